//! Tunnel settings of a destination reached by `ForwardMethod::Tunnel`.

use std::fmt;

const IP_VS_CONN_F_TUNNEL_TYPE_IPIP: u8 = 0;
const IP_VS_CONN_F_TUNNEL_TYPE_GUE: u8 = 1;
const IP_VS_CONN_F_TUNNEL_TYPE_GRE: u8 = 2;

const IP_VS_TUNNEL_ENCAP_FLAG_CSUM: u16 = 1 << 0;
const IP_VS_TUNNEL_ENCAP_FLAG_REMCSUM: u16 = 1 << 1;

/// Encapsulation (`IPVS_DEST_ATTR_TUN_TYPE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TunnelType {
    /// IP in IP.
    #[default]
    Ipip,
    /// Generic UDP Encapsulation, on [`Tunnel::port`].
    Gue,
    /// GRE.
    Gre,
    /// Any other encapsulation value, kept as sent.
    Other(u8),
}

impl From<u8> for TunnelType {
    fn from(value: u8) -> Self {
        match value {
            IP_VS_CONN_F_TUNNEL_TYPE_IPIP => Self::Ipip,
            IP_VS_CONN_F_TUNNEL_TYPE_GUE => Self::Gue,
            IP_VS_CONN_F_TUNNEL_TYPE_GRE => Self::Gre,
            other => Self::Other(other),
        }
    }
}

impl From<TunnelType> for u8 {
    fn from(value: TunnelType) -> Self {
        match value {
            TunnelType::Ipip => IP_VS_CONN_F_TUNNEL_TYPE_IPIP,
            TunnelType::Gue => IP_VS_CONN_F_TUNNEL_TYPE_GUE,
            TunnelType::Gre => IP_VS_CONN_F_TUNNEL_TYPE_GRE,
            TunnelType::Other(other) => other,
        }
    }
}

impl fmt::Display for TunnelType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ipip => f.write_str("ipip"),
            Self::Gue => f.write_str("gue"),
            Self::Gre => f.write_str("gre"),
            Self::Other(other) => write!(f, "tunnel {other}"),
        }
    }
}

/// Encapsulation flags (`IPVS_DEST_ATTR_TUN_FLAGS`); unknown bits kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TunnelFlags(pub u16);

impl TunnelFlags {
    /// No checksum.
    pub const NOCSUM: Self = Self(0);
    /// Checksum the encapsulation.
    pub const CSUM: Self = Self(IP_VS_TUNNEL_ENCAP_FLAG_CSUM);
    /// Remote checksum offload.
    pub const REMCSUM: Self = Self(IP_VS_TUNNEL_ENCAP_FLAG_REMCSUM);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl From<u16> for TunnelFlags {
    fn from(value: u16) -> Self {
        Self(value)
    }
}

impl From<TunnelFlags> for u16 {
    fn from(value: TunnelFlags) -> Self {
        value.0
    }
}

/// Tunnel type, port (GUE) and flags, sent together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tunnel {
    /// The encapsulation.
    pub kind: TunnelType,
    /// UDP port for GUE; 0 otherwise.
    pub port: u16,
    /// Encapsulation flags.
    pub flags: TunnelFlags,
}
