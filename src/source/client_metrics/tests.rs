use http::{Request, Response, StatusCode};
use tower::{ServiceBuilder, ServiceExt};

use super::*;
use crate::telemetry::exporter;

/// An API server that answers each path with the status it names
/// (`/404`), and fails the connection for `/gone`.
async fn answer(request: Request<()>) -> Result<Response<()>, &'static str> {
    let path = request.uri().path().trim_start_matches('/');
    if path == "gone" {
        return Err("connection reset");
    }
    let status = path.parse::<u16>().unwrap_or(200);
    Ok(Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
        .body(())
        .unwrap_or_default())
}

#[test]
fn every_request_is_counted_and_timed_as_client_go_does() {
    let recorder = exporter::recorder().expect("buckets");
    let handle = recorder.handle();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let layer = RestClientMetricsLayer::for_url(
                &"https://10.0.2.100:6443".parse().expect("url"),
            );
            let service = ServiceBuilder::new().layer(layer).service_fn(answer);
            // The layer only watches: each answer, the failure included,
            // reaches the client as the API server gave it.
            for (method, path, answered) in [
                ("GET", "/200", Ok(200)),
                ("GET", "/200", Ok(200)),
                ("GET", "/403", Ok(403)),
                ("POST", "/201", Ok(201)),
                ("PATCH", "/gone", Err("connection reset")),
            ] {
                let request = Request::builder()
                    .method(method)
                    .uri(path)
                    .body(())
                    .expect("request");
                let got = service.clone().oneshot(request).await;
                assert_eq!(
                    got.map(|r| r.status().as_u16()),
                    answered,
                    "{method} {path}"
                );
            }
        });
    });
    let text = handle.render();
    let expected = [
        r#"rest_client_requests_total{code="200",method="GET",host="10.0.2.100:6443"} 2"#,
        r#"rest_client_requests_total{code="403",method="GET",host="10.0.2.100:6443"} 1"#,
        r#"rest_client_requests_total{code="201",method="POST",host="10.0.2.100:6443"} 1"#,
        r#"rest_client_requests_total{code="<error>",method="PATCH",host="10.0.2.100:6443"} 1"#,
        r#"rest_client_request_duration_seconds_count{verb="GET",host="10.0.2.100:6443"} 3"#,
        r#"rest_client_request_duration_seconds_bucket{verb="POST",host="10.0.2.100:6443",le="0.005"} 1"#,
        r#"rest_client_request_duration_seconds_bucket{verb="POST",host="10.0.2.100:6443",le="60"} 1"#,
    ];
    for line in expected {
        assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
    }
}
