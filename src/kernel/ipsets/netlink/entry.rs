//! A set member as the `IPSET_ATTR_DATA` nest of an add, a delete or a
//! listed element: the fields kube-proxy's five set types use.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::{
    attribute::{Attr, AttrWriter, Attrs},
    DecodeError,
};
use crate::{
    desired::{SetEntry, SetType},
    model::Protocol,
};

const IPSET_ATTR_IP: u16 = 1;
const IPSET_ATTR_PORT: u16 = 4;
const IPSET_ATTR_PROTO: u16 = 7;
const IPSET_ATTR_CADT_FLAGS: u16 = 8;
const IPSET_ATTR_IP2: u16 = 20;
const IPSET_ATTR_CIDR2: u16 = 21;

const IPSET_ATTR_IPADDR_IPV4: u16 = 1;
const IPSET_ATTR_IPADDR_IPV6: u16 = 2;

/// An element stored as an exception ("nomatch"): it means the opposite
/// of a member, so it must not be read as one.
const IPSET_FLAG_NOMATCH: u32 = 1 << 2;

const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const IPPROTO_SCTP: u8 = 132;

fn proto_number(proto: Protocol) -> u8 {
    match proto {
        Protocol::Tcp => IPPROTO_TCP,
        Protocol::Udp => IPPROTO_UDP,
        Protocol::Sctp => IPPROTO_SCTP,
    }
}

fn proto_from_number(number: u8) -> Option<Protocol> {
    match number {
        IPPROTO_TCP => Some(Protocol::Tcp),
        IPPROTO_UDP => Some(Protocol::Udp),
        IPPROTO_SCTP => Some(Protocol::Sctp),
        _ => None,
    }
}

fn put_ip(w: &mut AttrWriter<'_>, kind: u16, ip: IpAddr) {
    w.nested(kind, |w| match ip {
        IpAddr::V4(v4) => w.net_bytes(IPSET_ATTR_IPADDR_IPV4, &v4.octets()),
        IpAddr::V6(v6) => w.net_bytes(IPSET_ATTR_IPADDR_IPV6, &v6.octets()),
    });
}

fn put_ip_port(w: &mut AttrWriter<'_>, ip: IpAddr, proto: Protocol, port: u16) {
    put_ip(w, IPSET_ATTR_IP, ip);
    w.be16(IPSET_ATTR_PORT, port);
    w.u8(IPSET_ATTR_PROTO, proto_number(proto));
}

/// Writes the content of the `IPSET_ATTR_DATA` nest for `entry`.
pub(crate) fn encode(w: &mut AttrWriter<'_>, entry: &SetEntry) {
    match entry {
        SetEntry::Ip(ip) => put_ip(w, IPSET_ATTR_IP, *ip),
        SetEntry::IpPort(ip, proto, port) => put_ip_port(w, *ip, *proto, *port),
        SetEntry::IpPortIp(ip, proto, port, ip2) => {
            put_ip_port(w, *ip, *proto, *port);
            put_ip(w, IPSET_ATTR_IP2, *ip2);
        }
        SetEntry::IpPortNet(ip, proto, port, net) => {
            put_ip_port(w, *ip, *proto, *port);
            let net = net.trunc();
            put_ip(w, IPSET_ATTR_IP2, net.addr());
            w.u8(IPSET_ATTR_CIDR2, net.prefix_len());
        }
        SetEntry::Port(port) => w.be16(IPSET_ATTR_PORT, *port),
    }
}

fn parse_ip(attr: &Attr<'_>) -> Result<IpAddr, DecodeError> {
    for inner in attr.nested() {
        let inner = inner?;
        match (inner.kind, inner.payload) {
            (IPSET_ATTR_IPADDR_IPV4, p) => {
                let octets: [u8; 4] = p
                    .get(..4)
                    .and_then(|s| s.try_into().ok())
                    .ok_or(DecodeError::BadAddress { len: p.len() })?;
                return Ok(IpAddr::V4(Ipv4Addr::from(octets)));
            }
            (IPSET_ATTR_IPADDR_IPV6, p) => {
                let octets: [u8; 16] = p
                    .get(..16)
                    .and_then(|s| s.try_into().ok())
                    .ok_or(DecodeError::BadAddress { len: p.len() })?;
                return Ok(IpAddr::V6(Ipv6Addr::from(octets)));
            }
            _ => {}
        }
    }
    Err(DecodeError::MissingAttr("address in IP nest"))
}

/// The fields of one listed element, before the set type gives them a
/// meaning.
#[derive(Debug, Default)]
struct Fields {
    ip: Option<IpAddr>,
    port: Option<u16>,
    proto: Option<u8>,
    ip2: Option<IpAddr>,
    cidr2: Option<u8>,
    nomatch: bool,
}

/// Reads one listed element of a set of type `set_type`. Extensions
/// (comment, timeout, counters) are not part of a [`SetEntry`] and are
/// skipped; anything kube-proxy's types cannot hold is an error.
pub(crate) fn decode(
    set_type: SetType,
    data: &[u8],
) -> Result<SetEntry, DecodeError> {
    let mut f = Fields::default();
    for attr in Attrs::new(data) {
        let attr = attr?;
        match attr.kind {
            IPSET_ATTR_IP => f.ip = Some(parse_ip(&attr)?),
            IPSET_ATTR_PORT => f.port = Some(attr.be16()?),
            IPSET_ATTR_PROTO => f.proto = Some(attr.u8()?),
            IPSET_ATTR_IP2 => f.ip2 = Some(parse_ip(&attr)?),
            IPSET_ATTR_CIDR2 => f.cidr2 = Some(attr.u8()?),
            IPSET_ATTR_CADT_FLAGS => {
                f.nomatch = attr.be32()? & IPSET_FLAG_NOMATCH != 0
            }
            _ => {}
        }
    }
    if f.nomatch {
        return Err(DecodeError::Unsupported("a nomatch element".into()));
    }
    let ip = || f.ip.ok_or(DecodeError::MissingAttr("IPSET_ATTR_IP"));
    let port = || f.port.ok_or(DecodeError::MissingAttr("IPSET_ATTR_PORT"));
    let proto = || {
        let number = f
            .proto
            .ok_or(DecodeError::MissingAttr("IPSET_ATTR_PROTO"))?;
        proto_from_number(number).ok_or_else(|| {
            DecodeError::Unsupported(format!("protocol {number}"))
        })
    };
    let ip2 = || f.ip2.ok_or(DecodeError::MissingAttr("IPSET_ATTR_IP2"));
    Ok(match set_type {
        SetType::HashIp => SetEntry::Ip(ip()?),
        SetType::HashIpPort => SetEntry::IpPort(ip()?, proto()?, port()?),
        SetType::HashIpPortIp => {
            SetEntry::IpPortIp(ip()?, proto()?, port()?, ip2()?)
        }
        SetType::HashIpPortNet => {
            let addr = ip2()?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = f.cidr2.unwrap_or(max);
            // The kernel keeps networks without host bits; one listed
            // with them is read as the network it names, as written.
            let net = IpNet::new(addr, prefix)
                .map_err(|_| {
                    DecodeError::Unsupported(format!("prefix length {prefix}"))
                })?
                .trunc();
            SetEntry::IpPortNet(ip()?, proto()?, port()?, net)
        }
        SetType::BitmapPort => SetEntry::Port(port()?),
    })
}
