//! The guest has what kube-proxy's IPVS mode uses besides IPVS: ipset types
//! and the iptables matches and targets of its rules, in both iptables
//! backends, and conntrack. A missing module shows up here by name rather
//! than as a puzzling failure in a proxy test.

use std::process::Command;

use anyhow::{Context, Result};
use testkit::{guest, run, run_with_input};

/// Runs a restore-style command, and on drop its cleanup script.
struct Restored {
    program: &'static str,
    cleanup: String,
}

impl Drop for Restored {
    fn drop(&mut self) {
        let mut cmd = Command::new(self.program);
        cmd.arg("--noflush");
        let _ = run_with_input(&mut cmd, &self.cleanup);
    }
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn ipset_types_the_proxy_uses() -> Result<()> {
    guest::require();
    let types = [
        ("TESTKIT-IP-PORT", "hash:ip,port", "198.18.0.10,tcp:80"),
        (
            "TESTKIT-IP-PORT-IP",
            "hash:ip,port,ip",
            "198.19.1.1,tcp:80,198.19.1.1",
        ),
        (
            "TESTKIT-IP-PORT-NET",
            "hash:ip,port,net",
            "198.18.0.10,tcp:80,198.19.0.0/16",
        ),
        ("TESTKIT-NET", "hash:net", "198.19.0.0/16"),
        ("TESTKIT-PORT", "bitmap:port range 0-65535", "30080"),
    ];
    let mut script = String::new();
    for (name, kind, entry) in types {
        script += &format!("create {name} {kind}\nadd {name} {entry}\n");
    }
    let result = run_with_input(Command::new("ipset").arg("restore"), &script)
        .and_then(|_| run(Command::new("ipset").args(["list", "-t"])));
    let mut cleanup = String::new();
    for (name, _, _) in types {
        cleanup += &format!("destroy {name}\n");
    }
    let _ =
        run_with_input(Command::new("ipset").args(["restore", "-!"]), &cleanup);
    let listed = result?;
    for (name, kind, _) in types {
        let kind = kind.split(' ').next().unwrap_or(kind);
        assert!(
            listed.contains(&format!("Name: {name}\nType: {kind}\n")),
            "{name} ({kind}) missing from:\n{listed}"
        );
    }
    Ok(())
}

/// Rules in the shape kube-proxy's IPVS mode writes, using each match and
/// target it needs.
const RULES: &str = "\
*nat
:TESTKIT-SERVICES - [0:0]
:TESTKIT-POSTROUTING - [0:0]
:TESTKIT-MARK-MASQ - [0:0]
:TESTKIT-NODE-PORT - [0:0]
-A TESTKIT-MARK-MASQ -j MARK --or-mark 0x4000
-A TESTKIT-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A TESTKIT-POSTROUTING -j MARK --xor-mark 0x4000
-A TESTKIT-POSTROUTING -m comment --comment \"testkit snat\" -j MASQUERADE --random-fully
-A TESTKIT-SERVICES -m comment --comment \"testkit cluster ip\" -m set --match-set TESTKIT-CLUSTER-IP dst,dst -j TESTKIT-MARK-MASQ
-A TESTKIT-SERVICES -m addrtype --dst-type LOCAL -j TESTKIT-NODE-PORT
-A TESTKIT-NODE-PORT -p tcp -m multiport --dports 30080,30443 -j TESTKIT-MARK-MASQ
COMMIT
*filter
:TESTKIT-FORWARD - [0:0]
-A TESTKIT-FORWARD -m conntrack --ctstate INVALID -j DROP
-A TESTKIT-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT
-A TESTKIT-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
";

const CLEANUP: &str = "\
*nat
-F TESTKIT-SERVICES
-F TESTKIT-POSTROUTING
-F TESTKIT-MARK-MASQ
-F TESTKIT-NODE-PORT
-X TESTKIT-SERVICES
-X TESTKIT-POSTROUTING
-X TESTKIT-MARK-MASQ
-X TESTKIT-NODE-PORT
COMMIT
*filter
-F TESTKIT-FORWARD
-X TESTKIT-FORWARD
COMMIT
";

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn iptables_rules_the_proxy_writes() -> Result<()> {
    guest::require();
    run(Command::new("ipset").args([
        "create",
        "TESTKIT-CLUSTER-IP",
        "hash:ip,port",
        "-exist",
    ]))?;
    for backend in ["nft", "legacy"] {
        let restore = match backend {
            "nft" => "iptables-nft-restore",
            _ => "iptables-legacy-restore",
        };
        let save = match backend {
            "nft" => "iptables-nft-save",
            _ => "iptables-legacy-save",
        };
        run_with_input(Command::new(restore).arg("--noflush"), RULES)
            .with_context(|| format!("{backend} backend"))?;
        let _cleanup = Restored {
            program: restore,
            cleanup: CLEANUP.to_string(),
        };
        let saved = run(&mut Command::new(save))?;
        for wanted in [
            "--match-set TESTKIT-CLUSTER-IP dst,dst",
            "-j MASQUERADE --random-fully",
            "--dst-type LOCAL",
            "--dports 30080,30443",
            "--ctstate INVALID -j DROP",
            "--comment \"testkit snat\"",
        ] {
            assert!(
                saved.contains(wanted),
                "{backend}: {wanted:?} missing from:\n{saved}"
            );
        }
    }
    run(Command::new("ipset").args(["destroy", "TESTKIT-CLUSTER-IP"]))?;
    Ok(())
}

#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn conntrack_table_is_readable() -> Result<()> {
    guest::require();
    // The proxy deletes stale UDP entries through ctnetlink; listing uses
    // the same interface.
    run(Command::new("conntrack").args(["-L", "-p", "udp"]))?;
    Ok(())
}
