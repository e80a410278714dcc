//! The handles of the series every change and every sync touch, kept per
//! thread. Asking the recorder for a series on each emit (building its
//! key, hashing it, finding it under the registry's lock) was most of
//! what emitting cost, and under a churn each change emits some fifteen.
//!
//! Only the process-wide recorder's handles are kept: it lives as long as
//! the process, so a kept handle never outlives the series it writes to.
//! Any other recorder (a test's, thread-local) is asked every time.

use std::{
    cell::RefCell,
    collections::HashMap,
    hash::{BuildHasherDefault, Hash, Hasher},
    sync::OnceLock,
    thread::LocalKey,
};

use metrics::{
    Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder,
};

/// The process-wide recorder, by address, once it is installed.
static GLOBAL: OnceLock<usize> = OnceLock::new();

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Notes the recorder just installed process-wide as the one whose
/// handles are kept. Called on the installing thread, where no local
/// recorder is set.
pub(super) fn global_recorder_installed() {
    let _ = GLOBAL.set(metrics::with_recorder(address));
}

fn address(recorder: &dyn Recorder) -> usize {
    (recorder as *const dyn Recorder).cast::<()>() as usize
}

/// Labels as the call sites have them: static names and values.
pub type Labels<'a> = &'a [(&'static str, &'static str)];

/// A series by the addresses of its static strings: equal strings at two
/// addresses make two entries for one series, which is harmless, and the
/// lookup hashes a few words instead of the strings.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Series {
    name: (usize, usize),
    labels: [((usize, usize), (usize, usize)); MAX_LABELS],
    count: usize,
}

const MAX_LABELS: usize = 3;

fn by_address(s: &'static str) -> (usize, usize) {
    (s.as_ptr() as usize, s.len())
}

impl Series {
    fn new(name: &'static str, labels: Labels<'_>) -> Option<Self> {
        if labels.len() > MAX_LABELS {
            return None;
        }
        let mut series = Self {
            name: by_address(name),
            labels: [((0, 0), (0, 0)); MAX_LABELS],
            count: labels.len(),
        };
        for (slot, &(k, v)) in series.labels.iter_mut().zip(labels) {
            *slot = (by_address(k), by_address(v));
        }
        Some(series)
    }
}

/// A hasher for [`Series`], whose words are addresses and lengths.
#[derive(Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // `Series` hashes words only; bytes are folded one at a time.
        for &byte in bytes {
            self.write_usize(usize::from(byte));
        }
    }

    fn write_usize(&mut self, word: usize) {
        self.0 = (self.0.rotate_left(5) ^ word as u64)
            .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type Kept<T> = RefCell<HashMap<Series, T, BuildHasherDefault<WordHasher>>>;

thread_local! {
    static COUNTERS: Kept<Counter> = RefCell::default();
    static GAUGES: Kept<Gauge> = RefCell::default();
    static HISTOGRAMS: Kept<Histogram> = RefCell::default();
}

pub fn counter(name: &'static str, labels: Labels<'_>) -> Counter {
    handle(&COUNTERS, GLOBAL.get().copied(), name, labels, |r, k, m| {
        r.register_counter(k, m)
    })
}

pub fn gauge(name: &'static str, labels: Labels<'_>) -> Gauge {
    handle(&GAUGES, GLOBAL.get().copied(), name, labels, |r, k, m| {
        r.register_gauge(k, m)
    })
}

pub fn histogram(name: &'static str, labels: Labels<'_>) -> Histogram {
    handle(
        &HISTOGRAMS,
        GLOBAL.get().copied(),
        name,
        labels,
        |r, k, m| r.register_histogram(k, m),
    )
}

/// The handle of a series from the current recorder: kept if that is the
/// recorder at `kept_for`, asked for otherwise.
fn handle<T: Clone + 'static>(
    kept: &'static LocalKey<Kept<T>>,
    kept_for: Option<usize>,
    name: &'static str,
    labels: Labels<'_>,
    register: fn(&dyn Recorder, &Key, &Metadata<'static>) -> T,
) -> T {
    metrics::with_recorder(|recorder| {
        let key = || {
            let labels: Vec<Label> =
                labels.iter().map(|&(k, v)| Label::new(k, v)).collect();
            Key::from_parts(name, labels)
        };
        let series = Series::new(name, labels)
            .filter(|_| kept_for == Some(address(recorder)));
        let Some(series) = series else {
            return register(recorder, &key(), &METADATA);
        };
        kept.with(|kept| {
            kept.borrow_mut()
                .entry(series)
                .or_insert_with(|| register(recorder, &key(), &METADATA))
                .clone()
        })
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    };

    use metrics::{CounterFn, KeyName, SharedString, Unit};

    use super::*;

    /// Counts what it is asked to register; every counter adds to one sum.
    #[derive(Default)]
    struct Counting {
        registered: AtomicUsize,
        sum: Arc<Sum>,
    }

    #[derive(Default)]
    struct Sum(AtomicU64);

    impl CounterFn for Sum {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::Relaxed);
        }
        fn absolute(&self, value: u64) {
            self.0.store(value, Ordering::Relaxed);
        }
    }

    impl Recorder for Counting {
        fn describe_counter(
            &self,
            _: KeyName,
            _: Option<Unit>,
            _: SharedString,
        ) {
        }
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {
        }
        fn describe_histogram(
            &self,
            _: KeyName,
            _: Option<Unit>,
            _: SharedString,
        ) {
        }
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            self.registered.fetch_add(1, Ordering::Relaxed);
            Counter::from_arc(Arc::clone(&self.sum))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    /// Five increments of one series through `handle`, kept for the
    /// recorder at the address `kept_for` gives.
    fn count(
        kept_for: impl Fn(&Counting) -> Option<usize>,
        op: &'static str,
        registrations: usize,
    ) {
        let recorder = Counting::default();
        let kept_for = kept_for(&recorder);
        metrics::with_local_recorder(&recorder, || {
            for _ in 0..5 {
                handle(
                    &COUNTERS,
                    kept_for,
                    "ops_total",
                    &[("op", op)],
                    |r, k, m| r.register_counter(k, m),
                )
                .increment(2);
            }
        });
        let registered = recorder.registered.load(Ordering::Relaxed);
        assert_eq!(registered, registrations, "kept for {kept_for:?}");
        assert_eq!(recorder.sum.0.load(Ordering::Relaxed), 10, "the sum");
    }

    #[test]
    fn the_kept_recorders_handles_are_asked_for_once() {
        count(|r| Some(address(r)), "add", 1);
    }

    #[test]
    fn another_recorder_is_asked_every_time() {
        count(|_| None, "add", 5);
        // Kept for a recorder that is not the current one: asked as well.
        count(|_| Some(1), "delete", 5);
    }
}
