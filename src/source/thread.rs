//! The thread the sources run on.
//!
//! Under churn, most of what an API event costs is before the trackers:
//! the watch connection's TLS, HTTP chunking, the JSON decoding of the
//! object and the store's conversion and diff: roughly a third of the
//! process's CPU under churn (the vs_upstream bench's CPU by thread). On
//! the sync loop's thread that work took turns with the syncs; here it runs
//! beside the loop, on a thread of its own, and hands the loop converted
//! changes through a channel.
//!
//! What runs here must be created here too: a `kube::Client` spawns the
//! task that drives its requests, and hyper the tasks that drive its
//! connections, on the runtime they are built in. So the watches' client
//! is built inside [`handle`]'s runtime (`Handle::enter`).

use std::sync::OnceLock;

use tokio::runtime::Handle;

static SOURCES: OnceLock<Result<Handle, String>> = OnceLock::new();

/// The sources' runtime, started on first use; it lives as long as the
/// process.
pub fn handle() -> Result<&'static Handle, String> {
    SOURCES
        .get_or_init(|| crate::runtime_thread::start("sources", || {}))
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sources_run_on_their_own_thread() {
        let name = handle()
            .unwrap()
            .spawn(async { std::thread::current().name().map(str::to_owned) })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("sources"));
        assert_ne!(std::thread::current().name(), Some("sources"));
    }
}
