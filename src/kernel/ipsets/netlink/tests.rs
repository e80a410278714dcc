use std::net::IpAddr;

use proptest::prelude::*;

use super::{
    attribute::{AttrWriter, Attrs},
    entry,
    errno::to_kernel_error,
    message::{self, encode_request, parse_list, replies, Command, Reply},
    DecodeError,
};
use crate::{
    desired::{SetEntry, SetType},
    kernel::ErrorKind,
    model::Protocol,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// An add of `198.18.0.10,tcp:80` laid out byte by byte: netlink header,
/// nfgenmsg, protocol 6, the NUL-terminated name, then the data nest with
/// the address nest, port and protocol, each flagged as the kernel
/// requires (nested 0x8000, network byte order 0x4000).
#[test]
fn add_request_layout() {
    let mut buf = Vec::new();
    encode_request(&mut buf, Command::Add, 0x205, 7, |w| {
        message::element(
            w,
            "KUBE-X",
            &SetEntry::IpPort(ip("198.18.0.10"), Protocol::Tcp, 80),
        )
    });
    let le16 = |v: u16| v.to_ne_bytes().to_vec();
    let le32 = |v: u32| v.to_ne_bytes().to_vec();
    let mut expected = Vec::new();
    expected.extend(le32(72)); // total length
    expected.extend(le16(0x0609)); // NFNL_SUBSYS_IPSET << 8 | IPSET_CMD_ADD
    expected.extend(le16(0x205));
    expected.extend(le32(7));
    expected.extend(le32(0));
    expected.extend([2, 0, 0, 0]); // AF_INET, NFNETLINK_V0, res_id
    expected.extend(le16(5));
    expected.extend(le16(1));
    expected.extend([6, 0, 0, 0]); // protocol 6, padded
    expected.extend(le16(11));
    expected.extend(le16(2));
    expected.extend(b"KUBE-X\0\0"); // name, NUL, padding
    expected.extend(le16(32));
    expected.extend(le16(0x8007)); // nested DATA
    expected.extend(le16(12));
    expected.extend(le16(0x8001)); // nested IP
    expected.extend(le16(8));
    expected.extend(le16(0x4001)); // IPADDR_IPV4, network order
    expected.extend([198, 18, 0, 10]);
    expected.extend(le16(6));
    expected.extend(le16(0x4004)); // PORT, network order
    expected.extend([0, 80, 0, 0]);
    expected.extend(le16(5));
    expected.extend(le16(7)); // PROTO
    expected.extend([6, 0, 0, 0]);
    assert_eq!(buf, expected);
}

fn round_trip(
    set_type: SetType,
    e: &SetEntry,
) -> Result<SetEntry, DecodeError> {
    let mut buf = Vec::new();
    entry::encode(&mut AttrWriter::new(&mut buf), e);
    entry::decode(set_type, &buf)
}

#[test]
fn entries_round_trip() {
    let net = |s: &str| s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
    let cases = [
        (SetType::HashIp, SetEntry::Ip(ip("198.18.0.1"))),
        (SetType::HashIp, SetEntry::Ip(ip("2001:db8::1"))),
        (
            SetType::HashIpPort,
            SetEntry::IpPort(ip("198.18.0.1"), Protocol::Udp, 53),
        ),
        (
            SetType::HashIpPortIp,
            SetEntry::IpPortIp(
                ip("2001:db8::5"),
                Protocol::Sctp,
                65535,
                ip("2001:db8::5"),
            ),
        ),
        (
            SetType::HashIpPortNet,
            SetEntry::IpPortNet(
                ip("198.18.0.1"),
                Protocol::Tcp,
                443,
                net("198.19.0.0/16"),
            ),
        ),
        (SetType::BitmapPort, SetEntry::Port(30080)),
    ];
    for (set_type, e) in cases {
        assert_eq!(round_trip(set_type, &e), Ok(e.clone()), "{e}");
    }
}

/// A listed network with host bits (found by the fuzzer) reads as the
/// network itself: kept as listed, it would never equal the entry the
/// proxy wants, nor what writing it back leaves in the kernel.
#[test]
fn a_listed_network_with_host_bits_reads_as_the_network() {
    let mut buf = Vec::new();
    let mut w = AttrWriter::new(&mut buf);
    entry::encode(
        &mut w,
        &SetEntry::IpPortIp(
            ip("198.18.1.1"),
            Protocol::Tcp,
            80,
            ip("198.18.101.7"),
        ),
    );
    w.u8(21, 15); // IPSET_ATTR_CIDR2
    assert_eq!(
        entry::decode(SetType::HashIpPortNet, &buf),
        Ok(SetEntry::IpPortNet(
            ip("198.18.1.1"),
            Protocol::Tcp,
            80,
            "198.18.0.0/15".parse().unwrap()
        ))
    );
}

#[test]
fn element_errors() {
    // A hash:ip,port element without its protocol.
    let mut buf = Vec::new();
    {
        let mut w = AttrWriter::new(&mut buf);
        w.nested(1, |w| w.net_bytes(1, &[198, 18, 0, 1]));
        w.be16(4, 80);
    }
    assert_eq!(
        entry::decode(SetType::HashIpPort, &buf),
        Err(DecodeError::MissingAttr("IPSET_ATTR_PROTO"))
    );
    // ICMP (1) is not a protocol kube-proxy puts in its sets.
    let mut w = AttrWriter::new(&mut buf);
    w.u8(7, 1);
    assert!(matches!(
        entry::decode(SetType::HashIpPort, &buf),
        Err(DecodeError::Unsupported(_))
    ));
    // A "nomatch" exception is not a member.
    let mut buf = Vec::new();
    let mut w = AttrWriter::new(&mut buf);
    w.be16(4, 80);
    w.be32(8, 1 << 2);
    assert!(matches!(
        entry::decode(SetType::BitmapPort, &buf),
        Err(DecodeError::Unsupported(_))
    ));
    // A 5-byte address.
    let mut buf = Vec::new();
    AttrWriter::new(&mut buf).nested(1, |w| w.net_bytes(1, &[1, 2, 3]));
    assert!(entry::decode(SetType::HashIp, &buf).is_err());
}

#[test]
fn malformed_attributes_end_the_walk() {
    let cases: [&[u8]; 4] = [
        &[1, 0],                // shorter than a header
        &[3, 0, 1, 0],          // length below the header's own
        &[12, 0, 1, 0, 1, 2],   // longer than the buffer
        &[8, 0, 1, 0, 1, 2, 3], // ditto, by one byte
    ];
    for bytes in cases {
        let walked: Vec<_> = Attrs::new(bytes).collect();
        assert!(
            matches!(walked.as_slice(), [Err(_)]),
            "{bytes:?} gave {walked:?}"
        );
    }
}

/// A listing's first message carries the header; its continuation only
/// the name and more elements.
#[test]
fn list_messages() {
    let mut first = Vec::new();
    {
        let mut w = AttrWriter::new(&mut first);
        w.u8(1, 6);
        w.cstr(2, "KUBE-NODE-PORT-TCP");
        w.cstr(3, "bitmap:port");
        w.u8(4, 3);
        w.u8(5, 0);
        w.nested(7, |w| {
            w.be16(4, 0);
            w.be16(5, 65535);
        });
        w.nested(8, |w| {
            w.nested(7, |w| w.be16(4, 80));
            w.nested(7, |w| w.be16(4, 443));
        });
    }
    let part = parse_list(&first).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(part.name, "KUBE-NODE-PORT-TCP");
    let header = part.header.unwrap_or_else(|| panic!("no header"));
    assert_eq!(
        (header.type_name.as_str(), header.revision),
        ("bitmap:port", 3)
    );
    let ports: Vec<_> = part
        .elements
        .iter()
        .map(|d| entry::decode(SetType::BitmapPort, d))
        .collect();
    assert_eq!(ports, vec![Ok(SetEntry::Port(80)), Ok(SetEntry::Port(443))]);

    let mut more = Vec::new();
    {
        let mut w = AttrWriter::new(&mut more);
        w.u8(1, 6);
        w.cstr(2, "KUBE-NODE-PORT-TCP");
        w.nested(8, |w| w.nested(7, |w| w.be16(4, 8080)));
    }
    let part = parse_list(&more).unwrap_or_else(|e| panic!("{e}"));
    assert!(part.header.is_none());
    assert_eq!(part.elements.len(), 1);
}

#[test]
fn acks_and_errors() {
    let mut buf = Vec::new();
    for (seq, code) in [(10u32, 0i32), (11, -4103)] {
        buf.extend(36u32.to_ne_bytes());
        buf.extend(2u16.to_ne_bytes());
        buf.extend(0u16.to_ne_bytes());
        buf.extend(seq.to_ne_bytes());
        buf.extend(0u32.to_ne_bytes());
        buf.extend(code.to_ne_bytes());
        buf.extend([0; 16]);
    }
    let got: Vec<_> = replies(&buf)
        .map(|r| match r {
            Ok(Reply::Ack { seq, errno }) => (seq, errno),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, vec![(10, 0), (11, 4103)]);
}

#[test]
fn errno_mapping_depends_on_the_command() {
    use ErrorKind::*;
    let cases = [
        (Command::Create, 17, Exists),
        (Command::Add, 4103, Exists),
        (Command::Del, 4103, NotFound),
        (Command::Add, 2, NotFound),
        (Command::Destroy, 2, NotFound),
        (Command::Add, 4097, Invalid),
        (Command::Add, 4109, Invalid),
        (Command::Add, 4110, Invalid),
        (Command::Add, 4104, Invalid),
        (Command::Create, 4098, Unavailable),
        (Command::Destroy, 4100, Other),
        (Command::Add, 4352, Other),
        (Command::Add, 105, Other),
    ];
    for (command, errno, kind) in cases {
        let e = to_kernel_error(command, "KUBE-X", errno);
        assert_eq!(e.kind, kind, "{command:?} errno {errno}: {e}");
        assert_eq!(e.errno, Some(errno));
        assert_eq!(e.object, "KUBE-X");
    }
    let busy = to_kernel_error(Command::Destroy, "KUBE-X", 4100);
    assert!(busy.message.contains("IPSET_ERR_BUSY"), "{busy}");
}

proptest! {
    /// Whatever the kernel (or a corrupted buffer) sends, reading it
    /// returns values or errors, never a panic.
    #[test]
    fn decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        for reply in replies(&bytes) {
            if let Ok(Reply::Ipset { attrs, .. }) = reply {
                let _ = parse_list(attrs);
            }
        }
        let _ = parse_list(&bytes);
        let _ = message::parse_type(&bytes);
        for set_type in [
            SetType::HashIp,
            SetType::HashIpPort,
            SetType::HashIpPortIp,
            SetType::HashIpPortNet,
            SetType::BitmapPort,
        ] {
            let _ = entry::decode(set_type, &bytes);
        }
    }
}
