use super::*;

fn v(major: u32, minor: u32) -> KernelVersion {
    KernelVersion::new(major, minor)
}

#[test]
fn kernel_releases_parse() {
    let cases = [
        ("6.1.0-28-amd64", Some(v(6, 1))),
        ("5.10.0\n", Some(v(5, 10))),
        ("4.19.0+", Some(v(4, 19))),
        ("5.8-rc1", Some(v(5, 8))),
        ("6", None),
        ("", None),
        ("x.y", None),
    ];
    for (release, want) in cases {
        let got = KernelVersion::parse(release);
        assert_eq!(got.as_ref().ok(), want.as_ref(), "{release:?}");
        if let Err(e) = got {
            assert_eq!(e.kind, ErrorKind::Invalid, "{release:?}");
        }
    }
}

#[test]
fn conn_reuse_mode_only_between_4_1_and_5_9() {
    let cases = [
        (v(3, 10), false),
        (v(4, 0), false),
        (v(4, 1), true),
        (v(4, 19), true),
        (v(5, 8), true),
        (v(5, 9), false),
        (v(6, 1), false),
    ];
    for (kernel, set) in cases {
        let paths: Vec<_> = wanted(&SysctlConfig::default(), kernel)
            .iter()
            .map(|s| s.path)
            .collect();
        assert_eq!(paths.contains(&VS_CONN_REUSE_MODE), set, "{kernel}");
    }
}

#[test]
fn wanted_values() {
    let plain = wanted(&SysctlConfig::default(), v(6, 1));
    let strict = wanted(&SysctlConfig { strict_arp: true }, v(5, 4));
    let pairs = |s: &[Setting]| -> Vec<(&str, &str)> {
        s.iter().map(|s| (s.path, s.value)).collect()
    };
    assert_eq!(
        pairs(&plain),
        [
            (VS_CONNTRACK, "1"),
            (VS_EXPIRE_NODEST_CONN, "1"),
            (VS_EXPIRE_QUIESCENT_TEMPLATE, "1"),
            (IP_FORWARD, "1"),
        ]
    );
    assert_eq!(
        pairs(&strict),
        [
            (VS_CONNTRACK, "1"),
            (VS_CONN_REUSE_MODE, "0"),
            (VS_EXPIRE_NODEST_CONN, "1"),
            (VS_EXPIRE_QUIESCENT_TEMPLATE, "1"),
            (IP_FORWARD, "1"),
            (ARP_IGNORE, "1"),
            (ARP_ANNOUNCE, "2"),
        ]
    );
}

fn fresh_kernel() -> SysctlsModel {
    SysctlsModel::new([
        (VS_CONNTRACK, "0"),
        (VS_CONN_REUSE_MODE, "1"),
        (VS_EXPIRE_NODEST_CONN, "0"),
        (VS_EXPIRE_QUIESCENT_TEMPLATE, "0"),
        (IP_FORWARD, "1"),
        (ARP_IGNORE, "0"),
        (ARP_ANNOUNCE, "0"),
    ])
}

#[test]
fn ensure_writes_only_what_differs_and_then_nothing() {
    let mut k = fresh_kernel();
    let config = SysctlConfig { strict_arp: true };
    let first = ensure(&mut k, &config, v(6, 1));
    let changed: Vec<_> = first
        .iter()
        .map(|r| r.as_ref().map(|c| (c.path, c.from.as_str(), c.to.as_str())))
        .collect();
    assert_eq!(
        changed,
        [
            Ok((VS_CONNTRACK, "0", "1")),
            Ok((VS_EXPIRE_NODEST_CONN, "0", "1")),
            Ok((VS_EXPIRE_QUIESCENT_TEMPLATE, "0", "1")),
            Ok((ARP_IGNORE, "0", "1")),
            Ok((ARP_ANNOUNCE, "0", "2")),
        ]
    );
    // ip_forward was already 1 and conn_reuse_mode is left alone on 6.1.
    assert_eq!(k.writes.len(), 5);
    assert_eq!(k.values[VS_CONN_REUSE_MODE], "1");

    assert_eq!(ensure(&mut k, &config, v(6, 1)), []);
    assert_eq!(k.writes.len(), 5);
}

#[test]
fn a_missing_sysctl_is_reported_and_the_rest_still_set() {
    // IPVS not loaded: its sysctls are absent.
    let mut k = SysctlsModel::new([(IP_FORWARD, "0")]);
    let results = ensure(&mut k, &SysctlConfig::default(), v(6, 1));
    let kinds: Vec<_> = results
        .iter()
        .map(|r| r.as_ref().err().map(|e| (e.kind, e.object.clone())))
        .collect();
    assert_eq!(
        kinds,
        [
            Some((ErrorKind::NotFound, format!("sysctl {VS_CONNTRACK}"))),
            Some((
                ErrorKind::NotFound,
                format!("sysctl {VS_EXPIRE_NODEST_CONN}")
            )),
            Some((
                ErrorKind::NotFound,
                format!("sysctl {VS_EXPIRE_QUIESCENT_TEMPLATE}")
            )),
            None,
        ]
    );
    assert_eq!(k.values[IP_FORWARD], "1");
}

#[test]
fn proc_sysctls_on_a_scratch_root() {
    let root = std::env::temp_dir()
        .join(format!("kipt-sysctl-{}", std::process::id()));
    let dir = root.join("net/ipv4");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("ip_forward"), "0\n").unwrap();
    let mut s = ProcSysctls::with_root(&root);

    assert_eq!(s.read(IP_FORWARD).as_deref(), Ok("0"));
    s.write(IP_FORWARD, "1").unwrap();
    assert_eq!(s.read(IP_FORWARD).as_deref(), Ok("1"));
    let missing = s.write(VS_CONNTRACK, "1").unwrap_err();
    assert_eq!(
        (missing.kind, missing.errno),
        (ErrorKind::NotFound, Some(libc::ENOENT))
    );
    assert!(!root.join(VS_CONNTRACK).exists());
    for bad in ["", "/etc/passwd", "net/../../etc/passwd", "./net"] {
        let e = s.read(bad).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Invalid, "{bad:?}");
    }
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn bridge_nf_call_iptables_is_only_looked_at() {
    let cases = [(None, false), (Some("1"), false), (Some("0"), true)];
    for (value, off) in cases {
        let mut k =
            SysctlsModel::new(value.map(|v| (BRIDGE_NF_CALL_IPTABLES, v)));
        assert_eq!(bridge_nf_call_iptables_off(&mut k), off, "{value:?}");
        // Never in the list of what is set.
        let all = wanted(&SysctlConfig { strict_arp: true }, v(5, 4));
        assert!(all.iter().all(|s| s.path != BRIDGE_NF_CALL_IPTABLES));
        assert!(k.writes.is_empty());
    }
}
