//! The metrics server: `/metrics` renders the Prometheus recorder,
//! `/healthz` says the process is up, `/proxyMode` names the mode, and a
//! node proxy's `/configz` gives its effective configuration, `/flagz`
//! its flags and `/statusz` what it is and since when.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    extract::State,
    http::{header, HeaderMap, HeaderValue},
    response::{IntoResponse, Response},
    routing::any,
    Router,
};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::task::JoinHandle;

use super::{zpages, TEXT_CONTENT_TYPE};
use crate::{telemetry::exporter, version::BUILD};

/// What `/proxyMode` answers.
pub const PROXY_MODE: &str = "ipvs";

/// The Prometheus text format's content type, as client_golang sends it.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The pages a node proxy adds to `/metrics`, `/healthz` and
/// `/proxyMode`; the API side's server has none of them.
#[derive(Debug, Clone, Default)]
pub struct Pages {
    /// The JSON `/configz` answers.
    pub configz: Option<String>,
    /// What `/flagz` lists.
    pub flagz: Option<BTreeMap<String, String>>,
    /// Whether `/statusz` is served.
    pub statusz: bool,
}

/// Any method is answered, as Go's handlers ignore it.
pub fn router(handle: PrometheusHandle, pages: Pages) -> Router {
    let mut router = Router::new()
        .route("/metrics", any(render))
        .route("/healthz", any(|| async { text("ok") }))
        .route("/proxyMode", any(|| async { text(PROXY_MODE) }));
    let mut paths = vec!["/metrics", "/healthz", "/proxyMode"];
    if let Some(body) = pages.configz {
        router = router.route(
            "/configz",
            any(move || std::future::ready(json(body.clone()))),
        );
        paths.push("/configz");
    }
    if let Some(flags) = pages.flagz {
        let content = Arc::new(zpages::Content::Flags(flags));
        router = router.route(
            "/flagz",
            any(move |headers: HeaderMap| {
                std::future::ready(zpages::respond(&headers, &content))
            }),
        );
        paths.push("/flagz");
    }
    if pages.statusz {
        // Upstream lists the paths served before /statusz was added.
        let paths = zpages::listed_paths(paths.iter().copied());
        let status = zpages::Status {
            started: process_start().unwrap_or_else(SystemTime::now),
            now: SystemTime::now(),
            binary_version: BUILD
                .git_version
                .trim_start_matches('v')
                .to_owned(),
            emulation_version: None,
            paths,
        };
        router = router.route(
            "/statusz",
            any(move |headers: HeaderMap| {
                // The release may be read after the server starts.
                let status = zpages::Status {
                    now: SystemTime::now(),
                    emulation_version: exporter::behaving_as_release()
                        .map(|k| format!("{}.{}", k.major, k.minor)),
                    ..status.clone()
                };
                std::future::ready(zpages::respond(
                    &headers,
                    &zpages::Content::Status(status),
                ))
            }),
        );
    }
    router.with_state(handle)
}

/// When the process started, from the kernel's account of it.
fn process_start() -> Option<SystemTime> {
    let stats = crate::telemetry::process::ProcessStats::read().ok()?;
    let secs = stats.start_time_seconds;
    (secs.is_finite() && secs > 0.0)
        .then(|| UNIX_EPOCH + Duration::from_secs_f64(secs))
}

fn json(body: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

async fn render(State(handle): State<PrometheusHandle>) -> Response {
    let mut body = handle.render();
    crate::telemetry::process::append_to(&mut body);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(METRICS_CONTENT_TYPE),
        )],
        body,
    )
        .into_response()
}

fn text(body: &'static str) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(TEXT_CONTENT_TYPE),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response()
}

/// Histogram samples accumulate between renders; without a scraper they
/// would grow without bound, so the recorder is drained periodically.
pub fn spawn_upkeep(
    handle: PrometheusHandle,
    every: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            ticks.tick().await;
            handle.run_upkeep();
        }
    })
}
