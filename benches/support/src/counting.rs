//! What the heap benchmarks count with: a global allocator that keeps
//! the live bytes and their peak, and the CPU time of this process, of
//! its threads and of other processes.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

/// Counts live heap bytes and their peak; a bench installs it with
/// `#[global_allocator]`.
pub struct Counting;

pub static LIVE: AtomicUsize = AtomicUsize::new(0);
pub static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed)
                + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

/// User and system CPU of the whole process so far.
pub fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64)
            + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// The calling thread's CPU so far, as the proxy reads it.
pub use kube_ipvs_proxy::telemetry::process::thread_cpu;

/// CPU time of this process's threads named `name` so far, from
/// /proc/self/task (threads that ended are not counted).
pub fn threads_cpu(name: &str) -> Duration {
    let mut total = Duration::ZERO;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm"))
            .unwrap_or_default();
        if !comm.trim_end().starts_with(name) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat"))
            .unwrap_or_default();
        total += stat_cpu(&stat);
    }
    total
}

/// User and system CPU of process `pid` so far; zero once it is gone.
pub fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_default();
    stat_cpu(&stat)
}

/// utime + stime of a /proc stat line.
pub fn stat_cpu(stat: &str) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Duration::from_secs_f64((field(14) + field(15)) / ticks)
}

pub fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
