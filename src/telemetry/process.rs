//! The standard process metrics, as Prometheus' Go client exports them for
//! kube-proxy (same names, help texts and types), read from `/proc` at
//! each scrape: CPU time, memory, file descriptors, start time, and the
//! network bytes of the process' network namespace. Written straight in
//! the text format after the recorder's output, since `metrics` counters
//! cannot hold fractional seconds.
//!
//! Also `go_goroutines`, which kube-proxy's dashboard graphs: here the
//! number of live tokio tasks, this process' counterpart of goroutines.

use std::{fmt::Write as _, fs, io, time::Duration};

#[cfg(test)]
mod tests;

/// One reading of `/proc/self`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub open_fds: u64,
    pub max_fds: Option<f64>,
    pub virtual_memory_bytes: u64,
    pub virtual_memory_max_bytes: Option<f64>,
    pub resident_memory_bytes: u64,
    pub start_time_seconds: f64,
    pub network_receive_bytes: Option<u64>,
    pub network_transmit_bytes: Option<u64>,
}

/// The calling thread's CPU time so far; zero where the clock cannot be
/// read.
pub fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec it is given.
    let read =
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if read != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// The page size and clock tick `/proc/self/stat` counts in.
fn sysconf(name: libc::c_int, fallback: i64) -> f64 {
    // SAFETY: sysconf reads a system constant and has no preconditions.
    let value = unsafe { libc::sysconf(name) };
    if value > 0 {
        value as f64
    } else {
        fallback as f64
    }
}

impl ProcessStats {
    /// Reads this process' figures.
    pub fn read() -> io::Result<Self> {
        let stat = fs::read_to_string("/proc/self/stat")?;
        let boot = fs::read_to_string("/proc/stat")?;
        let limits = fs::read_to_string("/proc/self/limits")?;
        let open_fds = fs::read_dir("/proc/self/fd")?.count() as u64;
        let net = fs::read_to_string("/proc/self/net/dev").ok();
        let mut stats = parse(
            &stat,
            &boot,
            &limits,
            sysconf(libc::_SC_CLK_TCK, 100),
            sysconf(libc::_SC_PAGESIZE, 4096),
        )
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "/proc/self/stat")
        })?;
        // Includes the descriptor reading the directory, as the Go
        // client's count does.
        stats.open_fds = open_fds;
        if let Some((rx, tx)) = net.as_deref().and_then(network_bytes) {
            stats.network_receive_bytes = Some(rx);
            stats.network_transmit_bytes = Some(tx);
        }
        Ok(stats)
    }
}

/// `/proc/self/stat`, `/proc/stat` (for the boot time) and
/// `/proc/self/limits`, with the clock tick and page size.
pub fn parse(
    stat: &str,
    boot: &str,
    limits: &str,
    ticks_per_second: f64,
    page_size: f64,
) -> Option<ProcessStats> {
    // The command name, in parentheses, may hold spaces: fields count
    // from after its last ')'. Field 3 (state) is the first after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
    let (utime, stime) = (field(14)?, field(15)?);
    let start_ticks = field(22)?;
    let vsize = field(23)?;
    let rss_pages = field(24)?;
    let btime: f64 = boot
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(ProcessStats {
        cpu_seconds: (utime + stime) / ticks_per_second,
        open_fds: 0,
        max_fds: soft_limit(limits, "Max open files"),
        virtual_memory_bytes: vsize as u64,
        virtual_memory_max_bytes: soft_limit(limits, "Max address space"),
        resident_memory_bytes: (rss_pages * page_size) as u64,
        start_time_seconds: btime + start_ticks / ticks_per_second,
        network_receive_bytes: None,
        network_transmit_bytes: None,
    })
}

/// A limit's soft value; "unlimited" is the largest u64, as procfs reads
/// it.
fn soft_limit(limits: &str, name: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with(name))?;
    let soft = line[name.len()..].split_whitespace().next()?;
    if soft == "unlimited" {
        Some(u64::MAX as f64)
    } else {
        soft.parse().ok()
    }
}

/// Bytes received and sent over every interface of the namespace
/// (`/proc/self/net/dev`), as the Go client sums them.
pub fn network_bytes(dev: &str) -> Option<(u64, u64)> {
    let mut rx = 0u64;
    let mut tx = 0u64;
    for line in dev.lines().skip(2) {
        let (_, counters) = line.split_once(':')?;
        let values: Vec<u64> = counters
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        rx = rx.saturating_add(*values.first()?);
        tx = tx.saturating_add(*values.get(8)?);
    }
    Some((rx, tx))
}

/// One family this module renders: client_golang's process collector's
/// name, type and help (and its goroutine gauge's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    pub name: &'static str,
    pub kind: &'static str,
    pub help: &'static str,
}

const CPU_SECONDS: Family = Family {
    name: "process_cpu_seconds_total",
    kind: "counter",
    help: "Total user and system CPU time spent in seconds.",
};
const OPEN_FDS: Family = Family {
    name: "process_open_fds",
    kind: "gauge",
    help: "Number of open file descriptors.",
};
const MAX_FDS: Family = Family {
    name: "process_max_fds",
    kind: "gauge",
    help: "Maximum number of open file descriptors.",
};
const VIRTUAL_MEMORY: Family = Family {
    name: "process_virtual_memory_bytes",
    kind: "gauge",
    help: "Virtual memory size in bytes.",
};
const VIRTUAL_MEMORY_MAX: Family = Family {
    name: "process_virtual_memory_max_bytes",
    kind: "gauge",
    help: "Maximum amount of virtual memory available in bytes.",
};
const RESIDENT_MEMORY: Family = Family {
    name: "process_resident_memory_bytes",
    kind: "gauge",
    help: "Resident memory size in bytes.",
};
const START_TIME: Family = Family {
    name: "process_start_time_seconds",
    kind: "gauge",
    help: "Start time of the process since unix epoch in seconds.",
};
const NETWORK_RECEIVE: Family = Family {
    name: "process_network_receive_bytes_total",
    kind: "counter",
    help: "Number of bytes received by the process over the network.",
};
const NETWORK_TRANSMIT: Family = Family {
    name: "process_network_transmit_bytes_total",
    kind: "counter",
    help: "Number of bytes sent by the process over the network.",
};
const GOROUTINES: Family = Family {
    name: "go_goroutines",
    kind: "gauge",
    help: "Number of goroutines that currently exist (kube-ipvs-proxy: live \
           tokio tasks).",
};

/// Every family this module may render, for the metrics page.
#[cfg(test)]
pub const FAMILIES: [Family; 10] = [
    CPU_SECONDS,
    OPEN_FDS,
    MAX_FDS,
    VIRTUAL_MEMORY,
    VIRTUAL_MEMORY_MAX,
    RESIDENT_MEMORY,
    START_TIME,
    NETWORK_RECEIVE,
    NETWORK_TRANSMIT,
    GOROUTINES,
];

fn family(out: &mut String, family: Family, value: f64) {
    let Family { name, kind, help } = family;
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

/// Appends the process families in the text format.
pub fn render(stats: &ProcessStats, out: &mut String) {
    family(out, CPU_SECONDS, stats.cpu_seconds);
    family(out, OPEN_FDS, stats.open_fds as f64);
    if let Some(max) = stats.max_fds {
        family(out, MAX_FDS, max);
    }
    family(out, VIRTUAL_MEMORY, stats.virtual_memory_bytes as f64);
    if let Some(max) = stats.virtual_memory_max_bytes {
        family(out, VIRTUAL_MEMORY_MAX, max);
    }
    family(out, RESIDENT_MEMORY, stats.resident_memory_bytes as f64);
    family(out, START_TIME, stats.start_time_seconds);
    if let (Some(rx), Some(tx)) =
        (stats.network_receive_bytes, stats.network_transmit_bytes)
    {
        family(out, NETWORK_RECEIVE, rx as f64);
        family(out, NETWORK_TRANSMIT, tx as f64);
    }
}

/// `go_goroutines` from the live tasks of the runtime rendering the
/// scrape.
pub fn render_tasks(alive_tasks: usize, out: &mut String) {
    family(out, GOROUTINES, alive_tasks as f64);
}

/// Everything this module adds to a scrape, from the running process.
pub fn append_to(out: &mut String) {
    match ProcessStats::read() {
        Ok(stats) => render(&stats, out),
        Err(error) => tracing::debug!(%error, "process metrics unavailable"),
    }
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        render_tasks(runtime.metrics().num_alive_tasks(), out);
    }
}
