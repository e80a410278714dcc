//! The ipset contract against the real kernel, each test in a network
//! namespace of its own (ipsets are per namespace), so they run in
//! parallel, leave nothing behind, and need no guest: as root on any
//! kernel with ipset, `cargo test --features kernel-tests --test
//! kernel_ipsets` runs them on the host too.

/// Thin wrappers: the real-kernel half is only built with the feature,
/// so without it the tests are listed as ignored and compile to nothing.
macro_rules! kernel_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            #[cfg_attr(
                not(feature = "kernel-tests"),
                ignore = "needs root and ipset: --features kernel-tests \
                          (on the host or in `make vm-test`)"
            )]
            fn $name() {
                #[cfg(feature = "kernel-tests")]
                super::real::$name();
            }
        )*
    };
}

/// Named so that the filter `ipsets` selects these and the unit tests.
mod ipsets_in_netns {
    kernel_tests!(
        create_list_destroy,
        add_delete_entries,
        rejected_entries,
        non_empty_sets_are_destroyed,
        failures_stay_in_place,
        dump_only_prefix,
        large_batch,
        element_kinds_must_match_the_type,
        listing_matches_ipset_save,
        reads_sets_written_by_ipset_restore,
        destroy_of_a_referenced_set_is_busy,
        foreign_type_under_our_prefix_is_named,
    );
}

#[cfg(feature = "kernel-tests")]
mod real {
    use std::{
        collections::BTreeSet,
        future::Future,
        io::Write,
        process::{Command, Stdio},
    };

    use kube_ipvs_proxy::{
        desired::SetKind,
        kernel::{
            ipsets::{contract, IpsetOp, Ipsets, NetlinkIpsets},
            ErrorKind,
        },
    };

    /// Runs `scenario` on a thread moved into a fresh network namespace. The
    /// socket opened there, and any process started from that thread, stay in
    /// that namespace; it disappears when the thread ends.
    fn in_netns<F, Fut>(scenario: F)
    where
        F: FnOnce(NetlinkIpsets) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let thread = std::thread::spawn(move || {
            // SAFETY: unshare only changes this thread's namespaces.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(
                rc,
                0,
                "unshare(CLONE_NEWNET) failed (needs root): {}",
                std::io::Error::last_os_error()
            );
            let ipsets = NetlinkIpsets::new()
                .unwrap_or_else(|e| panic!("opening the ipset socket: {e}"));
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap_or_else(|e| panic!("runtime: {e}"));
            runtime.block_on(scenario(ipsets));
        });
        if let Err(panic) = thread.join() {
            std::panic::resume_unwind(panic);
        }
    }

    macro_rules! kernel_contract {
        ($($scenario:ident),* $(,)?) => {
            $(
                pub fn $scenario() {
                    in_netns(|mut k| async move {
                        contract::$scenario(&mut k).await
                    });
                }
            )*
        };
    }

    kernel_contract!(
        create_list_destroy,
        add_delete_entries,
        rejected_entries,
        non_empty_sets_are_destroyed,
        failures_stay_in_place,
        dump_only_prefix,
        large_batch,
        element_kinds_must_match_the_type,
    );

    fn ipset(args: &[&str], stdin: &str) -> String {
        let mut child = Command::new("ipset")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running ipset: {e}"));
        if let Some(mut input) = child.stdin.take() {
            input
                .write_all(stdin.as_bytes())
                .unwrap_or_else(|e| panic!("writing to ipset: {e}"));
        }
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("waiting for ipset: {e}"));
        assert!(
            out.status.success(),
            "ipset {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The `add` lines of `ipset save`, as (set, element).
    fn saved_entries(save: &str) -> BTreeSet<(String, String)> {
        save.lines()
            .filter_map(|l| l.strip_prefix("add "))
            .filter_map(|l| l.split_once(' '))
            .map(|(set, entry)| (set.to_string(), entry.to_string()))
            .collect()
    }

    /// Sets we create are what `ipset save` shows: kube-proxy's create
    /// parameters and the same elements in the same syntax.
    pub fn listing_matches_ipset_save() {
        in_netns(|mut k| async move {
            let mut ops = Vec::new();
            let mut written = BTreeSet::new();
            for v6 in [false, true] {
                for kind in contract::KINDS {
                    let spec = contract::spec(kind, v6);
                    ops.push(IpsetOp::Create(spec.clone()));
                    for e in contract::entries(kind, v6) {
                        written.insert((spec.name.clone(), e.to_string()));
                        ops.push(IpsetOp::Add(spec.name.clone(), e));
                    }
                }
            }
            for r in k.apply(&ops).await {
                r.unwrap_or_else(|e| panic!("{e}"));
            }
            let save = ipset(&["save"], "");
            assert_eq!(saved_entries(&save), written, "ipset save:\n{save}");
            for line in save.lines().filter(|l| l.starts_with("create ")) {
                let hash = line.contains(" hash:");
                let family = if line.starts_with("create KUBE-6-") {
                    "family inet6"
                } else {
                    "family inet "
                };
                let ok = if hash {
                    line.contains(family)
                        && line.contains("hashsize 1024 maxelem 65536")
                } else {
                    line.contains("bitmap:port range 0-65535")
                };
                assert!(ok, "unexpected create parameters: {line}");
            }

            let listed: BTreeSet<_> = k
                .dump(contract::PREFIX)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .into_values()
                .flat_map(|s| {
                    let name = s.spec.name.clone();
                    s.entries
                        .into_iter()
                        .map(move |e| (name.clone(), e.to_string()))
                })
                .collect();
            assert_eq!(listed, written);
        });
    }

    /// Elements written by the `ipset` tool are read back in its syntax.
    pub fn reads_sets_written_by_ipset_restore() {
        in_netns(|mut k| async move {
            let restore = "\
    create KUBE-LOAD-BALANCER-SOURCE-CIDR hash:ip,port,net family inet hashsize 1024 maxelem 65536
    add KUBE-LOAD-BALANCER-SOURCE-CIDR 198.18.0.1,tcp:80,198.19.0.0/16
    add KUBE-LOAD-BALANCER-SOURCE-CIDR 198.18.0.1,udp:53,198.19.3.4
    create KUBE-6-LOOP-BACK hash:ip,port,ip family inet6 hashsize 1024 maxelem 65536
    add KUBE-6-LOOP-BACK 2001:db8::19:5,sctp:9,2001:db8::19:5
    create KUBE-NODE-PORT-UDP bitmap:port range 0-65535
    add KUBE-NODE-PORT-UDP 30053
    create KUBE-IPVS-IPS hash:ip family inet hashsize 1024 maxelem 65536 comment
    add KUBE-IPVS-IPS 198.18.0.10 comment \"made by hand\"
    ";
            ipset(&["restore"], restore);
            let save = ipset(&["save"], "");
            let sets = k
                .dump(contract::PREFIX)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let listed: BTreeSet<_> = sets
                .values()
                .flat_map(|s| {
                    s.entries
                        .iter()
                        .map(|e| (s.spec.name.clone(), e.to_string()))
                })
                .collect();
            // The comment is an extension, not part of the element.
            let expected: BTreeSet<_> = saved_entries(&save)
                .into_iter()
                .map(|(s, e)| match e.split_once(" comment") {
                    Some((e, _)) => (s, e.to_string()),
                    None => (s, e),
                })
                .collect();
            assert_eq!(listed, expected);
            let v6 = sets.get("KUBE-6-LOOP-BACK").map(|s| s.spec.ipv6);
            assert_eq!(v6, Some(true));
        });
    }

    /// A set an iptables rule or a list:set uses cannot be destroyed, and
    /// the error says so.
    pub fn destroy_of_a_referenced_set_is_busy() {
        in_netns(|mut k| async move {
            let spec = contract::spec(SetKind::ClusterIp, false);
            let created = k.apply(&[IpsetOp::Create(spec.clone())]).await;
            assert!(created.iter().all(Result::is_ok), "{created:?}");
            ipset(&["create", "HOLDER", "list:set"], "");
            ipset(&["add", "HOLDER", &spec.name], "");
            let results = k.apply(&[IpsetOp::Destroy(spec.name.clone())]).await;
            match results.as_slice() {
                [Err(e)] => {
                    assert_eq!(e.kind, ErrorKind::Other);
                    assert_eq!(e.object, spec.name);
                    assert!(e.message.contains("in use"), "{e}");
                }
                other => panic!("expected one busy error, got {other:?}"),
            }
        });
    }

    /// A `KUBE-` set of a type kube-proxy never creates cannot be read into
    /// our types: the dump fails naming it rather than guessing.
    pub fn foreign_type_under_our_prefix_is_named() {
        in_netns(|mut k| async move {
            ipset(&["create", "KUBE-HAND-MADE", "hash:net"], "");
            match k.dump(contract::PREFIX).await {
                Err(e) => {
                    assert_eq!(e.object, "KUBE-HAND-MADE");
                    assert_eq!(e.kind, ErrorKind::Invalid);
                }
                Ok(sets) => panic!("expected an error, got {sets:?}"),
            }
            // Other prefixes still list.
            let ours = contract::spec(SetKind::IpvsIps, false);
            let r = k.apply(&[IpsetOp::Create(ours.clone())]).await;
            assert!(r.iter().all(Result::is_ok), "{r:?}");
            let sets =
                k.dump("KUBE-IPVS").await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(sets.keys().collect::<Vec<_>>(), vec![&ours.name]);
        });
    }
}
