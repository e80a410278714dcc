//! Bounded-frequency sync runner, with kube-proxy's semantics.
//!
//! Every change asks for a sync, but syncs are expensive and changes come
//! in bursts, so requests are collapsed: a sync starts as soon as possible
//! after a request, yet never sooner than `min_interval` after the previous
//! sync finished. Independently of requests, a sync runs at least every
//! `max_interval` (kube-proxy's `syncPeriod`) so that drift in the kernel is
//! repaired. A failed sync asks for a retry with [`RunnerHandle::retry_after`],
//! which moves the next sync earlier but never later.
//!
//! Unlike upstream, there is no token-bucket burst allowance: one sync per
//! `min_interval` at most, which is what kube-proxy's IPVS mode needs once
//! syncs are incremental.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

/// What made the runner start a sync; recorded on the sync's span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncReason {
    /// [`RunnerHandle::run`] was called (possibly deferred by the minimum
    /// interval).
    Requested,
    /// [`RunnerHandle::retry_after`] came due.
    Retry,
    /// `max_interval` passed without any other sync.
    Periodic,
}

impl SyncReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncReason::Requested => "requested",
            SyncReason::Retry => "retry",
            SyncReason::Periodic => "periodic",
        }
    }
}

/// Passed to the sync function: which sync this is and why it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncTrigger {
    /// 1 for the first sync, then increasing by one.
    pub seq: u64,
    pub reason: SyncReason,
}

/// Requests written by handles and drained by the loop. The lock is held
/// only to flip these fields, never across an await.
#[derive(Debug, Default)]
struct Requests {
    run: bool,
    retry_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Shared {
    requests: Mutex<Requests>,
    wake: Notify,
}

impl Shared {
    fn with_requests<T>(&self, f: impl FnOnce(&mut Requests) -> T) -> T {
        // A panic elsewhere while holding this lock cannot leave the two
        // plain fields inconsistent, so a poisoned lock is still usable.
        let mut guard =
            self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }
}

/// Cheap to clone; asks the runner for syncs from any task.
#[derive(Debug, Clone)]
pub struct RunnerHandle {
    shared: Arc<Shared>,
}

impl RunnerHandle {
    /// Requests a sync as soon as the minimum interval allows. Requests made
    /// before the sync starts are collapsed into it; a request made while a
    /// sync is running causes one more sync after it.
    pub fn run(&self) {
        self.shared.with_requests(|r| r.run = true);
        self.shared.wake.notify_one();
    }

    /// Ensures a sync starts no later than `delay` from now (subject to the
    /// minimum interval). Of several pending retries the earliest wins.
    /// May be called from inside the sync function.
    pub fn retry_after(&self, delay: Duration) {
        let at = Instant::now() + delay;
        self.shared.with_requests(|r| {
            r.retry_at = Some(match r.retry_at {
                Some(earlier) if earlier <= at => earlier,
                _ => at,
            });
        });
        self.shared.wake.notify_one();
    }
}

/// Runs syncs with bounded frequency; see the module docs. The owner of
/// the sync loop asks [`BoundedFrequencyRunner::next`] when the next sync
/// is due, runs it, and reports its end with
/// [`BoundedFrequencyRunner::finished`]; between the two it may do
/// anything else, so the runner decides only *when*, never *what*.
#[derive(Debug)]
pub struct BoundedFrequencyRunner {
    name: String,
    min_interval: Duration,
    max_interval: Duration,
    shared: Arc<Shared>,
    state: LoopState,
}

impl BoundedFrequencyRunner {
    /// `max_interval` below `min_interval` is raised to `min_interval`
    /// (config validation already rejects it, as upstream does).
    pub fn new(
        name: impl Into<String>,
        min_interval: Duration,
        max_interval: Duration,
    ) -> (Self, RunnerHandle) {
        let shared = Arc::new(Shared::default());
        let max_interval = max_interval.max(min_interval);
        let runner = BoundedFrequencyRunner {
            name: name.into(),
            min_interval,
            max_interval,
            shared: Arc::clone(&shared),
            state: LoopState {
                last_end: None,
                deadline: Instant::now() + max_interval,
                deferred_request: false,
                retry_due: false,
                seq: 0,
            },
        };
        (runner, RunnerHandle { shared })
    }

    #[cfg(test)]
    pub fn handle(&self) -> RunnerHandle {
        RunnerHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Waits until a sync is due and returns what it is for. Nothing is
    /// due before the first request or before `max_interval` has passed,
    /// as in kube-proxy. Cancel-safe: everything it learns is kept in
    /// the runner, so dropping the future (in a `select!`) loses no
    /// request. Call [`BoundedFrequencyRunner::finished`] once the sync
    /// it announced is over; syncs never overlap.
    pub async fn next(&mut self) -> SyncTrigger {
        loop {
            let woken = tokio::select! {
                _ = self.shared.wake.notified() => true,
                _ = tokio::time::sleep_until(self.state.deadline) => false,
            };
            if let Some(trigger) = self.due(woken) {
                return trigger;
            }
        }
    }

    /// The decision after a wake-up, without awaiting anything.
    fn due(&mut self, woken: bool) -> Option<SyncTrigger> {
        let state = &mut self.state;
        let now = Instant::now();
        let (requested, retry_at) = self
            .shared
            .with_requests(|r| (std::mem::take(&mut r.run), r.retry_at));
        if let Some(at) = retry_at {
            if at <= now {
                self.shared.with_requests(|r| {
                    if r.retry_at == Some(at) {
                        r.retry_at = None;
                    }
                });
                state.retry_due = true;
            } else if at < state.deadline {
                state.deadline = at;
            }
        }
        let timer_fired = !woken || now >= state.deadline;
        let reason = if requested || state.deferred_request {
            SyncReason::Requested
        } else if state.retry_due {
            SyncReason::Retry
        } else if timer_fired {
            SyncReason::Periodic
        } else {
            return None;
        };

        if let Some(earliest) =
            state.last_end.map(|end| end + self.min_interval)
        {
            if earliest > now {
                // Too soon: remember why, and come back when allowed.
                if reason == SyncReason::Requested {
                    state.deferred_request = true;
                }
                state.deadline = state.deadline.min(earliest);
                return None;
            }
        }
        state.seq += 1;
        let trigger = SyncTrigger {
            seq: state.seq,
            reason,
        };
        tracing::debug!(
            runner = %self.name,
            seq = trigger.seq,
            reason = reason.as_str(),
            "sync starting"
        );
        // This sync satisfies any retry asked for before it; a retry
        // asked for during it (a failure) is kept.
        self.shared.with_requests(|r| r.retry_at = None);
        Some(trigger)
    }

    /// Records the end of the sync [`BoundedFrequencyRunner::next`]
    /// announced: the minimum interval counts from here, and so does the
    /// next periodic sync.
    pub fn finished(&mut self) {
        let end = Instant::now();
        let state = &mut self.state;
        state.last_end = Some(end);
        state.deferred_request = false;
        state.retry_due = false;
        // A retry asked for during the sync left a notification behind,
        // so the next call moves this deadline earlier again.
        state.deadline = end + self.max_interval;
    }
}

#[derive(Debug)]
struct LoopState {
    last_end: Option<Instant>,
    deadline: Instant,
    deferred_request: bool,
    retry_due: bool,
    seq: u64,
}

#[cfg(test)]
mod tests;
