//! The API side's gRPC service: each node watches its own view.
//!
//! A watch sends what the node lacks, then waits for the next sync and
//! sends what changed since; while a node is slow its view keeps
//! changing, and the next send carries each changed entry once, in its
//! latest form. A watch starts only once Services and EndpointSlices
//! have been listed: a half-known cluster sent as a full state would
//! make the node delete what it must keep.

use std::{
    process,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use nodeview_protocol::{
    prost::Message as _,
    v1::{self, node_view_server::NodeView as NodeViewRpc},
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};

use super::{
    cluster::Cluster,
    limits::{Refusal, SEND_TIMEOUT},
    tokens::{TokenRefusal, TokenReviewer},
};
use crate::{
    nodeview::wire,
    source::store::RecordChange,
    telemetry::{
        API_SIDE_CHANGES_SENT_TOTAL, API_SIDE_SENT_BYTES_TOTAL,
        API_SIDE_SYNC_DURATION_SECONDS, API_SIDE_UPDATES_SENT_TOTAL,
        API_SIDE_VIEWS, API_SIDE_WATCHES,
    },
};

/// The largest watch request read. A node's name, an instance and a
/// revision take a few hundred bytes; tonic's default (4 MiB) would let
/// any client that reaches the port make the API side buffer that much
/// per stream before anything is checked.
pub const MAX_REQUEST_BYTES: usize = 4096;

/// The most changes one message carries; a full state at 10,000
/// services is some forty messages.
pub const CHANGES_PER_MESSAGE: usize = 512;

/// What the feeding loop and the watches share.
#[derive(Debug)]
pub struct Shared {
    cluster: Mutex<Cluster>,
    /// Counts syncs; 0 until the cluster was listed once.
    generation: watch::Sender<u64>,
    /// Revisions are this process's own: a node that comes back to
    /// another process (a restart, another replica) starts over.
    instance: String,
    /// How long a message may wait for its node to read it.
    send_timeout: Duration,
}

impl Shared {
    pub fn new(cluster: Cluster) -> Arc<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        Arc::new(Self {
            cluster: Mutex::new(cluster),
            generation: watch::Sender::new(0),
            instance: format!("{}-{nanos:x}", process::id()),
            send_timeout: SEND_TIMEOUT,
        })
    }

    /// The same, with the time a node has to read a message shortened
    /// (the tests' stalled nodes).
    #[cfg(test)]
    pub fn with_send_timeout(
        cluster: Cluster,
        send_timeout: Duration,
    ) -> Arc<Self> {
        let mut shared = Self::new(cluster);
        if let Some(shared) = Arc::get_mut(&mut shared) {
            shared.send_timeout = send_timeout;
        }
        shared
    }

    fn cluster(&self) -> std::sync::MutexGuard<'_, Cluster> {
        // A panic while holding it leaves a cluster that the next changes
        // still bring up to date: better than no service.
        self.cluster.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the changes one source event made.
    pub fn apply(&self, changes: &[RecordChange]) -> bool {
        let mut cluster = self.cluster();
        let mut needs_sync = false;
        for change in changes {
            needs_sync |= cluster.apply(change);
        }
        needs_sync
    }

    /// Brings the views up to date and wakes the watches. The first call
    /// says the cluster is listed and watches may start.
    pub fn sync(&self) {
        let started = Instant::now();
        let views = {
            let mut cluster = self.cluster();
            cluster.sync();
            cluster.views()
        };
        metrics::histogram!(API_SIDE_SYNC_DURATION_SECONDS)
            .record(started.elapsed().as_secs_f64());
        metrics::gauge!(API_SIDE_VIEWS).set(views as f64);
        self.generation.send_modify(|g| *g += 1);
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }
}

/// Who may watch which view.
#[derive(Debug, Clone)]
pub enum Access {
    /// Whoever can open the Unix socket: its file mode is the guard.
    Socket,
    /// Over TLS, a node's client certificate names the one view it may
    /// watch.
    ClientCertificates,
    /// As above, or, for a node without one, its ServiceAccount token:
    /// the TokenReview names the node its Pod runs on.
    CertificatesOrTokens(Arc<TokenReviewer>),
}

/// The `NodeView` service.
#[derive(Debug, Clone)]
pub struct ViewService {
    shared: Arc<Shared>,
    access: Access,
}

impl ViewService {
    pub fn new(shared: Arc<Shared>, access: Access) -> Self {
        Self { shared, access }
    }

    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Who the client is, and whether it may watch the view it asks for;
    /// every refusal counted by its reason.
    async fn authorize(
        &self,
        request: &Request<v1::WatchRequest>,
    ) -> Result<(), Status> {
        let refused = self.check(request).await;
        if let Err(status) = &refused {
            let reason = match status.code() {
                tonic::Code::PermissionDenied => Refusal::PermissionDenied,
                tonic::Code::Unavailable => Refusal::TokenReviewRate,
                _ => Refusal::Unauthenticated,
            };
            reason.count();
        }
        refused
    }

    async fn check(
        &self,
        request: &Request<v1::WatchRequest>,
    ) -> Result<(), Status> {
        let tokens = match &self.access {
            Access::Socket => return Ok(()),
            Access::ClientCertificates => None,
            Access::CertificatesOrTokens(reviewer) => Some(reviewer),
        };
        let certs = request.peer_certs().filter(|certs| !certs.is_empty());
        let node = match (certs, tokens, bearer(request)) {
            (Some(certs), _, _) => certs
                .first()
                .and_then(|cert| node_of(cert.as_ref()))
                .ok_or_else(|| {
                    Status::unauthenticated(
                        "the client certificate names no node",
                    )
                })?,
            (None, Some(reviewer), Some(token)) => {
                reviewer.node_of(token).await.map_err(|e| match e {
                    TokenRefusal::Refused(why) => Status::unauthenticated(why),
                    TokenRefusal::Busy(why) => Status::unavailable(why),
                })?
            }
            (None, Some(_), None) => {
                return Err(Status::unauthenticated(
                    "no client certificate and no bearer token",
                ))
            }
            (None, None, _) => {
                return Err(Status::unauthenticated("no client certificate"))
            }
        };
        let wanted = &request.get_ref().node_name;
        if node != *wanted {
            warn!(node, wanted, "refused: a node may watch its own view only");
            return Err(Status::permission_denied(format!(
                "{node} may not watch the view of {wanted}"
            )));
        }
        Ok(())
    }

    pub fn into_server(
        self,
    ) -> v1::node_view_server::NodeViewServer<ViewService> {
        v1::node_view_server::NodeViewServer::new(self)
            .max_decoding_message_size(MAX_REQUEST_BYTES)
    }
}

#[tonic::async_trait]
impl NodeViewRpc for ViewService {
    type WatchStream = ReceiverStream<Result<v1::ViewUpdate, Status>>;

    async fn watch(
        &self,
        request: Request<v1::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        if request.get_ref().node_name.is_empty() {
            Refusal::InvalidRequest.count();
            return Err(Status::invalid_argument("node_name is empty"));
        }
        self.authorize(&request).await?;
        let request = request.into_inner();
        let held = (request.instance == self.shared.instance)
            .then_some(request.revision);
        info!(
            node = request.node_name,
            resumes_from = ?held,
            "node watches its view"
        );
        // A couple of messages in flight: past that the watch waits for
        // the node, and changes merge in the view meanwhile.
        let (tx, rx) = mpsc::channel(2);
        tokio::spawn(stream_view(
            self.shared.clone(),
            request.node_name,
            held,
            tx,
        ));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The token of an `authorization: Bearer TOKEN` header.
fn bearer<T>(request: &Request<T>) -> Option<&str> {
    let value = request.metadata().get("authorization")?.to_str().ok()?;
    value
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|token| !token.is_empty())
}

/// The node a client certificate (DER) names: its subject's common
/// name, without the `system:node:` prefix of kubelet client
/// certificates.
pub fn node_of(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    let node = cn.strip_prefix("system:node:").unwrap_or(cn);
    (!node.is_empty()).then(|| node.to_owned())
}

async fn stream_view(
    shared: Arc<Shared>,
    node: String,
    mut held: Option<u64>,
    tx: mpsc::Sender<Result<v1::ViewUpdate, Status>>,
) {
    let _open = OpenWatch::new();
    let mut generation = shared.generation.subscribe();
    tokio::select! {
        listed = generation.wait_for(|g| *g > 0) => if listed.is_err() {
            return;
        },
        () = tx.closed() => return,
    }
    let mut first = true;
    loop {
        // Nothing new, but a node that just connected must still hear
        // that what it holds is consistent.
        let update = {
            let mut cluster = shared.cluster();
            let update = cluster.update_for(&node, held, first);
            // A node's first watch makes its view.
            metrics::gauge!(API_SIDE_VIEWS).set(cluster.views() as f64);
            update
        };
        first = false;
        if let Some(update) = update {
            let revision = update.revision;
            let kind = if update.full { "full" } else { "changes" };
            metrics::counter!(API_SIDE_UPDATES_SENT_TOTAL, "kind" => kind)
                .increment(1);
            metrics::counter!(API_SIDE_CHANGES_SENT_TOTAL)
                .increment(update.changes.len() as u64);
            for part in update.split(CHANGES_PER_MESSAGE) {
                let message = wire::encode(&part, &shared.instance);
                metrics::counter!(API_SIDE_SENT_BYTES_TOTAL)
                    .increment(message.encoded_len() as u64);
                let sent = tokio::time::timeout(
                    shared.send_timeout,
                    tx.send(Ok(message)),
                )
                .await;
                match sent {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => {
                        debug!(node, "node stopped watching");
                        return;
                    }
                    // Its buffers are freed; its view stays, and it
                    // resumes from its revision when it reads again.
                    Err(_) => {
                        Refusal::Stalled.count();
                        warn!(
                            node,
                            waited = ?shared.send_timeout,
                            "ended the watch of a node that did not read"
                        );
                        return;
                    }
                }
            }
            held = Some(revision);
        }
        // A node that goes away between syncs ends its watch now, not
        // at the next sync, which a quiet cluster may not have for hours.
        tokio::select! {
            changed = generation.changed() => if changed.is_err() {
                return;
            },
            () = tx.closed() => {
                debug!(node, "node stopped watching");
                return;
            }
        }
    }
}

/// Counts a watch as open for as long as it lives, however it ends.
struct OpenWatch;

impl OpenWatch {
    fn new() -> Self {
        metrics::gauge!(API_SIDE_WATCHES).increment(1.0);
        Self
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        metrics::gauge!(API_SIDE_WATCHES).decrement(1.0);
    }
}
