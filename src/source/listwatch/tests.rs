//! The list and watch against a scripted server: each request is
//! recorded and answered with the script's next response. What the real
//! API server answers is for tests/api_protobuf.rs.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt as _;
use http::{Request, Response};
use k8s_openapi::api::core::v1::Service;
use kube::client::Body;
use pretty_assertions::assert_eq;

use super::*;
use crate::source::protobuf::testing as pb;

const PROTOBUF_STREAM: &str =
    "application/vnd.kubernetes.protobuf;stream=watch";

/// One scripted answer: status, content type, body.
type Answer = (u16, &'static str, Vec<u8>);

#[derive(Default)]
struct Script {
    answers: VecDeque<Answer>,
    /// Each request's path and query, and its Accept header.
    seen: Vec<(String, String)>,
}

fn scripted(answers: Vec<Answer>) -> (Client, Arc<Mutex<Script>>) {
    let script = Arc::new(Mutex::new(Script {
        answers: answers.into(),
        seen: Vec::new(),
    }));
    let shared = Arc::clone(&script);
    let service = tower::service_fn(move |request: Request<Body>| {
        let script = Arc::clone(&shared);
        async move {
            let accept = request
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let uri = request.uri().to_string();
            let answer = {
                let mut script = script.lock().expect("script");
                script.seen.push((uri, accept));
                script.answers.pop_front()
            };
            // Past the script: a watch that never says anything, as a
            // quiet cluster's.
            let Some((status, content_type, body)) = answer else {
                std::future::pending::<()>().await;
                unreachable!()
            };
            Response::builder()
                .status(status)
                .header("content-type", content_type)
                .body(Body::from(body))
                .map_err(kube::Error::HttpError)
        }
    });
    (Client::new(service, "default"), script)
}

/// The stream's first `n` items, each as a short line.
async fn first(
    stream: impl Stream<Item = Result<Event<Service>, Error>>,
    n: usize,
) -> Vec<String> {
    let items = stream.take(n).map(|item| match item {
        Ok(Event::Init) => "init".to_owned(),
        Ok(Event::InitApply(s)) => format!("init-apply {}", name(&s)),
        Ok(Event::InitDone) => "init-done".to_owned(),
        Ok(Event::Apply(s)) => format!("apply {}", name(&s)),
        Ok(Event::Delete(s)) => format!("delete {}", name(&s)),
        Err(err) => format!("error {err}"),
    });
    tokio::time::timeout(Duration::from_secs(5), items.collect())
        .await
        .expect("the events in time")
}

fn name(svc: &Service) -> String {
    format!(
        "{}@{}",
        svc.metadata.name.as_deref().unwrap_or_default(),
        svc.metadata.resource_version.as_deref().unwrap_or_default()
    )
}

fn services(
    client: Client,
) -> impl Stream<Item = Result<Event<Service>, Error>> {
    let selectors = Selectors {
        labels: "!service.kubernetes.io/service-proxy-name".into(),
        fields: String::new(),
    };
    list_watch::<Service>(client, Accept::protobuf(), selectors)
}

#[tokio::test]
async fn protobuf_pages_then_a_watch_resumed_and_relisted_when_gone() {
    let protobuf = protobuf::MEDIA_TYPE;
    let (client, script) = scripted(vec![
        (200, protobuf, pb::services(&[("a", "5")], "10", "page-2")),
        (200, protobuf, pb::services(&[("b", "7")], "10", "")),
        (
            200,
            PROTOBUF_STREAM,
            [
                pb::event("ADDED", pb::service("c", "11")),
                pb::event("MODIFIED", pb::service("a", "12")),
                pb::event("BOOKMARK", pb::service("", "15")),
            ]
            .concat(),
        ),
        // Resumed from the bookmark's version, after the server ended
        // the first watch.
        (
            200,
            PROTOBUF_STREAM,
            [
                pb::event("DELETED", pb::service("b", "16")),
                pb::event("ERROR", pb::status(410, "Expired", "too old")),
            ]
            .concat(),
        ),
        (200, protobuf, pb::services(&[("c", "11")], "20", "")),
        (
            200,
            PROTOBUF_STREAM,
            pb::event("ADDED", pb::service("d", "21")),
        ),
    ]);
    let got = first(services(client), 12).await;
    assert_eq!(
        got,
        [
            "init",
            "init-apply a@5",
            "init-apply b@7",
            "init-done",
            "apply c@11",
            "apply a@12",
            "delete b@16",
            "error watch: the API server reports 410 Expired: too old",
            "init",
            "init-apply c@11",
            "init-done",
            "apply d@21",
        ]
    );
    let seen = script.lock().unwrap().seen.clone();
    let selector =
        "labelSelector=%21service.kubernetes.io%2Fservice-proxy-name";
    let list = format!("/api/v1/services?&{selector}&limit=500");
    let watch = |version: &str| {
        format!(
            "/api/v1/services?&watch=true&timeoutSeconds=290&{selector}&allowWatchBookmarks=true&resourceVersion={version}"
        )
    };
    let paths: Vec<&str> = seen.iter().map(|(uri, _)| uri.as_str()).collect();
    assert_eq!(
        paths,
        [
            list.clone(),
            format!("{list}&continue=page-2"),
            watch("10"),
            watch("15"),
            list.clone(),
            watch("20"),
        ]
    );
    for (_, accept) in &seen {
        assert_eq!(accept, "application/vnd.kubernetes.protobuf, */*");
    }
}

/// A page that names the next has it asked for at once, while its own
/// objects are still being handed on; the objects still come in order.
#[tokio::test]
async fn the_next_page_is_asked_for_while_a_page_is_handed_on() {
    let protobuf = protobuf::MEDIA_TYPE;
    let (client, script) = scripted(vec![
        (
            200,
            protobuf,
            pb::services(&[("a", "5"), ("b", "6")], "10", "page-2"),
        ),
        (200, protobuf, pb::services(&[("c", "7")], "10", "")),
    ]);
    let mut stream = std::pin::pin!(services(client));
    let asked = |script: &Mutex<Script>| script.lock().unwrap().seen.len();
    let head = first(stream.as_mut(), 2).await;
    assert_eq!(head, ["init", "init-apply a@5"]);
    tokio::time::timeout(Duration::from_secs(5), async {
        while asked(&script) < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("page 2 asked for before page 1's objects were all taken");
    let rest = first(stream, 3).await;
    assert_eq!(rest, ["init-apply b@6", "init-apply c@7", "init-done"]);
    let seen = script.lock().unwrap().seen.clone();
    assert!(seen[1].0.ends_with("&continue=page-2"), "{seen:?}");
}

fn json_service(name: &str, version: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": version,
                     "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"clusterIP": "198.18.0.40", "ports": [{"port": 80}]}
    })
}

fn json_lines(events: &[serde_json::Value]) -> Vec<u8> {
    events
        .iter()
        .flat_map(|e| [e.to_string().into_bytes(), b"\n".to_vec()])
        .flatten()
        .collect()
}

#[tokio::test]
async fn a_server_that_answers_json_only_is_read_as_json() {
    let json = "application/json";
    let list = serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceList",
        "metadata": {"resourceVersion": "10"},
        "items": [json_service("a", "5")]
    });
    let (client, script) = scripted(vec![
        (200, json, list.to_string().into_bytes()),
        (
            200,
            json,
            json_lines(&[
                serde_json::json!({"type": "ADDED", "object": json_service("b", "11")}),
                serde_json::json!({"type": "BOOKMARK", "object": {
                    "kind": "Service", "apiVersion": "v1",
                    "metadata": {"resourceVersion": "14"}}}),
                serde_json::json!({"type": "DELETED", "object": json_service("a", "15")}),
                serde_json::json!({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "too old", "reason": "Expired", "code": 410}}),
            ]),
        ),
        (200, json, list.to_string().into_bytes()),
    ]);
    let got = first(services(client), 9).await;
    assert_eq!(
        got,
        [
            "init",
            "init-apply a@5",
            "init-done",
            "apply b@11",
            "delete a@15",
            "error watch: the API server reports 410 Expired: too old",
            "init",
            "init-apply a@5",
            "init-done",
        ]
    );
    // Asked for protobuf all along, as client-go asks.
    let seen = script.lock().unwrap().seen.clone();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(
        |(_, accept)| accept == "application/vnd.kubernetes.protobuf, */*"
    ));
}

#[tokio::test]
async fn refusals_name_the_request_and_the_servers_message_then_retry() {
    let protobuf = protobuf::MEDIA_TYPE;
    let (client, script) = scripted(vec![
        (
            403,
            protobuf,
            pb::status(403, "Forbidden", "services is forbidden: User \"x\""),
        ),
        (500, "text/plain", b"etcd is unhappy".to_vec()),
        (200, protobuf, b"k8s\0garbage".to_vec()),
        (200, protobuf, pb::services(&[("a", "5")], "10", "")),
        // The watch's own refusal: retried from the same version.
        (
            504,
            "application/json",
            serde_json::json!({"kind": "Status", "message": "timeout", "code": 504})
                .to_string()
                .into_bytes(),
        ),
        (200, PROTOBUF_STREAM, pb::event("ADDED", pb::service("b", "11"))),
    ]);
    let got = first(services(client), 11).await;
    assert_eq!(got[0], "init");
    assert_eq!(
        got[1],
        "error list: HTTP 403: services is forbidden: User \"x\""
    );
    assert_eq!(got[2], "init");
    assert_eq!(got[3], "error list: HTTP 500: Internal Server Error");
    assert_eq!(got[4], "init");
    assert!(got[5].starts_with("error list: malformed"), "{}", got[5]);
    assert_eq!(
        got[6..],
        [
            "init",
            "init-apply a@5",
            "init-done",
            "error watch: HTTP 504: timeout",
            "apply b@11",
        ]
    );
    let seen = script.lock().unwrap().seen.clone();
    let watches: Vec<&str> = seen
        .iter()
        .map(|(uri, _)| uri.as_str())
        .filter(|uri| uri.contains("watch=true"))
        .collect();
    assert_eq!(watches.len(), 2);
    assert!(watches
        .iter()
        .all(|uri| uri.ends_with("resourceVersion=10")));
}

#[test]
fn accept_is_made_as_client_gos() {
    let header = |accept: &str, content: &str| {
        Accept::new(accept, content).map(|a| a.to_string())
    };
    assert_eq!(
        Some(Accept::protobuf().to_string()),
        header("", protobuf::MEDIA_TYPE)
    );
    assert_eq!(
        header("application/json", protobuf::MEDIA_TYPE).as_deref(),
        Some("application/json")
    );
    assert_eq!(
        header("", "application/json").as_deref(),
        Some("application/json, */*")
    );
    assert_eq!(header("", "application/\u{7f}"), None);
}

#[tokio::test]
async fn an_event_that_does_not_decode_is_skipped_and_the_watch_goes_on() {
    let protobuf = protobuf::MEDIA_TYPE;
    let garbled = {
        let event = b"\x0a\x05ADDED\x12\x05\x0a\x03k8s".to_vec();
        let len = u32::try_from(event.len()).unwrap_or_default();
        [&len.to_be_bytes()[..], &event].concat()
    };
    let (client, script) = scripted(vec![
        (200, protobuf, pb::services(&[], "10", "")),
        (
            200,
            PROTOBUF_STREAM,
            [
                garbled,
                pb::event("ADDED", pb::service("b", "11")),
                // A length no object has: the rest cannot be read.
                u32::MAX.to_be_bytes().to_vec(),
                pb::event("ADDED", pb::service("lost", "12")),
            ]
            .concat(),
        ),
        (
            200,
            PROTOBUF_STREAM,
            pb::event("ADDED", pb::service("c", "13")),
        ),
    ]);
    let got = first(services(client), 6).await;
    assert_eq!(got[..2], ["init", "init-done"]);
    assert!(
        got[2].starts_with("error watch: not a protobuf"),
        "{}",
        got[2]
    );
    assert_eq!(got[3], "apply b@11");
    assert!(got[4].contains("resuming on a new watch"), "{}", got[4]);
    assert_eq!(got[5..], ["apply c@13"]);
    let seen = script.lock().unwrap().seen.clone();
    assert!(seen[2].0.ends_with("resourceVersion=11"), "{:?}", seen[2]);
}
