//! The proxy under test: its process, its metrics on 127.0.0.1:10249 and
//! what /proc says about its CPU time and memory.

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command},
    time::Duration,
};

use anyhow::{bail, Context};

const METRICS: &str = "127.0.0.1:10249";
const LAST_SYNC: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
const SYNC_DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";

/// A process's CPU time, in user space and in the kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTimes {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTimes {
    pub fn since(self, before: Self) -> Self {
        Self {
            user: self.user.saturating_sub(before.user),
            system: self.system.saturating_sub(before.system),
        }
    }
}

pub struct Proxy {
    child: Child,
    log: PathBuf,
}

impl Proxy {
    /// Starts our proxy, `binary`, on `state` in this thread's network
    /// namespace. The binary is the bench's to name: only the package's
    /// own targets are told where cargo built it. The repair rounds
    /// (every `--ipvs-sync-period`) are put out of the measurements' way:
    /// they read the whole kernel back, beside the syncs, and are not
    /// what a change costs.
    pub fn start(
        binary: &str,
        state: &Path,
        node: &str,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(binary);
        command
            .arg("--state")
            .arg(state)
            .args(["--hostname-override", node])
            .args(["--ipvs-sync-period", "10m"])
            .env(
                "RUST_LOG",
                std::env::var("BENCH_PROXY_LOG")
                    .unwrap_or_else(|_| "info".into()),
            )
            .env("NO_COLOR", "1");
        Self::spawn(command, log)
    }

    /// Starts any proxy (ours or upstream's) with its output in `log`.
    pub fn spawn(mut command: Command, log: PathBuf) -> anyhow::Result<Self> {
        let stderr = std::fs::File::create(&log)
            .with_context(|| format!("creating {}", log.display()))?;
        let stdout = stderr.try_clone()?;
        let child =
            command.stdout(stdout).stderr(stderr).spawn().with_context(
                || format!("starting {}", command.get_program().display()),
            )?;
        Ok(Self { child, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails, with the end of the log, if the proxy has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the proxy exited ({status}); log:\n{}", self.log_tail());
        }
        Ok(())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// utime + stime of every thread, living or gone.
    pub fn cpu(&self) -> anyhow::Result<Duration> {
        let times = self.cpu_times()?;
        Ok(times.user + times.system)
    }

    /// The CPU every thread, living or gone, spent in the process and in
    /// the kernel for it (fields 14 and 15 of /proc/PID/stat): the
    /// kernel's share is where its IPVS costs show.
    pub fn cpu_times(&self) -> anyhow::Result<CpuTimes> {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))?;
        Ok(stat_times(&stat)?.1)
    }

    /// A field of /proc/PID/status in KiB (`VmHWM`, `VmRSS`).
    pub fn status_kib(&self, field: &str) -> anyhow::Result<u64> {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no {field} in /proc/PID/status"))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A /proc stat line's command name and CPU times.
pub fn stat_times(stat: &str) -> anyhow::Result<(String, CpuTimes)> {
    // The command name may hold spaces; the fields follow its ')'.
    let (head, rest) =
        stat.rsplit_once(')').context("malformed /proc/PID/stat")?;
    let name = head.split_once('(').map_or("", |(_, n)| n).to_owned();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is the first after the name.
    let time = |n: usize| -> anyhow::Result<Duration> {
        let ticks: u64 = fields
            .get(n - 3)
            .context("short /proc/PID/stat")?
            .parse()
            .context("/proc/PID/stat field")?;
        Ok(Duration::from_secs_f64(ticks as f64 / clock_ticks()))
    };
    Ok((
        name,
        CpuTimes {
            user: time(14)?,
            system: time(15)?,
        },
    ))
}

pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// What the sync metrics said at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct SyncMetrics {
    /// Unix time of the last sync applied; 0 before the first.
    pub last_sync: f64,
    /// The total duration of the syncs applied, in seconds.
    pub sync_seconds: f64,
}

/// The proxy's `/metrics` text; `None` while the server is not up.
pub fn metrics_text() -> Option<String> {
    let mut stream = TcpStream::connect(METRICS).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream
        .write_all(
            b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Connection: close\r\n\r\n",
        )
        .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    Some(body)
}

/// Scrapes the proxy's metrics; `None` while the server is not up.
pub fn scrape() -> Option<SyncMetrics> {
    let body = metrics_text()?;
    // `NAME{ip_family="IPv4"} VALUE`: the first family's series (a
    // dual-stack node reports each sync under both).
    let value = |name: &str| -> f64 {
        body.lines()
            .filter_map(|l| l.strip_prefix(name))
            .filter(|rest| rest.starts_with([' ', '{']))
            .filter_map(|rest| rest.split_whitespace().last())
            .find_map(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    Some(SyncMetrics {
        last_sync: value(LAST_SYNC),
        sync_seconds: value(&format!("{SYNC_DURATION}_sum")),
    })
}
