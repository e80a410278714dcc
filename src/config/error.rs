use std::fmt;

/// Why a configuration was rejected. Every variant names where the problem
/// is: a field path of the file (`ipvs.scheduler`) or a flag
/// (`--ipvs-scheduler`), so the one-line message is enough to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Not YAML (or JSON) at all.
    #[error("config file is not valid YAML: {0}")]
    Syntax(String),
    /// Valid YAML that does not fit a `KubeProxyConfiguration`: unknown
    /// field, wrong type, bad duration.
    #[error("{path}: {reason}")]
    Decode { path: String, reason: String },
    /// Values that decode but are not acceptable.
    #[error("{}", join(.0))]
    Invalid(Vec<FieldError>),
}

impl ConfigError {
    /// The field errors, one by one, as the tests compare them.
    #[cfg(test)]
    pub fn fields(&self) -> Vec<FieldError> {
        match self {
            ConfigError::Syntax(reason) => vec![FieldError {
                field: String::new(),
                reason: reason.clone(),
            }],
            ConfigError::Decode { path, reason } => vec![FieldError {
                field: path.clone(),
                reason: reason.clone(),
            }],
            ConfigError::Invalid(errors) => errors.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// A file field path (`ipvs.syncPeriod`) or a flag (`--ipvs-sync-period`).
    pub field: String,
    pub reason: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(FieldError::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Something accepted but worth telling the operator, e.g. a field we do
/// not implement. Each field is reported once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}
