//! The sysctls IPVS mode needs, set on the guest's kernel through
//! /proc/sys: after one run they hold upstream's values, and a second
//! run writes nothing.

use kube_ipvs_proxy::kernel::sysctl::{
    self, ensure, KernelVersion, ProcSysctls, SysctlConfig, Sysctls,
};
use testkit::guest;

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn sets_the_ipvs_sysctls_once() -> anyhow::Result<()> {
    guest::require();
    let _root = guest::lock_root_netns();
    let mut s = ProcSysctls::new();
    let kernel = KernelVersion::running(&mut s)?;
    let config = SysctlConfig { strict_arp: true };

    // Start from values that differ, so the first run has work to do.
    s.write(sysctl::VS_EXPIRE_NODEST_CONN, "0")?;
    s.write(sysctl::ARP_ANNOUNCE, "0")?;

    let first = ensure(&mut s, &config, kernel);
    let written: Vec<_> = first
        .iter()
        .map(|r| r.as_ref().map(|c| c.path).map_err(|e| e.to_string()))
        .collect();
    assert!(
        written.contains(&Ok(sysctl::VS_EXPIRE_NODEST_CONN)),
        "{written:?}"
    );
    assert!(written.contains(&Ok(sysctl::ARP_ANNOUNCE)), "{written:?}");
    assert!(first.iter().all(Result::is_ok), "{written:?}");

    for setting in sysctl::wanted(&config, kernel) {
        assert_eq!(s.read(setting.path)?, setting.value, "{}", setting.path);
    }
    assert_eq!(ensure(&mut s, &config, kernel), []);

    s.write(sysctl::ARP_IGNORE, "0")?;
    s.write(sysctl::ARP_ANNOUNCE, "0")?;
    Ok(())
}
