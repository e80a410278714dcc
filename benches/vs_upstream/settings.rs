//! How long and how hard a `measure` run goes, from its environment
//! (BENCH_REPS, BENCH_CHURN_*, BENCH_*_TIMEOUT, BENCH_TRASH_WARMUP).

use std::time::Duration;

use anyhow::Context;

fn setting(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v:?}")),
        Err(_) => Ok(default),
    }
}

pub struct Settings {
    pub reps: usize,
    pub churn_rate: u64,
    pub churn_sample: u64,
    pub churn: Duration,
    /// How long the proxy may take to show a single change, or to catch
    /// up after the churn.
    pub change_timeout: Duration,
    pub cold_timeout: Duration,
    /// How long real servers are deleted at the churn's rate just
    /// before the churn (trash.rs); zero leaves the kernel's trash as the
    /// run left it.
    pub trash_warmup: Duration,
}

impl Settings {
    pub fn from_env() -> anyhow::Result<Self> {
        Ok(Self {
            reps: setting("BENCH_REPS", 3)?.max(1) as usize,
            churn_rate: setting("BENCH_CHURN_RATE", 100)?.max(1),
            churn_sample: setting("BENCH_CHURN_SAMPLE", 10)?.max(1),
            churn: Duration::from_secs(setting("BENCH_CHURN_SECONDS", 60)?),
            change_timeout: Duration::from_secs(setting(
                "BENCH_CHANGE_TIMEOUT",
                900,
            )?),
            cold_timeout: Duration::from_secs(setting(
                "BENCH_COLD_TIMEOUT",
                3600,
            )?),
            trash_warmup: Duration::from_secs(setting(
                "BENCH_TRASH_WARMUP",
                0,
            )?),
        })
    }
}
