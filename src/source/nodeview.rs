//! A node's source when the API side feeds it (`--api-endpoint`): its
//! view, as consistent updates.
//!
//! The stream never ends. When the API side is unreachable or the stream
//! breaks, nothing is yielded (the kernel keeps what it has) and the
//! watch is made again with growing pauses, resuming from the revision
//! held. A batch that arrives in parts is yielded whole once its last
//! part is in, so that the node never programs half of one; a part that
//! cannot be decoded is logged with its entry and field, and the node
//! asks for a full state on the next watch.

use std::{fmt, path::PathBuf, time::Duration};

use nodeview_protocol::v1::{self, node_view_client::NodeViewClient};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};
use tracing::{info, warn};

use crate::{
    nodeview::{
        wire::{self, WireError},
        Update,
    },
};

/// Where the API side listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiEndpoint {
    /// `unix:///path`: a node-local socket, no TLS.
    Unix(PathBuf),
}

impl ApiEndpoint {
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.strip_prefix("unix://") {
            Some(path) if path.starts_with('/') => {
                Ok(ApiEndpoint::Unix(PathBuf::from(path)))
            }
            Some(_) => Err(format!("{value}: a unix:// address needs an absolute path")),
            None => Err(format!(
                "{value}: only unix:///PATH is served so far (TCP needs TLS)"
            )),
        }
    }

    pub async fn connect(
        &self,
    ) -> Result<NodeViewClient<Channel>, tonic::transport::Error> {
        match self {
            ApiEndpoint::Unix(path) => connect_unix(path.clone()).await,
        }
    }
}

impl fmt::Display for ApiEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiEndpoint::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
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
        source: tonic::transport::Error,
    },
    #[error("watching: {0}")]
    Status(#[from] tonic::Status),
    #[error(transparent)]
    Malformed(#[from] WireError),
    #[error("the API side ended the stream")]
    Ended,
}

/// The first pause after a broken watch, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const LONGEST_PAUSE: Duration = Duration::from_secs(30);

/// What a node holds: the server instance and revision to resume from.
#[derive(Debug, Default, Clone)]
struct Held {
    instance: String,
    revision: u64,
}

/// The node `node_name`'s view from the API side at `endpoint`.
pub fn watch(endpoint: ApiEndpoint, node_name: String) -> ReceiverStream<Update> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let mut held: Option<Held> = None;
        let mut pause = FIRST_PAUSE;
        loop {
            let before = held.as_ref().map(|h| h.revision);
            match session(&endpoint, &node_name, &mut held, &tx).await {
                Ok(()) => return,
                Err(error) => {
                    if matches!(error, WatchError::Malformed(_)) {
                        held = None;
                    }
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
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    });
    ReceiverStream::new(rx)
}

/// One watch: `Ok` when the node's loop is gone, an error otherwise.
async fn session(
    endpoint: &ApiEndpoint,
    node_name: &str,
    held: &mut Option<Held>,
    tx: &mpsc::Sender<Update>,
) -> Result<(), WatchError> {
    let mut client =
        endpoint
            .connect()
            .await
            .map_err(|source| WatchError::Connect {
                endpoint: endpoint.to_string(),
                source,
            })?;
    let from = held.clone().unwrap_or_default();
    let mut stream = client
        .watch(v1::WatchRequest {
            node_name: node_name.to_owned(),
            instance: from.instance,
            revision: from.revision,
        })
        .await?
        .into_inner();
    info!(%endpoint, resumes_from = ?held.as_ref().map(|h| h.revision), "watching the view");
    let mut batch: Option<Update> = None;
    while let Some(message) = stream.message().await? {
        let instance = message.instance.clone();
        let part = wire::decode(message)?;
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
fn merge(batch: Option<Update>, part: Update) -> Update {
    match batch {
        Some(mut batch) if !part.full => {
            batch.changes.extend(part.changes);
            batch.revision = part.revision;
            batch.synced = part.synced;
            batch
        }
        _ => part,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_tcp_is_refused_until_it_has_tls() {
        assert_eq!(
            ApiEndpoint::parse("unix:///run/views.sock"),
            Ok(ApiEndpoint::Unix("/run/views.sock".into()))
        );
        assert!(ApiEndpoint::parse("unix://views.sock").is_err());
        let tcp = ApiEndpoint::parse("198.18.0.1:9100").unwrap_err();
        assert!(tcp.contains("TLS"), "{tcp}");
    }

    #[test]
    fn parts_merge_into_one_batch_and_a_full_part_starts_over() {
        let part = |full, n: usize, synced| Update {
            full,
            changes: vec![
                crate::nodeview::Change::Delete(crate::nodeview::Key::Node);
                n
            ],
            revision: 9,
            synced,
        };
        let batch = merge(Some(part(true, 2, false)), part(false, 1, true));
        assert_eq!((batch.full, batch.changes.len(), batch.synced), (true, 3, true));
        let batch = merge(Some(part(false, 2, false)), part(true, 1, false));
        assert_eq!((batch.full, batch.changes.len()), (true, 1));
    }
}
