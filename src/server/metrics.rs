//! The metrics server: `/metrics` renders the Prometheus recorder,
//! `/healthz` says the process is up, `/proxyMode` names the mode, and a
//! node proxy's `/configz` gives its effective configuration.

use std::time::Duration;

use axum::{
    extract::State,
    http::{header, HeaderValue},
    response::{IntoResponse, Response},
    routing::any,
    Router,
};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::task::JoinHandle;

/// What `/proxyMode` answers.
pub const PROXY_MODE: &str = "ipvs";

/// The Prometheus text format's content type, as client_golang sends it.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// Any method is answered, as Go's handlers ignore it. `configz` is the
/// JSON `/configz` answers; without it there is no such page.
pub fn router(handle: PrometheusHandle, configz: Option<String>) -> Router {
    let router = Router::new()
        .route("/metrics", any(render))
        .route("/healthz", any(|| async { text("ok") }))
        .route("/proxyMode", any(|| async { text(PROXY_MODE) }));
    let router = match configz {
        Some(body) => router.route(
            "/configz",
            any(move || std::future::ready(json(body.clone()))),
        ),
        None => router,
    };
    router.with_state(handle)
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
