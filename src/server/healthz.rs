//! The healthz server: `/healthz` (proxy health and node eligibility)
//! and `/livez` (proxy health only), with upstream's JSON bodies.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    extract::State,
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::any,
    Router,
};
use serde::Serialize;

use super::{
    health::{Health, ProxyHealth},
    timestamp::{rfc3339_nano, GO_ZERO_TIME},
};
use crate::telemetry::events::{InternalEvent, Probe, ProbeAnswered};

/// Any method is answered, as Go's handlers ignore it.
pub fn router(health: Arc<ProxyHealth>) -> Router {
    Router::new()
        .route("/healthz", any(healthz))
        .route("/livez", any(livez))
        .with_state(health)
}

/// Upstream's `ProxyHealth` JSON, fields in its order.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    last_updated: String,
    current_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_eligible: Option<bool>,
    healthy: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    status: BTreeMap<&'static str, FamilyBody>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct FamilyBody {
    last_updated: String,
    healthy: bool,
}

async fn healthz(State(health): State<Arc<ProxyHealth>>) -> Response {
    let eligible = health.node_eligible();
    answer(Probe::Healthz, health.health(), Some(eligible))
}

async fn livez(State(health): State<Arc<ProxyHealth>>) -> Response {
    answer(Probe::Livez, health.health(), None)
}

fn answer(
    probe: Probe,
    health: Health,
    node_eligible: Option<bool>,
) -> Response {
    let healthy = health.healthy && node_eligible.unwrap_or(true);
    ProbeAnswered { probe, healthy }.emit();
    // When healthy, `lastUpdated` is "now": older releases reported the
    // last sync loop run there, and tools compare it with the current
    // time (upstream keeps this for compatibility).
    let last_updated = if healthy {
        Some(health.current_time)
    } else {
        health.last_updated
    };
    let body = Body {
        last_updated: last_updated
            .map_or_else(|| GO_ZERO_TIME.to_owned(), rfc3339_nano),
        current_time: rfc3339_nano(health.current_time),
        node_eligible,
        healthy: health.healthy,
        status: health
            .status
            .iter()
            .map(|(family, status)| {
                (
                    family.as_str(),
                    FamilyBody {
                        last_updated: rfc3339_nano(status.last_updated),
                        healthy: status.healthy,
                    },
                )
            })
            .collect(),
    };
    // Plain strings and booleans always serialize.
    let json = serde_json::to_string(&body).unwrap_or_default();
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        json,
    )
        .into_response()
}
