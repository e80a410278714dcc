//! The run's sizes and pauses, from its environment (BENCH_SERVICES,
//! BENCH_REPS, BENCH_SETTLE_MS).

use std::time::Duration;

use anyhow::{bail, Context};

use crate::state;

pub struct Settings {
    pub services: usize,
    pub reps: usize,
    pub settle: Duration,
}

fn setting(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v:?}")),
        Err(_) => Ok(default),
    }
}

impl Settings {
    pub fn from_env() -> anyhow::Result<Self> {
        let services = setting("BENCH_SERVICES", 10_000)?;
        if !(2..=state::MAX_SERVICES).contains(&services) {
            bail!("BENCH_SERVICES must be 2..={}", state::MAX_SERVICES);
        }
        Ok(Self {
            services,
            reps: setting("BENCH_REPS", 6)?.max(1),
            settle: Duration::from_millis(
                setting("BENCH_SETTLE_MS", 5000)? as u64
            ),
        })
    }
}
