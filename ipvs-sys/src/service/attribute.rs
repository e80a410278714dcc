//! Attributes nested in `IPVS_CMD_ATTR_SERVICE`.

use netlink_packet_core::{
    emit_u16, emit_u16_be, emit_u32, emit_u32_be, parse_u16, parse_u16_be,
    parse_u32, parse_u32_be, DecodeError, DefaultNla, ErrorContext, Nla,
    NlaBuffer, Parseable,
};

use super::flags::{FlagsMask, FLAGS_MASK_LEN};
use crate::{
    address::{AddressFamily, InetAddr, Protocol, INET_ADDR_LEN},
    nla::{emit_bytes, emit_string, fits, parse_string, string_len},
    stats::{Stats, StatsWidth},
};

const IPVS_SVC_ATTR_AF: u16 = 1;
const IPVS_SVC_ATTR_PROTOCOL: u16 = 2;
const IPVS_SVC_ATTR_ADDR: u16 = 3;
const IPVS_SVC_ATTR_PORT: u16 = 4;
const IPVS_SVC_ATTR_FWMARK: u16 = 5;
const IPVS_SVC_ATTR_SCHED_NAME: u16 = 6;
const IPVS_SVC_ATTR_FLAGS: u16 = 7;
const IPVS_SVC_ATTR_TIMEOUT: u16 = 8;
const IPVS_SVC_ATTR_NETMASK: u16 = 9;
const IPVS_SVC_ATTR_STATS: u16 = 10;
const IPVS_SVC_ATTR_PE_NAME: u16 = 11;
const IPVS_SVC_ATTR_STATS64: u16 = 12;

/// One attribute of a virtual service.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServiceAttribute {
    /// The family of the address (or of the fwmark service).
    AddressFamily(AddressFamily),
    /// The transport protocol.
    Protocol(Protocol),
    /// Raw address; [`AddressFamily`] says how to read it.
    Address(InetAddr),
    /// Virtual port (network byte order on the wire).
    Port(u16),
    /// Firewall mark, for fwmark services (`ipvsadm -f`).
    Fwmark(u32),
    /// Scheduler name (`rr`, `wrr`, `lc`, `sh`, `mh`, ...).
    Scheduler(String),
    /// Flags, and which of them to change.
    Flags(FlagsMask),
    /// Persistence timeout, in seconds.
    Timeout(u32),
    /// Persistence netmask as the kernel stores it: for IPv4 a mask in
    /// network byte order (`0xffffffff` is /32, read big-endian here); for
    /// IPv6 a prefix length in host byte order. See
    /// [`Service::netmask`](crate::Service::netmask) for the typed view.
    Netmask(u32),
    /// Counters with 32-bit fields (replies only).
    Stats(Stats),
    /// Persistence engine name (`sip`).
    PersistenceEngine(String),
    /// Counters with 64-bit fields (replies only).
    Stats64(Stats),
    /// An attribute this crate does not know, kept as received.
    Other(DefaultNla),
}

impl Nla for ServiceAttribute {
    fn value_len(&self) -> usize {
        match self {
            Self::AddressFamily(_) | Self::Protocol(_) | Self::Port(_) => 2,
            Self::Address(_) => INET_ADDR_LEN,
            Self::Fwmark(_) | Self::Timeout(_) | Self::Netmask(_) => 4,
            Self::Scheduler(name) | Self::PersistenceEngine(name) => {
                string_len(name)
            }
            Self::Flags(_) => FLAGS_MASK_LEN,
            Self::Stats(stats) => stats.value_len(StatsWidth::Legacy),
            Self::Stats64(stats) => stats.value_len(StatsWidth::Wide),
            Self::Other(nla) => nla.value_len(),
        }
    }

    fn kind(&self) -> u16 {
        match self {
            Self::AddressFamily(_) => IPVS_SVC_ATTR_AF,
            Self::Protocol(_) => IPVS_SVC_ATTR_PROTOCOL,
            Self::Address(_) => IPVS_SVC_ATTR_ADDR,
            Self::Port(_) => IPVS_SVC_ATTR_PORT,
            Self::Fwmark(_) => IPVS_SVC_ATTR_FWMARK,
            Self::Scheduler(_) => IPVS_SVC_ATTR_SCHED_NAME,
            Self::Flags(_) => IPVS_SVC_ATTR_FLAGS,
            Self::Timeout(_) => IPVS_SVC_ATTR_TIMEOUT,
            Self::Netmask(_) => IPVS_SVC_ATTR_NETMASK,
            Self::Stats(_) => IPVS_SVC_ATTR_STATS,
            Self::PersistenceEngine(_) => IPVS_SVC_ATTR_PE_NAME,
            Self::Stats64(_) => IPVS_SVC_ATTR_STATS64,
            Self::Other(nla) => nla.kind(),
        }
    }

    fn is_nested(&self) -> bool {
        // The kernel sets NLA_F_NESTED on neither; match it byte for byte.
        matches!(self, Self::Other(nla) if nla.is_nested())
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        match self {
            Self::AddressFamily(af) => fits(emit_u16(buffer, (*af).into())),
            Self::Protocol(protocol) => {
                fits(emit_u16(buffer, (*protocol).into()))
            }
            Self::Address(addr) => emit_bytes(&addr.0, buffer),
            Self::Port(port) => fits(emit_u16_be(buffer, *port)),
            Self::Fwmark(value) | Self::Timeout(value) => {
                fits(emit_u32(buffer, *value))
            }
            Self::Netmask(mask) => fits(emit_u32_be(buffer, *mask)),
            Self::Scheduler(name) | Self::PersistenceEngine(name) => {
                emit_string(name, buffer)
            }
            Self::Flags(flags) => flags.emit(buffer),
            Self::Stats(stats) => stats.emit(StatsWidth::Legacy, buffer),
            Self::Stats64(stats) => stats.emit(StatsWidth::Wide, buffer),
            Self::Other(nla) => nla.emit_value(buffer),
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Parseable<NlaBuffer<&'a T>>
    for ServiceAttribute
{
    fn parse(buf: &NlaBuffer<&'a T>) -> Result<Self, DecodeError> {
        let value = buf.value();
        Ok(match buf.kind() {
            IPVS_SVC_ATTR_AF => Self::AddressFamily(
                parse_u16(value).context("invalid IPVS_SVC_ATTR_AF")?.into(),
            ),
            IPVS_SVC_ATTR_PROTOCOL => Self::Protocol(
                parse_u16(value)
                    .context("invalid IPVS_SVC_ATTR_PROTOCOL")?
                    .into(),
            ),
            IPVS_SVC_ATTR_ADDR => Self::Address(
                InetAddr::parse(value).context("invalid IPVS_SVC_ATTR_ADDR")?,
            ),
            IPVS_SVC_ATTR_PORT => Self::Port(
                parse_u16_be(value).context("invalid IPVS_SVC_ATTR_PORT")?,
            ),
            IPVS_SVC_ATTR_FWMARK => Self::Fwmark(
                parse_u32(value).context("invalid IPVS_SVC_ATTR_FWMARK")?,
            ),
            IPVS_SVC_ATTR_SCHED_NAME => Self::Scheduler(
                parse_string(value)
                    .context("invalid IPVS_SVC_ATTR_SCHED_NAME")?,
            ),
            IPVS_SVC_ATTR_FLAGS => Self::Flags(
                FlagsMask::parse(value)
                    .context("invalid IPVS_SVC_ATTR_FLAGS")?,
            ),
            IPVS_SVC_ATTR_TIMEOUT => Self::Timeout(
                parse_u32(value).context("invalid IPVS_SVC_ATTR_TIMEOUT")?,
            ),
            IPVS_SVC_ATTR_NETMASK => Self::Netmask(
                parse_u32_be(value).context("invalid IPVS_SVC_ATTR_NETMASK")?,
            ),
            IPVS_SVC_ATTR_STATS => Self::Stats(
                Stats::parse(value).context("invalid IPVS_SVC_ATTR_STATS")?,
            ),
            IPVS_SVC_ATTR_PE_NAME => Self::PersistenceEngine(
                parse_string(value).context("invalid IPVS_SVC_ATTR_PE_NAME")?,
            ),
            IPVS_SVC_ATTR_STATS64 => Self::Stats64(
                Stats::parse(value).context("invalid IPVS_SVC_ATTR_STATS64")?,
            ),
            _ => Self::Other(DefaultNla::parse(buf)?),
        })
    }
}
