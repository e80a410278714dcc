//! Virtual service flags (`IP_VS_SVC_F_*`) and the `{flags, mask}` pair
//! the kernel exchanges them in.

use std::{fmt, ops};

use netlink_packet_core::{emit_u32, parse_u32, DecodeError};

const IP_VS_SVC_F_PERSISTENT: u32 = 0x0001;
const IP_VS_SVC_F_HASHED: u32 = 0x0002;
const IP_VS_SVC_F_ONEPACKET: u32 = 0x0004;
const IP_VS_SVC_F_SCHED1: u32 = 0x0008;
const IP_VS_SVC_F_SCHED2: u32 = 0x0010;
const IP_VS_SVC_F_SCHED3: u32 = 0x0020;

/// A set of virtual service flags. Unknown bits are kept as they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ServiceFlags(pub u32);

impl ServiceFlags {
    /// No flag.
    pub const EMPTY: Self = Self(0);
    /// Persistent (sticky) service: `ipvsadm -p`.
    pub const PERSISTENT: Self = Self(IP_VS_SVC_F_PERSISTENT);
    /// Set by the kernel on every service in its table; ignored on input.
    pub const HASHED: Self = Self(IP_VS_SVC_F_HASHED);
    /// One-packet scheduling (`ipvsadm -o`), for UDP.
    pub const ONE_PACKET: Self = Self(IP_VS_SVC_F_ONEPACKET);
    /// The scheduler's first flag (`sh-fallback`, `mh-fallback`).
    pub const SCHED1: Self = Self(IP_VS_SVC_F_SCHED1);
    /// The scheduler's second flag (`sh-port`, `mh-port`).
    pub const SCHED2: Self = Self(IP_VS_SVC_F_SCHED2);
    /// The scheduler's third flag.
    pub const SCHED3: Self = Self(IP_VS_SVC_F_SCHED3);
    /// `sh` scheduler: fall back to another destination when one is down.
    pub const SH_FALLBACK: Self = Self::SCHED1;
    /// `sh` scheduler: hash the source port too.
    pub const SH_PORT: Self = Self::SCHED2;
    /// `mh` scheduler: fall back (same bit as `sh-fallback`).
    pub const MH_FALLBACK: Self = Self::SCHED1;
    /// `mh` scheduler: hash the source port too (same bit as `sh-port`).
    pub const MH_PORT: Self = Self::SCHED2;

    /// The flags as the kernel's bit mask.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no flag is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// These flags without the kernel-maintained `HASHED` bit: what a user
    /// asked for, and what two services should be compared on.
    pub fn without_hashed(self) -> Self {
        Self(self.0 & !IP_VS_SVC_F_HASHED)
    }
}

impl From<u32> for ServiceFlags {
    fn from(value: u32) -> Self {
        Self(value)
    }
}

impl From<ServiceFlags> for u32 {
    fn from(value: ServiceFlags) -> Self {
        value.0
    }
}

impl ops::BitOr for ServiceFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl ops::BitOrAssign for ServiceFlags {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl ops::BitAnd for ServiceFlags {
    type Output = Self;
    fn bitand(self, rhs: Self) -> Self {
        Self(self.0 & rhs.0)
    }
}

impl fmt::Display for ServiceFlags {
    /// Names joined by `|` (`persistent|hashed`), unknown bits in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(u32, &str); 6] = [
            (IP_VS_SVC_F_PERSISTENT, "persistent"),
            (IP_VS_SVC_F_HASHED, "hashed"),
            (IP_VS_SVC_F_ONEPACKET, "one-packet"),
            (IP_VS_SVC_F_SCHED1, "sched1"),
            (IP_VS_SVC_F_SCHED2, "sched2"),
            (IP_VS_SVC_F_SCHED3, "sched3"),
        ];
        let mut rest = self.0;
        let mut first = true;
        for (bit, name) in NAMES {
            if rest & bit != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                rest &= !bit;
                first = false;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{rest:#x}")?;
        } else if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// `struct ip_vs_flags`: the kernel changes only the bits set in `mask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlagsMask {
    /// The flags' values.
    pub flags: ServiceFlags,
    /// Which bits to change.
    pub mask: u32,
}

pub(crate) const FLAGS_MASK_LEN: usize = 8;

impl FlagsMask {
    /// Replace every flag (the kernel, and ipvsadm, use an all-ones mask).
    pub fn all(flags: ServiceFlags) -> Self {
        Self {
            flags,
            mask: u32::MAX,
        }
    }

    /// Reads a `struct ip_vs_flags` (8 bytes, or more from a newer kernel).
    pub fn parse(value: &[u8]) -> Result<Self, DecodeError> {
        // The kernel's policy demands at least the struct's size; trailing
        // bytes from a future, larger struct are ignored.
        match (value.get(0..4), value.get(4..8)) {
            (Some(flags), Some(mask)) => Ok(Self {
                flags: ServiceFlags(parse_u32(flags)?),
                mask: parse_u32(mask)?,
            }),
            _ => Err(DecodeError::from(format!(
                "service flags attribute has {} bytes, expected 8",
                value.len()
            ))),
        }
    }

    pub(crate) fn emit(&self, buffer: &mut [u8]) {
        if let Some(flags) = buffer.get_mut(0..4) {
            let _ = emit_u32(flags, self.flags.0);
        }
        if let Some(mask) = buffer.get_mut(4..8) {
            let _ = emit_u32(mask, self.mask);
        }
    }
}
