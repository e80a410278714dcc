//! The thread that detached reads run on.
//!
//! A repair round reads the whole kernel back: at 10,000 services that is
//! 110,000 IPVS objects and 10,000 addresses of the dummy link, megabytes
//! of netlink to receive and seconds of decoding. The proxy's own runtime
//! has one thread (a second one cost more CPU in scheduling than it saved
//! under churn), so a read there would hold up every sync for as long. Here
//! it runs on a thread of its own, with its own runtime, and the loop only
//! joins the result. The detached readers' netlink connections are opened
//! on this runtime too: a connection's task is where the socket is read
//! and the replies are parsed, so it must not run on the loop's thread
//! either.
//!
//! The thread runs at a lower scheduling priority (nice 10): a repair is
//! background work, due once a `syncPeriod`, while a sync carries changes
//! someone is waiting for. On a node whose CPUs are busy the read then
//! yields to the syncs instead of taking an equal share from them, and
//! still progresses when they are idle. The runtime's blocking threads
//! (parsing `/proc/net/ip_vs`, the ipset dump's system calls) are
//! started from this thread and so inherit its nice value, and so do
//! the `iptables-save` processes they start: every detached read runs
//! here, not on the loop's runtime, whose blocking threads do not
//! yield.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::Handle;

use super::{ErrorKind, KernelError};

static READS: OnceLock<Result<Handle, String>> = OnceLock::new();

/// The reads' runtime, started on first use; it lives as long as the
/// process.
pub(crate) fn handle() -> Result<&'static Handle, KernelError> {
    READS
        .get_or_init(start)
        .as_ref()
        .map_err(|e| failed(e.clone()))
}

fn start() -> Result<Handle, String> {
    crate::runtime_thread::start("kernel-reads", lower_priority)
}

/// The nice value of the reads' thread, at least.
const NICE: libc::c_int = 10;

/// The calling thread's nice value; `None` when the kernel will not say.
fn nice() -> Option<libc::c_int> {
    // SAFETY: getpriority reads the calling thread's nice value; -1 is
    // also a valid one, so errno, cleared before, tells errors apart.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(
            libc::PRIO_PROCESS as _,
            libc::gettid() as libc::id_t,
        );
        (*libc::__errno_location() == 0).then_some(nice)
    }
}

/// Lowers the calling thread's priority to `NICE` unless it is lower
/// already (a proxy started with `nice`): on Linux the nice value is per
/// thread, set by its id. Lowering one's priority needs no privilege, so
/// this fails only on a kernel without it; the reads then run at the
/// process's priority, and say so.
fn lower_priority() {
    if nice().is_some_and(|n| n >= NICE) {
        return;
    }
    // SAFETY: setpriority takes plain integers and touches no memory of
    // ours; gettid cannot fail.
    let set = unsafe {
        libc::setpriority(
            libc::PRIO_PROCESS as _,
            libc::gettid() as libc::id_t,
            NICE,
        )
    };
    if set != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "cannot lower the kernel reads' thread priority; repairs compete with syncs"
        );
    }
}

/// Runs `read` on the reads' thread and waits for its result.
pub(crate) async fn run<F, T>(read: F) -> Result<T, KernelError>
where
    F: Future<Output = Result<T, KernelError>> + Send + 'static,
    T: Send + 'static,
{
    handle()?
        .spawn(read)
        .await
        .map_err(|e| failed(format!("the read failed: {e}")))?
}

fn failed(message: String) -> KernelError {
    KernelError::new(ErrorKind::Transport, "kernel reads thread", message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_runs_on_the_reads_thread_and_its_result_comes_back() {
        let name =
            run(async { Ok(std::thread::current().name().map(str::to_owned)) })
                .await
                .unwrap();
        assert_eq!(name.as_deref(), Some("kernel-reads"));
        let failed: Result<(), _> = run(async {
            Err(KernelError::new(ErrorKind::Transport, "x", "y"))
        })
        .await;
        assert!(failed.is_err());
    }

    #[tokio::test]
    async fn the_reads_thread_yields_to_the_syncs() {
        let reads = run(async { Ok(nice()) }).await.unwrap().unwrap();
        // Threads start with their creator's nice value: the test's.
        let ours = nice().unwrap();
        assert_eq!(reads, ours.max(NICE), "the caller's nice value is {ours}");
        assert_eq!(nice(), Some(ours), "the caller's thread keeps its own");
    }

    #[tokio::test]
    async fn a_read_s_blocking_work_yields_too() {
        // Parsing /proc/net/ip_vs and the ipset dump run on the reads'
        // runtime's blocking threads, which inherit the nice value of
        // the thread that starts them, and pass it on to the iptables
        // tools they start.
        let blocking = run(async {
            tokio::task::spawn_blocking(nice)
                .await
                .map_err(|e| failed(e.to_string()))
        })
        .await
        .unwrap()
        .unwrap();
        let ours = nice().unwrap();
        assert_eq!(
            blocking,
            ours.max(NICE),
            "the caller's nice value is {ours}"
        );
    }

    #[tokio::test]
    async fn a_panicking_read_is_an_error_not_a_panic() {
        let read: Result<(), _> = run(async { panic!("decoder bug") }).await;
        let error = read.unwrap_err();
        assert!(error.to_string().contains("the read failed"), "{error}");
        // The thread survives it: the next read still runs.
        assert!(run(async { Ok(()) }).await.is_ok());
    }
}
