//! Where a churn's time went, from ours' stage histograms (upstream has
//! none), read off `/metrics` before and after the churn.

use std::time::Duration;

use bench_support::proxy::{metrics_text, CpuTimes};

use crate::measurement::{Results, Scrape};

/// Ours: the stages of a change on its way to the kernel, and the repair.
const STAGES: &str = "kube_ipvs_proxy_change_stage_duration_seconds";
const REPAIR: &str = "kube_ipvs_proxy_repair_duration_seconds";

/// The buckets of histogram `name`'s series `label` observed between the
/// scrapes `before` and `after`.
fn delta(
    before: &str,
    after: &str,
    name: &str,
    label: &str,
) -> Vec<(f64, f64)> {
    let old = histogram(before, name, label);
    histogram(after, name, label)
        .into_iter()
        .map(|(le, count)| {
            let was = old.iter().find(|(l, _)| *l == le).map_or(0.0, |c| c.1);
            (le, count - was)
        })
        .collect()
}

/// Where the single changes timed since `before` went: the API server's
/// part (`NAME_api_ms`, the slices' trigger time to our watch event) and
/// ours (`NAME_ours_ms`, received to applied), medians. The timed figure
/// also holds the writes' own round trips, which neither stage sees.
pub fn single(results: &Results, before: &str, name: &str) {
    let Some(after) = metrics_text() else {
        return;
    };
    for (stage, tag) in [("api", "api"), ("total", "ours")] {
        let buckets =
            delta(before, &after, STAGES, &format!("stage=\"{stage}\""));
        if let Some(v) = quantile(&buckets, 0.5) {
            results.print(&format!("{name}_{tag}_ms"), v * 1e3);
        }
    }
}

/// Each stage's p50 and p99 over the changes of the churn alone,
/// and the repair rounds' reads and the longest hold of a step.
pub fn breakdown(results: &Results, before: &str) {
    let Some(after) = metrics_text() else {
        return;
    };
    let delta = |name: &str, label: &str| delta(before, &after, name, label);
    for stage in ["api", "queue", "pending", "sync", "total"] {
        let buckets = delta(STAGES, &format!("stage=\"{stage}\""));
        for (q, tag) in [(0.5, "p50"), (0.99, "p99")] {
            if let Some(v) = quantile(&buckets, q) {
                results.print(&format!("stage_{stage}_{tag}_ms"), v * 1e3);
            }
        }
    }
    for (part, q, tag) in [("read", 0.5, "p50"), ("step", 1.0, "max")] {
        let buckets = delta(REPAIR, &format!("part=\"{part}\""));
        if let Some(v) = quantile(&buckets, q) {
            results.print(&format!("repair_{part}_{tag}_ms"), v * 1e3);
        }
    }
}

/// Each minute of a churn between its scrapes: the `total` and `queue`
/// stages' p99 and the `sync` stage's, the repair reads that ended in
/// it and their longest, and the proxy's CPU in user space and in the
/// kernel: which part of the proxy a bad minute's tail came from.
pub fn each_minute(scrapes: &[Scrape]) -> Vec<String> {
    scrapes
        .windows(2)
        .map(|pair| {
            let (before, after) = (&pair[0], &pair[1]);
            let delta = |name: &str, label: &str| {
                delta(&before.metrics, &after.metrics, name, label)
            };
            let p99 = |stage: &str| {
                quantile(&delta(STAGES, &format!("stage=\"{stage}\"")), 0.99)
                    .map_or("-".to_owned(), |v| format!("{:.0}", v * 1e3))
            };
            let reads = delta(REPAIR, "part=\"read\"");
            let count = reads.last().map_or(0.0, |b| b.1);
            let longest = quantile(&reads, 1.0)
                .map_or("-".to_owned(), |v| format!("{:.0}", v * 1e3));
            let spent = |f: fn(&CpuTimes) -> Duration| {
                f(&after.cpu).saturating_sub(f(&before.cpu)).as_secs_f64()
            };
            format!(
                "{}/{}/{} reads {count:.0} ({longest}) cpu {:.1}+{:.1}",
                p99("total"),
                p99("queue"),
                p99("sync"),
                spent(|t| t.user),
                spent(|t| t.system),
            )
        })
        .collect()
}

/// A histogram's cumulative buckets (upper bound, count) for the series
/// whose labels include `label` (`stage="sync"`), in order.
fn histogram(body: &str, name: &str, label: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{name}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = body
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter(|rest| rest.contains(label))
        .filter_map(|rest| {
            let le = rest.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let count = rest.split_whitespace().last()?.parse().ok()?;
            Some((le, count))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
}

/// The `q` quantile of cumulative buckets, interpolated linearly inside
/// its bucket as Prometheus' histogram_quantile does; `None` when empty.
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut below = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(below.0);
            }
            let width = count - below.1;
            let within = if width > 0.0 {
                (rank - below.1) / width
            } else {
                0.0
            };
            return Some(below.0 + (le - below.0) * within);
        }
        below = (le, count);
    }
    Some(below.0)
}
