use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use pretty_assertions::assert_eq;
use tokio::time::Instant;

use super::{BoundedFrequencyRunner, SyncReason};

#[derive(Debug, Clone, Copy)]
enum Action {
    Run,
    RetryAfter(u64),
}

struct Case {
    name: &'static str,
    min_ms: u64,
    max_ms: u64,
    /// How long each sync takes.
    sync_ms: u64,
    /// Syncs (by seq) that fail and ask for a retry after so many ms.
    fail: &'static [(u64, u64)],
    /// What the outside world does, at which time.
    script: &'static [(u64, Action)],
    until_ms: u64,
    /// Start time of each sync, with its reason.
    expected: &'static [(u64, SyncReason)],
}

use Action::{RetryAfter, Run};
use SyncReason::{Periodic, Requested, Retry};

const CASES: &[Case] = &[
    Case {
        name: "a burst of requests collapses into one sync",
        min_ms: 1000,
        max_ms: 30_000,
        sync_ms: 0,
        fail: &[],
        script: &[
            (0, Run),
            (0, Run),
            (0, Run),
            (100, Run),
            (100, Run),
            (200, Run),
        ],
        until_ms: 40_000,
        expected: &[(0, Requested), (1000, Requested), (31_000, Periodic)],
    },
    Case {
        name: "requests are spaced by the minimum interval",
        min_ms: 2000,
        max_ms: 60_000,
        sync_ms: 0,
        fail: &[],
        script: &[(0, Run), (500, Run), (2500, Run), (3000, Run), (7000, Run)],
        until_ms: 8000,
        expected: &[
            (0, Requested),
            (2000, Requested),
            (4000, Requested),
            (7000, Requested),
        ],
    },
    Case {
        name: "a zero minimum interval syncs on every request",
        min_ms: 0,
        max_ms: 60_000,
        sync_ms: 0,
        fail: &[],
        script: &[(0, Run), (10, Run), (20, Run)],
        until_ms: 1000,
        expected: &[(0, Requested), (10, Requested), (20, Requested)],
    },
    Case {
        name: "without requests a sync runs every max interval",
        min_ms: 1000,
        max_ms: 10_000,
        sync_ms: 0,
        fail: &[],
        script: &[],
        until_ms: 35_000,
        expected: &[(10_000, Periodic), (20_000, Periodic), (30_000, Periodic)],
    },
    Case {
        name: "a failed sync is retried after the asked delay",
        min_ms: 1000,
        max_ms: 30_000,
        sync_ms: 0,
        fail: &[(1, 5000)],
        script: &[(0, Run)],
        until_ms: 40_000,
        expected: &[(0, Requested), (5000, Retry), (35_000, Periodic)],
    },
    Case {
        name: "a retry still respects the minimum interval",
        min_ms: 1000,
        max_ms: 30_000,
        sync_ms: 0,
        fail: &[(1, 0)],
        script: &[(0, Run)],
        until_ms: 2000,
        expected: &[(0, Requested), (1000, Retry)],
    },
    Case {
        name: "of several retries the earliest wins",
        min_ms: 1000,
        max_ms: 30_000,
        sync_ms: 0,
        fail: &[],
        script: &[
            (0, RetryAfter(8000)),
            (100, RetryAfter(3000)),
            (200, RetryAfter(6000)),
        ],
        until_ms: 34_000,
        expected: &[(3100, Retry), (33_100, Periodic)],
    },
    Case {
        name: "a sync in between satisfies an earlier retry",
        min_ms: 1000,
        max_ms: 30_000,
        sync_ms: 0,
        fail: &[],
        script: &[(0, RetryAfter(5000)), (1000, Run)],
        until_ms: 32_000,
        expected: &[(1000, Requested), (31_000, Periodic)],
    },
    Case {
        name: "requests during a sync cause one sync after it",
        min_ms: 1000,
        max_ms: 10_000,
        sync_ms: 500,
        fail: &[],
        script: &[(0, Run), (100, Run), (200, Run)],
        until_ms: 12_500,
        // Intervals count from the end of the previous sync.
        expected: &[(0, Requested), (1500, Requested), (12_000, Periodic)],
    },
    Case {
        name: "a retry asked for during a slow sync is kept",
        min_ms: 0,
        max_ms: 30_000,
        sync_ms: 2000,
        fail: &[(1, 1000)],
        script: &[(0, Run)],
        until_ms: 5000,
        // Due at 1000, while the first sync still runs until 2000.
        expected: &[(0, Requested), (2000, Retry)],
    },
];

type Log = Arc<Mutex<Vec<(u64, SyncReason)>>>;

async fn run_case(case: &Case) -> Vec<(u64, SyncReason)> {
    let start = Instant::now();
    let (runner, handle) = BoundedFrequencyRunner::new(
        case.name,
        Duration::from_millis(case.min_ms),
        Duration::from_millis(case.max_ms),
    );
    let log: Log = Arc::default();
    let fail: BTreeMap<u64, u64> = case.fail.iter().copied().collect();
    let sync_time = Duration::from_millis(case.sync_ms);
    let task = {
        let log = Arc::clone(&log);
        let retry = handle.clone();
        let mut runner = runner;
        tokio::spawn(async move {
            loop {
                let trigger = runner.next().await;
                let at = (Instant::now() - start).as_millis();
                let at = u64::try_from(at).unwrap_or(u64::MAX);
                log.lock().unwrap().push((at, trigger.reason));
                // Failing early in the sync: the retry is due relative
                // to the failure, not to the end of the sync.
                if let Some(ms) = fail.get(&trigger.seq).copied() {
                    retry.retry_after(Duration::from_millis(ms));
                }
                tokio::time::sleep(sync_time).await;
                runner.finished();
            }
        })
    };
    for &(at, action) in case.script {
        tokio::time::sleep_until(start + Duration::from_millis(at)).await;
        match action {
            Run => handle.run(),
            RetryAfter(ms) => handle.retry_after(Duration::from_millis(ms)),
        }
    }
    tokio::time::sleep_until(start + Duration::from_millis(case.until_ms))
        .await;
    task.abort();
    let log = log.lock().unwrap().clone();
    log
}

#[tokio::test(start_paused = true)]
async fn sync_times() {
    for case in CASES {
        let got = run_case(case).await;
        assert_eq!(got, case.expected.to_vec(), "{}", case.name);
    }
}

#[tokio::test(start_paused = true)]
async fn sequence_numbers_count_syncs() {
    let (runner, handle) = BoundedFrequencyRunner::new(
        "seq",
        Duration::ZERO,
        Duration::from_secs(60),
    );
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let task = {
        let seen = Arc::clone(&seen);
        let mut runner = runner;
        tokio::spawn(async move {
            loop {
                let trigger = runner.next().await;
                seen.lock().unwrap().push(trigger.seq);
                runner.finished();
            }
        })
    };
    for _ in 0..3 {
        handle.run();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    task.abort();
    assert_eq!(*seen.lock().unwrap(), vec![1, 2, 3]);
}
