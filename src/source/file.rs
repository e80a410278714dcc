//! The state-file source: Services, EndpointSlices and Nodes read from a
//! YAML or JSON file, watched for changes, and turned into the same events
//! as the API-server source. It is the embedded default, so that the proxy
//! runs (and `plan` answers) without a cluster.
//!
//! The file holds several YAML documents, or a `List` as `kubectl get -o
//! yaml` writes it, or both; JSON is read the same way. Objects of other
//! kinds are kept aside in the snapshot. Every change of the file becomes a
//! full relist of the three kinds, which the store turns into a diff. A
//! broken edit is reported with file, line and reason, and changes nothing:
//! the last good state stays in force.

use std::{
    fmt, io,
    path::{Path, PathBuf},
};

use ::kube::runtime::watcher::Event;
use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};

use super::{kube::Admission, SourceEvent};

mod parse;
mod pods;
#[cfg(test)]
mod tests;
mod watch;

pub use parse::parse;
pub use pods::derive_endpoint_slices;
pub use watch::watch;

/// The objects of one version of the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub services: Vec<Service>,
    pub endpoint_slices: Vec<EndpointSlice>,
    pub nodes: Vec<Node>,
    /// Objects of other kinds (Pods, say), as read.
    pub others: Vec<serde_json::Value>,
}

impl Snapshot {
    /// A relist of each kind: what a watcher emits when it (re)starts, so
    /// that the store swaps in the new contents and diffs them.
    pub fn relist(&self) -> Vec<SourceEvent> {
        fn one<K: Clone>(
            objects: &[K],
            wrap: fn(Event<K>) -> SourceEvent,
        ) -> impl Iterator<Item = SourceEvent> + '_ {
            std::iter::once(wrap(Event::Init))
                .chain(objects.iter().cloned().map(Event::InitApply).map(wrap))
                .chain(std::iter::once(wrap(Event::InitDone)))
        }
        one(&self.services, SourceEvent::Service)
            .chain(one(&self.endpoint_slices, SourceEvent::EndpointSlice))
            .chain(one(&self.nodes, SourceEvent::Node))
            .collect()
    }

    /// The Services and EndpointSlices `admission` lets through, as an
    /// API server with the proxy's selectors would list them.
    pub fn admitted(&self, admission: &Admission) -> Snapshot {
        Snapshot {
            services: (self.services.iter())
                .filter(|s| admission.service(s.metadata.labels.as_ref()))
                .cloned()
                .collect(),
            endpoint_slices: (self.endpoint_slices.iter())
                .filter(|s| {
                    admission.endpoint_slice(s.metadata.labels.as_ref())
                })
                .cloned()
                .collect(),
            nodes: self.nodes.clone(),
            others: self.others.clone(),
        }
    }
}

/// Why the text could not be read, and where (1-based line and column,
/// when known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: Option<u64>,
    pub column: Option<u64>,
    pub reason: String,
}

impl ParseError {
    fn at_line(line: u64, reason: impl Into<String>) -> Self {
        Self {
            line: Some(line),
            column: None,
            reason: reason.into(),
        }
    }

    /// Moves a position inside a document to one inside the file.
    fn shifted(mut self, lines_before: u64) -> Self {
        self.line = self.line.map(|l| l + lines_before);
        self
    }

    pub fn in_file(self, file: &Path) -> FileError {
        FileError::Parse {
            file: file.to_path_buf(),
            error: self,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => {
                write!(f, "{line}:{column}: {}", self.reason)
            }
            (Some(line), None) => write!(f, "{line}: {}", self.reason),
            _ => write!(f, "{}", self.reason),
        }
    }
}

impl std::error::Error for ParseError {}

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{}: {source}", file.display())]
    Read { file: PathBuf, source: io::Error },
    /// Displays as `FILE:LINE[:COLUMN]: REASON`, as compilers do, so that
    /// editors can jump to it.
    #[error("{}:{error}", file.display())]
    Parse { file: PathBuf, error: ParseError },
}

/// Reads and parses the file once.
pub fn load(path: &Path) -> Result<Snapshot, FileError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| FileError::Read {
            file: path.to_path_buf(),
            source,
        })?;
    let mut snapshot = parse(&text).map_err(|e| e.in_file(path))?;
    derive_endpoint_slices(&mut snapshot, &[]);
    Ok(snapshot)
}
