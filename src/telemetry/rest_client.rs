//! client-go's REST client metrics, which kube-proxy exports and its
//! dashboard graphs: every request to the API server counted by status
//! code, method and host, and timed by verb and host until its response
//! headers arrive (a watch counts when it starts), with client-go's
//! buckets. A request that got no answer has the code `<error>`, as
//! client-go's.

use std::time::Duration;

/// Counter: requests by `code`, `method`, `host`.
pub const REQUESTS_TOTAL: &str = "rest_client_requests_total";
/// Histogram: request latency by `verb`, `host`.
pub const REQUEST_DURATION_SECONDS: &str =
    "rest_client_request_duration_seconds";

/// client-go's `requestLatency` buckets (component-base
/// `metrics/prometheus/restclient`).
pub const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The code label of a request that got no HTTP answer.
pub const NO_ANSWER: &str = "<error>";

/// One request to the API server and how it ended.
#[derive(Debug, Clone, Copy)]
pub struct RestClientRequest<'a> {
    /// `GET`, `POST`, `PATCH`, ...
    pub method: &'a str,
    /// `host:port` of the API server.
    pub host: &'a str,
    /// The HTTP status, `None` when no answer came.
    pub status: Option<u16>,
    pub duration: Duration,
}

impl super::events::InternalEvent for RestClientRequest<'_> {
    fn emit(self) {
        let code = self
            .status
            .map_or_else(|| NO_ANSWER.to_owned(), |s| s.to_string());
        metrics::counter!(
            REQUESTS_TOTAL,
            "code" => code,
            "method" => self.method.to_owned(),
            "host" => self.host.to_owned(),
        )
        .increment(1);
        metrics::histogram!(
            REQUEST_DURATION_SECONDS,
            "verb" => self.method.to_owned(),
            "host" => self.host.to_owned(),
        )
        .record(self.duration.as_secs_f64());
    }
}
