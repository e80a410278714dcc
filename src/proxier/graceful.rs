//! Graceful termination of real servers.
//!
//! A TCP real server removed while it still has connections is not
//! deleted: it goes to weight 0, so that the scheduler sends it nothing
//! new while its connections finish, and is deleted once its active and
//! inactive connection counts are both 0, or once it has drained for
//! [`GracefulConfig::timeout`] whatever its counts. UDP and SCTP real
//! servers go at once, as upstream does: their "connections" are
//! conntrack-like entries that would keep a dead backend alive. A real
//! server that comes back while draining returns to weight 1.
//!
//! Upstream checks its list once a minute and defines, but never applies,
//! a 15-minute bound; here the check runs every few seconds
//! ([`GracefulConfig::check_interval`]) and the bound applies.
//!
//! [`GracefulQueue`] is the pure state machine, driven with explicit
//! times; [`route`] rewrites a planned operation list through it; the
//! proxier polls only the draining services' real servers
//! ([`Ipvs::dests`](crate::kernel::ipvs::Ipvs::dests)) to feed
//! [`GracefulQueue::poll`].

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use crate::{
    kernel::ipvs::{
        DestKey, DestSpec, DestState, IpvsOp, IpvsTable, VirtualServerKey,
    },
    model::Protocol,
};

#[cfg(test)]
mod tests;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GracefulConfig {
    /// How often draining real servers' connection counts are read.
    pub check_interval: Duration,
    /// The longest a real server drains before it is deleted anyway.
    pub timeout: Duration,
}

impl Default for GracefulConfig {
    fn default() -> Self {
        Self {
            check_interval: Duration::from_secs(2),
            timeout: Duration::from_secs(15 * 60),
        }
    }
}

/// The real servers at weight 0 waiting for their connections to end,
/// with the time each must be gone by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GracefulQueue {
    timeout: Duration,
    draining: BTreeMap<VirtualServerKey, BTreeMap<DestKey, Instant>>,
}

/// What a draining service's real servers look like now, for
/// [`GracefulQueue::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    Dests(BTreeMap<DestKey, DestState>),
    /// The service itself is gone: its real servers went with it.
    ServiceGone,
}

impl GracefulQueue {
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            draining: BTreeMap::new(),
        }
    }

    /// Starts draining a removed real server; one already draining keeps
    /// its original deadline.
    pub fn on_removed(
        &mut self,
        service: VirtualServerKey,
        dest: DestKey,
        now: Instant,
    ) {
        let deadline = now + self.timeout;
        self.draining
            .entry(service)
            .or_default()
            .entry(dest)
            .or_insert(deadline);
    }

    /// The real server is wanted again; true if it was draining (so it
    /// exists at weight 0 and must be updated, not added).
    pub fn on_restored(
        &mut self,
        service: &VirtualServerKey,
        dest: &DestKey,
    ) -> bool {
        let Some(dests) = self.draining.get_mut(service) else {
            return false;
        };
        let was = dests.remove(dest).is_some();
        if dests.is_empty() {
            self.draining.remove(service);
        }
        was
    }

    /// The service was deleted or recreated: nothing of it drains any
    /// more.
    pub fn forget_service(&mut self, service: &VirtualServerKey) {
        self.draining.remove(service);
    }

    pub fn is_draining(
        &self,
        service: &VirtualServerKey,
        dest: &DestKey,
    ) -> bool {
        self.draining
            .get(service)
            .is_some_and(|dests| dests.contains_key(dest))
    }

    pub fn draining_services(&self) -> impl Iterator<Item = &VirtualServerKey> {
        self.draining.keys()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.draining.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.draining.is_empty()
    }

    /// Decides, from what the kernel shows now, which draining real
    /// servers go: those without connections and those past their
    /// deadline. One whose service was not observed (its read failed)
    /// goes only at its deadline. A real server or service that has
    /// disappeared is forgotten without an operation.
    pub fn poll(
        &mut self,
        now: Instant,
        observed: &BTreeMap<VirtualServerKey, Observation>,
    ) -> Vec<IpvsOp> {
        let mut ops = Vec::new();
        self.draining.retain(|service, dests| {
            let seen = observed.get(service);
            if seen == Some(&Observation::ServiceGone) {
                return false;
            }
            dests.retain(|dest, deadline| {
                let state = match seen {
                    Some(Observation::Dests(current)) => {
                        let Some(state) = current.get(dest) else {
                            return false;
                        };
                        Some(state)
                    }
                    _ => None,
                };
                let idle = state.is_some_and(|s| {
                    s.active_conns == 0 && s.inactive_conns == 0
                });
                if idle || now >= *deadline {
                    ops.push(IpvsOp::DeleteDest(*service, *dest));
                    return false;
                }
                true
            });
            !dests.is_empty()
        });
        ops
    }
}

/// Rewrites planned IPVS operations through the queue:
///
/// - `DeleteDest` of a TCP real server becomes `UpdateDest` to weight 0
///   and starts draining, unless `observed` shows it without connections
///   (then it is deleted now) or already at weight 0 (then it only starts
///   draining). One `observed` does not show (its service could not be
///   read) drains, and the next poll deletes it once idle. A `DeleteDest` of one already draining is dropped.
/// - `AddDest` or `UpdateDest` of a draining real server restores it:
///   `UpdateDest` with the planned weight.
/// - `AddService` and `DeleteService` end the draining of that service.
pub fn route(
    queue: &mut GracefulQueue,
    ops: Vec<IpvsOp>,
    now: Instant,
    observed: Option<&IpvsTable>,
) -> Vec<IpvsOp> {
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            IpvsOp::DeleteDest(service, dest) => {
                if queue.is_draining(&service, &dest) {
                    continue;
                }
                if service.protocol != Protocol::Tcp {
                    out.push(IpvsOp::DeleteDest(service, dest));
                    continue;
                }
                let state = observed
                    .and_then(|t| t.services.get(&service))
                    .and_then(|s| s.dests.get(&dest));
                match state {
                    Some(s) if s.active_conns == 0 && s.inactive_conns == 0 => {
                        out.push(IpvsOp::DeleteDest(service, dest));
                    }
                    Some(s) if s.weight == 0 => {
                        queue.on_removed(service, dest, now);
                    }
                    _ => {
                        queue.on_removed(service, dest, now);
                        let spec = DestSpec {
                            key: dest,
                            weight: 0,
                        };
                        out.push(IpvsOp::UpdateDest(service, spec));
                    }
                }
            }
            IpvsOp::AddDest(service, spec) => {
                if queue.on_restored(&service, &spec.key) {
                    out.push(IpvsOp::UpdateDest(service, spec));
                } else {
                    out.push(IpvsOp::AddDest(service, spec));
                }
            }
            IpvsOp::UpdateDest(service, spec) => {
                queue.on_restored(&service, &spec.key);
                out.push(IpvsOp::UpdateDest(service, spec));
            }
            IpvsOp::AddService(spec) => {
                queue.forget_service(&spec.key);
                out.push(IpvsOp::AddService(spec));
            }
            IpvsOp::DeleteService(key) => {
                queue.forget_service(&key);
                out.push(IpvsOp::DeleteService(key));
            }
            op @ IpvsOp::UpdateService(_) => out.push(op),
        }
    }
    out
}
