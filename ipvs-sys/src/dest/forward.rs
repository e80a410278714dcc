//! How a destination is reached (`IP_VS_CONN_F_*` forwarding methods).

use std::fmt;

const IP_VS_CONN_F_MASQ: u32 = 0;
const IP_VS_CONN_F_LOCALNODE: u32 = 1;
const IP_VS_CONN_F_TUNNEL: u32 = 2;
const IP_VS_CONN_F_DROUTE: u32 = 3;
const IP_VS_CONN_F_BYPASS: u32 = 4;

/// The forwarding method of a destination (`IPVS_DEST_ATTR_FWD_METHOD`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ForwardMethod {
    /// NAT (`ipvsadm -m`), what kube-proxy uses.
    #[default]
    Masquerade,
    /// Local node.
    Local,
    /// IP-in-IP / GUE / GRE tunnelling (`ipvsadm -i`).
    Tunnel,
    /// Direct routing (`ipvsadm -g`).
    DirectRoute,
    /// Cache bypass.
    Bypass,
    /// Any other method value, kept as sent.
    Other(u32),
}

impl From<u32> for ForwardMethod {
    fn from(value: u32) -> Self {
        match value {
            IP_VS_CONN_F_MASQ => Self::Masquerade,
            IP_VS_CONN_F_LOCALNODE => Self::Local,
            IP_VS_CONN_F_TUNNEL => Self::Tunnel,
            IP_VS_CONN_F_DROUTE => Self::DirectRoute,
            IP_VS_CONN_F_BYPASS => Self::Bypass,
            other => Self::Other(other),
        }
    }
}

impl From<ForwardMethod> for u32 {
    fn from(value: ForwardMethod) -> Self {
        match value {
            ForwardMethod::Masquerade => IP_VS_CONN_F_MASQ,
            ForwardMethod::Local => IP_VS_CONN_F_LOCALNODE,
            ForwardMethod::Tunnel => IP_VS_CONN_F_TUNNEL,
            ForwardMethod::DirectRoute => IP_VS_CONN_F_DROUTE,
            ForwardMethod::Bypass => IP_VS_CONN_F_BYPASS,
            ForwardMethod::Other(other) => other,
        }
    }
}

impl fmt::Display for ForwardMethod {
    /// The words `ipvsadm -Ln` prints in its `Forward` column.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Masquerade => f.write_str("Masq"),
            Self::Local => f.write_str("Local"),
            Self::Tunnel => f.write_str("Tunnel"),
            Self::DirectRoute => f.write_str("Route"),
            Self::Bypass => f.write_str("Bypass"),
            Self::Other(other) => write!(f, "fwd {other}"),
        }
    }
}
