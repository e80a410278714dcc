//! The fuzz targets' entry points: one per decoder of what reaches the
//! proxy from outside (the kernel's replies, `iptables-save`, files, the
//! API server's objects, the API side's stream).
//!
//! `fuzz/fuzz_targets/` holds one libFuzzer target per entry, built by
//! `cargo fuzz` on nightly (`make fuzz`); `cargo test` replays each
//! target's committed corpus through the same entry (`tests.rs`), so that
//! CI checks every input the fuzzer kept without an instrumented build.
//!
//! Each entry takes the fuzzer's bytes, runs them through the code the
//! proxy runs, and panics only when a property breaks: beyond "no
//! panic", a round trip where one exists (what is read, written and read
//! again is what was read) and, for the object and view streams, that a
//! state reached change by change is the state a fresh start from the
//! same objects reaches.

// A broken property is the fuzzer's (or the replaying test's) finding:
// these entries panic on purpose, as test support does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod input;
mod kernel;
mod objects;
mod protobuf;
mod text;
mod view;

#[cfg(test)]
mod tests;

/// A target: its name (its file under `fuzz/fuzz_targets/` and its
/// corpus directory under `fuzz/corpus/`) and its entry.
pub type Target = (&'static str, fn(&[u8]));

/// Every target.
pub const TARGETS: &[Target] = &[
    ("ipset_listing", kernel::ipset_listing),
    ("conntrack_reply", kernel::conntrack_reply),
    ("address_reply", kernel::address_reply),
    ("proc_ip_vs", kernel::proc_ip_vs),
    ("iptables_save", kernel::iptables_save),
    ("state_file", text::state_file),
    ("kube_proxy_config", text::kube_proxy_config),
    ("flags", text::flags),
    ("api_objects", objects::api_objects),
    ("api_protobuf", protobuf::api_protobuf),
    ("view_updates", view::view_updates),
];

/// Runs the target `name` on `data`; `false` when there is no such target.
pub fn run(name: &str, data: &[u8]) -> bool {
    match TARGETS.iter().find(|(n, _)| *n == name) {
        Some((_, entry)) => {
            entry(data);
            true
        }
        None => false,
    }
}
