//! Attributes nested in `IPVS_CMD_ATTR_DAEMON` (connection sync daemon).

use std::net::{Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{
    emit_u16, emit_u32, parse_u16, parse_u32, parse_u8, DecodeError,
    DefaultNla, ErrorContext, Nla, NlaBuffer, Parseable,
};

use crate::nla::{emit_bytes, emit_string, fits, parse_string, string_len};

const IPVS_DAEMON_ATTR_STATE: u16 = 1;
const IPVS_DAEMON_ATTR_MCAST_IFN: u16 = 2;
const IPVS_DAEMON_ATTR_SYNC_ID: u16 = 3;
const IPVS_DAEMON_ATTR_SYNC_MAXLEN: u16 = 4;
const IPVS_DAEMON_ATTR_MCAST_GROUP: u16 = 5;
const IPVS_DAEMON_ATTR_MCAST_GROUP6: u16 = 6;
const IPVS_DAEMON_ATTR_MCAST_PORT: u16 = 7;
const IPVS_DAEMON_ATTR_MCAST_TTL: u16 = 8;

const IP_VS_STATE_MASTER: u32 = 1;
const IP_VS_STATE_BACKUP: u32 = 2;

/// Role of a sync daemon (`IP_VS_STATE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DaemonState {
    /// Sends the connection table to backups.
    Master,
    /// Receives the connection table from a master.
    Backup,
    /// Any other state value, kept as sent.
    Other(u32),
}

impl From<u32> for DaemonState {
    fn from(value: u32) -> Self {
        match value {
            IP_VS_STATE_MASTER => Self::Master,
            IP_VS_STATE_BACKUP => Self::Backup,
            other => Self::Other(other),
        }
    }
}

impl From<DaemonState> for u32 {
    fn from(value: DaemonState) -> Self {
        match value {
            DaemonState::Master => IP_VS_STATE_MASTER,
            DaemonState::Backup => IP_VS_STATE_BACKUP,
            DaemonState::Other(other) => other,
        }
    }
}

/// One attribute of a sync daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DaemonAttribute {
    /// Whether it runs as master or backup.
    State(DaemonState),
    /// Multicast interface name.
    McastInterface(String),
    /// Sync id, to tell several sync groups apart.
    SyncId(u32),
    /// UDP payload size.
    SyncMaxLen(u16),
    /// IPv4 multicast group.
    McastGroup(Ipv4Addr),
    /// IPv6 multicast group.
    McastGroup6(Ipv6Addr),
    /// UDP port of the multicast group.
    McastPort(u16),
    /// Multicast TTL.
    McastTtl(u8),
    /// An attribute this crate does not know, kept as received.
    Other(DefaultNla),
}

impl Nla for DaemonAttribute {
    fn value_len(&self) -> usize {
        match self {
            Self::State(_) | Self::SyncId(_) | Self::McastGroup(_) => 4,
            Self::McastInterface(name) => string_len(name),
            Self::SyncMaxLen(_) | Self::McastPort(_) => 2,
            Self::McastGroup6(_) => 16,
            Self::McastTtl(_) => 1,
            Self::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::State(_) => IPVS_DAEMON_ATTR_STATE,
            Self::McastInterface(_) => IPVS_DAEMON_ATTR_MCAST_IFN,
            Self::SyncId(_) => IPVS_DAEMON_ATTR_SYNC_ID,
            Self::SyncMaxLen(_) => IPVS_DAEMON_ATTR_SYNC_MAXLEN,
            Self::McastGroup(_) => IPVS_DAEMON_ATTR_MCAST_GROUP,
            Self::McastGroup6(_) => IPVS_DAEMON_ATTR_MCAST_GROUP6,
            Self::McastPort(_) => IPVS_DAEMON_ATTR_MCAST_PORT,
            Self::McastTtl(_) => IPVS_DAEMON_ATTR_MCAST_TTL,
            Self::Other(nla) => nla.kind(),
        }
    }

    fn is_nested(&self) -> bool {
        matches!(self, Self::Other(nla) if nla.is_nested())
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            Self::State(state) => fits(emit_u32(buffer, (*state).into())),
            Self::SyncId(id) => fits(emit_u32(buffer, *id)),
            Self::McastInterface(name) => emit_string(name, buffer),
            Self::SyncMaxLen(v) | Self::McastPort(v) => {
                fits(emit_u16(buffer, *v))
            }
            Self::McastGroup(group) => emit_bytes(&group.octets(), buffer),
            Self::McastGroup6(group) => emit_bytes(&group.octets(), buffer),
            Self::McastTtl(ttl) => emit_bytes(&[*ttl], buffer),
            Self::Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>>
    for DaemonAttribute
{
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let value = buf.value();
        Ok(match buf.kind() {
            IPVS_DAEMON_ATTR_STATE => Self::State(
                parse_u32(value)
                    .context("invalid IPVS_DAEMON_ATTR_STATE")?
                    .into(),
            ),
            IPVS_DAEMON_ATTR_MCAST_IFN => Self::McastInterface(
                parse_string(value)
                    .context("invalid IPVS_DAEMON_ATTR_MCAST_IFN")?,
            ),
            IPVS_DAEMON_ATTR_SYNC_ID => Self::SyncId(
                parse_u32(value).context("invalid IPVS_DAEMON_ATTR_SYNC_ID")?,
            ),
            IPVS_DAEMON_ATTR_SYNC_MAXLEN => Self::SyncMaxLen(
                parse_u16(value)
                    .context("invalid IPVS_DAEMON_ATTR_SYNC_MAXLEN")?,
            ),
            IPVS_DAEMON_ATTR_MCAST_GROUP => {
                let octets: [u8; 4] = value.try_into().map_err(|_| {
                    DecodeError::from("invalid IPVS_DAEMON_ATTR_MCAST_GROUP")
                })?;
                Self::McastGroup(Ipv4Addr::from(octets))
            }
            IPVS_DAEMON_ATTR_MCAST_GROUP6 => {
                let octets: [u8; 16] = value.try_into().map_err(|_| {
                    DecodeError::from("invalid IPVS_DAEMON_ATTR_MCAST_GROUP6")
                })?;
                Self::McastGroup6(Ipv6Addr::from(octets))
            }
            IPVS_DAEMON_ATTR_MCAST_PORT => Self::McastPort(
                parse_u16(value)
                    .context("invalid IPVS_DAEMON_ATTR_MCAST_PORT")?,
            ),
            IPVS_DAEMON_ATTR_MCAST_TTL => Self::McastTtl(
                parse_u8(value)
                    .context("invalid IPVS_DAEMON_ATTR_MCAST_TTL")?,
            ),
            _ => Self::Other(DefaultNla::parse(buf)?),
        })
    }
}
