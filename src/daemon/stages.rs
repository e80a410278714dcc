//! When each change that asked for a sync arrived and was tracked, so
//! that the sync that programs it can say where its time went.

use std::time::Instant;

use crate::telemetry::events::{InternalEvent, Stage, StageTimed};

#[derive(Debug, Clone, Copy)]
struct Tracked {
    received: Instant,
    tracked: Instant,
}

/// The changes tracked since the last checkout.
#[derive(Debug, Default)]
pub(super) struct Stages {
    pending: Vec<Tracked>,
}

/// The changes one sync checked out.
#[derive(Debug)]
pub(super) struct CheckedOut {
    changes: Vec<Tracked>,
    sync_started: Instant,
}

impl Stages {
    /// A change received at `received` reached the trackers now.
    pub(super) fn tracked(&mut self, received: Instant) {
        self.pending.push(Tracked {
            received,
            tracked: Instant::now(),
        });
    }

    /// A sync starting at `sync_started` takes every pending change.
    pub(super) fn checkout(&mut self, sync_started: Instant) -> CheckedOut {
        CheckedOut {
            changes: std::mem::take(&mut self.pending),
            sync_started,
        }
    }

    /// A failed sync's changes wait for the retry that programs them.
    pub(super) fn requeue(&mut self, checked_out: CheckedOut) {
        self.pending.extend(checked_out.changes);
    }
}

impl CheckedOut {
    /// The sync reached the kernel now.
    pub(super) fn applied(self) {
        let applied = Instant::now();
        let sync = applied.saturating_duration_since(self.sync_started);
        for change in self.changes {
            for (stage, duration) in [
                (
                    Stage::Queue,
                    change.tracked.saturating_duration_since(change.received),
                ),
                (
                    Stage::Pending,
                    self.sync_started.saturating_duration_since(change.tracked),
                ),
                (Stage::Sync, sync),
                (
                    Stage::Total,
                    applied.saturating_duration_since(change.received),
                ),
            ] {
                StageTimed { stage, duration }.emit();
            }
        }
    }
}
