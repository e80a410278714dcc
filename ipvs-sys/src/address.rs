//! Address family, transport protocol and the kernel's 16-byte address.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use netlink_packet_core::DecodeError;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

const IPPROTO_TCP: u16 = 6;
const IPPROTO_UDP: u16 = 17;
const IPPROTO_SCTP: u16 = 132;

/// The kernel's `union nf_inet_addr` is 16 bytes; IPv4 sits in the first 4.
pub const INET_ADDR_LEN: usize = 16;

/// An address family (`AF_*`) as IPVS carries it in a `u16` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum AddressFamily {
    /// IPv4 (`AF_INET`).
    Inet,
    /// IPv6 (`AF_INET6`).
    Inet6,
    /// Any other family number, kept as sent.
    Other(u16),
}

impl AddressFamily {
    /// The family of an IP address.
    pub fn of(address: &IpAddr) -> Self {
        match address {
            IpAddr::V4(_) => Self::Inet,
            IpAddr::V6(_) => Self::Inet6,
        }
    }
}

impl From<u16> for AddressFamily {
    fn from(value: u16) -> Self {
        match value {
            AF_INET => Self::Inet,
            AF_INET6 => Self::Inet6,
            other => Self::Other(other),
        }
    }
}

impl From<AddressFamily> for u16 {
    fn from(value: AddressFamily) -> Self {
        match value {
            AddressFamily::Inet => AF_INET,
            AddressFamily::Inet6 => AF_INET6,
            AddressFamily::Other(other) => other,
        }
    }
}

impl fmt::Display for AddressFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inet => f.write_str("IPv4"),
            Self::Inet6 => f.write_str("IPv6"),
            Self::Other(other) => write!(f, "AF {other}"),
        }
    }
}

/// A virtual service's transport protocol (`IPPROTO_*`, carried as `u16`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Protocol {
    /// TCP (`IPPROTO_TCP`).
    Tcp,
    /// UDP (`IPPROTO_UDP`).
    Udp,
    /// SCTP (`IPPROTO_SCTP`).
    Sctp,
    /// Any other protocol number, kept as sent.
    Other(u16),
}

impl From<u16> for Protocol {
    fn from(value: u16) -> Self {
        match value {
            IPPROTO_TCP => Self::Tcp,
            IPPROTO_UDP => Self::Udp,
            IPPROTO_SCTP => Self::Sctp,
            other => Self::Other(other),
        }
    }
}

impl From<Protocol> for u16 {
    fn from(value: Protocol) -> Self {
        match value {
            Protocol::Tcp => IPPROTO_TCP,
            Protocol::Udp => IPPROTO_UDP,
            Protocol::Sctp => IPPROTO_SCTP,
            Protocol::Other(other) => other,
        }
    }
}

impl fmt::Display for Protocol {
    /// Upper case, the way `ipvsadm -Ln` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp => f.write_str("TCP"),
            Self::Udp => f.write_str("UDP"),
            Self::Sctp => f.write_str("SCTP"),
            Self::Other(other) => write!(f, "proto {other}"),
        }
    }
}

/// The raw address bytes of `IPVS_SVC_ATTR_ADDR` / `IPVS_DEST_ATTR_ADDR`.
///
/// The attribute alone does not say which family it holds (a sibling
/// attribute does), so decoding keeps the bytes and [`InetAddr::to_ip`]
/// interprets them once the family is known. The kernel always sends 16
/// bytes; 4-byte values (as some user-space tools send) are accepted too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct InetAddr(pub [u8; INET_ADDR_LEN]);

impl InetAddr {
    /// Reads an address attribute: 16 bytes as the kernel sends, or 4
    /// for an IPv4 address as some tools send; other lengths are an error.
    pub fn parse(value: &[u8]) -> Result<Self, DecodeError> {
        let mut bytes = [0u8; INET_ADDR_LEN];
        match value.len() {
            4 | INET_ADDR_LEN => {
                bytes[..value.len()].copy_from_slice(value);
                Ok(Self(bytes))
            }
            other => Err(DecodeError::from(format!(
                "address attribute has {other} bytes, expected 4 or 16"
            ))),
        }
    }

    /// The address as the given family reads it.
    pub fn to_ip(&self, family: AddressFamily) -> Result<IpAddr, DecodeError> {
        match family {
            AddressFamily::Inet => {
                let [a, b, c, d, ..] = self.0;
                Ok(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
            }
            AddressFamily::Inet6 => Ok(IpAddr::V6(Ipv6Addr::from(self.0))),
            AddressFamily::Other(af) => Err(DecodeError::from(format!(
                "cannot read an address of unknown family {af}"
            ))),
        }
    }
}

impl From<IpAddr> for InetAddr {
    fn from(address: IpAddr) -> Self {
        let mut bytes = [0u8; INET_ADDR_LEN];
        match address {
            IpAddr::V4(v4) => {
                if let Some(head) = bytes.get_mut(..4) {
                    head.copy_from_slice(&v4.octets());
                }
            }
            IpAddr::V6(v6) => bytes = v6.octets(),
        }
        Self(bytes)
    }
}

/// `198.18.0.10:80` or `[2001:db8::1]:80`, as `ipvsadm -Ln` prints them.
pub(crate) struct SocketDisplay<'a>(pub &'a IpAddr, pub u16);

impl fmt::Display for SocketDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}:{}", self.1),
            IpAddr::V6(v6) => write!(f, "[{v6}]:{}", self.1),
        }
    }
}
