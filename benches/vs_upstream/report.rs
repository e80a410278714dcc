//! The `RESULT` lines of all runs into one table: printed as Markdown,
//! written as CSV, and charted (upstream ÷ ours per measure and size) as
//! a PNG by gnuplot. Each proxy and size is one run, which the script
//! stamps with a `RUN proxy services STAMP` line (commit, date, kernel,
//! host); the table names each figure's run, because results kept from
//! earlier runs sit beside new ones.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    path::Path,
    process::Command,
};

use anyhow::{bail, Context};
use bench_support::result_line::ResultLine;

/// The measures in table order: name, label, and whether a ratio means
/// anything (a smaller value is better).
const MEASURES: &[(&str, &str, bool)] = &[
    ("cold_sync_s", "cold sync (s)", true),
    ("cold_cpu_s", "cold sync CPU (s)", true),
    (
        "cold_sync_floor_s",
        "cold sync: its state loaded alone, the kernel's floor (s)",
        false,
    ),
    ("cold_sync_over_floor", "cold sync over its floor", false),
    ("endpoint_change_ms", "one endpoint change (ms)", true),
    ("new_service_ms", "one new service (ms)", true),
    (
        "endpoint_change_write_ms",
        "one endpoint change: the API's answer to the write (ms)",
        false,
    ),
    (
        "endpoint_change_after_write_ms",
        "one endpoint change: after the API's answer (ms)",
        true,
    ),
    (
        "new_service_write_ms",
        "one new service: the API's answers to the two writes (ms)",
        false,
    ),
    (
        "new_service_after_write_ms",
        "one new service: after the API's answers (ms)",
        true,
    ),
    (
        "api_alone_service_ms",
        "the API server alone, from the host: a Service create (ms)",
        false,
    ),
    (
        "api_alone_slice_ms",
        "the API server alone, from the host: its slice's create (ms)",
        false,
    ),
    (
        "api_alone_configmap_ms",
        "the API server alone, from the host: a ConfigMap create (ms)",
        false,
    ),
    (
        "endpoint_change_api_ms",
        "one endpoint change: API to us (ms)",
        false,
    ),
    (
        "endpoint_change_ours_ms",
        "one endpoint change: received to kernel (ms)",
        false,
    ),
    (
        "new_service_api_ms",
        "one new service: API to us (ms)",
        false,
    ),
    (
        "new_service_ours_ms",
        "one new service: received to kernel (ms)",
        false,
    ),
    ("churn_p50_ms", "churn latency p50 (ms)", true),
    ("churn_p99_ms", "churn latency p99 (ms)", true),
    ("churn_max_ms", "churn latency max (ms)", true),
    (
        "churn_catch_up_s",
        "churn catch-up after the minute (s)",
        true,
    ),
    ("churn_cpu_s", "churn CPU (s)", true),
    ("churn_user_cpu_s", "churn CPU: user (s)", true),
    ("churn_system_cpu_s", "churn CPU: system (s)", true),
    ("total_cpu_s", "CPU, whole run (s)", true),
    ("peak_rss_mib", "peak RSS (MiB)", true),
    (
        "cold_sync_over_s",
        "cold sync not finished after (s)",
        false,
    ),
    (
        "churn_p99_first_minute_ms",
        "churn p99, first minute (ms)",
        true,
    ),
    (
        "churn_p99_last_minute_ms",
        "churn p99, last minute (ms)",
        true,
    ),
    (
        "stage_api_p50_ms",
        "churn stage: API to us, p50 (ms)",
        false,
    ),
    (
        "stage_api_p99_ms",
        "churn stage: API to us, p99 (ms)",
        false,
    ),
    (
        "stage_queue_p50_ms",
        "churn stage: to the trackers, p50 (ms)",
        false,
    ),
    (
        "stage_queue_p99_ms",
        "churn stage: to the trackers, p99 (ms)",
        false,
    ),
    (
        "stage_pending_p50_ms",
        "churn stage: to its sync, p50 (ms)",
        false,
    ),
    (
        "stage_pending_p99_ms",
        "churn stage: to its sync, p99 (ms)",
        false,
    ),
    (
        "stage_sync_p50_ms",
        "churn stage: the sync, p50 (ms)",
        false,
    ),
    (
        "stage_sync_p99_ms",
        "churn stage: the sync, p99 (ms)",
        false,
    ),
    (
        "stage_total_p50_ms",
        "churn stage: received to kernel, p50 (ms)",
        false,
    ),
    (
        "stage_total_p99_ms",
        "churn stage: received to kernel, p99 (ms)",
        false,
    ),
    (
        "repair_read_p50_ms",
        "repair round: kernel read, p50 (ms)",
        false,
    ),
    (
        "repair_step_max_ms",
        "repair round: longest step (ms)",
        false,
    ),
    (
        "churn_guest_busy_pct",
        "churn: the guest's CPUs busy (%)",
        false,
    ),
    (
        "churn_bench_cpu_s",
        "churn: the bench's own CPU in the guest (s)",
        false,
    ),
    (
        "host_steal_pct",
        "the host's CPUs stolen by its hypervisor over the run (%)",
        false,
    ),
    ("churn_rate_per_s", "churn changes written (/s)", false),
    ("churn_timed", "churn changes timed", false),
    ("churn_unobserved", "churn timed changes never seen", false),
    ("churn_write_errors", "churn write errors", false),
];

#[derive(Default, Clone, Copy)]
struct Pair {
    upstream: Option<f64>,
    ours: Option<f64>,
}

impl Pair {
    fn ratio(&self) -> Option<f64> {
        match (self.upstream, self.ours) {
            (Some(u), Some(o)) if o > 0.0 && u.is_finite() => Some(u / o),
            _ => None,
        }
    }
}

/// (services, measure) -> both proxies' values.
type Table = BTreeMap<(usize, String), Pair>;

/// (services, whether upstream's) -> the stamp of the run that measured
/// that proxy at that size.
type Runs = BTreeMap<(usize, bool), String>;

/// A size and proxy with results but no stamp: kept from a run made
/// before runs were stamped, so nothing says which commit or day.
const UNSTAMPED: &str = "not recorded";

/// Every well-formed RESULT line into the table, every RUN line's stamp
/// into the runs. A malformed one (a run killed mid-line, a measure that
/// printed nothing) is named and skipped: the other measures of that run
/// and the other runs still make the table.
fn parse(text: &str) -> anyhow::Result<(Table, Runs)> {
    let mut table = Table::new();
    let mut runs = Runs::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("RUN ") {
            match run(rest) {
                Ok((upstream, services, stamp)) => {
                    runs.insert((services, upstream), stamp.to_string());
                }
                Err(e) => {
                    eprintln!(
                        "report: line {}: {e:#}, skipped: {line:?}",
                        i + 1
                    )
                }
            }
            continue;
        }
        if !line.starts_with(ResultLine::PREFIX) {
            continue;
        }
        let (upstream, services, result) = match result(line) {
            Ok(fields) => fields,
            Err(e) => {
                eprintln!("report: line {}: {e:#}, skipped: {line:?}", i + 1);
                continue;
            }
        };
        let pair = table.entry((services, result.measure)).or_default();
        let slot = if upstream {
            &mut pair.upstream
        } else {
            &mut pair.ours
        };
        *slot = Some(result.value);
    }
    if table.is_empty() {
        bail!("no RESULT lines");
    }
    Ok((table, runs))
}

fn proxy_and_size(
    proxy: &str,
    services: &str,
) -> anyhow::Result<(bool, usize)> {
    let upstream = match proxy {
        "upstream" => true,
        "ours" => false,
        other => bail!("unknown proxy {other:?}"),
    };
    Ok((upstream, services.parse().context("services")?))
}

/// One RUN line's fields: whether it is upstream's, the size, the stamp.
fn run(rest: &str) -> anyhow::Result<(bool, usize, &str)> {
    let mut fields = rest.splitn(3, ' ');
    let (Some(proxy), Some(services), Some(stamp)) =
        (fields.next(), fields.next(), fields.next())
    else {
        bail!("not `proxy services stamp`");
    };
    let (upstream, services) = proxy_and_size(proxy, services)?;
    Ok((upstream, services, stamp.trim()))
}

/// One RESULT line, with whether it is upstream's and its size: its
/// subject and case.
fn result(line: &str) -> anyhow::Result<(bool, usize, ResultLine)> {
    let result: ResultLine = line.parse()?;
    let (upstream, services) = proxy_and_size(&result.subject, &result.case)?;
    Ok((upstream, services, result))
}

fn number(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.is_nan() => "-".into(),
        Some(v) if v.abs() >= 100.0 || v.fract() == 0.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

fn sizes(table: &Table) -> Vec<usize> {
    let mut sizes: Vec<usize> = table.keys().map(|(n, _)| *n).collect();
    sizes.dedup();
    sizes
}

/// The stamp of the run behind `value`, empty when there is no value.
fn run_of(runs: &Runs, n: usize, upstream: bool, value: Option<f64>) -> &str {
    match value {
        None => "",
        Some(_) => runs.get(&(n, upstream)).map_or(UNSTAMPED, String::as_str),
    }
}

fn markdown(table: &Table, runs: &Runs) -> String {
    let mut out = String::from(
        "| services x 10 endpoints | measure | upstream | ours | upstream / ours |\n\
         |---:|---|---:|---:|---:|\n",
    );
    for n in sizes(table) {
        for (name, label, ratio) in MEASURES {
            let Some(pair) = table.get(&(n, name.to_string())) else {
                continue;
            };
            let ratio = if *ratio {
                pair.ratio().map_or("-".into(), |r| format!("{r:.1}x"))
            } else {
                "-".into()
            };
            let _ = writeln!(
                out,
                "| {n} | {label} | {} | {} | {ratio} |",
                number(pair.upstream),
                number(pair.ours)
            );
        }
    }
    out.push_str(
        "\n| services x 10 endpoints | proxy | measured in the run |\n\
         |---:|---|---|\n",
    );
    let measured: BTreeSet<(usize, bool)> = table
        .iter()
        .flat_map(|((n, _), pair)| {
            [(true, pair.upstream), (false, pair.ours)]
                .into_iter()
                .filter(|(_, value)| value.is_some())
                .map(move |(upstream, _)| (*n, upstream))
        })
        .collect();
    for n in sizes(table) {
        for (upstream, proxy) in [(true, "upstream"), (false, "ours")] {
            if measured.contains(&(n, upstream)) {
                let stamp =
                    runs.get(&(n, upstream)).map_or(UNSTAMPED, String::as_str);
                let _ = writeln!(out, "| {n} | {proxy} | {stamp} |");
            }
        }
    }
    out
}

/// A CSV field, quoted: stamps have commas.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

fn csv(table: &Table, runs: &Runs) -> String {
    let mut out = String::from(
        "services,measure,upstream,ours,ratio,upstream_run,ours_run\n",
    );
    let cell = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
    for ((n, measure), pair) in table {
        let _ = writeln!(
            out,
            "{n},{measure},{},{},{},{},{}",
            cell(pair.upstream),
            cell(pair.ours),
            cell(pair.ratio()),
            quoted(run_of(runs, *n, true, pair.upstream)),
            quoted(run_of(runs, *n, false, pair.ours)),
        );
    }
    out
}

/// The sizes both proxies ran at: a column without a single ratio stops
/// gnuplot ("no valid points"), and a lone proxy has nothing to compare.
fn compared_sizes(table: &Table) -> Vec<usize> {
    let mut sizes: Vec<usize> = table
        .iter()
        .filter(|(_, pair)| pair.ratio().is_some())
        .map(|((n, _), _)| *n)
        .collect();
    sizes.dedup();
    sizes
}

/// gnuplot's data: one row per measure with a ratio, one column per
/// size both proxies ran at.
fn chart_data(table: &Table) -> String {
    let sizes = compared_sizes(table);
    let mut out = String::from("measure");
    for n in &sizes {
        let _ = write!(out, "\t\"{n} services\"");
    }
    out.push('\n');
    for (name, label, ratio) in MEASURES {
        if !ratio {
            continue;
        }
        let _ = write!(out, "\"{label}\"");
        for n in &sizes {
            let r = table.get(&(*n, name.to_string())).and_then(Pair::ratio);
            let _ =
                write!(out, "\t{}", r.map_or("NaN".into(), |r| r.to_string()));
        }
        out.push('\n');
    }
    out
}

fn plot(data: &Path, png: &Path, columns: usize) -> anyhow::Result<()> {
    let mut script = format!(
        "set terminal pngcairo size 1200,700 font 'sans,10'\n\
         set output '{}'\n\
         set title 'upstream kube-proxy (IPVS) / kube-ipvs-proxy: how many times less time, CPU or memory'\n\
         set style data histograms\n\
         set style histogram clustered gap 1\n\
         set style fill solid 0.8 border -1\n\
         set logscale y\n\
         set ylabel 'upstream / ours (log scale; above 1: ours is better)'\n\
         set xtics rotate by -30 scale 0\n\
         set grid ytics\n\
         set key top left autotitle columnhead\n\
         plot '{}' using 2:xtic(1)",
        png.display(),
        data.display()
    );
    for c in 3..=columns + 1 {
        let _ = write!(script, ", '' using {c}");
    }
    script.push_str(", 1 with lines dashtype 2 lc rgb 'black' notitle\n");
    let file = data.with_extension("gnuplot");
    std::fs::write(&file, &script)?;
    let out = Command::new("gnuplot")
        .arg(&file)
        .output()
        .context("running gnuplot (tests/vm/deps.sh gnuplot-nox)")?;
    if !out.status.success() {
        bail!("gnuplot: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

pub fn write(results: &Path, dir: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(results)
        .with_context(|| format!("reading {}", results.display()))?;
    let (table, runs) = parse(&text)?;
    std::fs::create_dir_all(dir)?;
    let table_md = markdown(&table, &runs);
    print!("{table_md}");
    std::fs::write(dir.join("vs-upstream.md"), &table_md)?;
    std::fs::write(dir.join("vs-upstream.csv"), csv(&table, &runs))?;
    let data = dir.join("vs-upstream.dat");
    std::fs::write(&data, chart_data(&table))?;
    let png = dir.join("vs-upstream.png");
    let columns = compared_sizes(&table).len();
    if columns == 0 {
        // One proxy alone (BENCH_PROXIES=ours): a table, nothing to
        // compare in a chart.
        println!(
            "written: {}, {} (no chart: no size has both proxies)",
            dir.join("vs-upstream.md").display(),
            dir.join("vs-upstream.csv").display(),
        );
        return Ok(());
    }
    plot(&data, &png, columns)?;
    println!(
        "written: {}, {}, {}",
        dir.join("vs-upstream.md").display(),
        dir.join("vs-upstream.csv").display(),
        png.display()
    );
    Ok(())
}
