//! Decoding a real-server dump reply, natively (no kernel): the messages
//! a `GET_DEST` dump of one virtual server with ten real servers brings,
//! laid out as kernel 6.1 sends them (every attribute, both stats
//! blocks), decoded into [`Destination`]s the way a dump's consumer
//! does.
//!
//! A proxy reads one such dump before each removal (graceful
//! termination needs the connection counts), so this decode is paid per
//! change. The baseline, timed in the same run on the same bytes, is
//! netlink-packet-core's untyped walk of every attribute and nest: what
//! any decoder pays to look at the bytes at all. The ratio says what the
//! typing adds on top.
//!
//! `cargo bench -p ipvs-sys --bench decode` (BENCH_ROUNDS, 20,000 by
//! default: dumps decoded per timed sample; eleven samples of each,
//! taken in pairs).

use std::{hint::black_box, net::Ipv4Addr, time::Instant};

use ipvs_sys::{
    AddressFamily, DestAttribute, Destination, IpvsAttribute, IpvsCmd,
    IpvsMessage, Stats,
};
use netlink_packet_core::{
    NetlinkMessage, NetlinkPayload, NlaBuffer, NlasIterator,
};
use netlink_packet_generic::GenlMessage;

const DESTS: u32 = 10;
const SAMPLES: usize = 11;

/// The family id a resolved IPVS family would have; any will do.
const FAMILY_ID: u16 = 0x24;

fn stats(seed: u64) -> Stats {
    Stats {
        conns: seed,
        in_packets: seed * 7,
        out_packets: seed * 5,
        in_bytes: seed * 900,
        out_bytes: seed * 700,
        ..Stats::default()
    }
}

/// One dump reply message for real server `n`, in the kernel's
/// attribute order.
fn reply(n: u32) -> Vec<u8> {
    let address = Ipv4Addr::new(198, 18, 1, n as u8);
    let mut raw = [0u8; 16];
    raw[..4].copy_from_slice(&address.octets());
    let attrs = vec![
        DestAttribute::Address(ipvs_sys::InetAddr(raw)),
        DestAttribute::AddressFamily(AddressFamily::Inet),
        DestAttribute::Port(8080),
        DestAttribute::ForwardMethod(ipvs_sys::ForwardMethod::Masquerade),
        DestAttribute::Weight(1),
        DestAttribute::TunnelType(ipvs_sys::TunnelType::Ipip),
        DestAttribute::TunnelPort(0),
        DestAttribute::TunnelFlags(Default::default()),
        DestAttribute::UpperThreshold(0),
        DestAttribute::LowerThreshold(0),
        DestAttribute::ActiveConns(n),
        DestAttribute::InactiveConns(2 * n),
        DestAttribute::PersistentConns(0),
        DestAttribute::Stats64(stats(u64::from(n))),
        DestAttribute::Stats(stats(u64::from(n))),
    ];
    let message =
        IpvsMessage::new(IpvsCmd::NewDest, vec![IpvsAttribute::Dest(attrs)]);
    let mut genl = GenlMessage::from_payload(message);
    genl.set_resolved_family_id(FAMILY_ID);
    let mut nl = NetlinkMessage::from(genl);
    nl.finalize();
    let mut bytes = vec![0; nl.buffer_len()];
    nl.serialize(&mut bytes);
    bytes
}

/// The typed decode, as the handle's dump stream and its consumer do it.
fn typed(messages: &[Vec<u8>]) -> usize {
    let mut conns = 0;
    for bytes in messages {
        let nl = NetlinkMessage::<GenlMessage<IpvsMessage>>::deserialize(bytes)
            .expect("a well-formed reply");
        let NetlinkPayload::InnerMessage(genl) = nl.payload else {
            panic!("not an IPVS message");
        };
        let dest: Destination = genl
            .payload
            .to_destination(AddressFamily::Inet)
            .expect("a destination");
        conns += dest.conns.map_or(0, |c| c.active as usize);
    }
    conns
}

/// Every attribute and nest visited, nothing typed.
fn untyped(messages: &[Vec<u8>]) -> usize {
    /// `nests`: the kinds that hold attributes at this depth, then at
    /// the next ones (the dest in the message, the stats blocks in it).
    fn walk(buf: &[u8], nests: &[&[u16]]) -> usize {
        let mut seen = 0;
        for nla in NlasIterator::new(buf) {
            let nla: NlaBuffer<&[u8]> = nla.expect("a well-formed attribute");
            seen += 1;
            if let Some((here, deeper)) = nests.split_first() {
                if here.contains(&nla.kind()) {
                    seen += walk(nla.value(), deeper);
                }
            }
        }
        seen
    }
    messages
        .iter()
        .map(|bytes| {
            // netlink header (16) and genl header (4).
            walk(bytes.get(20..).expect("headers"), &[&[2], &[10, 12]])
        })
        .sum()
}

/// Nanoseconds per dump for `decode`, over `rounds` dumps.
fn sample(
    rounds: usize,
    messages: &[Vec<u8>],
    decode: fn(&[Vec<u8>]) -> usize,
) -> f64 {
    let start = Instant::now();
    for _ in 0..rounds {
        black_box(decode(black_box(messages)));
    }
    start.elapsed().as_nanos() as f64 / rounds as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let rounds = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let messages: Vec<Vec<u8>> = (1..=DESTS).map(reply).collect();
    let bytes: usize = messages.iter().map(Vec::len).sum();
    // Both read everything, or the comparison means nothing.
    assert_eq!(typed(&messages), (1..=DESTS as usize).sum::<usize>());
    assert!(untyped(&messages) > 30 * DESTS as usize);
    // Samples taken in pairs, typed then untyped, so that the machine's
    // drift (another process, the clock) falls on both; the ratio is the
    // median of the pairs' ratios.
    let pairs: Vec<(f64, f64)> = (0..SAMPLES)
        .map(|_| {
            (
                sample(rounds, &messages, typed),
                sample(rounds, &messages, untyped),
            )
        })
        .collect();
    let typed_ns = median(pairs.iter().map(|p| p.0).collect());
    let untyped_ns = median(pairs.iter().map(|p| p.1).collect());
    let ratio = median(pairs.iter().map(|p| p.0 / p.1).collect());
    println!(
        "one dump reply: {DESTS} real servers, {bytes} bytes, {rounds} \
         rounds x {SAMPLES} samples (median)"
    );
    println!("| decode | per dump | per real server |");
    println!("|---|---:|---:|");
    for (name, ns) in [
        ("typed (ipvs-sys)", typed_ns),
        ("untyped walk (baseline)", untyped_ns),
    ] {
        println!(
            "| {name} | {:.2} us | {:.0} ns |",
            ns / 1000.0,
            ns / f64::from(DESTS)
        );
    }
    println!("typed / untyped: {ratio:.2}x (median of the pairs' ratios)");
}
