//! The file watched for edits: a new version is read and parsed, and
//! becomes a relist; a broken one is reported with file, line and reason
//! and changes nothing.

use std::{
    collections::VecDeque,
    hash::{Hash, Hasher},
    io,
    path::PathBuf,
    time::{Duration, SystemTime},
};

use futures::{stream, Stream};

use super::{parse, FileError, ParseError};
use crate::source::{kube::Admission, SourceEvent};

/// What tells one version of the file from another without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode: meta.ino(),
        }
    }
}

/// A write within the file system's timestamp granularity may leave the
/// stamp as it was; a file this fresh is read again at the next poll.
const SETTLE: Duration = Duration::from_secs(1);

pub(super) struct WatchState {
    path: PathBuf,
    poll: Duration,
    started: bool,
    /// The stamp of the contents last read, once old enough to trust.
    stamp: Option<Stamp>,
    /// A new stamp seen at the last poll, read if it holds until the next:
    /// a file written in place is empty or half-written for a moment, and
    /// an empty file is a valid state that would delete everything.
    pending: Option<Stamp>,
    /// Whether the file was read at all yet.
    read_once: bool,
    /// Hash of the contents last parsed, good or bad.
    contents: Option<u64>,
    last_read_error: Option<String>,
    /// The slices derived from Pods for the last good version, fed back so
    /// that an edit moves only what changed.
    derived: Vec<k8s_openapi::api::discovery::v1::EndpointSlice>,
    /// What an API server's selectors would have let through.
    admission: Admission,
    pub(super) queue: VecDeque<SourceEvent>,
}

impl WatchState {
    pub(super) fn new(
        path: PathBuf,
        poll: Duration,
        admission: Admission,
    ) -> Self {
        WatchState {
            admission,
            path,
            poll,
            started: false,
            stamp: None,
            pending: None,
            read_once: false,
            contents: None,
            last_read_error: None,
            derived: Vec::new(),
            queue: VecDeque::new(),
        }
    }

    /// Reads the file if it may have changed and queues a relist if its
    /// contents changed and parse.
    pub(super) async fn check(&mut self) {
        let meta = match tokio::fs::metadata(&self.path).await {
            Ok(meta) => meta,
            Err(e) => return self.read_failed(e),
        };
        let stamp = Stamp::of(&meta);
        if self.stamp.as_ref() == Some(&stamp) {
            return;
        }
        // The first read does not wait: the file is most likely at rest.
        if self.read_once && self.pending.as_ref() != Some(&stamp) {
            self.pending = Some(stamp);
            return;
        }
        self.read_once = true;
        self.pending = None;
        let text = match tokio::fs::read(&self.path).await {
            Ok(bytes) => bytes,
            Err(e) => return self.read_failed(e),
        };
        self.last_read_error = None;
        let settled = stamp
            .modified
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age >= SETTLE);
        self.stamp = settled.then_some(stamp);
        let hash = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            text.hash(&mut h);
            h.finish()
        };
        if self.contents == Some(hash) {
            return;
        }
        self.contents = Some(hash);
        let parsed = match String::from_utf8(text) {
            Ok(text) => parse(&text),
            Err(e) => Err(ParseError {
                line: None,
                column: None,
                reason: format!("not UTF-8: {e}"),
            }),
        };
        match parsed {
            Ok(mut snapshot) => {
                super::derive_endpoint_slices(&mut snapshot, &self.derived);
                self.derived = snapshot.endpoint_slices.clone();
                tracing::info!(
                    file = %self.path.display(),
                    services = snapshot.services.len(),
                    endpoint_slices = snapshot.endpoint_slices.len(),
                    nodes = snapshot.nodes.len(),
                    others = snapshot.others.len(),
                    "state file loaded"
                );
                self.queue
                    .extend(snapshot.admitted(&self.admission).relist());
            }
            Err(e) => tracing::error!(
                "{}; keeping the last good state",
                e.in_file(&self.path)
            ),
        }
    }

    /// Editors that replace the file by rename leave it missing for a
    /// moment: that is retried quietly, and only a new error is logged.
    fn read_failed(&mut self, e: io::Error) {
        let message = FileError::Read {
            file: self.path.clone(),
            source: e,
        }
        .to_string();
        if self.last_read_error.as_ref() != Some(&message) {
            tracing::warn!("{message}; keeping the last good state");
            self.last_read_error = Some(message);
        }
        self.stamp = None;
        self.pending = None;
    }
}

/// Watches the file by polling every `poll`: first a relist of its
/// contents (what `admission` lets through), then a relist whenever its
/// contents change and parse. The stream never ends.
pub fn watch(
    path: PathBuf,
    poll: Duration,
    admission: Admission,
) -> impl Stream<Item = SourceEvent> + Send + 'static {
    let state = WatchState::new(path, poll, admission);
    stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.queue.pop_front() {
                return Some((event, state));
            }
            if state.started {
                tokio::time::sleep(state.poll).await;
            }
            state.started = true;
            state.check().await;
        }
    })
}
