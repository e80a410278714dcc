//! How a virtual server picks its real servers: the kernel scheduler by
//! name and the scheduler's three flags (`IP_VS_SVC_F_SCHED1..3`). Only
//! `sh` and `mh` read the flags: the first falls back to another real
//! server when the hashed one is unavailable (weight 0, overloaded), the
//! second hashes the client's port with its address. `ipvsadm` names them
//! after the scheduler (`sh-fallback`, `mh-port`) and `flag-N` otherwise;
//! this module speaks those names.

use std::{fmt, sync::Arc};

#[cfg(test)]
mod tests;

/// The schedulers of a standard kernel build (`CONFIG_IP_VS_*_SCHED`),
/// `twos` from 6.2.
pub const STANDARD_SCHEDULERS: &[&str] = &[
    "rr", "wrr", "lc", "wlc", "fo", "ovf", "lblc", "lblcr", "dh", "sh", "mh",
    "sed", "nq", "twos",
];

/// The scheduler's flags, as the kernel's bits shifted down: bit 0 is
/// `IP_VS_SVC_F_SCHED1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct SchedulerFlags(u8);

impl SchedulerFlags {
    pub const NONE: Self = Self(0);
    /// `IP_VS_SVC_F_SCHED1`: `sh-fallback`, `mh-fallback`.
    pub const FALLBACK: Self = Self(1);
    /// `IP_VS_SVC_F_SCHED2`: `sh-port`, `mh-port`.
    pub const PORT: Self = Self(2);
    /// `IP_VS_SVC_F_SCHED3`, which no scheduler of the kernel reads.
    pub const THIRD: Self = Self(4);

    /// From the kernel's flag word (the other bits ignored).
    pub fn from_kernel(flags: u32) -> Self {
        Self(((flags >> 3) & 0b111) as u8)
    }

    /// Into the kernel's flag word.
    pub fn to_kernel(self) -> u32 {
        u32::from(self.0) << 3
    }

    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// What upstream sets for `scheduler`: `mh-port` with `mh`, nothing
    /// otherwise.
    pub fn upstream_default(scheduler: &str) -> Self {
        if scheduler == "mh" {
            Self::PORT
        } else {
            Self::NONE
        }
    }

    /// The names `ipvsadm -Ln` prints for these flags on `scheduler`.
    pub fn names(self, scheduler: &str) -> Vec<&'static str> {
        [Self::FALLBACK, Self::PORT, Self::THIRD]
            .into_iter()
            .filter(|flag| self.contains(*flag))
            .map(|flag| flag.name(scheduler))
            .collect()
    }

    fn name(self, scheduler: &str) -> &'static str {
        match (scheduler, self) {
            ("sh", Self::FALLBACK) => "sh-fallback",
            ("sh", Self::PORT) => "sh-port",
            ("mh", Self::FALLBACK) => "mh-fallback",
            ("mh", Self::PORT) => "mh-port",
            (_, Self::FALLBACK) => "flag-1",
            (_, Self::PORT) => "flag-2",
            _ => "flag-3",
        }
    }

    /// `sh-fallback,mh-port`, as the flags setting and annotation take
    /// them: each name must be one of `scheduler`'s (`mh-port` with `mh`
    /// only). An empty text is no flag.
    pub fn parse(scheduler: &str, text: &str) -> Result<Self, FlagsError> {
        let mut flags = Self::NONE;
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let flag = match name {
                "sh-fallback" | "mh-fallback" => Self::FALLBACK,
                "sh-port" | "mh-port" => Self::PORT,
                _ => return Err(FlagsError::Unknown(name.to_owned())),
            };
            if !name.starts_with(scheduler) || !matches!(scheduler, "sh" | "mh")
            {
                return Err(FlagsError::OtherScheduler {
                    flag: name.to_owned(),
                    scheduler: scheduler.to_owned(),
                });
            }
            flags = Self(flags.0 | flag.0);
        }
        Ok(flags)
    }

    /// kube-router's `flag-1,flag-2,flag-3` (its schedflags annotation,
    /// which it applies with `mh` only).
    pub fn parse_numbered(
        scheduler: &str,
        text: &str,
    ) -> Result<Self, FlagsError> {
        let mut flags = Self::NONE;
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let flag = match name {
                "flag-1" => Self::FALLBACK,
                "flag-2" => Self::PORT,
                "flag-3" => Self::THIRD,
                _ => return Err(FlagsError::Unknown(name.to_owned())),
            };
            if scheduler != "mh" {
                return Err(FlagsError::OtherScheduler {
                    flag: name.to_owned(),
                    scheduler: scheduler.to_owned(),
                });
            }
            flags = Self(flags.0 | flag.0);
        }
        Ok(flags)
    }
}

/// Flags chosen by name for the schedulers that take them
/// (`--ipvs-scheduler-flags`): the names of one scheduler are its whole
/// set, and a scheduler none is named for keeps upstream's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FlagChoice {
    sh: Option<SchedulerFlags>,
    mh: Option<SchedulerFlags>,
}

impl FlagChoice {
    /// `sh-fallback,mh-fallback,mh-port`: names of `sh` and `mh` mixed.
    pub fn parse(text: &str) -> Result<Self, FlagsError> {
        let mut choice = Self::default();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let (scheduler, slot) = if name.starts_with("sh-") {
                ("sh", &mut choice.sh)
            } else if name.starts_with("mh-") {
                ("mh", &mut choice.mh)
            } else {
                return Err(FlagsError::Unknown(name.to_owned()));
            };
            let flag = SchedulerFlags::parse(scheduler, name)?;
            let flags = slot.get_or_insert(SchedulerFlags::NONE);
            *flags = SchedulerFlags(flags.0 | flag.0);
        }
        Ok(choice)
    }

    /// The flags a virtual server of `scheduler` gets.
    pub fn for_scheduler(&self, scheduler: &str) -> SchedulerFlags {
        let chosen = match scheduler {
            "sh" => self.sh,
            "mh" => self.mh,
            _ => None,
        };
        chosen.unwrap_or_else(|| SchedulerFlags::upstream_default(scheduler))
    }

    /// The names as the flag takes them, `sh` first.
    pub fn names(&self) -> Vec<&'static str> {
        [("sh", self.sh), ("mh", self.mh)]
            .into_iter()
            .filter_map(|(scheduler, flags)| Some(flags?.names(scheduler)))
            .flatten()
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagsError {
    #[error("unknown scheduler flag {0:?} (sh-fallback, sh-port, mh-fallback, mh-port)")]
    Unknown(String),
    #[error("flag {flag:?} does not apply to the scheduler {scheduler:?}")]
    OtherScheduler { flag: String, scheduler: String },
}

/// A virtual server's scheduler and flags. The name is shared: every
/// virtual server of the default scheduling holds the same one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scheduling {
    pub scheduler: Arc<str>,
    pub flags: SchedulerFlags,
}

impl Scheduling {
    /// `scheduler` with the flags upstream gives it.
    pub fn upstream(scheduler: Arc<str>) -> Self {
        Self::chosen(scheduler, &FlagChoice::default())
    }

    /// `scheduler` with the flags `choice` gives it.
    pub fn chosen(scheduler: Arc<str>, choice: &FlagChoice) -> Self {
        let flags = choice.for_scheduler(&scheduler);
        Self { scheduler, flags }
    }
}

/// Upstream's default: `rr`, no flag.
impl Default for Scheduling {
    fn default() -> Self {
        Self::upstream("rr".into())
    }
}

/// As two fields of the object it is flattened into: `"scheduler": "mh",
/// "flags": ["mh-port"]`.
impl serde::Serialize for Scheduling {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("scheduler", &*self.scheduler)?;
        map.serialize_entry("flags", &self.flags.names(&self.scheduler))?;
        map.end()
    }
}

/// `mh (mh-fallback,mh-port)`, `rr`.
impl fmt::Display for Scheduling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.scheduler)?;
        let names = self.flags.names(&self.scheduler);
        if !names.is_empty() {
            write!(f, " ({})", names.join(","))?;
        }
        Ok(())
    }
}
