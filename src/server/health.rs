//! The proxy's health, as upstream's `ProxyHealthServer` keeps it: the
//! proxy is unhealthy when an update was queued and not applied within
//! the health timeout (2 × syncPeriod), and `/healthz` also fails while
//! the node is not eligible for traffic.

use std::{
    collections::BTreeMap,
    fmt,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, SystemTime},
};

use crate::model::IpFamily;

/// Where the health state reads the time: the system clock, or a clock
/// tests move by hand.
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> SystemTime;
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// One family's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxierHealth {
    pub last_updated: SystemTime,
    pub healthy: bool,
}

/// The health as one probe sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// The most recent update of any family; `None` before the first.
    pub last_updated: Option<SystemTime>,
    pub current_time: SystemTime,
    /// Every family is healthy (node eligibility not included).
    pub healthy: bool,
    /// Families that were updated at least once.
    pub status: BTreeMap<IpFamily, ProxierHealth>,
}

#[derive(Debug)]
struct State {
    families: Vec<IpFamily>,
    last_updated: BTreeMap<IpFamily, SystemTime>,
    oldest_pending: BTreeMap<IpFamily, SystemTime>,
    node_eligible: bool,
}

/// Shared between the daemon, which reports queued and applied updates,
/// and the servers, which answer probes from it.
#[derive(Debug)]
pub struct ProxyHealth {
    clock: Arc<dyn Clock>,
    timeout: Duration,
    state: Mutex<State>,
}

impl ProxyHealth {
    /// `timeout` is how long a queued update may wait: upstream uses
    /// 2 × syncPeriod.
    pub fn new(timeout: Duration) -> Self {
        Self::with_clock(timeout, Arc::new(SystemClock))
    }

    pub fn with_clock(timeout: Duration, clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            timeout,
            state: Mutex::new(State {
                families: vec![IpFamily::V4],
                last_updated: BTreeMap::new(),
                oldest_pending: BTreeMap::new(),
                // Eligible while starting, until the Node says otherwise.
                node_eligible: true,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update leaves the maps consistent, so a panic elsewhere
        // while the lock was held does not make them unusable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn now(&self) -> SystemTime {
        self.clock.now()
    }

    #[cfg(test)]
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The families the proxy programs (one proxier each, upstream);
    /// queued and applied updates apply to all of them. A family that
    /// goes away is forgotten.
    pub fn set_families(&self, families: &[IpFamily]) {
        let mut state = self.state();
        if state.families == families {
            return;
        }
        state.families = families.to_vec();
        state.last_updated.retain(|f, _| families.contains(f));
        state.oldest_pending.retain(|f, _| families.contains(f));
    }

    pub fn families(&self) -> Vec<IpFamily> {
        self.state().families.clone()
    }

    /// Object changes asked for a sync. Only the oldest unapplied one
    /// counts: a steady stream of changes must not hide a stuck sync.
    pub fn queued_update(&self) {
        let now = self.clock.now();
        let mut state = self.state();
        let families = state.families.clone();
        for family in families {
            state.oldest_pending.entry(family).or_insert(now);
        }
    }

    /// A sync reached the kernel: everything queued before is applied.
    pub fn updated(&self) {
        let now = self.clock.now();
        let mut state = self.state();
        let families = state.families.clone();
        for family in families {
            state.oldest_pending.remove(&family);
            state.last_updated.insert(family, now);
        }
    }

    /// False while the node is being deleted or tainted
    /// `ToBeDeletedByClusterAutoscaler` ([`crate::model::NodeInfo`]).
    pub fn set_node_eligible(&self, eligible: bool) {
        self.state().node_eligible = eligible;
    }

    pub fn node_eligible(&self) -> bool {
        self.state().node_eligible
    }

    /// The health now. A family that was never updated is healthy: it is
    /// still starting (upstream's semantics); one whose oldest queued
    /// update has waited the timeout or longer is not.
    pub fn health(&self) -> Health {
        let now = self.clock.now();
        let state = self.state();
        let mut health = Health {
            last_updated: state.last_updated.values().max().copied(),
            current_time: now,
            healthy: true,
            status: BTreeMap::new(),
        };
        for (family, last_updated) in &state.last_updated {
            let late = state.oldest_pending.get(family).is_some_and(|queued| {
                // A clock that went backwards makes the wait zero.
                now.duration_since(*queued).unwrap_or_default() >= self.timeout
            });
            health.healthy &= !late;
            health.status.insert(
                *family,
                ProxierHealth {
                    last_updated: *last_updated,
                    healthy: !late,
                },
            );
        }
        health
    }

    /// Upstream's `IsHealthy`: the proxier's health without the node's.
    pub fn is_healthy(&self) -> bool {
        self.health().healthy
    }
}
