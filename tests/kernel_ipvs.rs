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

/// How a handle reads the whole table back.
#[derive(Clone, Copy)]
enum Reads {
    /// Real servers from /proc/net/ip_vs, as the proxy reads them.
    Text,
    /// Everything over generic netlink: one dump per virtual server
    /// over this many connections, as on a kernel without the text
    /// table, and the writes and single reads without IPVS's socket
    /// options, as where they are refused. Only the guest's tests run
    /// so.
    #[cfg_attr(not(feature = "kernel-tests"), expect(dead_code))]
    Netlink(usize),
}

/// Runs `scenario` on a fresh connection reading as `reads` says,
/// against a flushed table.
fn with_kernel<F, Fut>(reads: Reads, scenario: F)
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
        let ipvs = match reads {
            Reads::Text => NetlinkIpvs::new(),
            Reads::Netlink(connections) => {
                NetlinkIpvs::with_dump_connections(connections)
                    .map(NetlinkIpvs::without_text_table)
                    .map(NetlinkIpvs::without_socket_options)
            }
        }
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
    ($reads:expr; $($name:ident),* $(,)?) => {$(
        #[test]
        #[cfg_attr(
            not(feature = "kernel-tests"),
            ignore = "needs the real-kernel guest: run `make vm-test`"
        )]
        fn $name() {
            #[cfg(feature = "kernel-tests")]
            with_kernel($reads, |mut ipvs| async move {
                contract::$name(&mut ipvs).await
            });
        }
    )*};
}

macro_rules! every_contract_test {
    ($reads:expr) => {
        contract_tests!(
            $reads;
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
    };
}

/// Named `ipvs_contract::*` so that a filter on `ipvs` selects them.
mod ipvs_contract {
    #[cfg(feature = "kernel-tests")]
    use super::{contract, with_kernel, Reads};

    every_contract_test!(Reads::Text);

    /// The same over netlink alone (no text table, no socket options),
    /// the real-server dumps shared by several connections.
    mod over_netlink {
        #[cfg(feature = "kernel-tests")]
        use super::super::{contract, with_kernel, Reads};

        every_contract_test!(Reads::Netlink(3));
    }
}

/// Both ways of reading the table read the same: a few hundred virtual
/// servers of both families and every protocol, with and without real
/// servers, and a fwmark service neither lists.
#[test]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
fn ipvs_text_and_netlink_read_the_same_table() {
    with_kernel(Reads::Text, |mut ipvs| async move {
        ipvsadm(&["-A", "-f", "7", "-s", "rr"]);
        ipvsadm(&["-a", "-f", "7", "-r", "198.19.9.1:0", "-m"]);
        let mut ops = Vec::new();
        for i in 0..300u16 {
            let v6 = i % 3 == 0;
            let address = if v6 {
                format!("2001:db8::{i:x}")
            } else {
                format!("198.18.{}.{}", i / 250, i % 250 + 1)
            };
            let backend = |j: u16| {
                if v6 {
                    format!("2001:db8:1::{j:x}")
                } else {
                    format!("198.19.{}.{}", j / 250, j % 250 + 1)
                }
            };
            let protocol = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
                [usize::from(i % 3)];
            let key = VirtualServerKey {
                address: ip(&address),
                port: 1000 + i,
                protocol,
            };
            let persistence = (i % 4 == 0).then_some(10800);
            let scheduler = if i % 5 == 0 { "mh" } else { "rr" };
            ops.push(IpvsOp::AddService(ServiceSpec::new(
                key,
                scheduler,
                persistence,
            )));
            for j in 0..i % 7 {
                ops.push(IpvsOp::AddDest(
                    key,
                    DestSpec {
                        key: DestKey {
                            address: ip(&backend(i * 7 + j)),
                            port: 8000 + j,
                        },
                        weight: u32::from(j % 2),
                    },
                ));
            }
        }
        let results = ipvs.apply(&ops).await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let text = ipvs.dump().await.expect("read with the text table");
        let mut netlink = NetlinkIpvs::new()
            .expect("netlink connection")
            .without_text_table();
        let dumped = netlink.dump().await.expect("read over netlink");
        assert_eq!(text.services.len(), 300);
        let dests: usize =
            text.services.values().map(|entry| entry.dests.len()).sum();
        assert_eq!(dests, (0..300).map(|i| i % 7).sum::<usize>());
        assert_eq!(text, dumped);
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
    with_kernel(Reads::Text, |mut ipvs| async move {
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
    with_kernel(Reads::Text, |mut ipvs| async move {
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
    with_kernel(Reads::Text, |ipvs| async move {
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
