use std::{
    io,
    sync::{Arc, Mutex},
};

use serde_json::Value;
use tracing_subscriber::fmt::MakeWriter;

use super::*;

#[test]
fn verbosity_maps_as_kube_proxy_uses_its_levels() {
    let cases = [
        (0, LevelFilter::INFO),
        (1, LevelFilter::INFO),
        (2, LevelFilter::DEBUG),
        (4, LevelFilter::DEBUG),
        (5, LevelFilter::TRACE),
        (10, LevelFilter::TRACE),
    ];
    for (verbosity, level) in cases {
        assert_eq!(level_for_verbosity(verbosity), level, "-v={verbosity}");
    }
}

/// Collects what a subscriber writes.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Buffer {
    fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8(bytes).expect("UTF-8 logs")
    }
}

impl io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buffer {
    type Writer = Buffer;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn log_some_events() {
    tracing::info!(
        namespace = "default",
        name = "web",
        port = 8080_u64,
        ready = true,
        "service \"quoted\"\nchanged"
    );
    tracing::warn!(level = "shadowed", "a field named like a key");
    tracing::debug!("hidden at info");
}

#[test]
fn json_lines_are_one_object_each_with_the_pipeline_fields() {
    let out = Buffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(LevelFilter::INFO)
        .with_writer(out.clone())
        .event_format(JsonLines)
        .finish();
    tracing::subscriber::with_default(subscriber, log_some_events);

    let text = out.text();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let first = &lines[0];
    assert_eq!(first["level"], "info");
    assert_eq!(first["message"], "service \"quoted\"\nchanged");
    assert_eq!(first["target"], module_path!());
    assert_eq!(first["namespace"], "default");
    assert_eq!(first["name"], "web");
    assert_eq!(first["port"], 8080);
    assert_eq!(first["ready"], true);
    let time = first["time"].as_str().expect("time is a string");
    assert!(
        time.len() >= 20 && time.ends_with('Z') && time.contains('T'),
        "RFC 3339 UTC: {time}"
    );
    assert_eq!(lines[1]["level"], "warn");
    assert_eq!(lines[1]["field.level"], "shadowed");
}

#[test]
fn text_without_a_terminal_has_no_escape_codes() {
    let out = Buffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(LevelFilter::INFO)
        .with_writer(out.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, log_some_events);
    let text = out.text();
    assert!(text.contains("WARN"), "{text}");
    assert!(!text.contains('\u{1b}'), "escape codes in {text:?}");
}

#[test]
fn colour_only_for_text_on_a_terminal() {
    // The test's stderr is a pipe or a file under cargo test either way.
    let settings = LogSettings::for_stderr(&LoggingConfig {
        format: LogFormat::Json,
        verbosity: 3,
    });
    assert!(!settings.ansi);
    assert_eq!(settings.level, LevelFilter::DEBUG);
}
