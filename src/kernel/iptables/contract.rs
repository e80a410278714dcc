//! Scenarios of iptables' own behaviour that every [`Iptables`] must
//! show, the model in `cargo test` and the real tools in a network
//! namespace (`tests/kernel_iptables.rs`): what a `--noflush` restore
//! replaces and what it leaves, that a failed restore applies nothing,
//! and which payloads the tools refuse. Each returns the normalised dump
//! ([`save::normalise`]) of the chains it used, so the kernel test can
//! also check that the model and the kernel end in the same state. Our
//! rules on any [`Iptables`] are the proxier's contract
//! (`proxier/iptables/contract.rs`).

use super::{failed_line, save, IpFamily, Iptables};

/// The chains these scenarios write.
fn used(_table: &str, chain: &str) -> bool {
    chain.starts_with("KUBE-")
}

async fn dump<K: Iptables>(k: &mut K, family: IpFamily) -> String {
    let mut out = String::new();
    for table in ["nat", "filter"] {
        let text = k.save(family, table).await.unwrap_or_else(|e| {
            panic!("save {family} {table}: {e}");
        });
        out.push_str(&save::normalise(family, &text, used));
    }
    out
}

async fn restore<K: Iptables>(k: &mut K, family: IpFamily, payload: &str) {
    k.restore(family, payload)
        .await
        .unwrap_or_else(|e| panic!("restoring {payload:?}: {e}"));
}

/// A `--noflush` restore rewrites the chains its payload declares and
/// appends to the others; chains it does not name are left alone.
pub async fn noflush_replaces_only_declared_chains<K: Iptables>(
    k: &mut K,
    family: IpFamily,
) -> String {
    let setup = "*filter\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n\
                 -A KUBE-A -j ACCEPT\n-A KUBE-B -j DROP\n\
                 -A INPUT -j KUBE-A\nCOMMIT\n";
    restore(k, family, setup).await;
    restore(
        k,
        family,
        "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j DROP\n\
         -A KUBE-A -j KUBE-B\nCOMMIT\n",
    )
    .await;
    let after = dump(k, family).await;
    assert_eq!(
        after,
        "*filter\n-A INPUT -j KUBE-A\n:KUBE-A\n:KUBE-B\n\
         -A KUBE-A -j DROP\n-A KUBE-A -j KUBE-B\n-A KUBE-B -j DROP\n",
        "{family}"
    );
    after
}

/// A restore that fails part-way applies nothing of its table, and the
/// error names the failing line.
pub async fn failed_restore_changes_nothing<K: Iptables>(
    k: &mut K,
    family: IpFamily,
) -> String {
    let setup = "*filter\n:KUBE-FORWARD - [0:0]\n:KUBE-NODE-PORT - [0:0]\n\
                 -A KUBE-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT\n\
                 -A KUBE-NODE-PORT -j ACCEPT\nCOMMIT\n";
    restore(k, family, setup).await;
    let before = dump(k, family).await;
    assert!(before.contains("-A KUBE-NODE-PORT -j ACCEPT"), "{before}");
    // Declaring KUBE-FORWARD would flush it, had the restore gone through.
    let bad =
        "*filter\n:KUBE-FORWARD - [0:0]\n-D KUBE-NODE-PORT -j DROP\nCOMMIT\n";
    let err = k
        .restore(family, bad)
        .await
        .expect_err("deleting a missing rule must fail");
    assert_eq!(failed_line(&err), Some(3), "{err}");
    let after = dump(k, family).await;
    assert_eq!(before, after, "a failed restore changed the tables");
    after
}

/// Payloads both tools refuse, with the line they name where the nft and
/// legacy tools agree on it.
pub async fn refusals<K: Iptables>(k: &mut K, family: IpFamily) -> String {
    let setup = "*filter\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n\
                 -A KUBE-A -j KUBE-B\nCOMMIT\n";
    k.restore(family, setup)
        .await
        .unwrap_or_else(|e| panic!("setup: {e}"));
    let cases: [(&str, &str, Option<usize>); 7] = [
        (
            "jump to a missing chain",
            "*filter\n:KUBE-C - [0:0]\n-A KUBE-C -j KUBE-NOPE\nCOMMIT\n",
            None,
        ),
        (
            "delete a referenced chain",
            "*filter\n-F KUBE-B\n-X KUBE-B\nCOMMIT\n",
            Some(3),
        ),
        (
            "delete a chain with rules",
            "*filter\n-X KUBE-A\nCOMMIT\n",
            Some(2),
        ),
        (
            "flush a missing chain",
            "*filter\n-F KUBE-NOPE\nCOMMIT\n",
            Some(2),
        ),
        (
            "delete a missing chain",
            "*filter\n-X KUBE-NOPE\nCOMMIT\n",
            Some(2),
        ),
        (
            "unknown table",
            "*bogus\n:KUBE-A - [0:0]\nCOMMIT\n",
            Some(1),
        ),
        (
            "insert past the end",
            "*filter\n-I KUBE-A 5 -j ACCEPT\nCOMMIT\n",
            Some(2),
        ),
    ];
    for (name, payload, line) in cases {
        let result = k.restore(family, payload).await;
        let Err(err) = result else {
            panic!("{name}: accepted");
        };
        if line.is_some() {
            assert_eq!(failed_line(&err), line, "{name}: {err}");
        }
    }
    let saved = k.save(family, "filter").await.unwrap_or_default();
    let tables = save::parse(family, &saved);
    let t = tables.get("filter").cloned().unwrap_or_default();
    let rules: Vec<String> = ["KUBE-A", "KUBE-B", "KUBE-C"]
        .iter()
        .filter(|c| t.has_chain(c))
        .flat_map(|c| {
            let mut v = vec![format!(":{c}")];
            v.extend(t.chain_rules(c).map(|r| format!("-A {c} {r}")));
            v
        })
        .collect();
    assert_eq!(
        rules,
        vec![":KUBE-A", "-A KUBE-A -j KUBE-B", ":KUBE-B"],
        "refused payloads left traces"
    );
    rules.join("\n")
}
