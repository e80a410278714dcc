//! `/flagz` and `/statusz` on the metrics server, as kube-proxy serves
//! them since 1.36 (KEP-4827, KEP-4828): plain text for people by
//! default, and the versioned `config.k8s.io` objects `Flagz` and
//! `Statusz` as JSON or YAML to a client that asks for them by `Accept`
//! (`application/json;as=Statusz;g=config.k8s.io;v=v1beta1`).

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::{json, Value};

use super::timestamp;

/// The component the pages name, as upstream's do.
pub const COMPONENT: &str = "kube-proxy";
const GROUP: &str = "config.k8s.io";
/// The versions served; the first is deprecated, as upstream marks it.
const VERSIONS: [&str; 2] = ["v1alpha1", "v1beta1"];
/// What a refused `Accept` is told it may ask for, in upstream's order.
const ACCEPTED: &str = "application/json, application/yaml, text/plain";
/// Upstream picks one of these at random for each text page, so that
/// nobody parses the text.
const DELIMITERS: [&str; 4] = [":", ": ", "=", " "];

/// Which page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    Flagz,
    Statusz,
}

impl Page {
    fn kind(self) -> &'static str {
        match self {
            Page::Flagz => "Flagz",
            Page::Statusz => "Statusz",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Page::Flagz => "flagz",
            Page::Statusz => "statusz",
        }
    }
}

/// How a page is written, from the request's `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json { version: &'static str },
    Yaml { version: &'static str },
}

/// The format `accept` asks for, or `None` when it asks for none this
/// page has (406). As upstream's negotiation: no header is text; the
/// clauses are tried by their `q`, each against JSON, YAML and text in
/// that order; text only without a kind, JSON and YAML only with this
/// page's kind, group and a served version.
pub fn negotiate(accept: Option<&str>, page: Page) -> Option<Format> {
    let accept = accept.map(str::trim).unwrap_or("");
    if accept.is_empty() {
        return Some(Format::Text);
    }
    let mut clauses: Vec<Clause> =
        accept.split(',').map(Clause::parse).collect();
    // Highest q first; among equals, the order written (a stable sort).
    clauses.sort_by(|a, b| b.q.total_cmp(&a.q));
    for clause in clauses.iter().filter(|c| c.q > 0.0) {
        for (kind, sub) in [
            ("application", "json"),
            ("application", "yaml"),
            ("text", "plain"),
        ] {
            // `*/*`, `type/*` or the type itself, as goautoneg matches.
            let matches = match (clause.kind.as_str(), clause.sub.as_str()) {
                ("*", "*") => true,
                (k, s) => k == kind && (s == sub || s == "*"),
            };
            if !matches {
                continue;
            }
            let version = match &clause.convert {
                None if sub == "plain" => return Some(Format::Text),
                Some((as_kind, group, version))
                    if sub != "plain"
                        && as_kind == page.kind()
                        && group == GROUP =>
                {
                    match VERSIONS.iter().find(|v| **v == version) {
                        Some(v) => *v,
                        None => continue,
                    }
                }
                _ => continue,
            };
            return Some(match sub {
                "json" => Format::Json { version },
                _ => Format::Yaml { version },
            });
        }
    }
    None
}

/// One clause of an `Accept` header.
struct Clause {
    kind: String,
    sub: String,
    q: f64,
    /// `as`, `g` and `v`, when any of them is given.
    convert: Option<(String, String, String)>,
}

impl Clause {
    fn parse(text: &str) -> Clause {
        let mut parts = text.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let (kind, sub) = media.split_once('/').unwrap_or((&media, ""));
        let mut clause = Clause {
            kind: kind.trim().to_owned(),
            sub: sub.trim().to_owned(),
            q: 1.0,
            convert: None,
        };
        for param in parts {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            let value = value.trim().to_owned();
            let convert = &mut clause.convert;
            match key.trim() {
                "q" => clause.q = value.parse().unwrap_or(0.0),
                "as" => convert.get_or_insert_with(Default::default).0 = value,
                "g" => convert.get_or_insert_with(Default::default).1 = value,
                "v" => convert.get_or_insert_with(Default::default).2 = value,
                _ => {}
            }
        }
        clause
    }
}

/// What `/statusz` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub started: SystemTime,
    pub now: SystemTime,
    /// This binary's version (`0.1.0`).
    pub binary_version: String,
    /// The Kubernetes release behaved as (`1.37`), once known.
    pub emulation_version: Option<String>,
    /// The first segment of each path the server serves, sorted.
    pub paths: Vec<String>,
}

impl Status {
    fn uptime(&self) -> Duration {
        self.now.duration_since(self.started).unwrap_or_default()
    }
}

/// The object a structured answer encodes.
pub fn object(page: Page, version: &str, content: &Content) -> Value {
    let mut object = json!({
        "kind": page.kind(),
        "apiVersion": format!("{GROUP}/{version}"),
        "metadata": {"name": COMPONENT, "creationTimestamp": null},
    });
    match content {
        Content::Flags(flags) => {
            if !flags.is_empty() {
                object["flags"] = json!(flags);
            }
        }
        Content::Status(status) => {
            object["startTime"] = json!(go_seconds(status.started));
            object["uptimeSeconds"] = json!(status.uptime().as_secs());
            // Not Go: kubernetes_build_info leaves go_version empty too.
            object["goVersion"] = json!("");
            object["binaryVersion"] = json!(status.binary_version);
            if let Some(emulation) = &status.emulation_version {
                object["emulationVersion"] = json!(emulation);
            }
            object["paths"] = json!(status.paths);
        }
    }
    object
}

/// A `metav1.Time`: RFC 3339 in whole seconds.
fn go_seconds(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    timestamp::rfc3339_nano(UNIX_EPOCH + Duration::from_secs(secs))
}

/// What a page shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Flags(BTreeMap<String, String>),
    Status(Status),
}

impl Content {
    fn page(&self) -> Page {
        match self {
            Content::Flags(_) => Page::Flagz,
            Content::Status(_) => Page::Statusz,
        }
    }
}

/// The text page, with `delimiter` between each name and its value.
pub fn text(content: &Content, delimiter: &str) -> String {
    let page = content.page();
    let mut out = format!(
        "\n{COMPONENT} {}\nWarning: This endpoint is not meant to be machine \
         parseable, has no formatting compatibility guarantees and is for \
         debugging purposes only.\n",
        page.name()
    );
    match content {
        Content::Flags(flags) => {
            for (name, value) in flags {
                let _ = writeln!(out, "{name}{delimiter}{value}");
            }
        }
        Content::Status(status) => {
            let up = status.uptime().as_secs();
            let _ = write!(
                out,
                "\nStarted{delimiter} {}\nUp{delimiter} {} hr {:02} min {:02} sec\n\
                 Go version{delimiter} \nBinary version{delimiter} {}\n",
                timestamp::unix_date(status.started),
                up / 3600,
                up / 60 % 60,
                up % 60,
                status.binary_version,
            );
            if let Some(emulation) = &status.emulation_version {
                let _ =
                    writeln!(out, "Emulation version{delimiter} {emulation}");
            } else {
                out.push('\n');
            }
            if status.paths.is_empty() {
                out.push('\n');
            } else {
                let _ = writeln!(
                    out,
                    "Paths{delimiter} {}",
                    status.paths.join(" ")
                );
            }
        }
    }
    out
}

/// A delimiter picked anew for each page, as upstream does.
fn delimiter() -> &'static str {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    DELIMITERS[nanos as usize % DELIMITERS.len()]
}

/// The answer to a request for `content` with these headers.
pub fn respond(headers: &HeaderMap, content: &Content) -> Response {
    let page = content.page();
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let Some(format) = negotiate(accept, page) else {
        return not_acceptable();
    };
    let (version, body, content_type) = match format {
        Format::Text => {
            return (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(super::TEXT_CONTENT_TYPE),
                )],
                text(content, delimiter()),
            )
                .into_response()
        }
        Format::Json { version } => (
            version,
            object(page, version, content).to_string(),
            "application/json",
        ),
        Format::Yaml { version } => (
            version,
            serde_saphyr::to_string(&object(page, version, content))
                .unwrap_or_default(),
            "application/yaml",
        ),
    };
    let mut response = (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response();
    if version == VERSIONS[0] {
        let warning = format!(
            "299 - \"This version of the {} endpoint is deprecated. Please use a newer version.\"",
            page.name()
        );
        if let Ok(value) = HeaderValue::from_str(&warning) {
            response.headers_mut().insert(header::WARNING, value);
        }
    }
    response
}

/// 406 as the API machinery writes it: a `Status` naming what may be
/// asked for.
fn not_acceptable() -> Response {
    let status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("only the following media types are accepted: {ACCEPTED}"),
        "reason": "NotAcceptable",
        "code": 406,
    });
    (
        StatusCode::NOT_ACCEPTABLE,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        status.to_string(),
    )
        .into_response()
}

/// The first segment of each path, deduplicated and sorted, as upstream
/// lists its server's paths on `/statusz`.
pub fn listed_paths<'a>(
    paths: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let mut out: Vec<String> = paths
        .into_iter()
        .filter_map(|p| p.split('/').nth(1).filter(|s| !s.is_empty()))
        .map(|segment| format!("/{segment}"))
        .collect();
    out.sort();
    out.dedup();
    out
}
