//! Which scheduler and flags each virtual server runs: the node's, or a
//! Service's own from its annotations when the operator lets annotations
//! choose that scheduler and the kernel has it. Whoever creates a Service
//! must not be able to make every node load any `ip_vs_*` module, hence
//! the operator's list.

use std::{collections::BTreeSet, sync::Arc};

use crate::model::{
    FlagChoice, Scheduling, ServicePortInfo, ServiceScheduling,
    STANDARD_SCHEDULERS,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerPolicy {
    /// The node's scheduler (`ipvs.scheduler`).
    pub scheduler: Arc<str>,
    /// The flags chosen for the schedulers that take them
    /// (`--ipvs-scheduler-flags`).
    pub flags: FlagChoice,
    /// The schedulers a Service's annotation may choose
    /// (`--ipvs-service-schedulers`); the node's own always may.
    pub allowed: BTreeSet<Arc<str>>,
    /// Annotated schedulers the kernel was found to lack.
    pub missing: BTreeSet<Arc<str>>,
}

/// Why a Service's annotated scheduler is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Not in the operator's list.
    NotAllowed,
    /// The kernel has no such scheduler.
    NotInKernel,
}

/// A Service's scheduler that was not used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RefusedScheduler {
    pub scheduler: Arc<str>,
    pub why: Refusal,
}

impl Default for SchedulerPolicy {
    fn default() -> Self {
        Self::new("rr".into(), FlagChoice::default(), standard())
    }
}

/// The schedulers of a standard kernel.
pub fn standard() -> BTreeSet<Arc<str>> {
    STANDARD_SCHEDULERS.iter().map(|&s| Arc::from(s)).collect()
}

impl SchedulerPolicy {
    pub fn new(
        scheduler: Arc<str>,
        flags: FlagChoice,
        allowed: BTreeSet<Arc<str>>,
    ) -> Self {
        Self {
            scheduler,
            flags,
            allowed,
            missing: BTreeSet::new(),
        }
    }

    /// What a Service without annotations runs.
    pub fn node(&self) -> Scheduling {
        Scheduling::chosen(self.scheduler.clone(), &self.flags)
    }

    /// What `svc`'s virtual servers run, and the annotated scheduler that
    /// was refused, if one was: then the node's scheduler runs, with the
    /// Service's flags if they were written for it.
    pub fn for_service(
        &self,
        svc: &ServicePortInfo,
    ) -> (Scheduling, Option<RefusedScheduler>) {
        let Some(own) = &svc.scheduling else {
            return (self.node(), None);
        };
        let refusal = own.scheduler.as_ref().and_then(|name| {
            let why = if *name == self.scheduler {
                return None;
            } else if !self.allowed.contains(name) {
                Refusal::NotAllowed
            } else if self.missing.contains(name) {
                Refusal::NotInKernel
            } else {
                return None;
            };
            Some(RefusedScheduler {
                scheduler: name.clone(),
                why,
            })
        });
        let scheduling = match &refusal {
            None => ServiceScheduling::resolve(
                Some(own),
                &self.scheduler,
                &self.flags,
            ),
            Some(_) => {
                let flags_only = ServiceScheduling {
                    scheduler: None,
                    flags: own.flags.clone(),
                };
                ServiceScheduling::resolve(
                    Some(&flags_only),
                    &self.scheduler,
                    &self.flags,
                )
            }
        };
        (scheduling, refusal)
    }
}
