//! One kind's list and watch, in the encoding kube-proxy reads: the
//! API server's protobuf, or JSON when asked for it or when that is all
//! the server answers with.
//!
//! kube-runtime's watcher speaks JSON only. This one makes the same
//! requests (kube-core builds them) and the same steps: a relist in pages
//! of 500 (kube-core drops the watcher's `resourceVersion=0` beside a
//! limit, so each is a consistent read), handed on as `Init`,
//! `InitApply`…, `InitDone`, each page asked for as soon as the one
//! before names it, while that one's objects are handed on; a watch from
//! the list's version with bookmarks, resumed from the last version seen
//! when the server ends it, and a relist when the server answers 410
//! Gone. Errors are yielded and the stream goes on, for a backoff to pace
//! (`WatchStreamExt`'s, as before). The response's `Content-Type` decides
//! how it is read, as client-go's does.

#[cfg(test)]
mod tests;

use std::{collections::VecDeque, fmt, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{stream, Stream};
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt as _;
use kube::{
    api::{ListParams, ObjectList, VersionMatch, WatchParams},
    client::Body,
    core::{Request, WatchEvent as JsonEvent},
    runtime::watcher::Event,
    Client, Resource,
};
use serde::de::DeserializeOwned;

use super::{
    protobuf::{self, Frames, FromProtobuf, WatchEvent},
    watched::Watched,
};

/// kube-runtime's page size and server-side watch timeout.
const PAGE: u32 = 500;
const WATCH_TIMEOUT_S: u32 = 290;
/// A watch that has said nothing, not even a bookmark, this long past its
/// timeout is a dead connection.
const IDLE_MARGIN: Duration = Duration::from_secs(30);

/// The `Accept` header, as client-go makes it from
/// `clientConnection.acceptContentTypes` and `contentType`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accept(HeaderValue);

impl Accept {
    /// kube-proxy's default: `contentType` protobuf, no
    /// `acceptContentTypes`.
    pub fn protobuf() -> Self {
        Self(HeaderValue::from_static(
            "application/vnd.kubernetes.protobuf, */*",
        ))
    }

    /// The configuration's, which checked both values.
    pub fn configured(types: &crate::config::ApiContentTypes) -> Self {
        Self::new(&types.accept_content_types, &types.content_type)
            .unwrap_or_else(Self::protobuf)
    }

    /// `acceptContentTypes` when set, else `contentType` and anything;
    /// `None` when that is no header value.
    pub fn new(accept_content_types: &str, content_type: &str) -> Option<Self> {
        let value = if !accept_content_types.is_empty() {
            accept_content_types.to_owned()
        } else if !content_type.is_empty() {
            format!("{content_type}, */*")
        } else {
            "application/json, */*".to_owned()
        };
        HeaderValue::from_str(&value).ok().map(Self)
    }
}

impl fmt::Display for Accept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.to_str().unwrap_or_default())
    }
}

/// What a list or watch met.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{request}: {source}")]
    Request {
        request: &'static str,
        source: kube::Error,
    },
    #[error("{request}: HTTP {code}: {message}")]
    Status {
        request: &'static str,
        code: u16,
        message: String,
    },
    #[error("{request}: {reason}")]
    Decode {
        request: &'static str,
        reason: String,
    },
    #[error("watch: the API server reports {code} {reason}: {message}")]
    Event {
        code: i32,
        reason: String,
        message: String,
    },
    #[error("{0}: an object without a resourceVersion")]
    NoResourceVersion(&'static str),
    #[error("watch: {0}; resuming on a new watch")]
    OutOfStep(String),
    #[error("list: the next page's request ended: {0}")]
    NextPage(String),
}

/// A kind this list and watch reads.
pub trait Listed:
    FromProtobuf + Resource<DynamicType = ()> + Clone + Send + 'static
where
    Watched<Self>: DeserializeOwned,
{
}

impl<K> Listed for K
where
    K: FromProtobuf + Resource<DynamicType = ()> + Clone + Send + 'static,
    Watched<K>: DeserializeOwned,
{
}

/// Which objects to read.
#[derive(Clone, Debug, Default)]
pub struct Selectors {
    pub labels: String,
    pub fields: String,
}

/// How a response's body is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn of(response: &Response<Body>) -> Self {
        let protobuf = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(protobuf::MEDIA_TYPE));
        if protobuf {
            Self::Protobuf
        } else {
            Self::Json
        }
    }
}

/// An open watch: its body and the bytes of an event not yet whole.
struct Watch {
    body: Body,
    encoding: Encoding,
    frames: Frames,
    /// JSON's events, one per line.
    line: Vec<u8>,
}

enum State<K> {
    Empty,
    InitPage {
        continue_token: Option<String>,
        objects: VecDeque<K>,
        resource_version: Option<String>,
        next: Option<NextPage<K>>,
    },
    InitListed {
        resource_version: String,
    },
    Watching {
        resource_version: String,
        watch: Box<Watch>,
    },
}

/// The next page of a list, asked for as soon as its token is known:
/// the API server prepares it while this page's objects are handed on,
/// rather than after. Dropped, it is no longer waited for.
struct NextPage<K>(tokio::task::JoinHandle<Result<protobuf::Page<K>, Error>>);

impl<K: Listed> NextPage<K>
where
    Watched<K>: DeserializeOwned,
{
    fn ask(lister: &Arc<Lister>, token: String) -> Self {
        let lister = Arc::clone(lister);
        Self(tokio::spawn(
            async move { lister.list::<K>(Some(token)).await },
        ))
    }

    async fn take(mut self) -> Result<protobuf::Page<K>, Error> {
        (&mut self.0)
            .await
            .unwrap_or_else(|e| Err(Error::NextPage(e.to_string())))
    }
}

impl<K> Drop for NextPage<K> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Lister {
    client: Client,
    accept: Accept,
    request: Request,
    selectors: Selectors,
}

fn selector(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

impl Lister {
    async fn send(
        &self,
        what: &'static str,
        request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<Response<Body>, Error> {
        let mut request = request.map_err(|err| Error::Decode {
            request: what,
            reason: err.to_string(),
        })?;
        request
            .headers_mut()
            .insert(header::ACCEPT, self.accept.0.clone());
        let response =
            self.client.send(request.map(Body::from)).await.map_err(
                |source| Error::Request {
                    request: what,
                    source,
                },
            )?;
        if response.status().is_success() {
            return Ok(response);
        }
        let code = response.status();
        let encoding = Encoding::of(&response);
        let bytes = response
            .into_body()
            .collect_bytes()
            .await
            .unwrap_or_default();
        Err(Error::Status {
            request: what,
            code: code.as_u16(),
            message: status_message(encoding, &bytes, code),
        })
    }

    async fn list<K: Listed>(
        &self,
        continue_token: Option<String>,
    ) -> Result<protobuf::Page<K>, Error>
    where
        Watched<K>: DeserializeOwned,
    {
        let params = ListParams {
            label_selector: selector(&self.selectors.labels),
            field_selector: selector(&self.selectors.fields),
            resource_version: Some("0".into()),
            version_match: Some(VersionMatch::NotOlderThan),
            limit: Some(PAGE),
            continue_token,
            ..ListParams::default()
        };
        let asked = std::time::Instant::now();
        let response = self.send("list", self.request.list(&params)).await?;
        let encoding = Encoding::of(&response);
        let bytes =
            response
                .into_body()
                .collect_bytes()
                .await
                .map_err(|source| Error::Request {
                    request: "list",
                    source,
                })?;
        let decode = |reason: String| Error::Decode {
            request: "list",
            reason,
        };
        let received = asked.elapsed();
        let page = match encoding {
            Encoding::Protobuf => {
                protobuf::list::<K>(&bytes).map_err(|e| decode(e.to_string()))
            }
            Encoding::Json => {
                let list: ObjectList<Watched<K>> =
                    serde_json::from_slice(&bytes)
                        .map_err(|e| decode(e.to_string()))?;
                Ok(protobuf::Page {
                    resource_version: list.metadata.resource_version,
                    continue_token: list
                        .metadata
                        .continue_
                        .filter(|token| !token.is_empty()),
                    items: list.items.into_iter().map(|w| w.0).collect(),
                })
            }
        };
        tracing::debug!(
            bytes = bytes.len(),
            ?received,
            decoded = ?asked.elapsed().saturating_sub(received),
            "listed a page"
        );
        page
    }

    async fn watch(&self, resource_version: &str) -> Result<Watch, Error> {
        let params = WatchParams {
            label_selector: selector(&self.selectors.labels),
            field_selector: selector(&self.selectors.fields),
            timeout: Some(WATCH_TIMEOUT_S),
            bookmarks: true,
            send_initial_events: false,
        };
        let response = self
            .send("watch", self.request.watch(&params, resource_version))
            .await?;
        Ok(Watch {
            encoding: Encoding::of(&response),
            body: response.into_body(),
            frames: Frames::default(),
            line: Vec::new(),
        })
    }
}

/// The message of an error response, whichever way it is encoded.
fn status_message(
    encoding: Encoding,
    bytes: &[u8],
    code: StatusCode,
) -> String {
    let message = match encoding {
        Encoding::Protobuf => protobuf::status(bytes).ok().map(|s| s.message),
        Encoding::Json => serde_json::from_slice::<kube::core::Status>(bytes)
            .ok()
            .map(|s| s.message),
    };
    message
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| code.canonical_reason().unwrap_or("").to_owned())
}

impl Watch {
    /// The next event, `None` when the server has ended the watch (its
    /// timeout) or the connection has gone quiet.
    async fn next<K: Listed>(&mut self) -> Option<Result<WatchEvent<K>, Error>>
    where
        Watched<K>: DeserializeOwned,
    {
        loop {
            if let Some(event) = self.buffered::<K>() {
                return Some(event);
            }
            let idle =
                Duration::from_secs(WATCH_TIMEOUT_S.into()) + IDLE_MARGIN;
            let frame = match tokio::time::timeout(idle, self.body.frame())
                .await
            {
                Err(_) => {
                    tracing::debug!("watch idle past its timeout; resuming");
                    return None;
                }
                Ok(None) => return None,
                Ok(Some(Err(source))) => {
                    return Some(Err(Error::Request {
                        request: "watch",
                        source,
                    }))
                }
                Ok(Some(Ok(frame))) => frame,
            };
            if let Ok(data) = frame.into_data() {
                self.push(&data);
            }
        }
    }

    fn push(&mut self, data: &Bytes) {
        match self.encoding {
            Encoding::Protobuf => self.frames.push(data),
            Encoding::Json => self.line.extend_from_slice(data),
        }
    }

    /// An event already whole in what has arrived.
    fn buffered<K: Listed>(&mut self) -> Option<Result<WatchEvent<K>, Error>>
    where
        Watched<K>: DeserializeOwned,
    {
        let decode = |reason: String| Error::Decode {
            request: "watch",
            reason,
        };
        match self.encoding {
            Encoding::Protobuf => match self.frames.next_frame() {
                Ok(None) => None,
                Ok(Some(frame)) => Some(
                    protobuf::watch_event::<K>(frame)
                        .map_err(|e| decode(e.to_string())),
                ),
                // Out of step: nothing after it can be read.
                Err(e) => Some(Err(Error::OutOfStep(e.to_string()))),
            },
            Encoding::Json => {
                let end = self.line.iter().position(|&b| b == b'\n')?;
                let line: Vec<u8> = self.line.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    return self.buffered::<K>();
                }
                Some(json_event::<K>(&line).map_err(decode))
            }
        }
    }
}

fn json_event<K>(line: &[u8]) -> Result<WatchEvent<K>, String>
where
    Watched<K>: DeserializeOwned,
    K: Resource,
{
    let event: JsonEvent<Watched<K>> =
        serde_json::from_slice(line).map_err(|e| e.to_string())?;
    Ok(match event {
        JsonEvent::Added(w) => WatchEvent::Added(w.0),
        JsonEvent::Modified(w) => WatchEvent::Modified(w.0),
        JsonEvent::Deleted(w) => WatchEvent::Deleted(w.0),
        JsonEvent::Bookmark(b) => {
            WatchEvent::Bookmark(Some(b.metadata.resource_version))
        }
        JsonEvent::Error(e) => WatchEvent::Error(protobuf::Status {
            code: i32::from(e.code),
            reason: e.reason,
            message: e.message,
        }),
    })
}

/// One step: the event it yields, if any, and the state after it.
async fn step<K: Listed>(
    lister: &Arc<Lister>,
    state: State<K>,
) -> (Option<Result<Event<K>, Error>>, State<K>)
where
    Watched<K>: DeserializeOwned,
{
    match state {
        State::Empty => (
            Some(Ok(Event::Init)),
            State::InitPage {
                continue_token: None,
                objects: VecDeque::new(),
                resource_version: None,
                next: None,
            },
        ),
        State::InitPage {
            continue_token,
            mut objects,
            resource_version,
            next,
        } => {
            if let Some(object) = objects.pop_front() {
                return (
                    Some(Ok(Event::InitApply(object))),
                    State::InitPage {
                        continue_token,
                        objects,
                        resource_version,
                        next,
                    },
                );
            }
            if continue_token.is_none() {
                if let Some(resource_version) = resource_version {
                    return (
                        Some(Ok(Event::InitDone)),
                        State::InitListed { resource_version },
                    );
                }
            }
            let page = match next {
                Some(next) => next.take().await,
                None => lister.list::<K>(continue_token).await,
            };
            match page {
                Ok(page) => {
                    let resource_version =
                        page.resource_version.filter(|v| !v.is_empty());
                    if resource_version.is_none()
                        && page.continue_token.is_none()
                    {
                        return (
                            Some(Err(Error::NoResourceVersion("list"))),
                            State::Empty,
                        );
                    }
                    let next = (page.continue_token.clone())
                        .map(|token| NextPage::ask(lister, token));
                    (
                        None,
                        State::InitPage {
                            continue_token: page.continue_token,
                            objects: page.items.into(),
                            resource_version,
                            next,
                        },
                    )
                }
                Err(err) => (Some(Err(err)), State::Empty),
            }
        }
        State::InitListed { resource_version } => {
            match lister.watch(&resource_version).await {
                Ok(watch) => (
                    None,
                    State::Watching {
                        resource_version,
                        watch: Box::new(watch),
                    },
                ),
                // Gone at the start: the version is too old to resume.
                Err(err @ Error::Status { code: 410, .. }) => {
                    (Some(Err(err)), State::Empty)
                }
                Err(err) => {
                    (Some(Err(err)), State::InitListed { resource_version })
                }
            }
        }
        State::Watching {
            resource_version,
            mut watch,
        } => match watch.next::<K>().await {
            None => (None, State::InitListed { resource_version }),
            Some(Ok(event)) => match event {
                WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                    applied(obj, watch, Event::Apply)
                }
                WatchEvent::Deleted(obj) => applied(obj, watch, Event::Delete),
                WatchEvent::Bookmark(version) => {
                    let resource_version = version
                        .filter(|v| !v.is_empty())
                        .unwrap_or(resource_version);
                    (
                        None,
                        State::Watching {
                            resource_version,
                            watch,
                        },
                    )
                }
                WatchEvent::Error(status) => {
                    let next = if status.code == 410 {
                        State::Empty
                    } else {
                        State::Watching {
                            resource_version,
                            watch,
                        }
                    };
                    let err = Error::Event {
                        code: status.code,
                        reason: status.reason,
                        message: status.message,
                    };
                    (Some(Err(err)), next)
                }
            },
            // One event that does not decode is skipped, the watch going
            // on, as kube-runtime's watcher does: resuming would be sent
            // the same event again, and nothing after it would arrive.
            Some(Err(err @ Error::Decode { .. })) => (
                Some(Err(err)),
                State::Watching {
                    resource_version,
                    watch,
                },
            ),
            // A broken connection or a stream out of step: resume from
            // the last version seen, on a new watch.
            Some(Err(err)) => {
                (Some(Err(err)), State::InitListed { resource_version })
            }
        },
    }
}

/// An object's event, the watch going on from its version.
fn applied<K: Resource>(
    obj: K,
    watch: Box<Watch>,
    event: fn(K) -> Event<K>,
) -> (Option<Result<Event<K>, Error>>, State<K>) {
    match obj
        .meta()
        .resource_version
        .clone()
        .filter(|v| !v.is_empty())
    {
        Some(resource_version) => (
            Some(Ok(event(obj))),
            State::Watching {
                resource_version,
                watch,
            },
        ),
        None => (Some(Err(Error::NoResourceVersion("watch"))), State::Empty),
    }
}

impl fmt::Debug for Lister {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lister")
            .field("accept", &self.accept)
            .field("selectors", &self.selectors)
            .finish_non_exhaustive()
    }
}

/// Every object of kind `K` that `selectors` select, as a never-ending
/// stream of watcher events and errors.
pub fn list_watch<K: Listed>(
    client: Client,
    accept: Accept,
    selectors: Selectors,
) -> impl Stream<Item = Result<Event<K>, Error>> + Send
where
    Watched<K>: DeserializeOwned,
{
    let lister = Arc::new(Lister {
        client,
        accept,
        request: Request::new(K::url_path(&(), None)),
        selectors,
    });
    stream::unfold(
        (lister, State::<K>::Empty),
        |(lister, mut state)| async move {
            loop {
                let (event, next) = step(&lister, state).await;
                state = next;
                if let Some(event) = event {
                    return Some((event, (lister, state)));
                }
            }
        },
    )
}
