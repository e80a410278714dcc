//! Encode → decode round trips of typed services and destinations.

use std::net::IpAddr;

use proptest::prelude::*;

use super::{decode, encode, REQUEST_ACK};
use crate::{
    AddressFamily, ConnCounts, Destination, ForwardMethod, IpvsMessage,
    Protocol, Service, ServiceFlags, ServiceKey, Stats, Tunnel, TunnelFlags,
    TunnelType,
};

fn address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
    ]
}

fn key() -> impl Strategy<Value = ServiceKey> {
    prop_oneof![
        (any::<u16>(), address(), any::<u16>()).prop_map(
            |(protocol, address, port)| ServiceKey::Inet {
                protocol: Protocol::from(protocol),
                address,
                port,
            }
        ),
        (any::<bool>(), 1..=u32::MAX).prop_map(|(v6, mark)| {
            let family = if v6 {
                AddressFamily::Inet6
            } else {
                AddressFamily::Inet
            };
            ServiceKey::Fwmark { family, mark }
        }),
    ]
}

/// Legacy stats carry most counters as u32; keep them in range.
fn legacy_stats() -> impl Strategy<Value = Stats> {
    (any::<[u32; 8]>(), any::<[u64; 2]>()).prop_map(|(small, bytes)| {
        let [conns, in_packets, out_packets, cps, in_pps, out_pps, in_bps, out_bps] =
            small.map(u64::from);
        Stats {
            conns,
            in_packets,
            out_packets,
            in_bytes: bytes[0],
            out_bytes: bytes[1],
            cps,
            in_pps,
            out_pps,
            in_bps,
            out_bps,
        }
    })
}

fn wide_stats() -> impl Strategy<Value = Stats> {
    any::<[u64; 10]>().prop_map(|v| Stats {
        conns: v[0],
        in_packets: v[1],
        out_packets: v[2],
        in_bytes: v[3],
        out_bytes: v[4],
        cps: v[5],
        in_pps: v[6],
        out_pps: v[7],
        in_bps: v[8],
        out_bps: v[9],
    })
}

fn service() -> impl Strategy<Value = Service> {
    (
        key(),
        "[a-z]{1,15}",
        any::<u32>(),
        any::<u32>(),
        any::<u8>(),
        proptest::option::of("[a-z]{1,15}"),
        proptest::option::of(legacy_stats()),
        proptest::option::of(wide_stats()),
    )
        .prop_map(
            |(key, scheduler, flags, timeout, mask, pe, stats, stats64)| {
                let max = match key.family() {
                    AddressFamily::Inet6 => 128,
                    _ => 32,
                };
                Service {
                    key,
                    scheduler,
                    flags: ServiceFlags(flags),
                    timeout,
                    netmask: mask % (max + 1),
                    persistence_engine: pe,
                    stats,
                    stats64,
                }
            },
        )
}

fn destination() -> impl Strategy<Value = Destination> {
    (
        (address(), any::<u16>(), any::<u32>(), any::<u32>()),
        (any::<u32>(), any::<u32>()),
        proptest::option::of((any::<u8>(), any::<u16>(), any::<u16>())),
        proptest::option::of(any::<[u32; 3]>()),
        proptest::option::of(legacy_stats()),
        proptest::option::of(wide_stats()),
    )
        .prop_map(
            |(
                (address, port, fwd, weight),
                (upper, lower),
                tunnel,
                conns,
                stats,
                stats64,
            )| {
                Destination {
                    address,
                    port,
                    fwd_method: ForwardMethod::from(fwd),
                    weight,
                    upper_threshold: upper,
                    lower_threshold: lower,
                    tunnel: tunnel.map(|(kind, port, flags)| Tunnel {
                        kind: TunnelType::from(kind),
                        port,
                        flags: TunnelFlags(flags),
                    }),
                    conns: conns.map(|[active, inactive, persistent]| {
                        ConnCounts {
                            active,
                            inactive,
                            persistent,
                        }
                    }),
                    stats,
                    stats64,
                }
            },
        )
}

proptest! {
    #[test]
    fn service_round_trips(service in service()) {
        let bytes = encode(IpvsMessage::new_service(&service), REQUEST_ACK, 7);
        let (message, _) = decode(&bytes).expect("decodes");
        prop_assert_eq!(message.to_service().expect("typed"), service);
    }

    #[test]
    fn destination_round_trips(svc in key(), dest in destination()) {
        // The service's family is deliberately unrelated: the destination
        // carries its own.
        let bytes = encode(IpvsMessage::new_dest(&svc, &dest), REQUEST_ACK, 7);
        let (message, _) = decode(&bytes).expect("decodes");
        prop_assert_eq!(&message.to_service().expect("key").key, &svc);
        prop_assert_eq!(
            message.to_destination(AddressFamily::Inet).expect("typed"),
            dest
        );
    }

    #[test]
    fn service_message_bytes_are_stable(service in service()) {
        // decode(encode(m)) re-encodes to the same bytes.
        let bytes = encode(IpvsMessage::new_service(&service), REQUEST_ACK, 7);
        let (message, _) = decode(&bytes).expect("decodes");
        prop_assert_eq!(encode(message, REQUEST_ACK, 7), bytes);
    }
}
