//! A minute of endpoint churn at a steady rate: a writer replaces one
//! service's last endpoint per tick through the API, round robin, each
//! change with an address of its own; an observer times one change in
//! BENCH_CHURN_SAMPLE (10) from its request to the kernel, polling that
//! service's real servers over ipvs-sys (one `getsockopt` a read for
//! the IPv4 services it makes, far cheaper than a generic netlink dump).
//!
//! As kube-proxy's network programming latency counts them, a change is
//! programmed once the kernel shows it or any later change of the same
//! service: a proxy that coalesces several into one sync programs them
//! all at once. So once a service has a timed change pending, every later
//! change to it is followed too.
//!
//! The observer must not compete with the proxy it watches: each read
//! takes the kernel's IPVS mutex, which the proxy's own IPVS requests
//! take too. It polls a service again after a tenth of its
//! oldest timed change's age (5 ms to 1 s), which bounds the error to
//! about a tenth, and reads at most READ_RATE services a second, the
//! most overdue first, so that its load cannot grow with a proxy's lag.
//! A healthy proxy's changes are seen within tens of milliseconds, well
//! under the cap. The run prints how many reads it made.

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, Ipv4Addr},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard, OnceLock,
    },
    time::{Duration, Instant},
};

use bench_support::{ipvs, proxy::Proxy};
use futures::StreamExt;
use ipvs_sys::{Destination, Handle, ServiceKey, SockoptSocket};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use tokio::sync::Semaphore;

use crate::{
    api,
    measurement::Scrape,
    objects::{self, Addresses},
    relay::Relay,
    settings::Settings,
};

/// Writes in flight at most; a slower API server lowers the achieved
/// rate, which is reported, rather than piling up requests.
const IN_FLIGHT: usize = 64;
/// Real-server reads in flight per polling round.
const READS: usize = 16;
const POLL: Duration = Duration::from_millis(5);
/// Real-server reads a second at most, over all services.
const READ_RATE: f64 = 100.0;
const MAX_POLL: Duration = Duration::from_secs(1);

pub struct Churn {
    /// Each timed change: when it was written, and how long until the
    /// kernel showed it.
    pub latencies: Vec<(Instant, Duration)>,
    pub started: Instant,
    /// How long the writes went on (BENCH_CHURN_SECONDS).
    pub duration: Duration,
    pub achieved_rate: f64,
    /// From the last write to the last timed change seen in the kernel.
    pub catch_up: Duration,
    /// Timed changes never seen.
    pub unobserved: usize,
    pub write_errors: usize,
    /// The proxy's `/metrics` and its CPU time at the start of the churn
    /// and at each whole minute of it: what each minute cost, beside
    /// its latencies.
    pub scrapes: Vec<Scrape>,
}

/// One change followed because it, or an earlier change to its service,
/// is timed.
#[derive(Clone, Copy)]
struct Change {
    address: Ipv4Addr,
    issued: Instant,
    timed: bool,
}

/// The changes of one service not yet seen in the kernel, oldest first.
struct Followed {
    changes: Vec<Change>,
    next_check: Instant,
}

impl Followed {
    fn oldest_timed(&self) -> Option<Instant> {
        self.changes.iter().find(|c| c.timed).map(|c| c.issued)
    }
}

#[derive(Default)]
struct Shared {
    followed: HashMap<usize, Followed>,
    /// Services with a write in flight: a second write to one could
    /// overtake the first.
    writing: HashSet<usize>,
}

type SharedState = Arc<Mutex<Shared>>;

/// Where the churn's writes are made: from the guest itself, or by the
/// host's relay on the guest's schedule (relay.rs; BENCH_RELAY=HOST:PORT).
pub enum Writer {
    Guest(Box<Api<EndpointSlice>>),
    Relay(Box<Relay>),
}

impl Writer {
    /// The relay when BENCH_RELAY names one, else `slices` from here.
    pub async fn from_env(slices: &Api<EndpointSlice>) -> anyhow::Result<Self> {
        match std::env::var("BENCH_RELAY") {
            Ok(address) if !address.is_empty() => {
                Ok(Self::Relay(Box::new(Relay::connect(&address).await?)))
            }
            _ => Ok(Self::Guest(Box::new(slices.clone()))),
        }
    }

    pub fn describe(&self) -> &'static str {
        match self {
            Self::Guest(_) => "from the guest",
            Self::Relay(_) => "by the host's relay, on the guest's schedule",
        }
    }
}

fn lock(shared: &SharedState) -> MutexGuard<'_, Shared> {
    // No task panics while holding it; recover regardless.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

pub async fn run(
    settings: &Settings,
    writer: Writer,
    handle: &Handle,
    addresses: &Addresses,
    services: usize,
    proxy: &mut Proxy,
) -> anyhow::Result<Churn> {
    let started = Instant::now();
    let mut scrapes = vec![Scrape::take(proxy)?];
    let shared: SharedState = Arc::default();
    let errors = Arc::new(AtomicUsize::new(0));
    // The writer is a task of its own so that a slow polling round never
    // delays a write.
    let mut writer = Some(tokio::spawn(write(
        Plan {
            duration: settings.churn,
            rate: settings.churn_rate,
            sample: settings.churn_sample,
            services,
        },
        writer,
        shared.clone(),
        errors.clone(),
    )));
    let mut latencies = Vec::new();
    let mut written: Option<(usize, Instant)> = None;
    let mut last_seen = Instant::now();
    // A token bucket: a round reads as many services as it has tokens.
    let mut tokens = READS as f64;
    let mut refilled = Instant::now();
    let mut reads = 0usize;
    loop {
        if let Some(w) = writer.take_if(|w| w.is_finished()) {
            written = Some((w.await??, Instant::now()));
        }
        let now = Instant::now();
        tokens = (tokens
            + now.duration_since(refilled).as_secs_f64() * READ_RATE)
            .min(READS as f64);
        refilled = now;
        let due: Vec<(usize, Vec<Change>)> = {
            let mut shared = lock(&shared);
            // Untimed changes alone are not worth a read.
            shared.followed.retain(|_, f| f.oldest_timed().is_some());
            if written.is_some() && shared.followed.is_empty() {
                break;
            }
            let mut due: Vec<(Instant, usize)> = shared
                .followed
                .iter()
                .filter(|(_, f)| f.next_check <= now)
                .map(|(k, f)| (f.next_check, *k))
                .collect();
            due.sort_unstable();
            due.truncate(tokens as usize);
            due.into_iter()
                .map(|(_, k)| (k, shared.followed[&k].changes.clone()))
                .collect()
        };
        tokens -= due.len() as f64;
        reads += due.len();
        let checks = futures::stream::iter(due)
            .map(|(k, changes)| async move {
                let dests =
                    real_servers(handle, addresses.vips[k], objects::PORT)
                        .await;
                (k, changes, dests)
            })
            .buffer_unordered(READS)
            .collect::<Vec<_>>()
            .await;
        let seen_at = Instant::now();
        for (k, changes, dests) in checks {
            let serving: Vec<IpAddr> = dests?
                .iter()
                .filter(|d| d.weight > 0)
                .map(|d| d.address)
                .collect();
            // The latest change the kernel shows; all before it are in.
            let shown = changes
                .iter()
                .rposition(|c| serving.contains(&IpAddr::V4(c.address)));
            let mut shared = lock(&shared);
            let Some(f) = shared.followed.get_mut(&k) else {
                continue;
            };
            // By address, unique to a change: a failed write may have
            // restarted the list since the read began.
            let upto = shown.and_then(|i| {
                f.changes
                    .iter()
                    .position(|c| c.address == changes[i].address)
            });
            if let Some(j) = upto {
                for c in f.changes.drain(..=j) {
                    if c.timed {
                        latencies.push((c.issued, seen_at - c.issued));
                        last_seen = seen_at;
                    }
                }
            }
            let age = f.oldest_timed().map_or(Duration::ZERO, |t| t.elapsed());
            f.next_check = seen_at + (age / 10).clamp(POLL, MAX_POLL);
        }
        proxy.check_alive()?;
        let minute = Duration::from_secs(60);
        let next = minute * scrapes.len() as u32;
        if next <= settings.churn && started.elapsed() >= next {
            scrapes.push(Scrape::take(proxy)?);
        }
        if let Some((_, at)) = written {
            if at.elapsed() > settings.change_timeout {
                break;
            }
        }
        tokio::time::sleep(POLL).await;
    }
    let (issued, written_at) = written.unwrap_or((0, last_seen));
    eprintln!(
        "churn: the observer read {reads} services' real servers, {:.0} a second",
        reads as f64 / started.elapsed().as_secs_f64().max(1e-3)
    );
    let unobserved = lock(&shared)
        .followed
        .values()
        .map(|f| f.changes.iter().filter(|c| c.timed).count())
        .sum();
    Ok(Churn {
        latencies,
        started,
        duration: settings.churn,
        achieved_rate: issued as f64 / settings.churn.as_secs_f64().max(1e-3),
        catch_up: last_seen.saturating_duration_since(written_at),
        unobserved,
        write_errors: errors.load(Ordering::Relaxed),
        scrapes,
    })
}

impl Churn {
    /// The first and the last minute's latencies, sorted, for a churn of
    /// at least two minutes: whether anything accumulates over a long run.
    pub fn minutes(&self) -> Vec<(&'static str, Vec<Duration>)> {
        let mut minutes = self.each_minute();
        if minutes.len() < 2 {
            return Vec::new();
        }
        let last = minutes.pop().unwrap_or_default();
        let first = minutes.swap_remove(0);
        vec![("first", first), ("last", last)]
    }

    /// Every whole minute's latencies, in order: whether the tail trends
    /// up or one minute is unlucky (a p99 of 600 samples is the sixth
    /// worst) shows only in the series. A change belongs to the minute it
    /// was written in; the minutes are the churn's own, so the last one
    /// counts although its last write comes a tick before its end.
    pub fn each_minute(&self) -> Vec<Vec<Duration>> {
        let minute = Duration::from_secs(60);
        let whole = (self.duration.as_secs() / minute.as_secs()) as usize;
        let mut out: Vec<Vec<Duration>> = vec![Vec::new(); whole];
        for (at, d) in &self.latencies {
            let i = (at.duration_since(self.started).as_secs() / 60) as usize;
            if let Some(m) = out.get_mut(i) {
                m.push(*d);
            }
        }
        for m in &mut out {
            m.sort();
        }
        out
    }
}

struct Plan {
    duration: Duration,
    rate: u64,
    sample: u64,
    services: usize,
}

/// Writes `plan` the writer's way; the number of writes issued.
async fn write(
    plan: Plan,
    writer: Writer,
    shared: SharedState,
    errors: Arc<AtomicUsize>,
) -> anyhow::Result<usize> {
    match writer {
        Writer::Guest(slices) => {
            write_from_guest(plan, *slices, shared, errors).await
        }
        Writer::Relay(relay) => {
            write_by_relay(plan, *relay, shared, errors).await
        }
    }
}

/// Follows `change` of service `k` when it is timed or its service
/// already has a timed change pending.
fn follow(shared: &mut Shared, k: usize, change: Change) {
    match shared.followed.get_mut(&k) {
        Some(f) => f.changes.push(change),
        None if change.timed => {
            shared.followed.insert(
                k,
                Followed {
                    changes: vec![change],
                    next_check: change.issued,
                },
            );
        }
        None => {}
    }
}

/// Changes the next service, round robin, skipping those with a write in
/// flight, `rate` times a second for `duration`, each write made from
/// here.
async fn write_from_guest(
    plan: Plan,
    slices: Api<EndpointSlice>,
    shared: SharedState,
    errors: Arc<AtomicUsize>,
) -> anyhow::Result<usize> {
    let n = plan.services;
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tick =
        tokio::time::interval(Duration::from_secs_f64(1.0 / plan.rate as f64));
    // Late ticks are made up at once: the rate is the point.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let start = Instant::now();
    let (mut issued, mut next) = (0usize, 0);
    while start.elapsed() < plan.duration {
        tick.tick().await;
        let slot = slots.clone().acquire_owned().await?;
        let address = objects::churn_address(issued);
        let timed = (issued as u64).is_multiple_of(plan.sample);
        let k = {
            let mut shared = lock(&shared);
            let Some(k) = (0..n)
                .map(|i| (next + i) % n)
                .find(|k| !shared.writing.contains(k))
            else {
                continue;
            };
            next = k + 1;
            shared.writing.insert(k);
            // Before the request: the kernel may show it before the
            // answer comes.
            let change = Change {
                address,
                issued: Instant::now(),
                timed,
            };
            follow(&mut shared, k, change);
            k
        };
        issued += 1;
        let (slices, shared, errors) =
            (slices.clone(), shared.clone(), errors.clone());
        tokio::spawn(async move {
            // Stamped here and now, on the guest's clock.
            let trigger = k8s_openapi::jiff::Timestamp::now();
            let slice = objects::slice_replacing(k, address, trigger);
            let result = api::write_slice(&slices, k, &slice).await;
            let mut shared = lock(&shared);
            shared.writing.remove(&k);
            if let Err(e) = result {
                eprintln!("churn: {e:#}");
                // A failed write will never show, nor will the service's
                // earlier changes be told apart from it: stop following.
                shared.followed.remove(&k);
                errors.fetch_add(1, Ordering::Relaxed);
            }
            drop(slot);
        });
    }
    // The last writes' answers.
    let _all = slots.acquire_many(IN_FLIGHT as u32).await?;
    Ok(issued)
}

/// The same changes made by the host's relay: one line a second tells it
/// which (change `i` to service `i mod N`), and each change is followed
/// from its place in the guest's schedule, which the relay's write of it
/// cannot precede (relay.rs).
async fn write_by_relay(
    plan: Plan,
    mut relay: Relay,
    shared: SharedState,
    errors: Arc<AtomicUsize>,
) -> anyhow::Result<usize> {
    let n = plan.services;
    // As from the guest: a failed write stops its service being followed.
    let failed = |(i, reason): (usize, String)| {
        eprintln!("churn: change {i} (relayed): {reason}");
        lock(&shared).followed.remove(&objects::churn_service(i, n));
        errors.fetch_add(1, Ordering::Relaxed);
    };
    let per_second = plan.rate as usize;
    let total = plan.duration.as_secs() as usize * per_second;
    let start = Instant::now();
    let mut first = 0;
    while first < total {
        let count = per_second.min(total - first);
        let second = Duration::from_secs((first / per_second) as u64);
        tokio::time::sleep_until((start + second).into()).await;
        let base = Instant::now();
        relay.schedule(
            first,
            count,
            n,
            plan.rate,
            k8s_openapi::jiff::Timestamp::now(),
        )?;
        for j in 0..count {
            let issued =
                base + Duration::from_secs_f64(j as f64 / plan.rate as f64);
            tokio::time::sleep_until(issued.into()).await;
            let i = first + j;
            let change = Change {
                address: objects::churn_address(i),
                issued,
                timed: (i as u64).is_multiple_of(plan.sample),
            };
            follow(&mut lock(&shared), objects::churn_service(i, n), change);
            while let Some(failure) = relay.failure() {
                failed(failure);
            }
        }
        first += count;
    }
    let (done, last_failures) = relay.finish().await?;
    last_failures.into_iter().for_each(failed);
    eprintln!(
        "churn: the relay wrote {} changes, none of them more than {} ms \
         behind the guest's schedule",
        done.written,
        done.late.as_millis()
    );
    Ok(done.written)
}

/// Service `vip:port`'s real servers, through IPVS's socket option where
/// it answers (an IPv4 service): one system call and a twentieth of a
/// dump's time in the guest, so that the observer takes less of the CPUs
/// the proxy it watches needs. The dump where the option cannot be had.
pub async fn real_servers(
    handle: &Handle,
    vip: IpAddr,
    port: u16,
) -> anyhow::Result<Vec<Destination>> {
    static SOCKET: OnceLock<Option<SockoptSocket>> = OnceLock::new();
    let socket = SOCKET.get_or_init(|| SockoptSocket::open().ok());
    match socket {
        Some(socket) if vip.is_ipv4() => {
            Ok(socket.dests(&ServiceKey::tcp(vip, port))?)
        }
        _ => ipvs::real_servers(handle, vip, port).await,
    }
}
