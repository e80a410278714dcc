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
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc as std_mpsc, Arc, OnceLock,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use nodeview_protocol::{
    encoded::{self, NodeView as NodeViewRpc, Outgoing},
    prost::bytes::Bytes,
    v1,
};
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};

use super::{
    cluster::Cluster,
    limits::{Refusal, SEND_TIMEOUT, WALK_SEND_TIMEOUT},
    tokens::{TokenRefusal, TokenReviewer},
};
use crate::{
    nodeview::{wire, CatchUp, Position, Update},
    source::store::RecordChange,
    telemetry::{
        API_SIDE_CHANGES_SENT_TOTAL, API_SIDE_MESSAGES_ENCODED_TOTAL,
        API_SIDE_SENT_BYTES_TOTAL, API_SIDE_SYNC_DURATION_SECONDS,
        API_SIDE_UPDATES_SENT_TOTAL, API_SIDE_VIEWS, API_SIDE_WATCHES,
    },
    version::Kubernetes,
};

/// The largest watch request read. A node's name, an instance and a
/// revision take a few hundred bytes; tonic's default (4 MiB) would let
/// any client that reaches the port make the API side buffer that much
/// per stream before anything is checked.
pub const MAX_REQUEST_BYTES: usize = 4096;

/// The most changes one message carries. tonic keeps each stream's
/// encoding buffer at the size of the largest message it sent (8 KiB to
/// start with): at 128 changes, about 25 KiB, that was the largest part
/// of what every synced node costs the API side (a heap profile at 1,000
/// nodes). 32 changes of ten endpoints fit the first 8 KiB; a full state
/// at 10,000 services is then some 600 messages.
pub const CHANGES_PER_MESSAGE: usize = 32;

/// How many nodes may walk more than one message's worth of their view at
/// once. A reconnect storm of every node then holds this many walks'
/// buffers, not every node's whole view; the others wait their turn.
pub const MAX_WALKS: usize = 32;

/// The cluster's thread is gone: it panicked. The API side cannot serve
/// without it.
#[derive(Debug, thiserror::Error)]
#[error("the thread that holds the cluster's state has stopped")]
pub struct ClusterGone;

/// What the thread that owns the cluster is asked to do.
enum Work {
    Apply(Vec<RecordChange>),
    Sync {
        only_if_changed: bool,
        done: oneshot::Sender<u64>,
    },
    Next {
        node: String,
        position: Position,
        always: bool,
        reply: oneshot::Sender<Next>,
    },
}

/// The next part of what a node lacks, and the zone its view is made
/// for, whose shared catch-ups it can take from then on.
struct Next {
    part: Option<(Update, Position)>,
    zone: Option<String>,
    /// The syncs made so far, whose changes the node has with this part
    /// once it is synced.
    syncs: u64,
}

/// A catch-up that the nodes of a zone share, encoded once.
#[derive(Debug)]
struct SharedUpdate {
    bytes: Bytes,
    changes: usize,
}

/// How many syncs' catch-ups the watches are offered: a node still
/// sending one sync's when the next ones come takes theirs in turn.
const RECENT_SYNCS: usize = 8;

/// What the last syncs left the nodes they did not touch lacking, per
/// zone, oldest first, as each sync publishes it to the watches; empty
/// until the cluster was listed once.
type Published = Arc<[Arc<CatchUp<SharedUpdate>>]>;

/// What the feeding loop and the watches share. The cluster itself lives
/// on a thread of its own, which does its work (syncs, a node's first
/// view, the parts of each walk) in turn, off the async workers that move
/// the bytes.
#[derive(Debug)]
pub struct Shared {
    requests: std_mpsc::Sender<Work>,
    published: watch::Receiver<Published>,
    /// Revisions are this process's own: a node that comes back to
    /// another process (a restart, another replica) starts over.
    instance: String,
    /// How long a message may wait for its node to read it, in general
    /// and while the node holds a walk permit.
    send_timeout: Duration,
    walk_send_timeout: Duration,
    walks: Arc<Semaphore>,
    /// The watches this API side has open now (the gauge counts every
    /// API side of the process, which the tests run many of).
    open_watches: AtomicUsize,
    /// The release the API side behaves as, once read: each stream's
    /// first message tells the node.
    kubernetes: Arc<OnceLock<Kubernetes>>,
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Work::Apply(_) => "Apply",
            Work::Sync { .. } => "Sync",
            Work::Next { .. } => "Next",
        };
        f.write_str(name)
    }
}

impl Shared {
    /// Without a release to tell the nodes (the tests' and benches').
    #[cfg(any(test, feature = "test-support"))]
    pub fn new(cluster: Cluster) -> Arc<Self> {
        Self::with_kubernetes(cluster, Arc::default())
    }

    /// The same, telling each node the release that `kubernetes` holds
    /// once the source has put it there.
    pub fn with_kubernetes(
        cluster: Cluster,
        kubernetes: Arc<OnceLock<Kubernetes>>,
    ) -> Arc<Self> {
        Self::build(cluster, SEND_TIMEOUT, WALK_SEND_TIMEOUT, kubernetes)
    }

    /// The same, with the times a node has to read a message set, in
    /// general and in a walk (the tests' stalled nodes).
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_send_timeouts(
        cluster: Cluster,
        send_timeout: Duration,
        walk_send_timeout: Duration,
    ) -> Arc<Self> {
        Self::build(cluster, send_timeout, walk_send_timeout, Arc::default())
    }

    fn build(
        cluster: Cluster,
        send_timeout: Duration,
        walk_send_timeout: Duration,
        kubernetes: Arc<OnceLock<Kubernetes>>,
    ) -> Arc<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let instance = format!("{}-{nanos:x}", process::id());
        let (requests, inbox) = std_mpsc::channel();
        let (publish, published) = watch::channel(Published::from([]));
        let owner = {
            let instance = instance.clone();
            std::thread::Builder::new()
                .name("api-side-cluster".into())
                .spawn(move || own(cluster, &inbox, &publish, &instance))
        };
        if let Err(e) = owner {
            // Requests then fail, and the API side says so and exits.
            tracing::error!(error = %e, "starting the cluster's thread");
        }
        Arc::new(Self {
            requests,
            published,
            instance,
            send_timeout,
            walk_send_timeout,
            walks: Arc::new(Semaphore::new(MAX_WALKS)),
            open_watches: AtomicUsize::new(0),
            kubernetes,
        })
    }

    /// The watches open on this API side now: the tests wait on it for
    /// the server to have ended the watches of stalled nodes.
    #[cfg(test)]
    pub fn open_watches(&self) -> usize {
        self.open_watches.load(Ordering::Relaxed)
    }

    /// Takes the changes one source event made.
    pub fn apply(&self, changes: Vec<RecordChange>) -> Result<(), ClusterGone> {
        if changes.is_empty() {
            return Ok(());
        }
        self.requests
            .send(Work::Apply(changes))
            .map_err(|_| ClusterGone)
    }

    /// Brings the views up to date and wakes the watches; returns the
    /// views' revision. The first call says the cluster is listed and
    /// watches may start.
    pub async fn sync(&self) -> Result<u64, ClusterGone> {
        self.sync_request(false).await
    }

    /// The same, but only if the changes taken since the last sync
    /// changed anything.
    pub async fn sync_changes(&self) -> Result<u64, ClusterGone> {
        self.sync_request(true).await
    }

    async fn sync_request(
        &self,
        only_if_changed: bool,
    ) -> Result<u64, ClusterGone> {
        let (done, synced) = oneshot::channel();
        self.requests
            .send(Work::Sync {
                only_if_changed,
                done,
            })
            .map_err(|_| ClusterGone)?;
        synced.await.map_err(|_| ClusterGone)
    }

    /// The next part of what `node` lacks (see [`Cluster::next_for`]).
    async fn next(
        &self,
        node: &str,
        position: Position,
        always: bool,
    ) -> Result<Next, ClusterGone> {
        let (reply, next) = oneshot::channel();
        self.requests
            .send(Work::Next {
                node: node.to_owned(),
                position,
                always,
                reply,
            })
            .map_err(|_| ClusterGone)?;
        next.await.map_err(|_| ClusterGone)
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }
}

/// The cluster's thread: takes requests in turn until every sender is
/// gone.
fn own(
    mut cluster: Cluster,
    inbox: &std_mpsc::Receiver<Work>,
    publish: &watch::Sender<Published>,
    instance: &str,
) {
    let mut changed = false;
    let mut recent = std::collections::VecDeque::with_capacity(RECENT_SYNCS);
    while let Ok(request) = inbox.recv() {
        match request {
            Work::Apply(changes) => {
                for change in &changes {
                    changed |= cluster.apply(change);
                }
            }
            Work::Sync {
                only_if_changed,
                done,
            } => {
                if changed || !only_if_changed {
                    let started = Instant::now();
                    let catch_up = cluster
                        .sync(CHANGES_PER_MESSAGE)
                        .map(|update| encode_shared(&update, instance));
                    metrics::histogram!(API_SIDE_SYNC_DURATION_SECONDS)
                        .record(started.elapsed().as_secs_f64());
                    metrics::gauge!(API_SIDE_VIEWS).set(cluster.views() as f64);
                    if recent.len() == RECENT_SYNCS {
                        recent.pop_front();
                    }
                    recent.push_back(Arc::new(catch_up));
                    publish.send_replace(recent.iter().cloned().collect());
                    changed = false;
                }
                let _ = done.send(cluster.revision());
            }
            Work::Next {
                node,
                position,
                always,
                reply,
            } => {
                let part = cluster.next_for(
                    &node,
                    position,
                    always,
                    CHANGES_PER_MESSAGE,
                );
                // A node's first watch makes its view.
                metrics::gauge!(API_SIDE_VIEWS).set(cluster.views() as f64);
                let zone = cluster.zone_of(&node).map(str::to_owned);
                let syncs = cluster.syncs();
                let _ = reply.send(Next { part, zone, syncs });
            }
        }
    }
}

/// A zone's shared catch-up as its nodes receive it.
fn encode_shared(update: &Update, instance: &str) -> SharedUpdate {
    metrics::counter!(API_SIDE_MESSAGES_ENCODED_TOTAL).increment(1);
    SharedUpdate {
        bytes: Outgoing::encode(&wire::encode(update, instance)),
        changes: update.changes.len(),
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

    pub fn into_server(self) -> encoded::NodeViewServer<ViewService> {
        encoded::NodeViewServer::new(self)
            .max_decoding_message_size(MAX_REQUEST_BYTES)
    }
}

#[tonic::async_trait]
impl NodeViewRpc for ViewService {
    type WatchStream = ReceiverStream<Result<Outgoing, Status>>;

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
    held: Option<u64>,
    tx: mpsc::Sender<Result<Outgoing, Status>>,
) {
    let _open = OpenWatch::new(shared.clone());
    let mut published = shared.published.clone();
    tokio::select! {
        listed = published.wait_for(|p| !p.is_empty()) => if listed.is_err() {
            return;
        },
        () = tx.closed() => return,
    }
    let sent = Sent::new();
    let mut position = Position::Held(held);
    // Nothing new, but a node that just connected must still hear that
    // what it holds is consistent.
    let mut always = true;
    let mut announced = false;
    // The zone whose catch-ups the node shares, as its last walk said,
    // the last sync it heard of, and the last syncs' catch-ups.
    let mut zone: Option<String> = None;
    let mut seen = 0;
    let mut recent: Published = Arc::new([]);
    let mut first = true;
    loop {
        // A node that kept up takes the catch-ups of the syncs since the
        // last it heard of, in turn, each the same bytes as its zone's
        // other nodes; unless a sync touched it, or it fell further
        // behind: then it walks what it lacks, made for it.
        let mut must_walk = std::mem::take(&mut first);
        let known = announced || shared.kubernetes.get().is_none();
        for catch_up in recent.iter() {
            if must_walk {
                break;
            }
            if catch_up.sync <= seen {
                continue;
            }
            let part = match (position, &zone) {
                (Position::Held(Some(held)), Some(zone)) if known => {
                    catch_up.for_node(&node, zone, held, seen)
                }
                _ => None,
            };
            match part {
                Some(Some(part)) => {
                    sent.count(part.changes, false, true, part.bytes.len());
                    let message = Outgoing::Encoded(part.bytes.clone());
                    let timeout = shared.send_timeout;
                    if !send(&tx, &node, message, timeout).await {
                        return;
                    }
                    position = Position::Held(Some(catch_up.upto));
                    seen = catch_up.sync;
                }
                // Nothing it reads changed.
                Some(None) => seen = catch_up.sync,
                None => must_walk = true,
            }
        }
        if must_walk {
            let walked = walk(
                &shared,
                &node,
                &tx,
                &sent,
                Walker {
                    position: &mut position,
                    always: &mut always,
                    announced: &mut announced,
                    zone: &mut zone,
                    seen: &mut seen,
                },
            )
            .await;
            if !walked {
                return;
            }
        }
        // A node that goes away between syncs ends its watch now, not
        // at the next sync, which a quiet cluster may not have for hours.
        tokio::select! {
            changed = published.changed() => if changed.is_err() {
                return;
            },
            () = tx.closed() => {
                debug!(node, "node stopped watching");
                return;
            }
        }
        recent = published.borrow_and_update().clone();
    }
}

/// Sends `node` what it lacks, made for it, a part at a time, until it
/// holds a consistent state. False when the watch is over.
async fn walk(
    shared: &Shared,
    node: &str,
    tx: &mpsc::Sender<Result<Outgoing, Status>>,
    sent: &Sent,
    walker: Walker<'_>,
) -> bool {
    let Walker {
        position,
        always,
        announced,
        zone,
        seen,
    } = walker;
    let mut permit: Option<OwnedSemaphorePermit> = None;
    let mut full = false;
    loop {
        // A walk of more than one message (every node's first) waits
        // for its turn; a node that keeps up never does.
        let long = !matches!(position, Position::Held(Some(_)));
        if long && permit.is_none() {
            permit = tokio::select! {
                permit = shared.walks.clone().acquire_owned() => permit.ok(),
                () = tx.closed() => return false,
            };
        }
        let next = match shared.next(node, *position, *always).await {
            Ok(next) => next,
            Err(e) => {
                warn!(node, error = %e, "ending the watch");
                return false;
            }
        };
        *always = false;
        *zone = next.zone;
        *seen = next.syncs;
        let Some((update, next)) = next.part else {
            return true;
        };
        full |= update.full;
        let mut message = wire::encode(&update, &shared.instance);
        sent.encoded.increment(1);
        if !*announced {
            message.kubernetes =
                shared.kubernetes.get().map(wire::encode_kubernetes);
            *announced = message.kubernetes.is_some();
        }
        let message = Outgoing::Message(message);
        let bytes = message.encoded_len();
        sent.count(update.changes.len(), full, update.synced, bytes);
        drop(update);
        let timeout = if permit.is_some() {
            shared.walk_send_timeout
        } else {
            shared.send_timeout
        };
        if !send(tx, node, message, timeout).await {
            return false;
        }
        *position = next;
        if matches!(position, Position::Held(_)) {
            return true;
        }
    }
}

/// What a watch knows of its node, which a walk moves on.
struct Walker<'a> {
    position: &'a mut Position,
    always: &'a mut bool,
    announced: &'a mut bool,
    zone: &'a mut Option<String>,
    seen: &'a mut u64,
}

/// Sends one message, waiting at most `timeout` for the node to take
/// it. False when the watch is over: the node stopped watching, or did
/// not read.
async fn send(
    tx: &mpsc::Sender<Result<Outgoing, Status>>,
    node: &str,
    message: Outgoing,
    timeout: Duration,
) -> bool {
    match tokio::time::timeout(timeout, tx.send(Ok(message))).await {
        Ok(Ok(())) => true,
        Ok(Err(_)) => {
            debug!(node, "node stopped watching");
            false
        }
        // Its buffers are freed; its view stays, and it resumes from its
        // revision when it reads again.
        Err(_) => {
            Refusal::Stalled.count();
            warn!(
                node,
                waited = ?timeout,
                "ended the watch of a node that did not read"
            );
            false
        }
    }
}

/// One watch's counters, looked up once rather than at every message.
struct Sent {
    changes: metrics::Counter,
    full: metrics::Counter,
    updates: metrics::Counter,
    bytes: metrics::Counter,
    encoded: metrics::Counter,
}

impl Sent {
    fn new() -> Self {
        Self {
            changes: metrics::counter!(API_SIDE_CHANGES_SENT_TOTAL),
            full: metrics::counter!(API_SIDE_UPDATES_SENT_TOTAL, "kind" => "full"),
            updates: metrics::counter!(API_SIDE_UPDATES_SENT_TOTAL, "kind" => "changes"),
            bytes: metrics::counter!(API_SIDE_SENT_BYTES_TOTAL),
            encoded: metrics::counter!(API_SIDE_MESSAGES_ENCODED_TOTAL),
        }
    }

    /// A message of `changes` sent, of `bytes`; the last of an update,
    /// full or not, when `synced`.
    fn count(&self, changes: usize, full: bool, synced: bool, bytes: usize) {
        self.changes.increment(changes as u64);
        if synced {
            match full {
                true => self.full.increment(1),
                false => self.updates.increment(1),
            }
        }
        self.bytes.increment(bytes as u64);
    }
}

/// Counts a watch as open for as long as it lives, however it ends.
struct OpenWatch(Arc<Shared>);

impl OpenWatch {
    fn new(shared: Arc<Shared>) -> Self {
        metrics::gauge!(API_SIDE_WATCHES).increment(1.0);
        shared.open_watches.fetch_add(1, Ordering::Relaxed);
        Self(shared)
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        metrics::gauge!(API_SIDE_WATCHES).decrement(1.0);
        self.0.open_watches.fetch_sub(1, Ordering::Relaxed);
    }
}
