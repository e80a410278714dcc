//! Unit tests: golden bytes per command, round trips, malformed input,
//! typed conversions and errors.

mod captured;
mod errors;
mod golden;
mod malformed;
mod roundtrip;
mod typed;

use netlink_packet_core::{
    NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_generic::GenlMessage;

use crate::IpvsMessage;

/// The family id the IPVS family got in the guest this crate was first
/// tried in; any value works as long as encode and decode agree.
pub(crate) const FAMILY_ID: u16 = 0x20;

pub(crate) const REQUEST_ACK: u16 = 0x0005;
pub(crate) const REQUEST_DUMP: u16 = 0x0301;
pub(crate) const MULTI: u16 = 0x0002;

/// Bytes from whitespace-separated hex, `#` starting a comment.
pub(crate) fn hex(text: &str) -> Vec<u8> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or(""))
        .flat_map(str::split_whitespace)
        .map(|byte| {
            u8::from_str_radix(byte, 16)
                .unwrap_or_else(|_| panic!("bad hex byte {byte:?} in fixture"))
        })
        .collect()
}

/// A whole netlink message, as the socket would carry it.
pub(crate) fn encode(message: IpvsMessage, flags: u16, seq: u32) -> Vec<u8> {
    let mut genl = GenlMessage::from_payload(message);
    genl.set_resolved_family_id(FAMILY_ID);
    let mut nl = NetlinkMessage::from(genl);
    nl.header.flags = flags;
    nl.header.sequence_number = seq;
    nl.finalize();
    let mut buffer = vec![0; nl.buffer_len()];
    nl.serialize(&mut buffer);
    buffer
}

/// Decode a whole netlink message and return its IPVS payload and flags.
pub(crate) fn decode(
    bytes: &[u8],
) -> Result<(IpvsMessage, NetlinkHeader), netlink_packet_core::DecodeError> {
    let nl = NetlinkMessage::<GenlMessage<IpvsMessage>>::deserialize(bytes)?;
    match nl.payload {
        NetlinkPayload::InnerMessage(genl) => Ok((genl.payload, nl.header)),
        other => Err(format!("not an IPVS message: {other:?}").into()),
    }
}

/// Decode only the generic netlink payload (genl header + attributes).
pub(crate) fn decode_genl(
    bytes: &[u8],
) -> Result<IpvsMessage, netlink_packet_core::DecodeError> {
    let mut header = NetlinkHeader::default();
    header.message_type = FAMILY_ID;
    GenlMessage::<IpvsMessage>::deserialize(&header, bytes)
        .map(|genl| genl.payload)
}
