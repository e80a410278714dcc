//! A minute of endpoint churn at a steady rate: a writer flips one
//! service's endpoint per tick through the API, round robin, while an
//! observer polls every service with changes not yet in the kernel over
//! ipvs-sys. As kube-proxy's network programming latency counts them, a
//! change is programmed when the kernel first shows its service's latest
//! state: changes to one service that a proxy coalesces into one sync are
//! each timed from their own request to that moment.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use ipvs_sys::Handle;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use tokio::sync::Semaphore;

use crate::{api, ipvs, measure::Addresses, objects, proxy::Proxy, Settings};

/// Writes in flight at most; a slower API server lowers the achieved
/// rate, which is reported, rather than piling up requests.
const IN_FLIGHT: usize = 64;
/// Real-server reads in flight per polling round.
const READS: usize = 16;
const POLL: Duration = Duration::from_millis(5);

pub struct Churn {
    pub latencies: Vec<Duration>,
    pub achieved_rate: f64,
    /// From the last write to the last change seen in the kernel.
    pub catch_up: Duration,
    pub unobserved: usize,
    pub write_errors: usize,
}

/// A service's changes not yet seen in the kernel.
#[derive(Clone)]
struct Pending {
    /// The state its latest change asks for.
    all_ready: bool,
    issued: Vec<Instant>,
}

#[derive(Default)]
struct Shared {
    pending: HashMap<usize, Pending>,
    /// Services with a write in flight: a second write to one could
    /// overtake the first.
    writing: HashSet<usize>,
}

type SharedState = Arc<Mutex<Shared>>;

fn lock(shared: &SharedState) -> MutexGuard<'_, Shared> {
    // No task panics while holding it; recover regardless.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

pub async fn run(
    settings: &Settings,
    slices: &Api<EndpointSlice>,
    handle: &Handle,
    addresses: &Addresses,
    ready: &mut Vec<bool>,
    proxy: &mut Proxy,
) -> anyhow::Result<Churn> {
    let shared: SharedState = Arc::default();
    let errors = Arc::new(AtomicUsize::new(0));
    // The writer is a task of its own so that a slow polling round never
    // delays a write.
    let mut writer = Some(tokio::spawn(write(
        settings.churn,
        settings.churn_rate,
        slices.clone(),
        shared.clone(),
        std::mem::take(ready),
        errors.clone(),
    )));
    let mut latencies = Vec::new();
    let mut written: Option<(usize, Instant)> = None;
    let mut last_seen = Instant::now();
    loop {
        if let Some(w) = writer.take_if(|w| w.is_finished()) {
            let (issued, states) = w.await??;
            *ready = states;
            written = Some((issued, Instant::now()));
        }
        let round: Vec<(usize, bool, usize)> = lock(&shared)
            .pending
            .iter()
            .map(|(k, p)| (*k, p.all_ready, p.issued.len()))
            .collect();
        if written.is_some() && round.is_empty() {
            break;
        }
        let checks = futures::stream::iter(round)
            .map(|(k, all_ready, count)| async move {
                let dests = ipvs::real_servers(
                    handle,
                    addresses.vips[k],
                    objects::PORT,
                )
                .await;
                (k, all_ready, count, dests)
            })
            .buffer_unordered(READS)
            .collect::<Vec<_>>()
            .await;
        let now = Instant::now();
        for (k, all_ready, count, dests) in checks {
            if !objects::shows(&dests?, addresses.flipping[k], all_ready) {
                continue;
            }
            // The kernel shows the state the first `count` changes asked
            // for; later ones (made since the round began) still wait.
            let mut shared = lock(&shared);
            let Some(p) = shared.pending.get_mut(&k) else {
                continue;
            };
            // (Fewer only if a failed write dropped the entry since.)
            let count = count.min(p.issued.len());
            latencies.extend(p.issued.drain(..count).map(|t| now - t));
            if p.issued.is_empty() {
                shared.pending.remove(&k);
            }
            last_seen = now;
        }
        proxy.check_alive()?;
        if let Some((_, at)) = written {
            if at.elapsed() > settings.change_timeout {
                break;
            }
        }
        tokio::time::sleep(POLL).await;
    }
    let (issued, written_at) = written.unwrap_or((0, last_seen));
    let unobserved =
        lock(&shared).pending.values().map(|p| p.issued.len()).sum();
    Ok(Churn {
        latencies,
        achieved_rate: issued as f64 / settings.churn.as_secs_f64().max(1e-3),
        catch_up: last_seen.saturating_duration_since(written_at),
        unobserved,
        write_errors: errors.load(Ordering::Relaxed),
    })
}

/// Flips the next service, round robin, skipping those with a write in
/// flight, `rate` times a second for `duration`; the number of writes
/// issued and the services' readiness after them.
async fn write(
    duration: Duration,
    rate: u64,
    slices: Api<EndpointSlice>,
    shared: SharedState,
    mut ready: Vec<bool>,
    errors: Arc<AtomicUsize>,
) -> anyhow::Result<(usize, Vec<bool>)> {
    let n = ready.len();
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tick =
        tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    // Late ticks are made up at once: the rate is the point.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let start = Instant::now();
    let (mut issued, mut next) = (0, 0);
    while start.elapsed() < duration {
        tick.tick().await;
        let slot = slots.clone().acquire_owned().await?;
        let (k, all_ready) = {
            let mut shared = lock(&shared);
            let Some(k) = (0..n)
                .map(|i| (next + i) % n)
                .find(|k| !shared.writing.contains(k))
            else {
                continue;
            };
            next = k + 1;
            ready[k] = !ready[k];
            shared.writing.insert(k);
            // Before the request: the kernel may show it before the
            // answer comes.
            let p = shared.pending.entry(k).or_insert(Pending {
                all_ready: ready[k],
                issued: Vec::new(),
            });
            p.all_ready = ready[k];
            p.issued.push(Instant::now());
            (k, ready[k])
        };
        issued += 1;
        let (slices, shared, errors) =
            (slices.clone(), shared.clone(), errors.clone());
        tokio::spawn(async move {
            let result = api::set_ready(&slices, k, all_ready).await;
            let mut shared = lock(&shared);
            shared.writing.remove(&k);
            if let Err(e) = result {
                eprintln!("churn: {e:#}");
                // What the failed write asked for will never show.
                shared.pending.remove(&k);
                errors.fetch_add(1, Ordering::Relaxed);
            }
            drop(slot);
        });
    }
    // The last writes' answers.
    let _all = slots.acquire_many(IN_FLIGHT as u32).await?;
    Ok((issued, ready))
}
