//! One endpoint change, at 1,000 and at 10,000 services of 10 endpoints:
//! the time from the slice update to an up-to-date desired state
//! (tracker update, checkout, recomputation of the changed port). The
//! design goal is that both sizes cost the same; the ratio is printed.

use std::{
    hint::black_box,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use criterion::{criterion_group, Criterion};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_ipvs_proxy::{
    source::store::ObjectChange,
    sync::{NodeSettings, SyncState},
};

mod fixtures;

use fixtures::{service, slice, ENDPOINTS_PER_SERVICE};
struct Loaded {
    state: SyncState,
    /// The slice of the service that changes, in its two versions.
    versions: [Arc<EndpointSlice>; 2],
    flip: usize,
}

fn load(services: usize) -> Loaded {
    let mut state = SyncState::new(
        "node-0",
        NodeSettings::default(),
        None,
        SystemTime::now(),
    );
    for i in 0..services {
        state.apply(&ObjectChange::Service {
            previous: None,
            current: Some(Arc::new(service(i))),
        });
        state.apply(&ObjectChange::EndpointSlice {
            previous: None,
            current: Some(Arc::new(slice(i, ENDPOINTS_PER_SERVICE))),
        });
    }
    state.sync();
    let target = services / 2;
    Loaded {
        state,
        versions: [
            Arc::new(slice(target, ENDPOINTS_PER_SERVICE)),
            Arc::new(slice(target, ENDPOINTS_PER_SERVICE - 1)),
        ],
        flip: 0,
    }
}

impl Loaded {
    /// One readiness flip of one endpoint, synced.
    fn one_change(&mut self) -> usize {
        let previous = self.versions[self.flip].clone();
        self.flip ^= 1;
        let current = self.versions[self.flip].clone();
        self.state.apply(&ObjectChange::EndpointSlice {
            previous: Some(previous),
            current: Some(current),
        });
        let outcome = self.state.sync();
        assert_eq!(outcome.deltas.len(), 1, "exactly one port changes");
        outcome.deltas.len()
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("one_endpoint_change");
    for services in [1_000, 10_000] {
        let mut loaded = load(services);
        group.bench_function(format!("{services}_services"), |b| {
            b.iter(|| black_box(loaded.one_change()))
        });
    }
    group.finish();
}

/// The median of many single changes, measured outside criterion so the
/// two sizes can be compared directly in one run.
fn median_change(services: usize, samples: usize) -> Duration {
    let mut loaded = load(services);
    for _ in 0..100 {
        loaded.one_change();
    }
    let mut times: Vec<Duration> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            black_box(loaded.one_change());
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();

    let small = median_change(1_000, 2_000);
    let large = median_change(10_000, 2_000);
    println!();
    println!("one endpoint change, checkout + desired-state update (median):");
    println!("  1,000 services x 10 endpoints: {small:?}");
    println!("  10,000 services x 10 endpoints: {large:?}");
    println!(
        "  ratio 10k/1k: {:.2} (1.0 means the cost follows the change, not the cluster)",
        large.as_secs_f64() / small.as_secs_f64()
    );
}
