//! Typed values: display, netmask conversion, defaults.

use std::net::IpAddr;

use crate::{
    AddressFamily, Destination, ForwardMethod, InetAddr, IpvsVersion, Protocol,
    Service, ServiceAttribute, ServiceFlags, ServiceKey,
};

fn ip(text: &str) -> IpAddr {
    text.parse().expect("fixture address")
}

#[test]
fn service_keys_display_like_ipvsadm() {
    let cases = [
        (ServiceKey::tcp(ip("198.18.0.10"), 80), "TCP 198.18.0.10:80"),
        (
            ServiceKey::udp(ip("2001:db8::1"), 53),
            "UDP [2001:db8::1]:53",
        ),
        (ServiceKey::sctp(ip("198.18.0.11"), 9), "SCTP 198.18.0.11:9"),
        (ServiceKey::fwmark(AddressFamily::Inet, 7), "FWM 7"),
        (ServiceKey::fwmark(AddressFamily::Inet6, 7), "FWM 7 IPv6"),
    ];
    for (key, text) in cases {
        assert_eq!(key.to_string(), text);
    }
    assert_eq!(
        Destination::new(ip("2001:db8::5"), 8080).to_string(),
        "[2001:db8::5]:8080"
    );
}

#[test]
fn netmask_is_a_prefix_length_in_the_typed_view() {
    let v4 = ServiceKey::tcp(ip("198.18.0.10"), 80);
    let v6 = ServiceKey::tcp(ip("2001:db8::1"), 80);
    let cases = [
        (Service::new(v4), 0xffff_ffff),
        (Service::new(v4).with_netmask(24), 0xffff_ff00),
        (Service::new(v4).with_netmask(0), 0),
        // IPv6: the prefix in host order, read here as big endian.
        (Service::new(v6), u32::from_be_bytes(128u32.to_ne_bytes())),
    ];
    for (service, raw) in cases {
        assert_eq!(service.raw_netmask(), raw, "{service}");
        let attrs = service.attributes();
        assert!(attrs.contains(&ServiceAttribute::Netmask(raw)));
        let back = Service::from_attributes(&attrs).expect("typed");
        assert_eq!(back.netmask, service.netmask, "{service}");
    }
}

#[test]
fn defaults_follow_ipvsadm() {
    let svc = Service::new(ServiceKey::tcp(ip("198.18.0.10"), 80));
    assert_eq!(svc.scheduler, "wlc");
    assert_eq!(svc.flags, ServiceFlags::EMPTY);
    assert_eq!(svc.netmask, 32);
    let persistent = svc.clone().persistent(10800);
    assert!(persistent.flags.contains(ServiceFlags::PERSISTENT));
    assert_eq!(persistent.timeout, 10800);
    let dest = Destination::new(ip("198.19.0.5"), 80);
    assert_eq!(dest.weight, 1);
    assert_eq!(dest.fwd_method, ForwardMethod::Masquerade);
}

#[test]
fn value_enums_keep_unknown_values() {
    assert_eq!(u16::from(Protocol::from(99)), 99);
    assert_eq!(Protocol::from(6), Protocol::Tcp);
    assert_eq!(u16::from(AddressFamily::from(99)), 99);
    assert_eq!(u32::from(ForwardMethod::from(9)), 9);
    assert_eq!(ForwardMethod::from(3).to_string(), "Route");
    assert_eq!(
        (ServiceFlags::PERSISTENT | ServiceFlags::HASHED | ServiceFlags(0x100))
            .to_string(),
        "persistent|hashed|0x100"
    );
    assert_eq!(ServiceFlags::EMPTY.to_string(), "none");
    assert_eq!(
        (ServiceFlags::PERSISTENT | ServiceFlags::HASHED).without_hashed(),
        ServiceFlags::PERSISTENT
    );
    assert_eq!(IpvsVersion(0x010201).to_string(), "1.2.1");
}

#[test]
fn inet_addr_accepts_four_or_sixteen_bytes() {
    let short = InetAddr::parse(&[198, 18, 0, 10]).expect("4 bytes");
    assert_eq!(
        short.to_ip(AddressFamily::Inet).ok(),
        Some(ip("198.18.0.10"))
    );
    assert!(InetAddr::parse(&[0; 8]).is_err());
    assert!(InetAddr::from(ip("198.18.0.10"))
        .to_ip(AddressFamily::Other(3))
        .is_err());
}
