//! The proxy's HTTP servers, as kube-proxy runs them:
//!
//! - the healthz server (`healthz_bind_address`, default `0.0.0.0:10256`):
//!   `/healthz` and `/livez`, answered from [`ProxyHealth`];
//! - the metrics server (`metrics_bind_address`, default
//!   `127.0.0.1:10249`): `/metrics`, `/healthz` and `/proxyMode`;
//! - one health check server per `externalTrafficPolicy: Local` load
//!   balancer on its `healthCheckNodePort` ([`ServiceHealthServer`]).
//!
//! [`SyncReporter`] is what the daemon calls around each sync to keep
//! them, and the sync metrics, up to date.

pub mod health;
pub mod healthz;
pub mod metrics;
mod no_local;
mod reporter;
pub mod service_health;
pub mod start;
#[cfg(test)]
mod tests;
pub mod timestamp;
pub mod zpages;

use std::{
    io,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::OnceLock,
    time::Duration,
};

use axum::Router;
use tokio::{runtime::Handle, task::JoinHandle};

/// Plain text, as the Go servers send it (`/proxyMode`, the z-pages).
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

pub use health::ProxyHealth;
pub use reporter::SyncReporter;
pub use service_health::ServiceHealthServer;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{server} server cannot listen on {address}: {source}")]
    Listen {
        server: &'static str,
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("{server} server on {address} failed: {source}")]
    Serve {
        server: &'static str,
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0} must be created inside the tokio runtime")]
    NoRuntime(&'static str),
}

/// A running server. Dropping it stops accepting connections at once.
#[derive(Debug)]
pub struct Server {
    #[cfg(test)]
    local_addr: SocketAddr,
    task: JoinHandle<()>,
}

type ServerTask =
    std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl Server {
    /// Binds `address` (port 0 picks one) and serves `router` on it.
    #[cfg(test)]
    pub async fn bind(
        name: &'static str,
        address: SocketAddr,
        router: Router,
    ) -> Result<Self, ServerError> {
        Self::bind_with(name, address, router, spawn)
    }

    /// The same, served by the test's own runtime, so that what the
    /// handlers record reaches a recorder local to the test's thread.
    #[cfg(test)]
    pub async fn bind_on_this_runtime(
        name: &'static str,
        address: SocketAddr,
        router: Router,
    ) -> Result<Self, ServerError> {
        Self::bind_with(name, address, router, tokio::spawn)
    }

    #[cfg(test)]
    fn bind_with(
        name: &'static str,
        address: SocketAddr,
        router: Router,
        spawn: fn(ServerTask) -> JoinHandle<()>,
    ) -> Result<Self, ServerError> {
        let listener =
            listen(address).map_err(|source| ServerError::Listen {
                server: name,
                address,
                source,
            })?;
        Self::serve_with(name, listener, router, address, spawn)
    }

    /// Serves on an already bound listener, on the servers' runtime.
    fn serve(
        name: &'static str,
        listener: std::net::TcpListener,
        router: Router,
        address: SocketAddr,
    ) -> Result<Self, ServerError> {
        Self::serve_with(name, listener, router, address, spawn)
    }

    fn serve_with(
        name: &'static str,
        listener: std::net::TcpListener,
        router: Router,
        address: SocketAddr,
        spawn: fn(ServerTask) -> JoinHandle<()>,
    ) -> Result<Self, ServerError> {
        let local_addr =
            listener
                .local_addr()
                .map_err(|source| ServerError::Listen {
                    server: name,
                    address,
                    source,
                })?;
        let task = spawn(Box::pin(async move {
            // Registered with the runtime that polls it.
            let served = match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => axum::serve(listener, router).await,
                Err(e) => Err(e),
            };
            if let Err(source) = served {
                tracing::error!(
                    "{}",
                    ServerError::Serve {
                        server: name,
                        address: local_addr,
                        source,
                    }
                );
            }
        }));
        Ok(Self {
            #[cfg(test)]
            local_addr,
            task,
        })
    }

    #[cfg(test)]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

/// The servers' own runtime thread, started on first use. A probe's
/// answer must not wait for a sync on the loop's single thread (a
/// kubelet's liveness probe gives it one second; under load a sync
/// takes longer, and a proxy killed for it stops programming while it
/// restarts), as upstream's server goroutines never wait for its sync.
pub fn runtime() -> Result<&'static Handle, String> {
    static SERVERS: OnceLock<Result<Handle, String>> = OnceLock::new();
    SERVERS
        .get_or_init(|| crate::runtime_thread::start("servers", || {}))
        .as_ref()
        .map_err(Clone::clone)
}

/// Spawns a server's task on the servers' runtime, or on the current one
/// if that thread could not start (said once, in the log).
fn spawn(task: ServerTask) -> JoinHandle<()> {
    match runtime() {
        Ok(handle) => handle.spawn(task),
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!("{e}; servers share the sync loop's thread")
            });
            tokio::spawn(task)
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long a server that could not listen waits before trying again,
/// as upstream's `wait.Until(..., 5*time.Second)`.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// Runs a server for the life of the process: a listen failure (the
/// port taken by an old instance still shutting down, say) is logged
/// and retried every [`RETRY_INTERVAL`], never fatal, as upstream does
/// without `bindAddressHardFail`.
pub fn spawn_forever(
    name: &'static str,
    address: SocketAddr,
    router: Router,
) -> JoinHandle<()> {
    spawn(Box::pin(retry_forever(name, address, router, None)))
}

/// [`spawn_forever`] for `bindAddressHardFail`: the port is bound here,
/// and a failure is the caller's to end the process with, as upstream
/// exits. Only listening can fail: once bound, axum's accept loop rides
/// out its own errors, so the server never ends.
pub fn spawn_bound(
    name: &'static str,
    address: SocketAddr,
    router: Router,
) -> Result<JoinHandle<()>, ServerError> {
    let listener = listen(address).map_err(|source| ServerError::Listen {
        server: name,
        address,
        source,
    })?;
    Ok(spawn(Box::pin(retry_forever(
        name,
        address,
        router,
        Some(listener),
    ))))
}

async fn retry_forever(
    name: &'static str,
    address: SocketAddr,
    router: Router,
    mut bound: Option<std::net::TcpListener>,
) {
    loop {
        let listener = match bound.take() {
            Some(listener) => Ok(listener),
            None => listen(address),
        };
        match listener.and_then(tokio::net::TcpListener::from_std) {
            Ok(listener) => {
                tracing::info!(%address, "{name} server listening");
                if let Err(source) = axum::serve(listener, router.clone()).await
                {
                    tracing::error!(
                        "{}",
                        ServerError::Serve {
                            server: name,
                            address,
                            source,
                        }
                    );
                }
            }
            Err(source) => tracing::error!(
                "{}; retrying in {}s",
                ServerError::Listen {
                    server: name,
                    address,
                    source,
                },
                RETRY_INTERVAL.as_secs()
            ),
        }
        tokio::time::sleep(RETRY_INTERVAL).await;
    }
}

/// Binds a non-blocking listener the way Go's `net.Listen("tcp", ...)`
/// does, which is what kube-proxy's listeners are: the IPv4 wildcard
/// (`0.0.0.0`, the default healthz address) becomes one dual-stack `[::]`
/// socket where the host has IPv6, so probes over IPv6 reach it too.
pub(crate) fn listen(address: SocketAddr) -> io::Result<std::net::TcpListener> {
    if address.ip() == Ipv4Addr::UNSPECIFIED {
        let v6 = SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), address.port());
        match listen_exactly(v6, false) {
            Err(e) if is_no_ipv6(&e) => {}
            other => return other,
        }
    }
    listen_exactly(address, true)
}

pub(crate) fn listen_exactly(
    address: SocketAddr,
    only_v6: bool,
) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};

    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    if address.is_ipv6() {
        socket.set_only_v6(only_v6)?;
    }
    // A restarted proxy must not wait out TIME_WAIT of its old sockets.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// EAFNOSUPPORT without the IPv6 stack, EADDRNOTAVAIL when it is
/// disabled.
fn is_no_ipv6(error: &io::Error) -> bool {
    use libc::EAFNOSUPPORT;
    error.raw_os_error() == Some(EAFNOSUPPORT)
        || error.kind() == io::ErrorKind::AddrNotAvailable
}
