//! What a run measures with, shared by its steps and depending on none
//! of them: the figures it prints as `RESULT` lines, the proxy's state
//! at one moment, and the statistics of timed samples.

use std::time::Duration;

use anyhow::bail;
use bench_support::{
    proxy::{metrics_text, CpuTimes, Proxy},
    result_line::ResultLine,
};

/// One proxy's figures at one size, each printed as it is measured.
pub struct Results<'a> {
    proxy: &'a str,
    services: usize,
}

impl<'a> Results<'a> {
    pub fn new(proxy: &'a str, services: usize) -> anyhow::Result<Self> {
        if !matches!(proxy, "upstream" | "ours") {
            bail!("the proxy is `upstream` or `ours`, not {proxy:?}");
        }
        Ok(Self { proxy, services })
    }

    pub fn proxy(&self) -> &str {
        self.proxy
    }

    pub fn services(&self) -> usize {
        self.services
    }

    /// What the proxy has cost so far: CPU and peak RSS.
    pub fn costs(&self, proxy: &Proxy) -> anyhow::Result<()> {
        self.print("total_cpu_s", proxy.cpu()?.as_secs_f64());
        self.print("peak_rss_mib", proxy.status_kib("VmHWM")? as f64 / 1024.0);
        Ok(())
    }

    pub fn print(&self, metric: &str, value: f64) {
        ResultLine::new(self.proxy, self.services, metric, value, 3).print();
    }
}

/// The proxy's `/metrics` and its CPU time at one moment.
pub struct Scrape {
    pub metrics: String,
    pub cpu: CpuTimes,
}

impl Scrape {
    pub fn take(proxy: &Proxy) -> anyhow::Result<Self> {
        Ok(Self {
            metrics: metrics_text().unwrap_or_default(),
            cpu: proxy.cpu_times()?,
        })
    }
}

pub fn median_ms(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples
        .get(samples.len() / 2)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

/// The nearest-rank percentile of sorted samples.
pub fn percentile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}
