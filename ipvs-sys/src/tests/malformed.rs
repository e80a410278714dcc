//! Truncated and malformed input is an error, never a panic; attributes a
//! newer kernel might add are skipped.

use proptest::prelude::*;

use super::{decode, decode_genl, encode, hex, REQUEST_ACK};
use crate::{
    AddressFamily, Destination, IpvsAttribute, IpvsCmd, IpvsMessage, Service,
    ServiceAttribute, ServiceKey,
};

/// A genl header for `cmd` followed by `attrs` (hex).
fn genl(cmd: u8, attrs: &str) -> Vec<u8> {
    let mut bytes = vec![cmd, 1, 0, 0];
    bytes.extend(hex(attrs));
    bytes
}

#[test]
fn malformed_payloads_are_errors() {
    let cases: &[(&str, u8, &str)] = &[
        ("attribute header cut short", 1, "08 00"),
        (
            "attribute longer than the buffer",
            1,
            "10 00 01 00 00 00 00 00",
        ),
        ("attribute length below its header", 1, "02 00 01 00"),
        (
            "nested attribute overruns its parent",
            1,
            "0c 00 01 00  0c 00 01 00 02 00 00 00",
        ),
        (
            "service AF of 4 bytes",
            1,
            "0c 00 01 00  08 00 01 00 02 00 00 00",
        ),
        (
            "service port of 1 byte",
            1,
            "0c 00 01 00  05 00 04 00 50 00 00 00",
        ),
        (
            "service address of 5 bytes",
            1,
            "10 00 01 00  09 00 03 00 c6 12 00 0a 01 00 00 00",
        ),
        (
            "service flags of 4 bytes",
            1,
            "0c 00 01 00  08 00 07 00 01 00 00 00",
        ),
        (
            "scheduler not UTF-8",
            1,
            "0c 00 01 00  07 00 06 00 ff fe 00 00",
        ),
        (
            "stats counter of 2 bytes",
            1,
            "10 00 01 00  0c 00 0a 00  06 00 01 00 01 00 00 00",
        ),
        (
            "dest weight of 2 bytes",
            5,
            "0c 00 02 00  06 00 04 00 01 00 00 00",
        ),
        (
            "dest tunnel type of 4 bytes",
            5,
            "0c 00 02 00  08 00 0d 00 01 00 00 00",
        ),
        ("timeout of 2 bytes", 12, "06 00 04 00 01 00 00 00"),
        ("info version of 2 bytes", 14, "06 00 01 00 01 00 00 00"),
        (
            "daemon group of 3 bytes",
            9,
            "0c 00 03 00  07 00 05 00 e0 00 00 00",
        ),
    ];
    for (name, cmd, attrs) in cases {
        let result = decode_genl(&genl(*cmd, attrs));
        assert!(result.is_err(), "{name}: decoded as {result:?}");
    }
}

#[test]
fn genl_header_cut_short_is_an_error() {
    assert!(decode_genl(&[1, 1]).is_err());
    assert!(decode_genl(&[]).is_err());
}

#[test]
fn every_truncation_of_a_message_is_an_error() {
    let svc = Service::new(ServiceKey::tcp("198.18.0.10".parse().unwrap(), 80));
    let messages = [
        IpvsMessage::new_service(&svc),
        IpvsMessage::new_dest(
            &svc.key,
            &Destination::new("2001:db8::5".parse().unwrap(), 8080),
        ),
    ];
    for message in messages {
        let bytes = encode(message, REQUEST_ACK, 1);
        for len in 0..bytes.len() {
            let truncated = bytes.get(..len).unwrap_or_default();
            assert!(decode(truncated).is_err(), "prefix of {len} bytes");
        }
    }
}

#[test]
fn attributes_inside_a_nest_cut_mid_way_are_errors() {
    // A service nest whose last attribute claims more than the nest holds,
    // while the outer lengths are consistent.
    let bytes = genl(1, "10 00 01 00  06 00 01 00 02 00 00 00  08 00 02 00");
    assert!(decode_genl(&bytes).is_err());
}

#[test]
fn unknown_attributes_are_kept_as_other_and_ignored_by_typed_views() {
    // A service with an attribute number from the future (0x63) and the
    // nested flag set on the outer attribute, as libnl sends it.
    let bytes = genl(
        1,
        "28 00 01 80
           06 00 01 00 02 00 00 00
           08 00 05 00 07 00 00 00
           0c 00 63 00 de ad be ef 01 02 03 04
           06 00 02 00 06 00 00 00
         08 00 63 00 01 00 00 00",
    );
    let message = decode_genl(&bytes).expect("unknown attributes are fine");
    assert_eq!(message.cmd, IpvsCmd::NewService);
    assert!(matches!(message.nlas.last(), Some(IpvsAttribute::Other(_))));
    let attrs = message.service_attributes().expect("service nest");
    assert!(attrs
        .iter()
        .any(|a| matches!(a, ServiceAttribute::Other(_))));
    let service = message.to_service().expect("typed view skips unknowns");
    assert_eq!(service.key, ServiceKey::fwmark(AddressFamily::Inet, 7));
}

#[test]
fn stats_padding_and_unknown_counters_are_skipped() {
    // IPVS_STATS_ATTR_PAD (11, empty) as 64-bit-unaligned arches emit it,
    // then an unknown counter 0x20.
    let bytes = genl(
        1,
        "2c 00 01 00
           06 00 01 00 02 00 00 00
           08 00 05 00 07 00 00 00
           18 00 0c 00
             04 00 0b 00
             0c 00 01 00 2a 00 00 00 00 00 00 00
             04 00 20 00",
    );
    let service = decode_genl(&bytes)
        .expect("decodes")
        .to_service()
        .expect("typed");
    assert_eq!(service.stats64.map(|s| s.conns), Some(42));
}

#[test]
fn unknown_commands_decode_as_other() {
    let message = decode_genl(&genl(0x42, "")).expect("decodes");
    assert_eq!(message.cmd, IpvsCmd::Other(0x42));
}

#[test]
fn typed_views_reject_incomplete_objects() {
    let cases: &[(&str, &str)] = &[
        ("no service nest", "08 00 04 00 01 00 00 00"),
        ("no address family", "0c 00 01 00  08 00 05 00 07 00 00 00"),
        (
            "neither fwmark nor address",
            "14 00 01 00  06 00 01 00 02 00 00 00  06 00 02 00 06 00 00 00",
        ),
        (
            "unknown family with an address",
            "30 00 01 00
               06 00 01 00 07 00 00 00
               06 00 02 00 06 00 00 00
               14 00 03 00 c6 12 00 0a 00 00 00 00 00 00 00 00 00 00 00 00
               06 00 04 00 00 50 00 00",
        ),
        (
            "IPv4 netmask with holes",
            "1c 00 01 00
               06 00 01 00 02 00 00 00
               08 00 05 00 07 00 00 00
               08 00 09 00 ff 00 ff 00",
        ),
        (
            "IPv6 netmask above 128",
            "1c 00 01 00
               06 00 01 00 0a 00 00 00
               08 00 05 00 07 00 00 00
               08 00 09 00 81 00 00 00",
        ),
    ];
    for (name, attrs) in cases {
        let message = decode_genl(&genl(1, attrs))
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        assert!(message.to_service().is_err(), "{name}");
    }
    let no_port = decode_genl(&genl(
        5,
        "18 00 02 00  14 00 01 00 c6 13 00 05 00 00 00 00 00 00 00 00
                      00 00 00 00",
    ))
    .expect("decodes");
    assert!(no_port.to_destination(AddressFamily::Inet).is_err());
    let info = decode_genl(&genl(14, "08 00 01 00 01 02 01 00")).expect("ok");
    assert!(info.to_info().is_err(), "info without table size");
}

/// Whatever decodes encodes and decodes back to the same bytes (the fuzz
/// target checks the same).
fn assert_reencoding_is_stable(cmd: u8, message: &IpvsMessage) {
    use netlink_packet_core::{Emitable, ParseableParametrized};
    use netlink_packet_generic::GenlHeader;
    if message.buffer_len() > 60_000 {
        return;
    }
    let encode = |m: &IpvsMessage| {
        let mut buffer = vec![0; m.buffer_len()];
        m.emit(&mut buffer);
        buffer
    };
    let header = GenlHeader { cmd, version: 1 };
    let first = encode(message);
    let again = IpvsMessage::parse_with_param(first.as_slice(), header)
        .expect("our own encoding decodes");
    assert_eq!(encode(&again), first);
}

fn seed_payload() -> Vec<u8> {
    let svc = ServiceKey::tcp("198.18.0.10".parse().unwrap(), 80);
    let dest = Destination::new("2001:db8::5".parse().unwrap(), 8080);
    let bytes = encode(IpvsMessage::new_dest(&svc, &dest), REQUEST_ACK, 1);
    // Drop the 16-byte netlink header, keep genl header and attributes.
    bytes.get(16..).unwrap_or_default().to_vec()
}

proptest! {
    #[test]
    fn mutated_messages_never_panic_and_reencode_stably(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = seed_payload();
        let len = bytes.len();
        for (at, value) in flips {
            if let Some(byte) = bytes.get_mut(at % len) {
                *byte = value;
            }
        }
        if let Ok(message) = decode_genl(&bytes) {
            let _ = message.to_destination(AddressFamily::Inet);
            let _ = message.to_service();
            assert_reencoding_is_stable(bytes[0], &message);
        }
    }

    #[test]
    fn arbitrary_payloads_never_panic(
        cmd in any::<u8>(),
        body in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut bytes = vec![cmd, 1, 0, 0];
        bytes.extend(body);
        if let Ok(message) = decode_genl(&bytes) {
            let _ = message.to_service();
            let _ = message.to_destination(AddressFamily::Inet6);
            let _ = message.to_info();
            let _ = message.to_timeouts();
            assert_reencoding_is_stable(cmd, &message);
        }
    }

    #[test]
    fn arbitrary_netlink_buffers_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let _ = decode(&bytes);
    }
}
