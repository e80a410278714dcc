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

    /// From bit 0 (SCHED1) to bit 2 (SCHED3); the others ignored.
    pub fn from_bits(bits: u32) -> Self {
        Self((bits & 0b111) as u8)
    }

    pub fn bits(self) -> u8 {
        self.0
    }

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
    #[cfg(test)]
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

/// Ours: a Service's IPVS scheduler, any the kernel has.
pub const ANNOTATION_SCHEDULER: &str = "kube-ipvs-proxy.io/scheduler";
/// Ours: its scheduler's flags by ipvsadm's names, the whole set.
pub const ANNOTATION_SCHEDULER_FLAGS: &str =
    "kube-ipvs-proxy.io/scheduler-flags";
/// kube-router's scheduler annotation, read so that a Service moved from
/// kube-router keeps its scheduling.
pub const KUBE_ROUTER_SCHEDULER: &str = "kube-router.io/service.scheduler";
/// kube-router's flags annotation (`flag-1,flag-2,flag-3`, with `mh`).
pub const KUBE_ROUTER_SCHEDULER_FLAGS: &str =
    "kube-router.io/service.schedflags";

/// Every annotation the proxy reads on a Service, and what it does: a
/// Service without them is programmed exactly as upstream programs it.
/// docs/configuration.md lists them.
#[cfg(test)]
pub const SERVICE_ANNOTATIONS: &[(&str, &str)] = &[
    (
        ANNOTATION_SCHEDULER,
        "The IPVS scheduler of the Service's virtual servers, any the kernel \
         has that `--ipvs-service-schedulers` lists; changed in place, no \
         connection dropped.",
    ),
    (
        ANNOTATION_SCHEDULER_FLAGS,
        "Its scheduler's flags, comma-separated: `sh-fallback`, `sh-port` \
         with `sh`, `mh-fallback`, `mh-port` with `mh`; the whole set (empty: \
         none). Without it, the flags `--ipvs-scheduler-flags` chooses, or \
         upstream's (`mh-port` with `mh`).",
    ),
    (
        KUBE_ROUTER_SCHEDULER,
        "kube-router's: `rr`, `lc`, `dh`, `sh` or `mh`, used when ours is \
         not given, so that a Service moved from kube-router keeps its \
         scheduling.",
    ),
    (
        KUBE_ROUTER_SCHEDULER_FLAGS,
        "kube-router's: `flag-1` (fallback), `flag-2` (port), `flag-3`, \
         with `mh` only; used when ours is not given.",
    ),
];

/// The schedulers kube-router's annotation takes.
const KUBE_ROUTER_SCHEDULERS: &[&str] = &["rr", "lc", "dh", "sh", "mh"];

/// The kernel keeps a scheduler's name in `IP_VS_SCHEDNAME_MAXLEN` (16)
/// bytes, its NUL included.
const SCHEDULER_NAME_MAX: usize = 15;

/// A Service's own scheduling, from its annotations. What it leaves out
/// is the node's: without a scheduler, the node's scheduler; without
/// flags, the flags the node chooses for the scheduler in force.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ServiceScheduling {
    pub scheduler: Option<Arc<str>>,
    /// The flags and the scheduler they were written for: they apply only
    /// while that scheduler is the one in force.
    pub flags: Option<(Arc<str>, SchedulerFlags)>,
}

/// `"scheduler": "mh", "flags": ["mh-fallback"]`, each when annotated.
impl serde::Serialize for ServiceScheduling {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        if let Some(scheduler) = &self.scheduler {
            map.serialize_entry("scheduler", &**scheduler)?;
        }
        if let Some((written_for, flags)) = &self.flags {
            map.serialize_entry("flags", &flags.names(written_for))?;
        }
        map.end()
    }
}

/// An annotation that could not be used, and why; the annotation is then
/// left out, as if not given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationProblem {
    pub annotation: &'static str,
    pub value: String,
    pub reason: String,
}

impl ServiceScheduling {
    /// From a Service's annotations; `None` when it has none of the four,
    /// so that such a Service is programmed exactly as upstream programs
    /// it. Ours win over kube-router's, each of scheduler and flags on its
    /// own.
    pub fn from_annotations(
        annotations: Option<&std::collections::BTreeMap<String, String>>,
        problems: &mut Vec<AnnotationProblem>,
    ) -> Option<Self> {
        let annotations = annotations?;
        let get = |key: &str| annotations.get(key).map(String::as_str);
        let (ours, theirs) =
            (get(ANNOTATION_SCHEDULER), get(KUBE_ROUTER_SCHEDULER));
        let (our_flags, their_flags) = (
            get(ANNOTATION_SCHEDULER_FLAGS),
            get(KUBE_ROUTER_SCHEDULER_FLAGS),
        );
        if ours.is_none()
            && theirs.is_none()
            && our_flags.is_none()
            && their_flags.is_none()
        {
            return None;
        }
        let mut problem =
            |annotation: &'static str, value: &str, reason: String| {
                problems.push(AnnotationProblem {
                    annotation,
                    value: value.to_owned(),
                    reason,
                });
            };
        let ours = ours.and_then(|name| match scheduler_name(name) {
            Ok(name) => Some(name),
            Err(reason) => {
                problem(ANNOTATION_SCHEDULER, name, reason);
                None
            }
        });
        // Ours win; kube-router's stands in when ours is absent or unusable.
        let theirs = match theirs.filter(|_| ours.is_none()) {
            Some(name) if KUBE_ROUTER_SCHEDULERS.contains(&name) => {
                Some(Arc::from(name))
            }
            Some(name) => {
                let known = KUBE_ROUTER_SCHEDULERS.join(", ");
                problem(
                    KUBE_ROUTER_SCHEDULER,
                    name,
                    format!("not one of kube-router's schedulers ({known})"),
                );
                None
            }
            None => None,
        };
        let scheduler = ours.or(theirs);
        let flags = match (our_flags, their_flags) {
            (Some(text), _) => {
                let written_for =
                    scheduler.clone().or_else(|| implied_scheduler(text));
                match written_for {
                    None => {
                        problem(
                            ANNOTATION_SCHEDULER_FLAGS,
                            text,
                            "names no flag of sh or mh".to_owned(),
                        );
                        None
                    }
                    Some(for_) => match SchedulerFlags::parse(&for_, text) {
                        Ok(flags) => Some((for_, flags)),
                        Err(e) => {
                            problem(
                                ANNOTATION_SCHEDULER_FLAGS,
                                text,
                                e.to_string(),
                            );
                            None
                        }
                    },
                }
            }
            (None, Some(text)) => {
                let for_ = scheduler.clone().unwrap_or_else(|| Arc::from("mh"));
                match SchedulerFlags::parse_numbered(&for_, text) {
                    Ok(flags) => Some((for_, flags)),
                    Err(e) => {
                        problem(
                            KUBE_ROUTER_SCHEDULER_FLAGS,
                            text,
                            e.to_string(),
                        );
                        None
                    }
                }
            }
            (None, None) => None,
        };
        Some(Self { scheduler, flags })
    }

    /// What a virtual server of this Service runs on a node whose own
    /// scheduler is `default` and whose flag choice is `choice`.
    pub fn resolve(
        this: Option<&Self>,
        default: &Arc<str>,
        choice: &FlagChoice,
    ) -> Scheduling {
        let scheduler = this
            .and_then(|s| s.scheduler.clone())
            .unwrap_or_else(|| default.clone());
        let flags = match this.and_then(|s| s.flags.as_ref()) {
            Some((for_, flags)) if *for_ == scheduler => *flags,
            _ => choice.for_scheduler(&scheduler),
        };
        Scheduling { scheduler, flags }
    }
}

/// The scheduler flags' names were written for, when they say it
/// (`mh-port`); an empty set says none.
fn implied_scheduler(text: &str) -> Option<Arc<str>> {
    let first = text.split(',').map(str::trim).find(|n| !n.is_empty())?;
    ["sh", "mh"]
        .into_iter()
        .find(|s| first.starts_with(&format!("{s}-")))
        .map(Arc::from)
}

/// A scheduler's name as the kernel takes it: `ip_vs_NAME` is its module,
/// so letters, digits, `_` and `-`, at most 15 bytes.
fn scheduler_name(name: &str) -> Result<Arc<str>, String> {
    let usable = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if name.is_empty()
        || name.len() > SCHEDULER_NAME_MAX
        || !name.chars().all(usable)
    {
        return Err(format!(
            "not a scheduler's name (letters, digits, _ and -, at most {SCHEDULER_NAME_MAX})"
        ));
    }
    Ok(Arc::from(name))
}
