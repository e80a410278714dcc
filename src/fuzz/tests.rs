//! Every input the fuzzer kept, replayed through its target's entry in
//! the ordinary test suite: the corpora are committed, so CI checks them
//! without libFuzzer.

use std::{fs, path::PathBuf};

use super::TARGETS;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join("corpus").join(name);
    let mut inputs: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = fs::read(&path).unwrap();
            (path.display().to_string(), bytes)
        })
        .collect();
    inputs.sort();
    inputs
}

#[test]
fn every_target_has_a_fuzz_target_file_and_a_corpus() {
    let mut files: Vec<String> = fs::read_dir(fuzz_dir().join("fuzz_targets"))
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            path.file_stem().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    files.sort();
    let mut names: Vec<String> =
        TARGETS.iter().map(|(n, _)| (*n).to_owned()).collect();
    names.sort();
    assert_eq!(files, names, "fuzz/fuzz_targets/ and TARGETS differ");
    let mut replayed = REPLAYED.to_vec();
    replayed.sort_unstable();
    assert_eq!(replayed, names, "a target is not replayed");
    for name in names {
        assert!(!corpus(&name).is_empty(), "{name}: empty corpus");
    }
}

macro_rules! replay {
    ($($name:ident),* $(,)?) => {
        /// The targets replayed below.
        const REPLAYED: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                for (path, input) in corpus(stringify!($name)) {
                    eprintln!("{path}");
                    assert!(super::run(stringify!($name), &input));
                }
            }
        )*
    };
}

replay!(
    ipset_listing,
    conntrack_reply,
    address_reply,
    proc_ip_vs,
    iptables_save,
    state_file,
    kube_proxy_config,
    flags,
    api_objects,
    api_protobuf,
    view_updates,
);

/// Seeds made by our own encoders, in the corpora as `seed-*`: replies
/// shaped as the kernel sends them, and fixed byte patterns for the
/// targets that read choices.
fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    use std::net::{IpAddr, SocketAddr};

    use netlink_packet_core::{
        NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_MULTIPART,
    };
    use netlink_packet_netfilter::{
        conntrack::{ConntrackAttribute, ConntrackMessage},
        NetfilterProtoFamily,
    };
    use rtnetlink::packet_route::RouteNetlinkMessage;

    use crate::{
        desired::SetEntry,
        kernel::{
            addresses::real::host_message,
            conntrack::{
                real::{message, tuple_attributes},
                FlowTuple,
            },
            ipsets::netlink::{
                entry,
                message::{encode_request, Command},
            },
        },
        model::Protocol,
    };

    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let mut seeds = Vec::new();

    // One listing datagram per set type, ended by NLMSG_DONE, as
    // `ipset list` receives it.
    let sets: [(&str, &str, u8, Vec<SetEntry>); 5] = [
        (
            "KUBE-CLUSTER-IP",
            "hash:ip,port",
            2,
            vec![
                SetEntry::IpPort(ip("198.18.0.10"), Protocol::Tcp, 80),
                SetEntry::IpPort(ip("198.18.0.11"), Protocol::Udp, 53),
            ],
        ),
        (
            "KUBE-LOOP-BACK",
            "hash:ip,port,ip",
            2,
            vec![SetEntry::IpPortIp(
                ip("198.19.0.1"),
                Protocol::Tcp,
                8080,
                ip("198.19.0.1"),
            )],
        ),
        (
            "KUBE-LOAD-BALANCER-SOURCE-CIDR",
            "hash:ip,port,net",
            2,
            vec![SetEntry::IpPortNet(
                ip("198.18.1.1"),
                Protocol::Tcp,
                80,
                "198.18.0.0/15".parse().unwrap(),
            )],
        ),
        (
            "KUBE-6-NODE-PORT-LOCAL-SCTP-HASH",
            "hash:ip,port",
            10,
            vec![SetEntry::IpPort(ip("2001:db8::1"), Protocol::Sctp, 30080)],
        ),
        (
            "KUBE-NODE-PORT-TCP",
            "bitmap:port",
            0,
            vec![SetEntry::Port(30080), SetEntry::Port(30081)],
        ),
    ];
    for (name, type_name, family, entries) in sets {
        let mut datagram = Vec::new();
        encode_request(&mut datagram, Command::List, NLM_F_MULTIPART, 1, |w| {
            w.cstr(2, name);
            w.cstr(3, type_name);
            w.u8(4, 1);
            w.u8(5, family);
            w.nested(8, |w| {
                for e in &entries {
                    w.nested(7, |w| entry::encode(w, e));
                }
            });
        });
        datagram.extend_from_slice(&20u32.to_ne_bytes());
        datagram.extend_from_slice(&3u16.to_ne_bytes());
        datagram.extend_from_slice(&NLM_F_MULTIPART.to_ne_bytes());
        datagram.extend_from_slice(&1u32.to_ne_bytes());
        datagram.extend_from_slice(&0u32.to_ne_bytes());
        datagram.extend_from_slice(&0u32.to_ne_bytes());
        seeds.push(("ipset_listing", format!("seed-{name}"), datagram));
    }

    // A UDP flow to a service, DNAT'ed to a pod, of each family.
    for (name, tuples) in [
        (
            "v4",
            [
                "198.18.128.11:40000",
                "198.18.0.10:53",
                "198.19.0.5:53",
                "198.18.128.11:40000",
            ],
        ),
        (
            "v6",
            [
                "[2001:db8::1]:40000",
                "[2001:db8::a]:53",
                "[2001:db8:1::5]:53",
                "[2001:db8::1]:40000",
            ],
        ),
    ] {
        let sock = |s: &str| s.parse::<SocketAddr>().unwrap();
        let original = FlowTuple {
            src: sock(tuples[0]),
            dst: sock(tuples[1]),
        };
        let reply = FlowTuple {
            src: sock(tuples[2]),
            dst: sock(tuples[3]),
        };
        let mut msg = message(
            NLM_F_MULTIPART,
            NetfilterProtoFamily::Unspec,
            ConntrackMessage::New(vec![
                ConntrackAttribute::CtaTupleOrig(tuple_attributes(&original)),
                ConntrackAttribute::CtaTupleReply(tuple_attributes(&reply)),
            ]),
        );
        msg.finalize();
        let mut bytes = vec![0; msg.buffer_len()];
        msg.serialize(&mut bytes);
        seeds.push(("conntrack_reply", format!("seed-udp-{name}"), bytes));
    }

    // kube-ipvs0's addresses as an address dump reports them.
    for (name, address) in [("v4", "198.18.0.10"), ("v6", "2001:db8::a")] {
        let mut msg = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::from(RouteNetlinkMessage::NewAddress(
                host_message(7, ip(address)),
            )),
        );
        msg.finalize();
        let mut bytes = vec![0; msg.buffer_len()];
        msg.serialize(&mut bytes);
        seeds.push(("address_reply", format!("seed-{name}"), bytes));
    }

    // The API server's protobuf: a list page, and a watch stream (its
    // first byte the target's cut) of each kind of event.
    {
        use crate::source::protobuf::testing as pb;
        seeds.push((
            "api_protobuf",
            "seed-service-list".to_owned(),
            pb::services(&[("a", "5"), ("b", "7")], "10", "next"),
        ));
        let stream = [
            pb::event("ADDED", pb::service("c", "11")),
            pb::event("BOOKMARK", pb::service("", "15")),
            pb::event("DELETED", pb::service("b", "16")),
            pb::event("ERROR", pb::status(410, "Expired", "too old")),
        ]
        .concat();
        seeds.push((
            "api_protobuf",
            "seed-watch".to_owned(),
            [&[13u8][..], &stream].concat(),
        ));
    }

    // The targets that read choices: a few fixed patterns to start from.
    for target in ["flags", "api_objects", "view_updates"] {
        for (name, bytes) in [
            ("zeros", vec![0u8; 64]),
            ("count", (0..=255u8).collect::<Vec<u8>>()),
            ("odd", (0..128u8).map(|b| b.wrapping_mul(37) | 1).collect()),
        ] {
            seeds.push((target, format!("seed-{name}"), bytes));
        }
    }
    seeds
}

/// The generated seeds are in the corpora as they are made today;
/// `UPDATE_SEEDS=1` writes them.
#[test]
fn the_seeds_are_in_the_corpora() {
    let update = std::env::var_os("UPDATE_SEEDS").is_some();
    for (target, name, bytes) in seeds() {
        let path = fuzz_dir().join("corpus").join(target).join(&name);
        if update {
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, &bytes).unwrap();
        }
        let committed = fs::read(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (UPDATE_SEEDS=1 writes it)", path.display())
        });
        assert!(
            committed == bytes,
            "{} differs from its seed (UPDATE_SEEDS=1)",
            path.display()
        );
    }
}
