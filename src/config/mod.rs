//! Configuration: kube-proxy's flags and `KubeProxyConfiguration` file,
//! resolved into one validated [`Config`].
//!
//! [`resolve`] is pure: the caller reads the file and passes its text, so
//! every rule (defaults, validation, precedence between file and flags) is
//! table-tested without touching the filesystem.

mod duration;
mod error;
mod flags;
mod kubeproxy;
mod settings;
mod validate;
mod write;

#[cfg(test)]
mod reference;

pub use error::{ConfigError, ConfigWarning, FieldError};
pub use flags::{
    ApiServerArgs, Cli, Command, ConfigArgs, OutputFormat, PlanArgs, RunArgs,
};
pub use settings::{
    Config, DetectLocal, LogFormat, LoggingConfig, NodePortAddress,
};
pub use write::to_yaml;

use validate::{to_config, Origin};

/// The exit status of a configuration that is refused: sysexits'
/// EX_USAGE, as linkerd2-proxy uses for a bad configuration.
pub const EXIT_BAD_CONFIG: u8 = 64;
/// The exit status when the kernel lacks what IPVS mode needs: sysexits'
/// EX_UNAVAILABLE.
pub const EXIT_KERNEL_UNSUPPORTED: u8 = 69;

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
            let kpc = args.to_kube_proxy_configuration();
            let (mut config, more) = to_config(&kpc, Origin::Flags)?;
            warnings.extend(more);
            // An empty flag value turns a server off; in the file, empty
            // means the default address.
            if args.healthz_bind_address.as_deref() == Some("") {
                config.healthz_bind_address = None;
            }
            if args.metrics_bind_address.as_deref() == Some("") {
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

    config.state_file = args.state.clone();
    config.api_endpoint = args.api_endpoint.clone();
    config.api_tls_dir = args.api_tls_dir.clone();
    config.api_token_file = args.api_token_file.clone();
    config.service_proxy_name =
        args.service_proxy_name.clone().filter(|n| !n.is_empty());
    Ok(Resolved { config, warnings })
}

#[cfg(test)]
mod tests;
