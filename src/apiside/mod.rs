//! The API side of the API/node split (`kube-ipvs-proxy api-server`): one
//! process watches the API server, runs the trackers once, and serves
//! each node its own view ([`crate::nodeview`]) over gRPC.

pub mod cluster;
pub mod limits;
pub mod server;
pub mod tokens;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use tokio::net::{TcpListener, UnixListener};
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use crate::nodeview::endpoint::TlsFiles;

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
