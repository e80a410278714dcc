//! Golden bytes for every command, written by hand from the kernel's ABI
//! (include/uapi/linux/ip_vs.h and the attribute types ip_vs_ctl.c puts
//! and gets). Bytes captured from ipvsadm in the guest belong here too.
//!
//! Layout reminders: nlmsghdr is len u32, type u16 (the family id),
//! flags u16, seq u32, pid u32; genlmsghdr is cmd u8, version u8, 2
//! reserved bytes; each attribute is len u16 (header included), type u16,
//! value, padded to 4 bytes. Integers are host order (little endian here)
//! except ports and the IPv4 netmask, which are network order.

use std::net::IpAddr;

use pretty_assertions::assert_eq;

use super::{decode, encode, hex, MULTI, REQUEST_ACK, REQUEST_DUMP};
use crate::{
    AddressFamily, ConnCounts, DaemonAttribute, DaemonState, Destination,
    ForwardMethod, Info, IpvsAttribute, IpvsCmd, IpvsMessage, IpvsVersion,
    Service, ServiceFlags, ServiceKey, Stats, Timeouts, Tunnel, TunnelFlags,
    TunnelType,
};

fn ip(text: &str) -> IpAddr {
    text.parse().expect("fixture address")
}

fn tcp_svc() -> ServiceKey {
    ServiceKey::tcp(ip("198.18.0.10"), 80)
}

/// `IPVS_CMD_ATTR_SERVICE` holding the key of TCP 198.18.0.10:80.
const TCP_SVC_KEY: &str = "
    30 00 01 00                 # IPVS_CMD_ATTR_SERVICE, 48 bytes
      06 00 01 00 02 00 00 00   # AF = AF_INET
      06 00 02 00 06 00 00 00   # PROTOCOL = IPPROTO_TCP
      14 00 03 00 c6 12 00 0a   # ADDR 198.18.0.10 ...
        00 00 00 00 00 00 00 00 00 00 00 00  # ... in a 16-byte union
      06 00 04 00 00 50 00 00   # PORT 80, big endian
";

struct Case {
    name: &'static str,
    message: IpvsMessage,
    flags: u16,
    bytes: String,
}

fn cases() -> Vec<Case> {
    let fwmark7 = ServiceKey::fwmark(AddressFamily::Inet, 7);
    let dest = Destination::new(ip("198.19.0.5"), 8080);
    vec![
        Case {
            name: "new service TCP 198.18.0.10:80 rr",
            message: IpvsMessage::new_service(
                &Service::new(tcp_svc()).with_scheduler("rr"),
            ),
            flags: REQUEST_ACK,
            bytes: "68 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 01 01 00 00                # NEW_SERVICE, version 1
                 54 00 01 00                # IPVS_CMD_ATTR_SERVICE, 84
                   06 00 01 00 02 00 00 00  # AF_INET
                   06 00 02 00 06 00 00 00  # TCP
                   14 00 03 00 c6 12 00 0a 00 00 00 00 00 00 00 00
                               00 00 00 00  # ADDR
                   06 00 04 00 00 50 00 00  # PORT 80
                   07 00 06 00 72 72 00 00  # SCHED_NAME \"rr\\0\"
                   0c 00 07 00 00 00 00 00 ff ff ff ff  # FLAGS 0/~0
                   08 00 08 00 00 00 00 00  # TIMEOUT 0
                   08 00 09 00 ff ff ff ff  # NETMASK 255.255.255.255"
                .to_owned(),
        },
        Case {
            name: "set service UDP [2001:db8::10]:53 sh persistent",
            message: IpvsMessage::set_service(
                &Service::new(ServiceKey::udp(ip("2001:db8::10"), 53))
                    .with_scheduler("sh")
                    .with_flags(ServiceFlags::SH_PORT)
                    .persistent(600)
                    .with_netmask(64),
            ),
            flags: REQUEST_ACK,
            bytes: "68 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 02 01 00 00                # SET_SERVICE
                 54 00 01 00
                   06 00 01 00 0a 00 00 00  # AF_INET6
                   06 00 02 00 11 00 00 00  # UDP
                   14 00 03 00 20 01 0d b8 00 00 00 00 00 00 00 00
                               00 00 00 10  # ADDR 2001:db8::10
                   06 00 04 00 00 35 00 00  # PORT 53
                   07 00 06 00 73 68 00 00  # \"sh\"
                   0c 00 07 00 11 00 00 00 ff ff ff ff  # PERSISTENT|SCHED2
                   08 00 08 00 58 02 00 00  # TIMEOUT 600
                   08 00 09 00 40 00 00 00  # NETMASK: prefix 64, host order"
                .to_owned(),
        },
        Case {
            name: "del service FWM 7",
            message: IpvsMessage::del_service(&fwmark7),
            flags: REQUEST_ACK,
            bytes: "28 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 03 01 00 00                # DEL_SERVICE
                 14 00 01 00
                   06 00 01 00 02 00 00 00  # AF_INET
                   08 00 05 00 07 00 00 00  # FWMARK 7"
                .to_owned(),
        },
        Case {
            name: "get service TCP 198.18.0.10:80",
            message: IpvsMessage::get_service(&tcp_svc()),
            flags: REQUEST_ACK,
            bytes: format!(
                "44 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 04 01 00 00                # GET_SERVICE
                 {TCP_SVC_KEY}"
            ),
        },
        Case {
            name: "dump services",
            message: IpvsMessage::dump_services(),
            flags: REQUEST_DUMP,
            bytes: "14 00 00 00  20 00  01 03  01 00 00 00  00 00 00 00
                 04 01 00 00                # GET_SERVICE, NLM_F_DUMP"
                .to_owned(),
        },
        Case {
            name: "new dest 198.19.0.5:8080 in TCP 198.18.0.10:80",
            message: IpvsMessage::new_dest(&tcp_svc(), &dest),
            flags: REQUEST_ACK,
            bytes: format!(
                "8c 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 05 01 00 00                # NEW_DEST
                 {TCP_SVC_KEY}
                 48 00 02 00                # IPVS_CMD_ATTR_DEST, 72
                   14 00 01 00 c6 13 00 05 00 00 00 00 00 00 00 00
                               00 00 00 00  # ADDR 198.19.0.5
                   06 00 02 00 1f 90 00 00  # PORT 8080
                   08 00 03 00 00 00 00 00  # FWD_METHOD masq
                   08 00 04 00 01 00 00 00  # WEIGHT 1
                   08 00 05 00 00 00 00 00  # U_THRESH
                   08 00 06 00 00 00 00 00  # L_THRESH
                   06 00 0b 00 02 00 00 00  # ADDR_FAMILY AF_INET"
            ),
        },
        Case {
            name: "set dest, GUE tunnel, in FWM 7",
            message: IpvsMessage::set_dest(
                &fwmark7,
                &dest
                    .clone()
                    .with_fwd_method(ForwardMethod::Tunnel)
                    .with_weight(5)
                    .with_thresholds(100, 10)
                    .with_tunnel(Tunnel {
                        kind: TunnelType::Gue,
                        port: 6080,
                        flags: TunnelFlags::CSUM,
                    }),
            ),
            flags: REQUEST_ACK,
            bytes: "88 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 06 01 00 00                # SET_DEST
                 14 00 01 00
                   06 00 01 00 02 00 00 00
                   08 00 05 00 07 00 00 00  # FWMARK 7
                 60 00 02 00                # IPVS_CMD_ATTR_DEST, 96
                   14 00 01 00 c6 13 00 05 00 00 00 00 00 00 00 00
                               00 00 00 00
                   06 00 02 00 1f 90 00 00
                   08 00 03 00 02 00 00 00  # FWD_METHOD tunnel
                   08 00 04 00 05 00 00 00  # WEIGHT 5
                   05 00 0d 00 01 00 00 00  # TUN_TYPE GUE (u8)
                   06 00 0e 00 17 c0 00 00  # TUN_PORT 6080, big endian
                   06 00 0f 00 01 00 00 00  # TUN_FLAGS CSUM
                   08 00 05 00 64 00 00 00  # U_THRESH 100
                   08 00 06 00 0a 00 00 00  # L_THRESH 10
                   06 00 0b 00 02 00 00 00"
                .to_owned(),
        },
        Case {
            name: "del dest",
            message: IpvsMessage::del_dest(&tcp_svc(), &dest),
            flags: REQUEST_ACK,
            bytes: format!(
                "6c 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 07 01 00 00                # DEL_DEST
                 {TCP_SVC_KEY}
                 28 00 02 00
                   14 00 01 00 c6 13 00 05 00 00 00 00 00 00 00 00
                               00 00 00 00
                   06 00 02 00 1f 90 00 00
                   06 00 0b 00 02 00 00 00"
            ),
        },
        Case {
            name: "dump dests",
            message: IpvsMessage::dump_dests(&tcp_svc()),
            flags: REQUEST_DUMP,
            bytes: format!(
                "44 00 00 00  20 00  01 03  01 00 00 00  00 00 00 00
                 08 01 00 00                # GET_DEST
                 {TCP_SVC_KEY}"
            ),
        },
        Case {
            name: "flush",
            message: IpvsMessage::flush(),
            flags: REQUEST_ACK,
            bytes: "14 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 11 01 00 00                # FLUSH"
                .to_owned(),
        },
        Case {
            name: "zero one service",
            message: IpvsMessage::zero(Some(&fwmark7)),
            flags: REQUEST_ACK,
            bytes: "28 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 10 01 00 00                # ZERO
                 14 00 01 00
                   06 00 01 00 02 00 00 00
                   08 00 05 00 07 00 00 00"
                .to_owned(),
        },
        Case {
            name: "get info",
            message: IpvsMessage::get_info(),
            flags: REQUEST_ACK,
            bytes: "14 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 0f 01 00 00                # GET_INFO"
                .to_owned(),
        },
        Case {
            name: "info reply",
            message: IpvsMessage::new(
                IpvsCmd::SetInfo,
                Info {
                    version: IpvsVersion(0x010201),
                    conn_table_size: 4096,
                }
                .attributes()
                .into_iter()
                .map(IpvsAttribute::Info)
                .collect(),
            ),
            flags: 0,
            bytes: "24 00 00 00  20 00  00 00  01 00 00 00  00 00 00 00
                 0e 01 00 00                # SET_INFO (the reply)
                 08 00 01 00 01 02 01 00    # VERSION 1.2.1
                 08 00 02 00 00 10 00 00    # CONN_TAB_SIZE 4096"
                .to_owned(),
        },
        Case {
            name: "get config",
            message: IpvsMessage::get_config(),
            flags: REQUEST_ACK,
            bytes: "14 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 0d 01 00 00                # GET_CONFIG"
                .to_owned(),
        },
        Case {
            name: "set config: all timeouts (also GET_CONFIG's reply)",
            message: IpvsMessage::set_config(&Timeouts {
                tcp: Some(900),
                tcp_fin: Some(120),
                udp: Some(300),
            }),
            flags: REQUEST_ACK,
            bytes: "2c 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 0c 01 00 00                # SET_CONFIG
                 08 00 04 00 84 03 00 00    # TIMEOUT_TCP 900
                 08 00 05 00 78 00 00 00    # TIMEOUT_TCP_FIN 120
                 08 00 06 00 2c 01 00 00    # TIMEOUT_UDP 300"
                .to_owned(),
        },
        Case {
            name: "set config: udp only",
            message: IpvsMessage::set_config(&Timeouts {
                udp: Some(30),
                ..Timeouts::default()
            }),
            flags: REQUEST_ACK,
            bytes: "1c 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 0c 01 00 00
                 08 00 06 00 1e 00 00 00    # TIMEOUT_UDP 30"
                .to_owned(),
        },
        Case {
            name: "new daemon",
            message: IpvsMessage::new(
                IpvsCmd::NewDaemon,
                vec![IpvsAttribute::Daemon(vec![
                    DaemonAttribute::State(DaemonState::Master),
                    DaemonAttribute::McastInterface("eth0".to_owned()),
                    DaemonAttribute::SyncId(1),
                ])],
            ),
            flags: REQUEST_ACK,
            bytes: "34 00 00 00  20 00  05 00  01 00 00 00  00 00 00 00
                 09 01 00 00                # NEW_DAEMON
                 20 00 03 00                # IPVS_CMD_ATTR_DAEMON, 32
                   08 00 01 00 01 00 00 00  # STATE master
                   09 00 02 00 65 74 68 30 00 00 00 00  # MCAST_IFN eth0
                   08 00 03 00 01 00 00 00  # SYNC_ID 1"
                .to_owned(),
        },
    ]
}

#[test]
fn every_command_encodes_to_its_golden_bytes() {
    for case in cases() {
        let expected = hex(&case.bytes);
        let actual = encode(case.message.clone(), case.flags, 1);
        assert_eq!(actual, expected, "{}", case.name);
    }
}

#[test]
fn every_command_decodes_from_its_golden_bytes() {
    for case in cases() {
        let (message, header) = decode(&hex(&case.bytes))
            .unwrap_or_else(|err| panic!("{}: {err}", case.name));
        assert_eq!(message, case.message, "{}", case.name);
        assert_eq!(header.flags, case.flags, "{}", case.name);
        assert_eq!(header.message_type, super::FAMILY_ID, "{}", case.name);
    }
}

/// Stats blocks as the kernel fills them: legacy with u32 counters and u64
/// byte counts, then 64-bit. Numbered so each counter is told apart.
fn stats_blocks(kind_legacy: u8, kind_wide: u8) -> String {
    format!(
        "5c 00 {kind_legacy:02x} 00              # STATS, 92
           08 00 01 00 01 00 00 00  # CONNS 1
           08 00 02 00 02 00 00 00  # INPKTS 2
           08 00 03 00 03 00 00 00  # OUTPKTS 3
           0c 00 04 00 04 00 00 00 00 00 00 00  # INBYTES 4 (u64)
           0c 00 05 00 05 00 00 00 00 00 00 00  # OUTBYTES 5 (u64)
           08 00 06 00 06 00 00 00  # CPS
           08 00 07 00 07 00 00 00  # INPPS
           08 00 08 00 08 00 00 00  # OUTPPS
           08 00 09 00 09 00 00 00  # INBPS
           08 00 0a 00 0a 00 00 00  # OUTBPS
         7c 00 {kind_wide:02x} 00              # STATS64, 124
           0c 00 01 00 01 00 00 00 01 00 00 00  # CONNS 2^32 + 1
           0c 00 02 00 02 00 00 00 00 00 00 00
           0c 00 03 00 03 00 00 00 00 00 00 00
           0c 00 04 00 04 00 00 00 00 00 00 00
           0c 00 05 00 05 00 00 00 00 00 00 00
           0c 00 06 00 06 00 00 00 00 00 00 00
           0c 00 07 00 07 00 00 00 00 00 00 00
           0c 00 08 00 08 00 00 00 00 00 00 00
           0c 00 09 00 09 00 00 00 00 00 00 00
           0c 00 0a 00 0a 00 00 00 00 00 00 00"
    )
}

fn numbered_stats(conns: u64) -> Stats {
    Stats {
        conns,
        in_packets: 2,
        out_packets: 3,
        in_bytes: 4,
        out_bytes: 5,
        cps: 6,
        in_pps: 7,
        out_pps: 8,
        in_bps: 9,
        out_bps: 10,
    }
}

#[test]
fn service_dump_reply_decodes_to_a_service_and_back() {
    let bytes = hex(&format!(
        "40 01 00 00  20 00  02 00  01 00 00 00  00 00 00 00  # NLM_F_MULTI
         01 01 00 00                # NEW_SERVICE (a dump entry)
         2c 01 01 00                # IPVS_CMD_ATTR_SERVICE, 300
           06 00 01 00 02 00 00 00
           06 00 02 00 06 00 00 00
           14 00 03 00 c6 12 00 0a 00 00 00 00 00 00 00 00 00 00 00 00
           06 00 04 00 00 50 00 00
           07 00 06 00 72 72 00 00
           0c 00 07 00 02 00 00 00 ff ff ff ff  # HASHED, set by the kernel
           08 00 08 00 00 00 00 00
           08 00 09 00 ff ff ff ff
           {}",
        stats_blocks(0x0a, 0x0c)
    ));
    let (message, header) = decode(&bytes).expect("decodes");
    assert_eq!(header.flags, MULTI);
    let service = message.to_service().expect("typed service");
    let expected = Service {
        flags: ServiceFlags::HASHED,
        stats: Some(numbered_stats(1)),
        stats64: Some(numbered_stats((1 << 32) + 1)),
        ..Service::new(tcp_svc()).with_scheduler("rr")
    };
    assert_eq!(service, expected);
    assert_eq!(service.counters(), Some(numbered_stats((1 << 32) + 1)));
    assert_eq!(encode(IpvsMessage::new_service(&service), MULTI, 1), bytes);
}

#[test]
fn dest_dump_reply_decodes_to_a_destination_and_back() {
    let bytes = hex(&format!(
        "64 01 00 00  20 00  02 00  01 00 00 00  00 00 00 00
         05 01 00 00                # NEW_DEST (a dump entry)
         50 01 02 00                # IPVS_CMD_ATTR_DEST, 336
           14 00 01 00 20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 05
           06 00 02 00 1f 90 00 00  # PORT 8080
           08 00 03 00 00 00 00 00  # masq
           08 00 04 00 03 00 00 00  # WEIGHT 3
           05 00 0d 00 00 00 00 00  # TUN_TYPE ipip (always sent)
           06 00 0e 00 00 00 00 00  # TUN_PORT 0
           06 00 0f 00 00 00 00 00  # TUN_FLAGS 0
           08 00 05 00 00 00 00 00
           08 00 06 00 00 00 00 00
           08 00 07 00 0b 00 00 00  # ACTIVE_CONNS 11
           08 00 08 00 0c 00 00 00  # INACT_CONNS 12
           08 00 09 00 0d 00 00 00  # PERSIST_CONNS 13
           06 00 0b 00 0a 00 00 00  # ADDR_FAMILY AF_INET6
           {}",
        stats_blocks(0x0a, 0x0c)
    ));
    let (message, _) = decode(&bytes).expect("decodes");
    let dest = message
        .to_destination(AddressFamily::Inet6)
        .expect("typed destination");
    let expected = Destination {
        tunnel: Some(Tunnel::default()),
        conns: Some(ConnCounts {
            active: 11,
            inactive: 12,
            persistent: 13,
        }),
        stats: Some(numbered_stats(1)),
        stats64: Some(numbered_stats((1 << 32) + 1)),
        ..Destination::new(ip("2001:db8::5"), 8080).with_weight(3)
    };
    assert_eq!(dest, expected);
    let reply = IpvsMessage::new(
        IpvsCmd::NewDest,
        vec![IpvsAttribute::Dest(dest.attributes())],
    );
    assert_eq!(encode(reply, MULTI, 1), bytes);
}

#[test]
fn info_and_config_replies_read_as_typed_values() {
    let info =
        decode(&hex("24 00 00 00  20 00  00 00  01 00 00 00  00 00 00 00
         0e 01 00 00
         08 00 01 00 01 02 01 00
         08 00 02 00 00 10 00 00"))
        .expect("decodes")
        .0
        .to_info()
        .expect("typed info");
    assert_eq!(info.version.to_string(), "1.2.1");
    assert_eq!(info.conn_table_size, 4096);

    let timeouts =
        decode(&hex("2c 00 00 00  20 00  00 00  01 00 00 00  00 00 00 00
         0c 01 00 00
         08 00 04 00 84 03 00 00
         08 00 05 00 78 00 00 00
         08 00 06 00 2c 01 00 00"))
        .expect("decodes")
        .0
        .to_timeouts();
    assert_eq!(
        timeouts,
        Timeouts {
            tcp: Some(900),
            tcp_fin: Some(120),
            udp: Some(300)
        }
    );
}
