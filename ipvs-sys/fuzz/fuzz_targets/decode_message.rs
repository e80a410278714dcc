//! Decoders must never panic, and whatever decodes must encode and decode
//! back to the same bytes (`ipvs_sys::fuzz::decode_message`, which the
//! crate's tests replay the corpus through).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ipvs_sys::fuzz::decode_message(data);
});
