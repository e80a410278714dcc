//! Service and destination counters (`IPVS_*_ATTR_STATS` and `_STATS64`).

use netlink_packet_core::{
    emit_u32, emit_u64, parse_u32, parse_u64, DecodeError, Nla,
};

use crate::nla::{emit_nlas, for_each, nlas_len};

const IPVS_STATS_ATTR_CONNS: u16 = 1;
const IPVS_STATS_ATTR_INPKTS: u16 = 2;
const IPVS_STATS_ATTR_OUTPKTS: u16 = 3;
const IPVS_STATS_ATTR_INBYTES: u16 = 4;
const IPVS_STATS_ATTR_OUTBYTES: u16 = 5;
const IPVS_STATS_ATTR_CPS: u16 = 6;
const IPVS_STATS_ATTR_INPPS: u16 = 7;
const IPVS_STATS_ATTR_OUTPPS: u16 = 8;
const IPVS_STATS_ATTR_INBPS: u16 = 9;
const IPVS_STATS_ATTR_OUTBPS: u16 = 10;

/// Counters and rates of a service or destination.
///
/// The kernel sends the same numbers twice: in the legacy block (32-bit
/// counters except the byte counts) and in the 64-bit block. Both decode to
/// this struct; values wider than the legacy block allows are truncated
/// when that block is emitted, as the kernel does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stats {
    /// Connections scheduled.
    pub conns: u64,
    /// Packets received.
    pub in_packets: u64,
    /// Packets sent.
    pub out_packets: u64,
    /// Bytes received.
    pub in_bytes: u64,
    /// Bytes sent.
    pub out_bytes: u64,
    /// Current connection rate (per second).
    pub cps: u64,
    /// Current packet rate in (per second).
    pub in_pps: u64,
    /// Current packet rate out (per second).
    pub out_pps: u64,
    /// Current byte rate in (per second).
    pub in_bps: u64,
    /// Current byte rate out (per second).
    pub out_bps: u64,
}

/// Which of the two encodings a stats block uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StatsWidth {
    /// `IPVS_*_ATTR_STATS`: u32 except in/out bytes.
    Legacy,
    /// `IPVS_*_ATTR_STATS64`: everything u64.
    Wide,
}

struct Counter {
    kind: u16,
    value: u64,
    wide: bool,
}

impl Nla for Counter {
    fn value_len(&self) -> usize {
        if self.wide {
            8
        } else {
            4
        }
    }

    fn kind(&self) -> u16 {
        self.kind
    }

    fn emit_value(&self, buffer: &mut [u8]) {
        // The kernel truncates to u32 for the legacy block; so do we.
        let _ = if self.wide {
            emit_u64(buffer, self.value)
        } else {
            emit_u32(buffer, self.value as u32)
        };
    }
}

impl Stats {
    fn counters(&self, width: StatsWidth) -> [Counter; 10] {
        let wide = width == StatsWidth::Wide;
        let c = |kind, value, always_wide: bool| Counter {
            kind,
            value,
            wide: wide || always_wide,
        };
        [
            c(IPVS_STATS_ATTR_CONNS, self.conns, false),
            c(IPVS_STATS_ATTR_INPKTS, self.in_packets, false),
            c(IPVS_STATS_ATTR_OUTPKTS, self.out_packets, false),
            c(IPVS_STATS_ATTR_INBYTES, self.in_bytes, true),
            c(IPVS_STATS_ATTR_OUTBYTES, self.out_bytes, true),
            c(IPVS_STATS_ATTR_CPS, self.cps, false),
            c(IPVS_STATS_ATTR_INPPS, self.in_pps, false),
            c(IPVS_STATS_ATTR_OUTPPS, self.out_pps, false),
            c(IPVS_STATS_ATTR_INBPS, self.in_bps, false),
            c(IPVS_STATS_ATTR_OUTBPS, self.out_bps, false),
        ]
    }

    pub(crate) fn value_len(&self, width: StatsWidth) -> usize {
        nlas_len(&self.counters(width))
    }

    pub(crate) fn emit(&self, width: StatsWidth, buffer: &mut [u8]) {
        emit_nlas(&self.counters(width), buffer)
    }

    /// Decode a stats block of either width. Each counter may be 4 or 8
    /// bytes; padding (`IPVS_STATS_ATTR_PAD`) and counters added by newer
    /// kernels are skipped.
    pub fn parse(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut stats = Stats::default();
        for_each(buf, "stats", |nla| {
            let value = nla.value();
            let slot = match nla.kind() {
                IPVS_STATS_ATTR_CONNS => &mut stats.conns,
                IPVS_STATS_ATTR_INPKTS => &mut stats.in_packets,
                IPVS_STATS_ATTR_OUTPKTS => &mut stats.out_packets,
                IPVS_STATS_ATTR_INBYTES => &mut stats.in_bytes,
                IPVS_STATS_ATTR_OUTBYTES => &mut stats.out_bytes,
                IPVS_STATS_ATTR_CPS => &mut stats.cps,
                IPVS_STATS_ATTR_INPPS => &mut stats.in_pps,
                IPVS_STATS_ATTR_OUTPPS => &mut stats.out_pps,
                IPVS_STATS_ATTR_INBPS => &mut stats.in_bps,
                IPVS_STATS_ATTR_OUTBPS => &mut stats.out_bps,
                _ => return Ok(()),
            };
            *slot = match value.len() {
                4 => u64::from(parse_u32(value)?),
                _ => parse_u64(value)?,
            };
            Ok(())
        })?;
        Ok(stats)
    }
}
