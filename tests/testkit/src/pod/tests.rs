use std::net::Ipv4Addr;

use super::slot_ip;

#[test]
fn slot_addresses() {
    let cases = [
        (0, Some(Ipv4Addr::new(198, 19, 1, 1))),
        (1, Some(Ipv4Addr::new(198, 19, 1, 2))),
        (249, Some(Ipv4Addr::new(198, 19, 1, 250))),
        (250, Some(Ipv4Addr::new(198, 19, 2, 1))),
        (250 * 254 - 1, Some(Ipv4Addr::new(198, 19, 254, 250))),
        (250 * 254, None),
        (u32::MAX, None),
    ];
    for (slot, want) in cases {
        assert_eq!(slot_ip(slot), want, "slot {slot}");
    }
}

#[test]
fn spec_collects_ports() {
    let spec = super::PodSpec::new("pod-a").port(80).port(8080);
    assert_eq!(spec.name, "pod-a");
    assert_eq!(spec.ports, vec![80, 8080]);
}
