//! The proxier's planning cost: the operations for a cold sync of 10,000
//! services x 10 endpoints, and for one endpoint change at 1,000 and at
//! 10,000 services (spine checkout + desired-state update + plan). The
//! design goal is that one change costs the same at both sizes; the
//! ratio is printed. Kernel time is not included: that is `make bench`.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use bench_support::fixtures::{loaded_state, median, Flip};
use criterion::{criterion_group, Criterion};
use kube_ipvs_proxy::{proxier::plan::Ledger, sync::SyncState};
struct Loaded {
    state: SyncState,
    ledger: Ledger,
    flip: Flip,
}

/// Loads `services` services and plans the cold sync; returns the
/// loaded state, the cold plan's operation count and its planning time.
fn load(services: usize) -> (Loaded, usize, Duration) {
    let mut state = loaded_state(services);
    let outcome = state.sync();
    let mut ledger = Ledger::new();
    let start = Instant::now();
    let ops = ledger.plan(&outcome.deltas).len();
    let cold = start.elapsed();
    let loaded = Loaded {
        state,
        ledger,
        flip: Flip::new(services),
    };
    (loaded, ops, cold)
}

impl Loaded {
    /// One readiness flip of one endpoint, synced and planned.
    fn one_change(&mut self) -> usize {
        self.state.apply_objects(&self.flip.next_change());
        let outcome = self.state.sync();
        let ops = self.ledger.plan(&outcome.deltas);
        assert_eq!(ops.ipvs.len(), 1, "one real server added or removed");
        ops.len()
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan_one_endpoint_change");
    for services in [1_000, 10_000] {
        let (mut loaded, _, _) = load(services);
        group.bench_function(format!("{services}_services"), |b| {
            b.iter(|| black_box(loaded.one_change()))
        });
    }
    group.finish();
}

fn median_change(loaded: &mut Loaded, samples: usize) -> Duration {
    median(samples, || {
        black_box(loaded.one_change());
    })
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();

    let (mut small, _, _) = load(1_000);
    let (mut large, cold_ops, cold) = load(10_000);
    let small = median_change(&mut small, 2_000);
    let large = median_change(&mut large, 2_000);
    println!();
    println!("cold plan, 10,000 services x 10 endpoints: {cold_ops} operations in {cold:?}");
    println!("one endpoint change, checkout + desired state + plan (median):");
    println!("  1,000 services x 10 endpoints: {small:?}");
    println!("  10,000 services x 10 endpoints: {large:?}");
    println!(
        "  ratio 10k/1k: {:.2} (1.0 means the cost follows the change, not the cluster)",
        large.as_secs_f64() / small.as_secs_f64()
    );
}
