//! Attributes nested in `IPVS_CMD_ATTR_DEST`.

use netlink_packet_core::{
    emit_u16, emit_u16_be, emit_u32, parse_u16, parse_u16_be, parse_u32,
    parse_u8, DecodeError, DefaultNla, ErrorContext, Nla, NlaBuffer, Parseable,
};

use super::{
    forward::ForwardMethod,
    tunnel::{TunnelFlags, TunnelType},
};
use crate::{
    address::{AddressFamily, InetAddr, INET_ADDR_LEN},
    nla::{emit_bytes, fits},
    stats::{Stats, StatsWidth},
};

const IPVS_DEST_ATTR_ADDR: u16 = 1;
const IPVS_DEST_ATTR_PORT: u16 = 2;
const IPVS_DEST_ATTR_FWD_METHOD: u16 = 3;
const IPVS_DEST_ATTR_WEIGHT: u16 = 4;
const IPVS_DEST_ATTR_U_THRESH: u16 = 5;
const IPVS_DEST_ATTR_L_THRESH: u16 = 6;
const IPVS_DEST_ATTR_ACTIVE_CONNS: u16 = 7;
const IPVS_DEST_ATTR_INACT_CONNS: u16 = 8;
const IPVS_DEST_ATTR_PERSIST_CONNS: u16 = 9;
const IPVS_DEST_ATTR_STATS: u16 = 10;
const IPVS_DEST_ATTR_ADDR_FAMILY: u16 = 11;
const IPVS_DEST_ATTR_STATS64: u16 = 12;
const IPVS_DEST_ATTR_TUN_TYPE: u16 = 13;
const IPVS_DEST_ATTR_TUN_PORT: u16 = 14;
const IPVS_DEST_ATTR_TUN_FLAGS: u16 = 15;

/// One attribute of a destination (real server).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DestAttribute {
    /// Raw address; `AddressFamily` (or the service's family, from kernels
    /// older than 3.18) says how to read it.
    Address(InetAddr),
    /// Network byte order on the wire.
    Port(u16),
    /// How packets reach it (NAT, tunnel, direct routing).
    ForwardMethod(ForwardMethod),
    /// Scheduling weight; 0 takes it out of scheduling.
    Weight(u32),
    /// Upper connection threshold; 0 is none.
    UpperThreshold(u32),
    /// Lower connection threshold; 0 is none.
    LowerThreshold(u32),
    /// Active connections (replies only).
    ActiveConns(u32),
    /// Inactive connections (replies only).
    InactiveConns(u32),
    /// Persistence templates (replies only).
    PersistentConns(u32),
    /// Counters with 32-bit fields (replies only).
    Stats(Stats),
    /// The destination's own address family (kernels 3.18 and later).
    AddressFamily(AddressFamily),
    /// Counters with 64-bit fields (replies only).
    Stats64(Stats),
    /// Tunnel encapsulation, for the tunnel forwarding method.
    TunnelType(TunnelType),
    /// Network byte order on the wire.
    TunnelPort(u16),
    /// Tunnel encapsulation flags.
    TunnelFlags(TunnelFlags),
    /// An attribute this crate does not know, kept as received.
    Other(DefaultNla),
}

impl Nla for DestAttribute {
    fn value_len(&self) -> usize {
        match self {
            Self::Address(_) => INET_ADDR_LEN,
            Self::Port(_)
            | Self::AddressFamily(_)
            | Self::TunnelPort(_)
            | Self::TunnelFlags(_) => 2,
            Self::ForwardMethod(_)
            | Self::Weight(_)
            | Self::UpperThreshold(_)
            | Self::LowerThreshold(_)
            | Self::ActiveConns(_)
            | Self::InactiveConns(_)
            | Self::PersistentConns(_) => 4,
            Self::TunnelType(_) => 1,
            Self::Stats(stats) => stats.value_len(StatsWidth::Legacy),
            Self::Stats64(stats) => stats.value_len(StatsWidth::Wide),
            Self::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::Address(_) => IPVS_DEST_ATTR_ADDR,
            Self::Port(_) => IPVS_DEST_ATTR_PORT,
            Self::ForwardMethod(_) => IPVS_DEST_ATTR_FWD_METHOD,
            Self::Weight(_) => IPVS_DEST_ATTR_WEIGHT,
            Self::UpperThreshold(_) => IPVS_DEST_ATTR_U_THRESH,
            Self::LowerThreshold(_) => IPVS_DEST_ATTR_L_THRESH,
            Self::ActiveConns(_) => IPVS_DEST_ATTR_ACTIVE_CONNS,
            Self::InactiveConns(_) => IPVS_DEST_ATTR_INACT_CONNS,
            Self::PersistentConns(_) => IPVS_DEST_ATTR_PERSIST_CONNS,
            Self::Stats(_) => IPVS_DEST_ATTR_STATS,
            Self::AddressFamily(_) => IPVS_DEST_ATTR_ADDR_FAMILY,
            Self::Stats64(_) => IPVS_DEST_ATTR_STATS64,
            Self::TunnelType(_) => IPVS_DEST_ATTR_TUN_TYPE,
            Self::TunnelPort(_) => IPVS_DEST_ATTR_TUN_PORT,
            Self::TunnelFlags(_) => IPVS_DEST_ATTR_TUN_FLAGS,
            Self::Other(nla) => nla.kind(),
        }
    }

    fn is_nested(&self) -> bool {
        matches!(self, Self::Other(nla) if nla.is_nested())
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            Self::Address(addr) => emit_bytes(&addr.0, buffer),
            Self::Port(port) | Self::TunnelPort(port) => {
                fits(emit_u16_be(buffer, *port))
            }
            Self::ForwardMethod(method) => {
                fits(emit_u32(buffer, (*method).into()))
            }
            Self::Weight(v)
            | Self::UpperThreshold(v)
            | Self::LowerThreshold(v)
            | Self::ActiveConns(v)
            | Self::InactiveConns(v)
            | Self::PersistentConns(v) => fits(emit_u32(buffer, *v)),
            Self::AddressFamily(af) => fits(emit_u16(buffer, (*af).into())),
            Self::TunnelFlags(flags) => fits(emit_u16(buffer, (*flags).into())),
            Self::TunnelType(kind) => {
                if let Some(byte) = buffer.first_mut() {
                    *byte = (*kind).into();
                }
            }
            Self::Stats(stats) => stats.emit(StatsWidth::Legacy, buffer),
            Self::Stats64(stats) => stats.emit(StatsWidth::Wide, buffer),
            Self::Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>>
    for DestAttribute
{
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let value = buf.value();
        let u32_of = |name: &str| {
            parse_u32(value).with_context(|| format!("invalid {name}"))
        };
        Ok(match buf.kind() {
            IPVS_DEST_ATTR_ADDR => Self::Address(
                InetAddr::parse(value)
                    .context("invalid IPVS_DEST_ATTR_ADDR")?,
            ),
            IPVS_DEST_ATTR_PORT => Self::Port(
                parse_u16_be(value).context("invalid IPVS_DEST_ATTR_PORT")?,
            ),
            IPVS_DEST_ATTR_FWD_METHOD => {
                Self::ForwardMethod(u32_of("IPVS_DEST_ATTR_FWD_METHOD")?.into())
            }
            IPVS_DEST_ATTR_WEIGHT => {
                Self::Weight(u32_of("IPVS_DEST_ATTR_WEIGHT")?)
            }
            IPVS_DEST_ATTR_U_THRESH => {
                Self::UpperThreshold(u32_of("IPVS_DEST_ATTR_U_THRESH")?)
            }
            IPVS_DEST_ATTR_L_THRESH => {
                Self::LowerThreshold(u32_of("IPVS_DEST_ATTR_L_THRESH")?)
            }
            IPVS_DEST_ATTR_ACTIVE_CONNS => {
                Self::ActiveConns(u32_of("IPVS_DEST_ATTR_ACTIVE_CONNS")?)
            }
            IPVS_DEST_ATTR_INACT_CONNS => {
                Self::InactiveConns(u32_of("IPVS_DEST_ATTR_INACT_CONNS")?)
            }
            IPVS_DEST_ATTR_PERSIST_CONNS => {
                Self::PersistentConns(u32_of("IPVS_DEST_ATTR_PERSIST_CONNS")?)
            }
            IPVS_DEST_ATTR_STATS => Self::Stats(
                Stats::parse(value).context("invalid IPVS_DEST_ATTR_STATS")?,
            ),
            IPVS_DEST_ATTR_ADDR_FAMILY => Self::AddressFamily(
                parse_u16(value)
                    .context("invalid IPVS_DEST_ATTR_ADDR_FAMILY")?
                    .into(),
            ),
            IPVS_DEST_ATTR_STATS64 => Self::Stats64(
                Stats::parse(value)
                    .context("invalid IPVS_DEST_ATTR_STATS64")?,
            ),
            IPVS_DEST_ATTR_TUN_TYPE => Self::TunnelType(
                parse_u8(value)
                    .context("invalid IPVS_DEST_ATTR_TUN_TYPE")?
                    .into(),
            ),
            IPVS_DEST_ATTR_TUN_PORT => Self::TunnelPort(
                parse_u16_be(value)
                    .context("invalid IPVS_DEST_ATTR_TUN_PORT")?,
            ),
            IPVS_DEST_ATTR_TUN_FLAGS => Self::TunnelFlags(
                parse_u16(value)
                    .context("invalid IPVS_DEST_ATTR_TUN_FLAGS")?
                    .into(),
            ),
            _ => Self::Other(DefaultNla::parse(buf)?),
        })
    }
}
