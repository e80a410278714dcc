//! Where log lines go and what they look like: kube-proxy's `-v` levels
//! and `--logging-format`, on stderr, coloured only on a terminal.
//!
//! Verbosity follows how kube-proxy uses klog's levels: `-v` 0 and 1 are
//! the operator's view (info), 2 to 4 what changed and why (debug), 5 and
//! more everything (trace). `RUST_LOG`, when set, takes precedence, for
//! per-module filters.
//!
//! The JSON format writes one object per line with `time` (RFC 3339,
//! UTC), `level`, `message`, `target` and the event's fields at the top
//! level; an object's `namespace` and `name` are fields of their own, so
//! a pipeline can index them. Span fields are not written.

use std::{fmt, io::IsTerminal};

use serde_json::{Map, Value};
use tracing::{field::Field, Event, Level, Subscriber};
use tracing_subscriber::{
    filter::LevelFilter,
    fmt::{
        format::Writer, time::FormatTime, FmtContext, FormatEvent, FormatFields,
    },
    registry::LookupSpan,
    EnvFilter,
};

use crate::config::{LogFormat, LoggingConfig};

/// The level kube-proxy's verbosity `-v` maps to.
pub fn level_for_verbosity(verbosity: u32) -> LevelFilter {
    match verbosity {
        0..=1 => LevelFilter::INFO,
        2..=4 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    }
}

/// How the process logs, decided before anything is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSettings {
    pub format: LogFormat,
    pub level: LevelFilter,
    /// Colour codes: only where a person reads stderr on a terminal.
    pub ansi: bool,
}

impl LogSettings {
    /// From the configuration, for the process' real stderr. `NO_COLOR`
    /// (any value) turns colour off even on a terminal.
    pub fn for_stderr(config: &LoggingConfig) -> Self {
        let ansi = std::io::stderr().is_terminal()
            && std::env::var_os("NO_COLOR").is_none();
        LogSettings {
            format: config.format,
            level: level_for_verbosity(config.verbosity),
            ansi: ansi && config.format == LogFormat::Text,
        }
    }
}

/// Installs the process-wide subscriber writing to stderr. Returns a
/// message to log once logging works when `RUST_LOG` could not be used.
pub fn init(settings: LogSettings) -> Option<String> {
    let (filter, problem) = filter(settings.level);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(settings.ansi);
    // A second init (tests) keeps the first subscriber.
    let _ = match settings.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.event_format(JsonLines).try_init(),
    };
    problem
}

/// `RUST_LOG` if set and valid, else everything at `level`.
fn filter(level: LevelFilter) -> (EnvFilter, Option<String>) {
    let fallback = || EnvFilter::default().add_directive(level.into());
    match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => {
            match EnvFilter::try_new(&spec) {
                Ok(filter) => (filter, None),
                Err(e) => (
                    fallback(),
                    Some(format!("RUST_LOG ignored: {e}; logging at {level}")),
                ),
            }
        }
        _ => (fallback(), None),
    }
}

/// One JSON object per event, one event per line.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut time = String::new();
        tracing_subscriber::fmt::time::SystemTime
            .format_time(&mut Writer::new(&mut time))?;
        let line = json_line(&time, event);
        writeln!(writer, "{line}")
    }
}

/// The JSON object for one event; fields named like the fixed keys are
/// kept under a `field.` prefix rather than overwriting them.
fn json_line(time: &str, event: &Event<'_>) -> String {
    let meta = event.metadata();
    let mut object = Map::new();
    object.insert("time".into(), Value::String(time.to_owned()));
    object.insert("level".into(), Value::String(level_name(*meta.level())));
    object.insert("message".into(), Value::String(String::new()));
    object.insert("target".into(), Value::String(meta.target().to_owned()));
    event.record(&mut JsonVisitor(&mut object));
    Value::Object(object).to_string()
}

fn level_name(level: Level) -> String {
    level.as_str().to_ascii_lowercase()
}

struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl JsonVisitor<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        let key = match field.name() {
            "message" => "message".to_owned(),
            name @ ("time" | "level" | "target") => format!("field.{name}"),
            name => name.to_owned(),
        };
        self.0.insert(key, value);
    }
}

impl tracing::field::Visit for JsonVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_error(
        &mut self,
        field: &Field,
        value: &(dyn std::error::Error + 'static),
    ) {
        self.put(field, Value::String(value.to_string()));
    }
}

#[cfg(test)]
mod tests;
