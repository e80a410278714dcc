use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use http::{Request, Response};
use kube::client::Body;
use serde_json::Value;

use super::*;

type Seen = Arc<Mutex<Vec<(String, String, Value)>>>;

/// A client whose API server records each request (method, path, JSON
/// body) and answers 201 with the body, as the API server does for a
/// create.
fn recording_client() -> (Client, Seen) {
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let service = tower::service_fn(move |request: Request<Body>| {
        let log = Arc::clone(&log);
        async move {
            let method = request.method().to_string();
            let path = request.uri().path().to_owned();
            let bytes = request.into_body().collect_bytes().await?;
            let body: Value =
                serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if let Ok(mut log) = log.lock() {
                log.push((method, path, body));
            }
            Response::builder()
                .status(201)
                .header("content-type", "application/json")
                .body(Body::from(bytes.to_vec()))
                .map_err(kube::Error::HttpError)
        }
    });
    (Client::new(service, "default"), seen)
}

/// The requests once `count` were made (or after two seconds).
async fn wait_for(seen: &Seen, count: usize) -> Vec<(String, String, Value)> {
    let mut requests = Vec::new();
    for _ in 0..200 {
        requests = seen.lock().map(|s| s.clone()).unwrap_or_default();
        if requests.len() >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    requests
}

#[tokio::test]
async fn the_start_up_event_is_upstreams_on_the_node() {
    let (client, seen) = recording_client();
    let sink = EventSink::spawn(client, "node-a");
    sink.starting();
    let requests = wait_for(&seen, 1).await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (method, path, event) = &requests[0];
    assert_eq!(method, "POST");
    // A Node is cluster-scoped: its events live in `default`.
    assert_eq!(path, "/apis/events.k8s.io/v1/namespaces/default/events");
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["reason"], "Starting");
    assert_eq!(event["action"], "StartKubeProxy");
    assert_eq!(event["reportingController"], "kube-proxy");
    assert_eq!(event["reportingInstance"], "kube-proxy-node-a");
    assert_eq!(event["regarding"]["kind"], "Node");
    assert_eq!(event["regarding"]["name"], "node-a");
    // As upstream since 1.35: the API version, and no UID.
    assert_eq!(event["regarding"]["apiVersion"], "v1");
    assert!(event["regarding"].get("uid").is_none(), "{event}");
    let note = event["note"].as_str().unwrap_or_default();
    assert!(note.starts_with("kube-ipvs-proxy v"), "{note}");
}

#[tokio::test]
async fn a_health_check_that_cannot_listen_is_a_warning_on_its_service() {
    let (client, seen) = recording_client();
    let sink = EventSink::spawn(client, "node-a");
    let service = NamespacedName::new("shop", "web");
    sink.health_check_failed(&service, 32087, &"Address in use (os error 98)");
    let requests = wait_for(&seen, 1).await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (method, path, event) = &requests[0];
    assert_eq!(method, "POST");
    assert_eq!(path, "/apis/events.k8s.io/v1/namespaces/shop/events");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "FailedToStartServiceHealthcheck");
    assert_eq!(event["action"], "Listen");
    assert_eq!(event["regarding"]["kind"], "Service");
    assert_eq!(event["regarding"]["apiVersion"], "v1");
    assert_eq!(event["regarding"]["namespace"], "shop");
    assert!(event["regarding"].get("uid").is_none(), "{event}");
    assert_eq!(
        event["note"],
        "node node-a failed to start healthcheck \"shop/web\" on port \
         32087: Address in use (os error 98)"
    );
}

#[tokio::test]
async fn a_scheduling_annotation_not_used_is_a_warning_on_its_service() {
    let (client, seen) = recording_client();
    let sink = EventSink::spawn(client, "node-a");
    let service = NamespacedName::new("shop", "web");
    sink.scheduling_not_used(
        &service,
        "annotated scheduler \"twos\": the kernel has none, the node's is used",
    );
    let requests = wait_for(&seen, 1).await;
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (_, path, event) = &requests[0];
    assert_eq!(path, "/apis/events.k8s.io/v1/namespaces/shop/events");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "IPVSSchedulingNotUsed");
    assert_eq!(event["regarding"]["kind"], "Service");
    assert_eq!(event["regarding"]["name"], "web");
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.starts_with("node node-a: annotated scheduler \"twos\""),
        "{note}"
    );
}
