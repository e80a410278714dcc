//! Configuration: kube-proxy's flags and `KubeProxyConfiguration` file,
//! resolved into one validated [`Config`].
//!
//! [`resolve`] is pure: the caller reads the file and passes its text, so
//! every rule (defaults, validation, precedence between file and flags) is
//! table-tested without touching the filesystem.

mod duration;
mod error;
mod flags;
mod flagz;
mod kubeproxy;
mod settings;
mod validate;
mod write;

#[cfg(test)]
mod reference;

pub use error::{ConfigError, ConfigWarning, FieldError};
pub use flags::{
    ApiServerArgs, Cli, Command, ConfigArgs, ExplainArgs, ListArgs,
    OutputFormat, PlanArgs, RunArgs,
};
pub use flagz::flagz;
pub use settings::{
    ApiContentTypes, Config, DetectLocal, LogFormat, LoggingConfig,
    NodePortAddress,
};
pub use write::{to_configz, to_yaml};

use std::net::{IpAddr, SocketAddr};

use crate::model::FlagChoice;

use validate::{to_config, Origin};

/// The exit status of a configuration that is refused: sysexits'
/// EX_USAGE, as linkerd2-proxy uses for a bad configuration.
pub const EXIT_BAD_CONFIG: u8 = 64;
/// The exit status when the kernel lacks what IPVS mode needs: sysexits'
/// EX_UNAVAILABLE.
pub const EXIT_KERNEL_UNSUPPORTED: u8 = 69;
/// The exit status when this process lacks a capability the kernel asks
/// for (`CAP_NET_ADMIN`, `CAP_NET_RAW`): sysexits' EX_NOPERM.
pub const EXIT_FORBIDDEN: u8 = 77;

/// A configuration that was accepted, with what the operator should be
/// told about it (each warning once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub config: Config,
    pub warnings: Vec<ConfigWarning>,
}

/// Builds the effective configuration from the flags and, when `--config`
/// was given, the text of that file. See [`ConfigArgs`] for which flags
/// still apply next to a file.
pub fn resolve(
    args: &ConfigArgs,
    file_text: Option<&str>,
) -> Result<Resolved, ConfigError> {
    let mut warnings = Vec::new();
    let mut config = match file_text {
        Some(text) => {
            let kpc = kubeproxy::parse(text)?;
            warnings.extend(kpc.unused_fields());
            warnings.extend(args.given_config_flags().into_iter().map(
                |flag| {
                    ConfigWarning {
                        field: flag,
                        message: "ignored because --config is given (as \
                              kube-proxy does); set it in the file"
                            .to_owned(),
                    }
                },
            ));
            let (config, more) = to_config(&kpc, Origin::File)?;
            warnings.extend(more);
            config
        }
        None => {
            let mut kpc = args.to_kube_proxy_configuration();
            kpc.feature_gates = Some(flag_gates(args)?);
            let ports = [
                ("--healthz-port", args.healthz_port),
                ("--metrics-port", args.metrics_port),
            ]
            .map(|(flag, port)| deprecated_port(flag, port))
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
            let (healthz_port, metrics_port) = (ports[0], ports[1]);
            // As upstream: a bare IP takes the port flag's port (its
            // own default otherwise), an IP:port keeps its port.
            let with_port = |text: &Option<String>, port: Option<u16>| {
                text.as_deref().map(|t| match (port, t.parse::<IpAddr>()) {
                    (Some(port), Ok(ip)) if port != 0 => {
                        SocketAddr::new(ip, port).to_string()
                    }
                    _ => t.to_owned(),
                })
            };
            kpc.healthz_bind_address =
                with_port(&args.healthz_bind_address, healthz_port);
            kpc.metrics_bind_address =
                with_port(&args.metrics_bind_address, metrics_port);
            let (mut config, more) = to_config(&kpc, Origin::Flags)?;
            warnings.extend(more);
            // An empty flag value turns a server off, and so does port 0;
            // in the file, empty means the default address.
            if args.healthz_bind_address.as_deref() == Some("")
                || healthz_port == Some(0)
            {
                config.healthz_bind_address = None;
            }
            if args.metrics_bind_address.as_deref() == Some("")
                || metrics_port == Some(0)
            {
                config.metrics_bind_address = None;
            }
            config
        }
    };

    // The flag wins over the file, as upstream: DaemonSets pass the node
    // name this way next to a shared ConfigMap.
    if let Some(name) = args.hostname_override.as_deref() {
        if !name.is_empty() {
            let name = name.trim();
            if name.is_empty() {
                return Err(ConfigError::Invalid(vec![FieldError {
                    field: "--hostname-override".to_owned(),
                    reason: "must not be blank".to_owned(),
                }]));
            }
            config.hostname_override = Some(name.to_lowercase());
        }
    }

    // Logging flags win over the file, as kube-proxy copies them over
    // the loaded configuration (`--config ... -v=5` must work).
    if let Some(level) = args.verbosity {
        config.logging.verbosity = level;
    }
    if let Some(format) = args.logging_format.as_deref() {
        // clap accepts only the known names.
        config.logging.format = format.parse().unwrap_or_default();
    }

    for (flag, value) in args.ignored.given() {
        warnings.push(ConfigWarning {
            field: flag.to_owned(),
            message: format!(
                "not implemented by kube-ipvs-proxy; {value:?} ignored"
            ),
        });
    }

    // Not part of the configuration file: it applies next to one too.
    config.master = args.master.clone().filter(|m| !m.is_empty());
    config.state_file = args.state.clone();
    config.api_endpoint = args.api_endpoint.clone();
    config.api_tls_dir = args.api_tls_dir.clone();
    config.api_token_file = args.api_token_file.clone();
    config.service_proxy_name =
        args.service_proxy_name.clone().filter(|n| !n.is_empty());
    if let Some(text) = args.ipvs_scheduler_flags.as_deref() {
        config.scheduler_flags = FlagChoice::parse(text).map_err(|e| {
            ConfigError::Invalid(vec![FieldError {
                field: "--ipvs-scheduler-flags".to_owned(),
                reason: e.to_string(),
            }])
        })?;
    }
    if let Some(text) = args.ipvs_service_schedulers.as_deref() {
        config.service_schedulers = (text.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
    }
    Ok(Resolved { config, warnings })
}

/// `--feature-gates NAME=BOOL,...`, as upstream's map flag reads it
/// (Go's boolean spellings; spaces around names and values ignored).
fn flag_gates(
    args: &ConfigArgs,
) -> Result<std::collections::BTreeMap<String, bool>, ConfigError> {
    let invalid = |reason: String| {
        ConfigError::Invalid(vec![FieldError {
            field: "--feature-gates".to_owned(),
            reason,
        }])
    };
    let mut gates = std::collections::BTreeMap::new();
    let text = args.feature_gates.as_deref().unwrap_or("");
    for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(invalid(format!("{pair:?} must be NAME=BOOL")));
        };
        let enabled = match value.trim() {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
            "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
            other => {
                return Err(invalid(format!(
                    "{}: {other:?} is not a boolean",
                    name.trim()
                )))
            }
        };
        gates.insert(name.trim().to_owned(), enabled);
    }
    Ok(gates)
}

/// `--healthz-port`, `--metrics-port`: 0 (off) to 65535.
fn deprecated_port(
    flag: &str,
    port: Option<i64>,
) -> Result<Option<u16>, ConfigError> {
    port.map(|p| {
        u16::try_from(p).map_err(|_| {
            ConfigError::Invalid(vec![FieldError {
                field: flag.to_owned(),
                reason: format!("must be in [0, 65535], got {p}"),
            }])
        })
    })
    .transpose()
}

#[cfg(test)]
mod tests;
