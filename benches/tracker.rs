//! One endpoint change, at 1,000 and at 10,000 services of 10 endpoints:
//! the time from the slice update to an up-to-date desired state
//! (tracker update, checkout, recomputation of the changed port). The
//! design goal is that both sizes cost the same; the ratio is printed.

use std::{hint::black_box, time::Duration};

use bench_support::fixtures::{loaded_state, median, Flip};
use criterion::{criterion_group, Criterion};
use kube_ipvs_proxy::sync::SyncState;
struct Loaded {
    state: SyncState,
    flip: Flip,
}

fn load(services: usize) -> Loaded {
    let mut state = loaded_state(services);
    state.sync();
    Loaded {
        state,
        flip: Flip::new(services),
    }
}

impl Loaded {
    /// One readiness flip of one endpoint, synced.
    fn one_change(&mut self) -> usize {
        self.state.apply_objects(&self.flip.next_change());
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

fn median_change(services: usize, samples: usize) -> Duration {
    let mut loaded = load(services);
    median(samples, || {
        black_box(loaded.one_change());
    })
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
