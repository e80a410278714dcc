//! A tokio runtime on a thread of its own, for work that must not share
//! the sync loop's thread: the repair's whole-kernel reads
//! (`kernel::read_thread`) and the sources' reading and decoding
//! (`source::thread`).
//!
//! The proxy's own runtime has one thread: a second worker of the same
//! runtime cost more CPU in wake-ups and stealing than it saved, because
//! every hand-off between the loop, the watches and the netlink
//! connections became a futex wake-up. A runtime per kind of work keeps
//! each one's tasks and connections together and the hand-offs few: the
//! loop only joins a read's result, or takes a batch of changes from a
//! channel.

use tokio::runtime::Handle;

/// Starts a current-thread runtime on a new thread named `name`, which
/// first runs `on_start` (its priority, say), then lives as long as the
/// process.
pub(crate) fn start(name: &str, on_start: fn()) -> Result<Handle, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name(name)
        .build()
        .map_err(|e| format!("cannot start the {name} runtime: {e}"))?;
    let handle = runtime.handle().clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            on_start();
            runtime.block_on(std::future::pending::<()>())
        })
        .map_err(|e| format!("cannot start the {name} thread: {e}"))?;
    Ok(handle)
}
