//! Where the API side listens and how a node proves who it is: the
//! protocol's addressing, shared by the server (`apiside`), the node's
//! client (`source::nodeview`) and the configuration that names both.
//! Pure data and the reading of the credential files; the transports
//! stay with each side.

use std::{
    fmt,
    path::{Path, PathBuf},
};

/// Where the API side listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiEndpoint {
    /// `unix:///path`: a node-local socket, no TLS.
    Unix(PathBuf),
    /// `https://host:port`: TCP, always with TLS and client
    /// certificates.
    Tls { host: String, port: u16 },
}

impl ApiEndpoint {
    pub fn parse(value: &str) -> Result<Self, String> {
        if let Some(path) = value.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(format!(
                    "{value}: a unix:// address needs an absolute path"
                ));
            }
            return Ok(ApiEndpoint::Unix(PathBuf::from(path)));
        }
        let Some(authority) = value.strip_prefix("https://") else {
            return Err(format!(
                "{value}: expected unix:///PATH or https://HOST:PORT (TCP \
                 is served with TLS only)"
            ));
        };
        let (host, port) = authority
            .trim_end_matches('/')
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse().ok()?)))
            .ok_or_else(|| format!("{value}: expected https://HOST:PORT"))?;
        if host.is_empty() {
            return Err(format!("{value}: no host"));
        }
        Ok(ApiEndpoint::Tls {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for ApiEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiEndpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            ApiEndpoint::Tls { host, port } => {
                write!(f, "https://{host}:{port}")
            }
        }
    }
}

/// The CA peers are checked against and, when there is one, a TLS
/// identity, read from a folder as a Kubernetes TLS Secret mounts it:
/// `ca.crt`, `tls.crt`, `tls.key`. A node that authenticates with a
/// token has only `ca.crt`.
#[derive(Clone)]
pub struct TlsFiles {
    pub ca: Vec<u8>,
    /// The certificate and its key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("TlsFiles").finish_non_exhaustive()
    }
}

impl TlsFiles {
    pub fn read(dir: &Path) -> Result<Self, String> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))
        };
        let identity = match dir.join("tls.crt").exists() {
            true => Some((read("tls.crt")?, read("tls.key")?)),
            false => None,
        };
        Ok(Self {
            ca: read("ca.crt")?,
            identity,
        })
    }
}

/// How a node proves who it is to an `https://` API side.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    pub tls: Option<TlsFiles>,
    /// A file holding the node's ServiceAccount token, read again for
    /// each watch (the kubelet rotates projected tokens).
    pub token_file: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_plain_tcp_is_refused() {
        assert_eq!(
            ApiEndpoint::parse("unix:///run/views.sock"),
            Ok(ApiEndpoint::Unix("/run/views.sock".into()))
        );
        assert!(ApiEndpoint::parse("unix://views.sock").is_err());
        assert_eq!(
            ApiEndpoint::parse("https://api-side.kube-system:9443"),
            Ok(ApiEndpoint::Tls {
                host: "api-side.kube-system".into(),
                port: 9443
            })
        );
        assert_eq!(
            ApiEndpoint::parse("https://[2001:db8::1]:9443/")
                .map(|e| e.to_string()),
            Ok("https://[2001:db8::1]:9443".into())
        );
        let tcp = ApiEndpoint::parse("198.18.0.1:9100").unwrap_err();
        assert!(tcp.contains("TLS"), "{tcp}");
        assert!(ApiEndpoint::parse("https://host").is_err());
        assert!(ApiEndpoint::parse("https://:9443").is_err());
    }
}
