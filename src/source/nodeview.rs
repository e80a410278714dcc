//! A node's source when the API side feeds it (`--api-endpoint`): its
//! view, as consistent updates.
//!
//! The stream never ends. When the API side is unreachable or the stream
//! breaks, nothing is yielded (the kernel keeps what it has) and the
//! watch is made again with growing pauses, resuming from the revision
//! held. A batch that arrives in parts is yielded whole once its last
//! part is in, so that the node never programs half of one; a change
//! that cannot be decoded is logged with its entry and field, counted,
//! and left out, the entry keeping what it held.

use std::{path::PathBuf, time::Duration};

use nodeview_protocol::v1::{self, node_view_client::NodeViewClient};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity,
};
use tracing::{info, warn};

use crate::{
    nodeview::{
        endpoint::{ApiEndpoint, Credentials, TlsFiles},
        wire, Update,
    },
    telemetry::events::InternalEvent,
    version::Kubernetes,
};

/// A client of the view service at `endpoint`; `tls` is required for
/// an `https://` endpoint.
pub async fn connect(
    endpoint: &ApiEndpoint,
    tls: Option<&TlsFiles>,
) -> Result<NodeViewClient<Channel>, ConnectError> {
    match endpoint {
        ApiEndpoint::Unix(path) => Ok(connect_unix(path.clone()).await?),
        ApiEndpoint::Tls { host, port } => {
            let tls = tls.ok_or(ConnectError::NoCredentials)?;
            let mut config = ClientTlsConfig::new()
                .domain_name(host.trim_matches(['[', ']']))
                .ca_certificate(Certificate::from_pem(&tls.ca));
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            let channel =
                Endpoint::from_shared(format!("https://{host}:{port}"))?
                    .tls_config(config)?
                    .connect()
                    .await?;
            Ok(NodeViewClient::new(channel))
        }
    }
}

/// Why a connection to the API side failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("an https:// API side needs TLS credentials (--api-tls-dir)")]
    NoCredentials,
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
}

/// A client of the view service on the Unix socket `path`.
pub async fn connect_unix(
    path: PathBuf,
) -> Result<NodeViewClient<Channel>, tonic::transport::Error> {
    // The URI is unused: every connection goes to the socket.
    let channel = Endpoint::from_static("http://api-side.invalid")
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    UnixStream::connect(path).await?,
                ))
            }
        }))
        .await?;
    Ok(NodeViewClient::new(channel))
}

/// Why one watch ended.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("connecting to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: ConnectError,
    },
    #[error("watching: {0}")]
    Status(#[from] tonic::Status),
    #[error("the API side ended the stream")]
    Ended,
    #[error("the node's token: {0}")]
    Token(String),
}

/// The first pause after a broken watch, and the longest.
pub const FIRST_PAUSE: Duration = Duration::from_millis(500);
pub const LONGEST_PAUSE: Duration = Duration::from_secs(30);

/// What a node holds: the server instance and revision to resume from.
#[derive(Debug, Default, Clone)]
struct Held {
    instance: String,
    revision: u64,
}

/// The release the node reports as `kubernetes_build_info`: the first
/// one an API side names. The metric is one series for the process, as a
/// proxy watching the API server reads its release once; an API side
/// that comes back behaving as another release is logged, once for each.
#[derive(Debug, Default)]
pub(crate) struct Reported {
    reported: Option<Kubernetes>,
    warned: Option<Kubernetes>,
}

impl Reported {
    pub(crate) fn heard(&mut self, kubernetes: Kubernetes) {
        match &self.reported {
            None => {
                info!(
                    kubernetes = %kubernetes.git_version,
                    "behaving as the API side's Kubernetes release"
                );
                crate::telemetry::exporter::behaving_as(
                    &kubernetes,
                    &crate::version::BUILD,
                );
                self.reported = Some(kubernetes);
            }
            Some(held) if *held == kubernetes => {}
            Some(held) => {
                if self.warned.as_ref() != Some(&kubernetes) {
                    warn!(
                        kubernetes = %kubernetes.git_version,
                        reported = %held.git_version,
                        "the API side now behaves as another Kubernetes \
                         release; kubernetes_build_info keeps the first \
                         until this proxy restarts"
                    );
                    self.warned = Some(kubernetes);
                }
            }
        }
    }
}

/// The node `node_name`'s view from the API side at `endpoint`, watched
/// by a task on `runtime` (a runtime of the caller's choosing, rather
/// than whichever is current: outside one, tokio would panic).
pub fn watch(
    runtime: &tokio::runtime::Handle,
    endpoint: ApiEndpoint,
    credentials: Credentials,
    node_name: String,
) -> ReceiverStream<Update> {
    let (tx, rx) = mpsc::channel(4);
    runtime.spawn(async move {
        let mut held: Option<Held> = None;
        let mut reported = Reported::default();
        let mut pause = FIRST_PAUSE;
        loop {
            let before = held.as_ref().map(|h| h.revision);
            let session = session(
                &endpoint,
                &credentials,
                &node_name,
                &mut held,
                &mut reported,
                &tx,
            );
            match session.await {
                Ok(()) => return,
                Err(error) => {
                    warn!(
                        %endpoint,
                        %error,
                        retry_in = ?pause,
                        "no view from the API side; the kernel keeps its state"
                    );
                }
            }
            // A watch that delivered something starts the pauses over.
            if held.is_some() && held.as_ref().map(|h| h.revision) != before {
                pause = FIRST_PAUSE;
            }
            tokio::select! {
                () = tokio::time::sleep(spread(pause)) => {}
                () = tx.closed() => return,
            }
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    });
    ReceiverStream::new(rx)
}

/// `pause`, shortened by a random part of up to half: the nodes that
/// lost their API side at the same moment (it restarted) come back
/// spread over time rather than all at once at each step of the pauses.
pub fn spread(pause: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // Each RandomState has keys of its own: std's randomness, no crate.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let fraction = (random % 1024) as f64 / 1024.0;
    pause.mul_f64(1.0 - fraction / 2.0)
}

/// The node's first consistent view, in one attempt: for `plan`, which
/// would rather say why it has none than wait for the API side to change
/// its mind.
pub async fn first_view(
    endpoint: &ApiEndpoint,
    credentials: &Credentials,
    node_name: &str,
) -> Result<Update, WatchError> {
    let (tx, mut rx) = mpsc::channel(1);
    let mut held = None;
    let mut reported = Reported::default();
    let attempt = session(
        endpoint,
        credentials,
        node_name,
        &mut held,
        &mut reported,
        &tx,
    );
    tokio::select! {
        ended = attempt => match ended {
            Err(error) => Err(error),
            Ok(()) => Err(WatchError::Ended),
        },
        Some(update) = rx.recv() => Ok(update),
    }
}

/// One watch: `Ok` when the node's loop is gone, an error otherwise.
async fn session(
    endpoint: &ApiEndpoint,
    credentials: &Credentials,
    node_name: &str,
    held: &mut Option<Held>,
    reported: &mut Reported,
    tx: &mpsc::Sender<Update>,
) -> Result<(), WatchError> {
    let mut client = connect(endpoint, credentials.tls.as_ref())
        .await
        .map_err(|source| WatchError::Connect {
            endpoint: endpoint.to_string(),
            source,
        })?;
    let from = held.clone().unwrap_or_default();
    let mut request = tonic::Request::new(v1::WatchRequest {
        node_name: node_name.to_owned(),
        instance: from.instance,
        revision: from.revision,
    });
    if let Some(path) = &credentials.token_file {
        let token = std::fs::read_to_string(path).map_err(|e| {
            WatchError::Token(format!("{}: {e}", path.display()))
        })?;
        let value =
            format!("Bearer {}", token.trim()).parse().map_err(|_| {
                WatchError::Token(format!("{}: not a token", path.display()))
            })?;
        request.metadata_mut().insert("authorization", value);
    }
    let mut stream = client.watch(request).await?.into_inner();
    info!(%endpoint, resumes_from = ?held.as_ref().map(|h| h.revision), "watching the view");
    let mut batch: Option<Update> = None;
    loop {
        // Whoever took the view may go (a test, `plan`) while the API side
        // is quiet: the watch ends then, not at the next change.
        let message = tokio::select! {
            message = stream.message() => message?,
            () = tx.closed() => return Ok(()),
        };
        let Some(mut message) = message else { break };
        if let Some(kubernetes) = message.kubernetes.take() {
            match wire::decode_kubernetes(kubernetes) {
                Ok(kubernetes) => reported.heard(kubernetes),
                Err(problem) => (&problem).emit(),
            }
        }
        let instance = message.instance.clone();
        let (part, rejected) = wire::decode_skipping(message);
        for problem in &rejected {
            problem.emit();
        }
        let whole = merge(batch.take(), part);
        if !whole.synced {
            batch = Some(whole);
            continue;
        }
        *held = Some(Held {
            instance,
            revision: whole.revision,
        });
        if tx.send(whole).await.is_err() {
            return Ok(());
        }
    }
    Err(WatchError::Ended)
}

/// A batch's parts so far, and the next one.
pub(crate) fn merge(batch: Option<Update>, part: Update) -> Update {
    match batch {
        Some(mut batch) if !part.full => {
            batch.changes.extend(part.changes);
            batch.revision = part.revision;
            batch.synced = part.synced;
            // A service's ports may come in different parts, each with
            // the service's times: each time counts once.
            for (service, times) in part.trigger_times {
                let held = batch.trigger_times.entry(service).or_default();
                for time in times {
                    if !held.contains(&time) {
                        held.push(time);
                    }
                }
            }
            batch
        }
        _ => part,
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    /// Started from a thread with no runtime, the watch runs on the one
    /// it is given, and ends when its reader goes.
    #[test]
    fn the_watch_runs_on_the_runtime_it_is_given() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut view = watch(
            runtime.handle(),
            ApiEndpoint::Unix("/nonexistent/views.sock".into()),
            Credentials::default(),
            "node-a".to_owned(),
        );
        // Nothing answers: no update within a pause, the task retrying.
        let waited = runtime.block_on(async {
            tokio::time::timeout(Duration::from_millis(200), view.next()).await
        });
        assert!(waited.is_err(), "an update from nowhere");
        drop(view);
        drop(runtime);
    }

    #[test]
    fn parts_merge_into_one_batch_and_a_full_part_starts_over() {
        let part = |full, n: usize, synced| Update {
            full,
            changes: vec![
                crate::nodeview::Change::Delete(
                    crate::nodeview::Key::Node
                );
                n
            ],
            revision: 9,
            synced,
            trigger_times: Default::default(),
        };
        let batch = merge(Some(part(true, 2, false)), part(false, 1, true));
        assert_eq!(
            (batch.full, batch.changes.len(), batch.synced),
            (true, 3, true)
        );
        let batch = merge(Some(part(false, 2, false)), part(true, 1, false));
        assert_eq!((batch.full, batch.changes.len()), (true, 1));
    }

    /// One series for the process: the first release heard, whatever
    /// API side comes next.
    #[test]
    fn the_first_release_heard_is_the_one_reported() {
        let release = |minor: &str| Kubernetes {
            major: "1".into(),
            minor: minor.into(),
            git_version: format!("v1.{minor}.0"),
        };
        let text = crate::telemetry::tests::render(|| {
            let mut reported = Reported::default();
            reported.heard(release("36"));
            reported.heard(release("36"));
            reported.heard(release("37"));
            reported.heard(release("37"));
        });
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("kubernetes_build_info{"))
            .collect();
        assert_eq!(series.len(), 1, "{text}");
        assert!(series[0].contains(r#"git_version="v1.36.0""#), "{text}");
        assert!(series[0].contains(r#"minor="36""#), "{text}");

        let none = crate::telemetry::tests::render(|| {
            Reported::default();
        });
        assert!(!none.contains("kubernetes_build_info{"), "{none}");
    }

    #[test]
    fn pauses_are_spread_over_their_upper_half() {
        let pause = Duration::from_secs(8);
        let spread: Vec<Duration> = (0..64).map(|_| spread(pause)).collect();
        assert!(spread.iter().all(|p| *p > pause / 2 && *p <= pause));
        let distinct: std::collections::BTreeSet<_> = spread.iter().collect();
        assert!(distinct.len() > 32, "{distinct:?}");
    }

    #[test]
    fn a_service_s_times_in_two_parts_count_once() {
        use std::time::{SystemTime, UNIX_EPOCH};
        let service = crate::model::NamespacedName::new("ns", "web");
        let (t1, t2) = (
            UNIX_EPOCH + Duration::from_secs(1),
            UNIX_EPOCH + Duration::from_secs(2),
        );
        let part = |times: Vec<SystemTime>, synced| Update {
            full: false,
            changes: Vec::new(),
            revision: 9,
            synced,
            trigger_times: [(service.clone(), times)].into(),
        };
        let batch =
            merge(Some(part(vec![t1], false)), part(vec![t1, t2], true));
        assert_eq!(batch.trigger_times[&service], [t1, t2]);
    }
}
