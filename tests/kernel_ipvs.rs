//! The IPVS contract against the real kernel, in the QEMU guest
//! (`make vm-test VM_TEST_PACKAGES=kube-ipvs-proxy VM_TEST_ARGS=ipvs`).
//! The same scenarios run against `IpvsModel` in the unit tests, so the
//! model answers as this kernel does. Each test holds the root-namespace
//! lock and starts from `ipvsadm -C`.

use std::{future::Future, net::IpAddr, process::Command};

// The scenarios are compiled into the library only with the feature;
// without it every test here is ignored and has nothing to run.
#[cfg(feature = "kernel-tests")]
use kube_ipvs_proxy::kernel::ipvs::contract;
use kube_ipvs_proxy::{
    kernel::ipvs::{
        DestKey, DestSpec, Ipvs, IpvsOp, NetlinkIpvs, ServiceSpec,
        VirtualServerKey,
    },
    model::Protocol,
};

/// Runs `scenario` on a fresh connection (with `dump_connections` for the
/// full dump) against a flushed table.
fn with_kernel<F, Fut>(dump_connections: usize, scenario: F)
where
    F: FnOnce(NetlinkIpvs) -> Fut,
    Fut: Future<Output = ()>,
{
    testkit::guest::require();
    let _root = testkit::guest::lock_root_netns();
    ipvsadm(&["-C"]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let ipvs = NetlinkIpvs::with_dump_connections(dump_connections)
            .expect("netlink connection");
        scenario(ipvs).await;
    });
    ipvsadm(&["-C"]);
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("fixture address")
}

fn tcp(address: &str, port: u16) -> VirtualServerKey {
    VirtualServerKey {
        address: ip(address),
        port,
        protocol: Protocol::Tcp,
    }
}

fn dest(address: &str, port: u16) -> DestKey {
    DestKey {
        address: ip(address),
        port,
    }
}

fn ipvsadm(args: &[&str]) -> String {
    let mut cmd = Command::new("ipvsadm");
    cmd.args(args);
    testkit::run(&mut cmd).unwrap_or_else(|e| panic!("ipvsadm {args:?}: {e}"))
}

macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        #[cfg_attr(
            not(feature = "kernel-tests"),
            ignore = "needs the real-kernel guest: run `make vm-test`"
        )]
        fn $name() {
            #[cfg(feature = "kernel-tests")]
            with_kernel(1, |mut ipvs| async move {
                contract::$name(&mut ipvs).await
            });
        }
    )*};
}

/// Named `ipvs_contract::*` so that a filter on `ipvs` selects them.
mod ipvs_contract {
    #[cfg(feature = "kernel-tests")]
    use super::{contract, with_kernel};

    contract_tests!(
        programs_services_and_real_servers,
        duplicates_are_refused_with_eexist,
        missing_objects_are_not_found,
        updates_change_settings_and_keep_real_servers,
        deletes_remove_services_with_their_real_servers,
        a_failure_does_not_stop_the_batch,
        unknown_scheduler_is_not_found,
        real_server_of_the_other_family_is_invalid,
        weight_above_int_max_is_refused,
    );
}

/// The full dump over several connections reads the same table.
#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn ipvs_dump_over_several_connections() {
    #[cfg(feature = "kernel-tests")]
    with_kernel(3, |mut ipvs| async move {
        contract::programs_services_and_real_servers(&mut ipvs).await
    });
}

/// fwmark services are never ours: the dump leaves them out, and does
/// not fail on them.
#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn ipvs_dump_skips_fwmark_services() {
    with_kernel(1, |mut ipvs| async move {
        ipvsadm(&["-A", "-f", "7", "-s", "rr"]);
        ipvsadm(&["-a", "-f", "7", "-r", "198.19.9.1:0", "-m"]);
        let key = tcp("198.18.9.1", 80);
        let ops = [IpvsOp::AddService(ServiceSpec::new(key, "rr", None))];
        let results = ipvs.apply(&ops).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let table = ipvs.dump().await.expect("dump");
        let keys: Vec<_> = table.services.keys().copied().collect();
        assert_eq!(keys, vec![key]);
    });
}

/// What ipvsadm shows of our services is what kube-proxy programs:
/// masquerading, `-p` with the timeout, the full netmask, `mh-port` for
/// the `mh` scheduler.
#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn ipvs_as_ipvsadm_sees_it_is_what_kube_proxy_programs() {
    with_kernel(1, |mut ipvs| async move {
        let sticky =
            ServiceSpec::new(tcp("198.18.10.1", 80), "rr", Some(10800));
        let maglev = ServiceSpec::new(tcp("198.18.10.2", 80), "mh", None);
        let v6 = ServiceSpec::new(tcp("2001:db8::a", 80), "rr", Some(60));
        let backend = DestSpec {
            key: dest("198.19.10.1", 8080),
            weight: 1,
        };
        let ops = [
            IpvsOp::AddService(sticky.clone()),
            IpvsOp::AddDest(sticky.key, backend),
            IpvsOp::AddService(maglev),
            IpvsOp::AddService(v6),
        ];
        let results = ipvs.apply(&ops).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let saved = ipvsadm(&["-Sn"]);
        let mut lines: Vec<&str> = saved.lines().map(str::trim).collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            vec![
                "-A -t 198.18.10.1:80 -s rr -p 10800",
                "-A -t 198.18.10.2:80 -s mh -b mh-port",
                "-A -t [2001:db8::a]:80 -s rr -p 60",
                "-a -t 198.18.10.1:80 -r 198.19.10.1:8080 -m -w 1",
            ],
            "ipvsadm -Sn:\n{saved}"
        );
    });
}

/// The timeouts upstream sets from `ipvs.tcpTimeout`, `tcpFinTimeout` and
/// `udpTimeout`: what ipvsadm then lists, and an unset one left alone.
#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn ipvs_timeouts_as_ipvsadm_lists_them() {
    use kube_ipvs_proxy::kernel::ipvs::ConnTimeouts;
    with_kernel(1, |ipvs| async move {
        let before = ipvs.timeouts().await.expect("read the timeouts");
        let all = ConnTimeouts {
            tcp: Some(901),
            tcp_fin: Some(121),
            udp: Some(31),
        };
        ipvs.set_timeouts(&all).await.expect("set all three");
        let listed = ipvsadm(&["-L", "--timeout"]);
        let tcp_only = ConnTimeouts {
            tcp: Some(902),
            ..ConnTimeouts::default()
        };
        ipvs.set_timeouts(&tcp_only).await.expect("set tcp");
        let after = ipvs.timeouts().await.expect("read them back");
        // Back first, so that a failed assertion leaves the guest as it was.
        ipvs.set_timeouts(&before).await.expect("restore");
        assert!(
            listed.contains("Timeout (tcp tcpfin udp): 901 121 31"),
            "{listed}"
        );
        assert_eq!(
            after,
            ConnTimeouts {
                tcp: Some(902),
                tcp_fin: Some(121),
                udp: Some(31)
            }
        );
    });
}
