//! The binary's modes, each wired here from its configuration: the node
//! proxy ([`node`]), the API side of the split ([`api_side`]), `plan`
//! ([`plan`]), `list` ([`list`]), `explain` ([`explain`]) and `--cleanup`
//! ([`cleanup`]). `main.rs`
//! parses the command line, loads the configuration and calls one of
//! them; what each mode starts and in which order is here, where a test
//! can run it in-process.

pub mod api_side;
pub mod cleanup;
mod clients;
pub mod explain;
pub mod list;
pub mod node;
mod one_shot;
pub mod plan;
#[cfg(test)]
mod tests;

use std::{
    fmt,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    config::{
        Config, EXIT_BAD_CONFIG, EXIT_FORBIDDEN, EXIT_KERNEL_UNSUPPORTED,
    },
    kernel::capabilities::{Forbidden, Refused, Unsupported},
    nodeview::endpoint::{ApiEndpoint, Credentials, TlsFiles},
};

/// Why a mode stopped; each kind has its exit status.
#[derive(Debug)]
pub enum Failure {
    /// The configuration cannot be used: status 64.
    BadConfig(anyhow::Error),
    /// The kernel lacks what IPVS mode needs: status 69.
    Unsupported(Unsupported),
    /// This process lacks a capability the kernel asks for: status 77.
    Forbidden(Forbidden),
    /// A step that retrying would not mend: status 1.
    Failed(anyhow::Error),
}

impl Failure {
    pub fn bad_config(message: impl fmt::Display) -> Self {
        Failure::BadConfig(anyhow::anyhow!("{message}"))
    }

    pub fn exit_status(&self) -> u8 {
        match self {
            Failure::BadConfig(_) => EXIT_BAD_CONFIG,
            Failure::Unsupported(_) => EXIT_KERNEL_UNSUPPORTED,
            Failure::Forbidden(_) => EXIT_FORBIDDEN,
            Failure::Failed(_) => 1,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `{:#}` keeps an error's whole context chain on one line.
        match self {
            Failure::BadConfig(e) | Failure::Failed(e) => write!(f, "{e:#}"),
            Failure::Unsupported(e) => write!(f, "{e}"),
            Failure::Forbidden(e) => write!(f, "{e}"),
        }
    }
}

impl From<Refused> for Failure {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Forbidden(e) => Failure::Forbidden(e),
            Refused::Unsupported(e) => Failure::Unsupported(e),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Failure::Failed(error)
    }
}

/// Where a proxy takes the cluster from: `--api-endpoint` (with its
/// credentials), `--state`, or the API server (`--kubeconfig`, or the
/// in-cluster configuration).
#[derive(Debug, Clone)]
pub enum Source {
    ApiServer {
        kubeconfig: Option<PathBuf>,
        /// `--master`, over the kubeconfig's server.
        master: Option<String>,
    },
    StateFile(PathBuf),
    ApiSide {
        endpoint: ApiEndpoint,
        credentials: Credentials,
    },
}

impl Source {
    /// The configuration's source. A malformed `--api-endpoint` is a
    /// configuration error; credentials that cannot be read are not
    /// (they are files mounted from a Secret, which may be mended).
    pub fn of(config: &Config) -> Result<Self, Failure> {
        if let Some(value) = config.api_endpoint.as_deref() {
            let endpoint = ApiEndpoint::parse(value).map_err(|e| {
                Failure::bad_config(format!("--api-endpoint {e}"))
            })?;
            let tls = config
                .api_tls_dir
                .as_deref()
                .map(TlsFiles::read)
                .transpose()
                .map_err(|e| anyhow::anyhow!("--api-tls-dir {e}"))?;
            let credentials = Credentials {
                tls,
                token_file: config.api_token_file.clone(),
            };
            return Ok(Source::ApiSide {
                endpoint,
                credentials,
            });
        }
        Ok(match &config.state_file {
            Some(path) => Source::StateFile(path.clone()),
            None => Source::ApiServer {
                kubeconfig: config.kubeconfig.clone(),
                master: config.master.clone(),
            },
        })
    }
}

/// `--write-config-to`: as upstream, the resolved configuration with
/// its defaults, then stop.
pub fn write_config(config: &Config, path: &Path) -> Result<(), Failure> {
    let yaml = crate::config::to_yaml(config).map_err(anyhow::Error::from)?;
    std::fs::write(path, yaml).map_err(|e| {
        anyhow::anyhow!(
            "cannot write the configuration to {}: {e}",
            path.display()
        )
    })?;
    tracing::info!(file = %path.display(), "wrote the configuration");
    Ok(())
}

/// How often a state file is checked for edits.
const STATE_FILE_POLL: Duration = Duration::from_millis(500);

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default()
}
