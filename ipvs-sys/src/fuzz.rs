//! The fuzz target's entry (`fuzz/fuzz_targets/decode_message.rs`), here
//! so that the crate's tests replay the committed corpus through it.
//! Compiled for tests and under cargo-fuzz (`--cfg fuzzing`) only.

// A broken property is the fuzzer's finding: this entry panics on purpose.
#![allow(clippy::panic)]

use netlink_packet_core::{Emitable, ParseableParametrized};
use netlink_packet_generic::GenlHeader;

use crate::{address::AddressFamily, message::IpvsMessage};

/// Re-encoding can grow 4-byte addresses to 16; stay clear of the 16-bit
/// attribute length limit the request path also enforces.
const MAX_REENCODE: usize = 60_000;

fn encode(message: &IpvsMessage) -> Vec<u8> {
    let mut buffer = vec![0; message.buffer_len()];
    message.emit(&mut buffer);
    buffer
}

/// The first byte picks the IPVS command (the genl header decides how
/// top-level attributes are read); the rest is the attribute block.
/// Decoding and the typed views never panic, and whatever decodes
/// encodes and decodes back to the same bytes.
pub fn decode_message(data: &[u8]) {
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
    let again = match IpvsMessage::parse_with_param(first.as_slice(), header) {
        Ok(again) => again,
        Err(e) => panic!("our own encoding does not decode: {e}"),
    };
    assert_eq!(encode(&again), first, "encoding is not stable");
}

#[cfg(test)]
mod tests {
    use std::{fs, path::PathBuf};

    /// Every input in the committed corpus, through the entry.
    #[test]
    fn the_corpus_replays() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus/decode_message");
        let mut replayed = 0;
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            eprintln!("{}", path.display());
            super::decode_message(&fs::read(&path).unwrap());
            replayed += 1;
        }
        assert!(replayed > 0, "{}: empty", dir.display());
    }
}
