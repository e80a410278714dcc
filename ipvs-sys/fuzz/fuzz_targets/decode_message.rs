//! Decoders must never panic, and whatever decodes must encode and decode
//! back to the same bytes.
//!
//! The first input byte picks the IPVS command (the genl header decides
//! how top-level attributes are read); the rest is the attribute block.

#![no_main]

use ipvs_sys::{AddressFamily, IpvsMessage};
use libfuzzer_sys::fuzz_target;
use netlink_packet_core::{Emitable, ParseableParametrized};
use netlink_packet_generic::GenlHeader;

/// Re-encoding can grow 4-byte addresses to 16; stay clear of the 16-bit
/// attribute length limit the request path also enforces.
const MAX_REENCODE: usize = 60_000;

fn encode(message: &IpvsMessage) -> Vec<u8> {
    let mut buffer = vec![0; message.buffer_len()];
    message.emit(&mut buffer);
    buffer
}

fuzz_target!(|data: &[u8]| {
    let Some((&cmd, attrs)) = data.split_first() else {
        return;
    };
    let header = GenlHeader { cmd, version: 1 };
    let Ok(message) = IpvsMessage::parse_with_param(attrs, header) else {
        return;
    };
    let _ = message.to_service();
    let _ = message.to_destination(AddressFamily::Inet);
    let _ = message.to_destination(AddressFamily::Inet6);
    let _ = message.to_info();
    let _ = message.to_timeouts();

    if message.buffer_len() > MAX_REENCODE {
        return;
    }
    let first = encode(&message);
    let again = IpvsMessage::parse_with_param(first.as_slice(), header)
        .expect("our own encoding decodes");
    assert_eq!(encode(&again), first, "encoding is not stable");
});
