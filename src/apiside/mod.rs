//! The API side of the API/node split (`kube-ipvs-proxy api-server`): one
//! process watches the API server, runs the trackers once, and serves
//! each node its own view ([`crate::nodeview`]) over gRPC.

pub mod cluster;
pub mod limits;
pub mod server;
pub mod tokens;

#[cfg(test)]
mod tests;

use std::{
    future::Future,
    path::{Path, PathBuf},
    sync::Arc,
};

use futures::{Stream, StreamExt};
use tokio::net::{TcpListener, UnixListener};
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use crate::{
    nodeview::endpoint::TlsFiles,
    source::{store::Stores, SourceEvent},
};

/// Why the view service stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("listening on {path}: {source}")]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("serving the node views: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("TLS needs the server's tls.crt and tls.key")]
    NoIdentity,
}

/// Why the API side stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the object source ended")]
    SourceEnded,
    #[error("the view server stopped")]
    ServerStopped,
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("the view server's task: {0}")]
    ServerTask(#[from] tokio::task::JoinError),
    #[error(transparent)]
    ClusterGone(#[from] server::ClusterGone),
}

/// Feeds the cluster behind `shared` from `source` and serves the views
/// with `serving` (a [`serve_tls`] or [`serve_unix`] future, spawned) until
/// either stops. Both are watched together: a server whose listener
/// failed ends the API side at once, on a quiet cluster too.
pub async fn run(
    source: impl Stream<Item = SourceEvent> + Send + 'static,
    shared: Arc<server::Shared>,
    serving: impl Future<Output = Result<(), ServeError>> + Send + 'static,
) -> Result<(), RunError> {
    let mut serving = tokio::spawn(serving);
    let fed = feed(source, &shared);
    tokio::select! {
        ended = &mut serving => match ended {
            Ok(Ok(())) => Err(RunError::ServerStopped),
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(e.into()),
        },
        ended = fed => {
            serving.abort();
            ended
        }
    }
}

/// The source's events into the cluster, until the source ends.
async fn feed(
    source: impl Stream<Item = SourceEvent>,
    shared: &server::Shared,
) -> Result<(), RunError> {
    let mut stores = Stores::new(cluster::NO_NODE);
    let mut listed = false;
    // What is ready at once goes into one sync, so that a burst of
    // changes wakes each node's watch once.
    let mut batches = std::pin::pin!(source.ready_chunks(1024));
    while let Some(events) = batches.next().await {
        for event in events {
            shared.apply(stores.apply(event))?;
        }
        if !listed && stores.ready() {
            listed = true;
            tracing::info!("services and endpoint slices synced; serving");
            shared.sync().await?;
        } else if listed {
            shared.sync_changes().await?;
        }
    }
    Err(RunError::SourceEnded)
}

/// Serves `service` with TLS on `listener` until `shutdown` resolves.
/// A client's certificate, when it shows one, must be signed by `tls.ca`;
/// the service decides what each client may watch.
pub async fn serve_tls(
    listener: TcpListener,
    tls: &TlsFiles,
    service: server::ViewService,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let (cert, key) = tls.identity.as_ref().ok_or(ServeError::NoIdentity)?;
    // Nodes that authenticate with a token show no certificate.
    let optional =
        matches!(service.access(), server::Access::CertificatesOrTokens(_));
    let config = ServerTlsConfig::new()
        .identity(Identity::from_pem(cert, key))
        .client_ca_root(Certificate::from_pem(&tls.ca))
        .client_auth_optional(optional)
        .timeout(limits::HANDSHAKE_TIMEOUT);
    bounded()
        .tls_config(config)?
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(
            limits::per_peer(
                TcpListenerStream::new(listener),
                limits::MAX_CONNECTIONS_PER_PEER,
            ),
            shutdown,
        )
        .await?;
    Ok(())
}

/// A server that gives each client a bounded share (see [`limits`]).
fn bounded() -> Server {
    Server::builder()
        .timeout(limits::AUTHORIZE_TIMEOUT)
        .max_concurrent_streams(limits::MAX_STREAMS_PER_CONNECTION)
        .http2_max_header_list_size(limits::MAX_HEADER_BYTES)
        .http2_keepalive_interval(Some(limits::KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(limits::KEEPALIVE_TIMEOUT))
}

/// Serves `service` on the Unix socket `path` until `shutdown` resolves.
/// The socket's file mode is the guard: no TLS on it.
pub async fn serve_unix(
    path: &Path,
    service: server::ViewService,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    // A socket left by an earlier run would make the bind fail.
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "stale socket");
        }
    }
    let listener =
        UnixListener::bind(path).map_err(|source| ServeError::Listen {
            path: path.to_owned(),
            source,
        })?;
    bounded()
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(
            UnixListenerStream::new(listener),
            shutdown,
        )
        .await?;
    Ok(())
}
