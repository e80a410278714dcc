use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

/// Everything a fixture can fail with; each names what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start `{command}`: {source}")]
    Spawn { command: String, source: io::Error },

    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },

    #[error("the testpod server is not at {}: build it with `cargo build -p testkit --bin testpod` or set TESTKIT_TESTPOD", .path.display())]
    NoTestpod { path: PathBuf },

    #[error("pod {pod}: {reason}")]
    Pod { pod: String, reason: String },

    #[error("pod addresses exhausted: at most {max} pods per test process")]
    TooManyPods { max: u32 },

    #[error("{what} {addr}: {source}")]
    Traffic {
        what: String,
        addr: std::net::SocketAddr,
        source: io::Error,
    },

    #[error("{what} {addr}: unexpected answer {answer:?}")]
    BadAnswer {
        what: String,
        addr: std::net::SocketAddr,
        answer: String,
    },
}
