//! The long-running proxy. A feeder task turns source events into object
//! changes and sends them to the sync loop, which owns everything else:
//! the trackers, the bounded-frequency runner, the backend and its repair
//! rounds, and what is reported after each sync. Nothing is shared
//! between the two but the channel, so decoding and relist diffs never
//! wait for a sync and a sync never waits for them.
//!
//! The loop's priorities, in order: a sync that is due; the changes that
//! arrived (all of them at once, so that one sync takes them all); the
//! graceful-termination poll; the repair round's kernel read, which runs
//! in a task of its own; and last a repair step, each of which holds the
//! loop for a bounded time (see [`crate::backend`]).

mod feeder;
mod stages;
#[cfg(test)]
mod tests;

use std::time::Duration;

use futures::{stream::BoxStream, Stream};
use tokio::{
    runtime::Handle,
    sync::mpsc::{self, UnboundedReceiver},
    task::{JoinError, JoinHandle},
    time::{Instant, Interval, MissedTickBehavior},
};
use tracing::{debug, debug_span, error, info_span, warn, Instrument, Level};

use crate::{
    backend::{Backend, Observation, RepairStep, SyncBatch},
    nodeview::Update,
    runner::{BoundedFrequencyRunner, RunnerHandle, SyncTrigger},
    server::SyncReporter,
    source::SourceEvent,
    sync::{ChangeOutcome, Merged, RestartReason, SyncState},
    telemetry::{
        events::{InternalEvent, RepairPart, RepairTimed},
        process::thread_cpu,
    },
};
use feeder::Input;
use stages::Stages;

/// How soon a failed sync is retried; each further failure in a row
/// doubles it, up to `syncPeriod`, so that a kernel that keeps refusing
/// is not asked every second.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// kube-proxy's timing settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopSettings {
    /// `minSyncPeriod`: at most one sync this often.
    pub min_sync_period: Duration,
    /// `syncPeriod`: a sync at least this often, and a repair round
    /// starting this long after the previous one ended.
    pub sync_period: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Restart(RestartReason),
    #[error("the object source ended")]
    SourceEnded,
}

/// Where the proxy's picture of the cluster comes from.
pub enum Source {
    /// API objects, from the API server or a state file.
    Objects(BoxStream<'static, SourceEvent>),
    /// The node's view from the API side (`--api-endpoint`); [`run`]
    /// makes its state [`SyncState::fed_by_view`].
    View(BoxStream<'static, Update>),
}

impl Source {
    pub fn objects(
        events: impl Stream<Item = SourceEvent> + Send + 'static,
    ) -> Self {
        Source::Objects(Box::pin(events))
    }
}

/// A source being read, decoded and turned into the loop's inputs, from
/// the moment it is started: at scale the API server's first list takes
/// seconds, which the rest of the start (the kernel's facilities, the
/// servers) need not wait for. The inputs wait in the channel meanwhile.
pub struct Feed {
    inputs: UnboundedReceiver<Input>,
    task: FeedTask,
    by_view: bool,
}

/// The feeder's task, stopped when dropped: with the loop, or with a
/// start that failed before the loop ran.
struct FeedTask(JoinHandle<()>);

impl Drop for FeedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Feed {
    /// Starts reading `source` on `runtime` (the proxy gives it
    /// [`crate::source::thread`]'s, so that it runs beside the syncs;
    /// tests with a paused clock their own).
    pub fn start(source: Source, node_name: &str, runtime: &Handle) -> Self {
        let (input, inputs) = mpsc::unbounded_channel();
        let by_view = matches!(source, Source::View(_));
        let task = match source {
            Source::Objects(events) => runtime.spawn(
                feeder::feed(
                    events,
                    node_name.to_owned(),
                    std::time::SystemTime::now(),
                    input,
                )
                .instrument(info_span!("source")),
            ),
            Source::View(updates) => runtime.spawn(
                feeder::feed_view(updates, input)
                    .instrument(info_span!("view")),
            ),
        };
        Self {
            inputs,
            task: FeedTask(task),
            by_view,
        }
    }
}

/// Runs until the source ends or a change requires a restart. `reporter`
/// hears of queued and applied updates (health, sync metrics, health
/// check node ports). `state` is a new [`SyncState`]; the source decides
/// how it is fed.
pub async fn run<B>(
    feed: Feed,
    mut state: SyncState,
    backend: B,
    settings: LoopSettings,
    reporter: SyncReporter,
) -> Result<(), DaemonError>
where
    B: Backend,
{
    let Feed {
        inputs,
        task: _feeder,
        by_view,
    } = feed;
    if by_view {
        state = state.fed_by_view();
    }
    let result = SyncLoop::new(state, backend, settings, reporter)
        .run(inputs)
        .await;
    if let Err(e) = &result {
        error!(error = %e, "stopping");
    }
    result
}

/// Where the repair rounds are.
enum Repair<O> {
    /// The next round begins then (after the first sync).
    Waiting(Instant),
    /// The kernel is being read.
    Reading {
        started: Instant,
        task: JoinHandle<O>,
    },
    /// Comparing what was read, a step at a time.
    Stepping(O),
}

/// What happened to the repair round while the loop waited.
enum RepairEvent<O> {
    Due,
    Read(Result<O, JoinError>),
}

impl<O: Send + 'static> Repair<O> {
    /// Resolves when the round's next phase is due; never while stepping
    /// (steps run when the loop has nothing better to do). Cancel-safe.
    async fn event(&mut self) -> RepairEvent<O> {
        match self {
            Repair::Waiting(at) => {
                tokio::time::sleep_until(*at).await;
                RepairEvent::Due
            }
            Repair::Reading { task, .. } => RepairEvent::Read(task.await),
            Repair::Stepping(_) => std::future::pending().await,
        }
    }
}

struct SyncLoop<B: Backend> {
    state: SyncState,
    backend: B,
    runner: BoundedFrequencyRunner,
    runner_handle: RunnerHandle,
    reporter: SyncReporter,
    sync_period: Duration,
    /// Services and slices listed once: syncs may run.
    listed: bool,
    /// No repair before the first sync has brought the kernel in line.
    synced_once: bool,
    stages: Stages,
    repair: Repair<B::Observed>,
    /// Failed syncs in a row.
    failures: u32,
    /// What the syncs computed ahead of the first, while the list was
    /// still arriving, for the first to apply.
    ahead: Option<Merged>,
    /// The node's addresses were read while the list arrived.
    addresses_read_ahead: bool,
}

impl<B: Backend> SyncLoop<B> {
    fn new(
        state: SyncState,
        backend: B,
        settings: LoopSettings,
        reporter: SyncReporter,
    ) -> Self {
        let (runner, runner_handle) = BoundedFrequencyRunner::new(
            "sync-proxy-rules",
            settings.min_sync_period,
            settings.sync_period,
        );
        Self {
            state,
            backend,
            runner,
            runner_handle,
            reporter,
            sync_period: settings.sync_period,
            listed: false,
            synced_once: false,
            stages: Stages::default(),
            repair: Repair::Waiting(Instant::now() + settings.sync_period),
            failures: 0,
            ahead: None,
            addresses_read_ahead: false,
        }
    }

    async fn run(
        mut self,
        mut inputs: UnboundedReceiver<Input>,
    ) -> Result<(), DaemonError> {
        let mut poll = self.backend.poll_interval().map(|period| {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            tick
        });
        loop {
            let listed = self.listed;
            let repairing = self.synced_once;
            let stepping = matches!(self.repair, Repair::Stepping(_));
            tokio::select! {
                biased;
                trigger = self.runner.next(), if listed => {
                    self.sync(trigger).await;
                    self.runner.finished();
                    // A step after every sync too: a loop kept busy by
                    // changes still gets its round done, a bounded step
                    // at a time.
                    if matches!(self.repair, Repair::Stepping(_)) {
                        self.repair_step().await;
                    }
                }
                input = inputs.recv() => {
                    let Some(input) = input else {
                        return Err(DaemonError::SourceEnded);
                    };
                    self.take(input)?;
                    // Everything already waiting, so that one sync takes
                    // it all.
                    while let Ok(input) = inputs.try_recv() {
                        self.take(input)?;
                    }
                    if !self.listed {
                        self.compute_ahead().await;
                    }
                }
                () = tick(poll.as_mut()) => self.backend.poll().await,
                event = self.repair.event(), if repairing => {
                    self.repair_event(event);
                }
                () = std::future::ready(()), if stepping => {
                    self.repair_step().await;
                }
            }
        }
    }

    /// Applies one input to the trackers, asking for a sync where it
    /// changed something.
    fn take(&mut self, input: Input) -> Result<(), DaemonError> {
        match input {
            Input::Changes { changes, received } => {
                let mut needs_sync = false;
                for change in &changes {
                    match self.state.apply(change) {
                        ChangeOutcome::Unchanged => {}
                        ChangeOutcome::NeedsSync => needs_sync = true,
                        ChangeOutcome::Restart(why) => {
                            return Err(DaemonError::Restart(why));
                        }
                    }
                }
                if needs_sync && self.listed {
                    self.stages.tracked(received);
                    self.request_sync();
                }
            }
            Input::Listed => {
                self.listed = true;
                self.request_sync();
            }
            Input::View { update, received } => {
                let outcome = self.state.apply_view(update);
                if let ChangeOutcome::Restart(why) = outcome {
                    return Err(DaemonError::Restart(why));
                }
                if !self.listed {
                    // The first update is the whole view: it may be
                    // programmed, and it needs a sync even if empty.
                    self.listed = true;
                    self.request_sync();
                } else if outcome == ChangeOutcome::NeedsSync {
                    self.stages.tracked(received);
                    self.request_sync();
                }
            }
        }
        Ok(())
    }

    /// Brings the desired state up to what the list has delivered so
    /// far, without applying it: the first sync then computes only the
    /// rest, and a cold start's largest computation runs while the API
    /// server is still sending, not after.
    async fn compute_ahead(&mut self) {
        if self.ahead.is_none() {
            // The node's addresses first, as the first sync would take
            // them: learnt later, they would recompute every port.
            if let Some(local) = self.backend.local_addresses().await {
                self.state.set_local_addresses(local);
                self.addresses_read_ahead = true;
            }
        }
        let outcome = self.state.sync();
        self.backend.ahead_of_first_sync(&outcome.deltas).await;
        self.ahead.get_or_insert_default().push(outcome);
    }

    fn request_sync(&self) {
        self.reporter.queued();
        self.runner_handle.run();
    }

    async fn sync(&mut self, trigger: SyncTrigger) {
        // A debug span: at info, building one per sync cost some 5 % of
        // the loop's own CPU under churn, and the sync's warnings name
        // what they are about without it.
        let span = debug_span!(
            "sync",
            seq = trigger.seq,
            reason = trigger.reason.as_str()
        );
        let (seq, reason) = (trigger.seq, trigger.reason.as_str());
        let started = std::time::Instant::now();
        // The first sync knows the node's addresses (its NodePorts, its
        // families) from the start (read as the list began, when it was
        // computed ahead); later, each repair round reads them.
        if !self.synced_once && !self.addresses_read_ahead {
            if let Some(local) = self.backend.local_addresses().await {
                self.state.set_local_addresses(local);
            }
        }
        let changes = self.stages.checkout(started);
        let mut outcome = self.state.sync();
        if let Some(mut ahead) = self.ahead.take() {
            ahead.push(outcome);
            outcome = ahead.into_outcome();
        }
        span.in_scope(|| {
            debug!(
                elapsed = ?started.elapsed(),
                deltas = outcome.deltas.len(),
                "desired state computed"
            )
        });
        // A scheduler a Service's annotation names is asked of the kernel
        // once, before a virtual server uses it; one the kernel lacks is
        // replaced by the node's in the same sync.
        let unprobed = self.state.unprobed_schedulers(&outcome.deltas);
        if !unprobed.is_empty() {
            for scheduler in unprobed {
                let present = self.backend.has_scheduler(&scheduler).await;
                self.state.scheduler_probed(scheduler, present);
            }
            outcome = outcome.then(self.state.sync());
        }
        self.reporter.changed(&self.state, &outcome);
        let batch = SyncBatch {
            trigger,
            outcome: &outcome,
            state: &self.state,
        };
        // A clock read per sync only for whoever reads the debug log.
        let cpu = tracing::enabled!(Level::DEBUG).then(thread_cpu);
        match self.backend.apply(batch).instrument(span.clone()).await {
            Ok(()) => {
                let wall = started.elapsed();
                if let Some(cpu) = cpu {
                    // Wall time well above the loop's CPU time is time
                    // spent waiting: on the kernel's locks, or for a CPU.
                    span.in_scope(|| {
                        debug!(
                            ?wall,
                            cpu = ?thread_cpu().saturating_sub(cpu),
                            deltas = outcome.deltas.len(),
                            "sync applied"
                        )
                    });
                }
                self.reporter.synced(&self.state, &outcome, wall);
                changes.applied();
                self.failures = 0;
                if !self.synced_once {
                    self.synced_once = true;
                    self.repair =
                        Repair::Waiting(Instant::now() + self.sync_period);
                }
            }
            Err(e) => {
                span.in_scope(|| {
                    warn!(
                        error = %e,
                        reason = e.reason(),
                        sync = seq,
                        trigger = reason,
                        "sync failed; retrying"
                    )
                });
                self.stages.requeue(changes);
                let backoff = RETRY_AFTER
                    .saturating_mul(1 << self.failures.min(16))
                    .min(self.sync_period);
                self.failures = self.failures.saturating_add(1);
                self.runner_handle.retry_after(backoff);
            }
        }
    }

    fn repair_event(&mut self, event: RepairEvent<B::Observed>) {
        match event {
            RepairEvent::Due => {
                debug!("repair round: reading the kernel");
                let read = self.backend.begin_repair();
                self.repair = Repair::Reading {
                    started: Instant::now(),
                    task: tokio::spawn(
                        read.instrument(info_span!("repair read")),
                    ),
                };
            }
            RepairEvent::Read(read) => {
                if let Repair::Reading { started, .. } = &self.repair {
                    let duration = started.elapsed();
                    debug!(?duration, "repair round: the kernel read");
                    RepairTimed {
                        part: RepairPart::Read,
                        duration,
                    }
                    .emit();
                }
                match read {
                    Ok(observed) => {
                        if let Some(local) = observed.local_addresses() {
                            if self.state.set_local_addresses(local.to_vec()) {
                                self.request_sync();
                            }
                        }
                        self.repair = Repair::Stepping(observed);
                    }
                    Err(e) => {
                        warn!(error = %e, "repair read failed");
                        self.repair =
                            Repair::Waiting(Instant::now() + self.sync_period);
                    }
                }
            }
        }
    }

    async fn repair_step(&mut self) {
        let Repair::Stepping(observed) = &mut self.repair else {
            return;
        };
        let started = std::time::Instant::now();
        let step = self
            .backend
            .repair_step(observed)
            .instrument(info_span!("repair step"))
            .await;
        RepairTimed {
            part: RepairPart::Step,
            duration: started.elapsed(),
        }
        .emit();
        if step == RepairStep::Done {
            debug!("repair round: done");
            self.repair = Repair::Waiting(Instant::now() + self.sync_period);
        }
    }
}

/// The next tick, or never without a poller.
async fn tick(interval: Option<&mut Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}
