//! `IPVS_CMD_GET_INFO`'s reply: version and connection table size.

use std::fmt;

use netlink_packet_core::{
    emit_u32, parse_u32, DecodeError, DefaultNla, ErrorContext, Nla, NlaBuffer,
    Parseable,
};

use crate::nla::fits;

const IPVS_INFO_ATTR_VERSION: u16 = 1;
const IPVS_INFO_ATTR_CONN_TAB_SIZE: u16 = 2;

/// A top-level attribute of an info reply (`IPVS_CMD_SET_INFO`).
///
/// Info replies reuse the numbers of the command attributes, so they are
/// decoded by command, not by number (see [`IpvsAttribute::Info`]).
///
/// [`IpvsAttribute::Info`]: crate::IpvsAttribute::Info
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InfoAttribute {
    /// IPVS's version (`IPVS_INFO_ATTR_VERSION`).
    Version(IpvsVersion),
    /// Size of the connection hash table (`IPVS_INFO_ATTR_CONN_TAB_SIZE`).
    ConnTableSize(u32),
    /// An attribute this crate does not know, kept as received.
    Other(DefaultNla),
}

impl Nla for InfoAttribute {
    fn value_len(&self) -> usize {
        match self {
            Self::Version(_) | Self::ConnTableSize(_) => 4,
            Self::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::Version(_) => IPVS_INFO_ATTR_VERSION,
            Self::ConnTableSize(_) => IPVS_INFO_ATTR_CONN_TAB_SIZE,
            Self::Other(nla) => nla.kind(),
        }
    }

    fn is_nested(&self) -> bool {
        matches!(self, Self::Other(nla) if nla.is_nested())
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            Self::Version(v) => fits(emit_u32(buffer, v.0)),
            Self::ConnTableSize(size) => fits(emit_u32(buffer, *size)),
            Self::Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>>
    for InfoAttribute
{
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let value = buf.value();
        Ok(match buf.kind() {
            IPVS_INFO_ATTR_VERSION => Self::Version(IpvsVersion(
                parse_u32(value).context("invalid IPVS_INFO_ATTR_VERSION")?,
            )),
            IPVS_INFO_ATTR_CONN_TAB_SIZE => Self::ConnTableSize(
                parse_u32(value)
                    .context("invalid IPVS_INFO_ATTR_CONN_TAB_SIZE")?,
            ),
            _ => Self::Other(DefaultNla::parse(buf)?),
        })
    }
}

/// `IP_VS_VERSION_CODE`: `0x010201` is 1.2.1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IpvsVersion(pub u32);

impl fmt::Display for IpvsVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        write!(f, "{}.{}.{}", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff)
    }
}

/// General IPVS information (`ipvsadm -Ln`'s first line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Info {
    /// IPVS's version, as `ipvsadm` prints it.
    pub version: IpvsVersion,
    /// Size of the connection hash table.
    pub conn_table_size: u32,
}

impl Info {
    /// Reads an info reply's attributes; both the version and the table
    /// size must be there.
    pub fn from_attributes(
        attrs: &[InfoAttribute],
    ) -> Result<Self, DecodeError> {
        let mut version = None;
        let mut size = None;
        for attr in attrs {
            match attr {
                InfoAttribute::Version(v) => version = Some(*v),
                InfoAttribute::ConnTableSize(s) => size = Some(*s),
                InfoAttribute::Other(_) => {}
            }
        }
        match (version, size) {
            (Some(version), Some(conn_table_size)) => Ok(Self {
                version,
                conn_table_size,
            }),
            _ => Err(DecodeError::from(
                "info reply lacks the version or the connection table size",
            )),
        }
    }

    /// The attributes of an info reply with these values.
    pub fn attributes(&self) -> Vec<InfoAttribute> {
        vec![
            InfoAttribute::Version(self.version),
            InfoAttribute::ConnTableSize(self.conn_table_size),
        ]
    }
}
