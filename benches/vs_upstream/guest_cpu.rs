//! A machine's CPUs over a stretch of the run, and who used them: the
//! guest's (the bench's own share beside the proxy's), and the host's
//! (the API server's, etcd's, QEMU's).

use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::Context;
use bench_support::proxy::{clock_ticks, stat_times, CpuTimes};

/// The whole machine's CPU time from /proc/stat's first line: busy
/// (everything but idle and iowait) and all of it, over every CPU. What
/// the proxy gets is bounded by what else wants the same CPUs; in the
/// guest that includes the bench itself and the kernel's own work.
#[derive(Debug, Clone, Copy, Default)]
pub struct MachineCpu {
    pub busy: Duration,
    pub total: Duration,
    /// Time the hypervisor under this machine gave its CPUs to others
    /// (part of `busy`). The development host is itself a VM: when its
    /// neighbours are busy, QEMU's vCPU threads lose time that the guest
    /// cannot see and counts to whatever task it was running.
    pub steal: Duration,
}

impl MachineCpu {
    pub fn read() -> anyhow::Result<Self> {
        let stat = std::fs::read_to_string("/proc/stat")?;
        Self::parse(&stat)
    }

    fn parse(stat: &str) -> anyhow::Result<Self> {
        let line = stat
            .lines()
            .find(|l| l.starts_with("cpu "))
            .context("no cpu line in /proc/stat")?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|t| t.parse().context("/proc/stat field"))
            .collect::<anyhow::Result<_>>()?;
        // user nice system idle iowait irq softirq steal; guest time is
        // already inside user and nice.
        let field = |i: usize| ticks.get(i).copied().unwrap_or(0);
        let all: u64 = (0..8).map(field).sum();
        let idle = field(3) + field(4);
        let secs = |t: u64| Duration::from_secs_f64(t as f64 / clock_ticks());
        Ok(Self {
            busy: secs(all - idle),
            total: secs(all),
            steal: secs(field(7)),
        })
    }

    pub fn since(self, before: Self) -> Self {
        Self {
            busy: self.busy.saturating_sub(before.busy),
            total: self.total.saturating_sub(before.total),
            steal: self.steal.saturating_sub(before.steal),
        }
    }
}

/// This process's own CPU, user and system, all its threads.
pub fn own_cpu() -> anyhow::Result<CpuTimes> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    Ok(stat_times(&stat)?.1)
}

/// CPU (user and system) of every process on this machine, summed by
/// command name; processes that end between two readings drop out.
pub fn by_command() -> BTreeMap<String, Duration> {
    cpu_by_name(Path::new("/proc")).unwrap_or_default()
}

/// The CPU of every numbered entry of `dir` (processes in /proc, threads
/// in /proc/PID/task), user and system together, summed by the name its
/// `stat` gives. One that ended since the listing is not counted.
pub fn cpu_by_name(dir: &Path) -> anyhow::Result<BTreeMap<String, Duration>> {
    let mut by_name = BTreeMap::new();
    for entry in std::fs::read_dir(dir)?.flatten() {
        let numbered = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        if !numbered {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat"))
        else {
            continue;
        };
        let (name, times) = stat_times(&stat)?;
        *by_name.entry(name).or_default() += times.user + times.system;
    }
    Ok(by_name)
}
