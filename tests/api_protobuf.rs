//! The API server's protobuf against its JSON, for what the proxy reads:
//! Services, EndpointSlices and Nodes with every field the proxy reads
//! set, made in the real API server, listed and watched both ways by the
//! proxy's own list and watch, must come out the same, change by change.
//! (The Services have no selector, so that the EndpointSlice controller
//! adds no slice of its own.)
//!
//! Runs on the host with `--features e2e-tests` and KUBECONFIG naming the
//! loopback control plane's admin (tests/e2e/control-plane.sh); `make e2e`
//! does both.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures::{Stream, StreamExt};
use http::header;
use k8s_openapi::api::{
    core::v1::{Namespace, Node, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    api::{DeleteParams, Patch, PatchParams, PostParams},
    client::Body,
    runtime::watcher::Event,
    Api, Client, Resource,
};
use kube_ipvs_proxy::source::{
    listwatch::{list_watch, Accept, Error, Listed, Selectors},
    protobuf,
    watched::Watched,
};
use pretty_assertions::assert_eq;
use serde::de::DeserializeOwned;
use serde_json::json;

const NAMESPACE: &str = "protobuf-vs-json";
const LABEL: &str = "kube-ipvs-proxy.test/protobuf-vs-json";
const NODE: &str = "protobuf-vs-json-node";

fn selectors() -> Selectors {
    Selectors {
        labels: LABEL.to_owned(),
        fields: String::new(),
    }
}

fn labels() -> serde_json::Value {
    json!({LABEL: "yes", "kubernetes.io/service-name": "web"})
}

async fn reset(client: &Client) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(NAMESPACE).await?.is_some() {
        namespaces
            .delete(NAMESPACE, &DeleteParams::default())
            .await?;
        for _ in 0..240 {
            if namespaces.get_opt(NAMESPACE).await?.is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    if nodes.get_opt(NODE).await?.is_some() {
        nodes.delete(NODE, &DeleteParams::default()).await?;
    }
    Ok(())
}

async fn create(client: &Client) -> Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let annotations = json!({
        "kube-ipvs-proxy.io/scheduler": "wrr",
        "note": "kept by the proxy, as every annotation"
    });
    for svc in [
        json!({
            "metadata": {"name": "web", "labels": labels(), "annotations": annotations},
            "spec": {
                "type": "ClusterIP",
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
                "internalTrafficPolicy": "Local",
                "trafficDistribution": "PreferClose",
                "publishNotReadyAddresses": true,
                "ports": [
                    {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http",
                     "appProtocol": "http"},
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353},
                    {"name": "sctp", "port": 9, "protocol": "SCTP", "targetPort": 9}
                ]
            }
        }),
        json!({
            "metadata": {"name": "lb", "labels": labels()},
            "spec": {
                "type": "LoadBalancer",
                "externalIPs": ["198.18.201.1"],
                "externalTrafficPolicy": "Local",
                "loadBalancerSourceRanges": ["198.18.0.0/24", "198.19.0.0/16"],
                "allocateLoadBalancerNodePorts": true,
                "loadBalancerClass": "example.invalid/lb",
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}]
            }
        }),
        json!({
            "metadata": {"name": "outside", "labels": labels()},
            "spec": {"type": "ExternalName", "externalName": "example.invalid"}
        }),
    ] {
        services
            .create(&PostParams::default(), &serde_json::from_value(svc)?)
            .await?;
    }
    services
        .patch_status(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [
                {"ip": "198.18.200.1", "ipMode": "Proxy",
                 "ports": [{"port": 80, "protocol": "TCP", "error": "Pending"}]},
                {"hostname": "lb.example.invalid"}
            ]}}})),
        )
        .await?;

    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let mut slice_labels = labels();
    slice_labels["endpointslice.kubernetes.io/managed-by"] =
        json!("kube-ipvs-proxy.test");
    for slice in [
        json!({
            "metadata": {"name": "web-1", "labels": slice_labels,
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time":
                                "2026-11-28T10:00:01Z"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["198.19.0.1"], "nodeName": "node-a", "zone": "zone-a",
                 "hostname": "web-0",
                 "conditions": {"ready": true, "serving": true, "terminating": false},
                 "hints": {"forZones": [{"name": "zone-a"}], "forNodes": [{"name": "node-a"}]},
                 "targetRef": {"kind": "Pod", "namespace": NAMESPACE, "name": "web-0"}},
                {"addresses": ["198.19.1.1"], "nodeName": "node-b",
                 "conditions": {"ready": false, "serving": true, "terminating": true}},
                {"addresses": ["198.19.2.1"], "conditions": {}}
            ],
            "ports": [
                {"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"},
                {"name": "dns", "port": 5353, "protocol": "UDP"}
            ]
        }),
        json!({
            "metadata": {"name": "web-empty", "labels": slice_labels},
            "addressType": "IPv4",
            "endpoints": [],
            "ports": []
        }),
        json!({
            "metadata": {"name": "web-fqdn", "labels": slice_labels},
            "addressType": "FQDN",
            "endpoints": [{"addresses": ["web.example.invalid"]}]
        }),
    ] {
        slices
            .create(&PostParams::default(), &serde_json::from_value(slice)?)
            .await?;
    }

    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": NODE, "labels": {
                    LABEL: "yes", "topology.kubernetes.io/zone": "zone-a"}},
                "spec": {
                    "podCIDR": "198.19.8.0/24",
                    "podCIDRs": ["198.19.8.0/24"],
                    "taints": [{"key": "ToBeDeletedByClusterAutoscaler",
                                "value": "1", "effect": "NoSchedule"}]
                }
            }))?,
        )
        .await?;
    nodes
        .patch_status(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "198.18.130.1"},
                {"type": "ExternalIP", "address": "198.18.131.1"},
                {"type": "Hostname", "address": NODE}
            ]}})),
        )
        .await?;
    Ok(())
}

/// What the protobuf messages leave out on purpose, and the JSON types
/// keep: no proxy reads them.
trait Unread {
    fn without_unread(self) -> Self;
}

impl Unread for Service {
    fn without_unread(self) -> Self {
        self
    }
}

impl Unread for EndpointSlice {
    fn without_unread(mut self) -> Self {
        for endpoint in self.endpoints.iter_mut().flatten() {
            endpoint.target_ref = None;
            endpoint.deprecated_topology = None;
        }
        self
    }
}

impl Unread for Node {
    fn without_unread(mut self) -> Self {
        if let Some(spec) = &mut self.spec {
            *spec = k8s_openapi::api::core::v1::NodeSpec {
                pod_cidr: spec.pod_cidr.take(),
                pod_cidrs: spec.pod_cidrs.take(),
                taints: spec.taints.take().map(|taints| {
                    taints
                        .into_iter()
                        .map(|mut t| {
                            t.time_added = None;
                            t
                        })
                        .collect()
                }),
                ..Default::default()
            };
        }
        self
    }
}

/// The stream's events as lines, until `until` is seen (10 s at most).
async fn read_until<K: Resource + std::fmt::Debug>(
    stream: &mut (impl Stream<Item = Result<Event<K>, Error>> + Unpin),
    until: impl Fn(&Event<K>) -> bool,
) -> Result<Vec<Event<K>>> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .with_context(|| format!("waiting, after {events:?}"))?;
        match next {
            Some(Ok(event)) => {
                let done = until(&event);
                events.push(event);
                if done {
                    return Ok(events);
                }
            }
            Some(Err(err)) => bail!("{err}"),
            None => bail!("the stream ended"),
        }
    }
}

fn init_done<K>(event: &Event<K>) -> bool {
    matches!(event, Event::InitDone)
}

/// Each event, its object stripped of what the proxy does not read.
fn normalized<K: Unread>(
    events: Vec<Event<K>>,
) -> Vec<(&'static str, Option<K>)> {
    events
        .into_iter()
        .map(|event| match event {
            Event::Apply(o) => ("apply", Some(o.without_unread())),
            Event::Delete(o) => ("delete", Some(o.without_unread())),
            Event::InitApply(o) => ("init-apply", Some(o.without_unread())),
            Event::Init => ("init", None),
            Event::InitDone => ("init-done", None),
        })
        .collect()
}

/// The protobuf answer really is protobuf: a raw list asks for it as the
/// proxy does and decodes it.
async fn served_as_protobuf<K: Listed>(client: &Client) -> Result<usize>
where
    Watched<K>: DeserializeOwned,
{
    let url = format!(
        "{}?labelSelector={}",
        K::url_path(&(), None),
        LABEL.replace('/', "%2F")
    );
    let request = http::Request::get(url)
        .header(header::ACCEPT, "application/vnd.kubernetes.protobuf, */*")
        .body(Body::empty())?;
    let response = client.send(request).await?;
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if !content_type.starts_with(protobuf::MEDIA_TYPE) {
        bail!("{}: answered as {content_type:?}", K::url_path(&(), None));
    }
    let bytes = response.into_body().collect_bytes().await?;
    Ok(protobuf::list::<K>(&bytes)?.items.len())
}

/// Lists and watches kind `K` both ways; `change` makes the changes both
/// watches must see, the last of which `last` recognises.
async fn both_ways<K, F>(
    client: &Client,
    expected: usize,
    change: F,
    last: impl Fn(&Event<K>) -> bool + Copy,
) -> Result<()>
where
    K: Listed + Unread + PartialEq + std::fmt::Debug,
    Watched<K>: DeserializeOwned,
    F: std::future::Future<Output = Result<()>>,
{
    let kind = K::kind(&());
    assert_eq!(served_as_protobuf::<K>(client).await?, expected, "{kind}");
    let json = Accept::new("application/json", "").context("accept")?;
    let mut by_protobuf = Box::pin(list_watch::<K>(
        client.clone(),
        Accept::protobuf(),
        selectors(),
    ));
    let mut by_json =
        Box::pin(list_watch::<K>(client.clone(), json, selectors()));
    let listed_pb = read_until(&mut by_protobuf, init_done).await?;
    let listed_json = read_until(&mut by_json, init_done).await?;
    assert_eq!(listed_pb.len(), expected + 2, "{kind}: {listed_pb:?}");
    assert_eq!(
        normalized(listed_json),
        normalized(listed_pb),
        "{kind}: the lists"
    );
    change.await?;
    let watched_pb = read_until(&mut by_protobuf, last).await?;
    let watched_json = read_until(&mut by_json, last).await?;
    assert_eq!(
        normalized(watched_json),
        normalized(watched_pb),
        "{kind}: the watches"
    );
    Ok(())
}

fn named<K: Resource>(
    name: &'static str,
    deleted: bool,
) -> impl Fn(&Event<K>) -> bool + Copy {
    move |event| match event {
        Event::Apply(o) if !deleted => o.meta().name.as_deref() == Some(name),
        Event::Delete(o) if deleted => o.meta().name.as_deref() == Some(name),
        _ => false,
    }
}

#[tokio::test]
#[cfg_attr(
    not(feature = "e2e-tests"),
    ignore = "needs the loopback control plane: run `make e2e`"
)]
async fn protobuf_reads_as_json_does() -> Result<()> {
    let client = Client::try_default()
        .await
        .context("KUBECONFIG must name the e2e control plane's admin")?;
    reset(&client).await?;
    create(&client).await?;
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE);
    let nodes: Api<Node> = Api::all(client.clone());

    both_ways::<Service, _>(
        &client,
        3,
        async {
            services
                .patch(
                    "web",
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"spec": {"externalIPs": ["198.18.201.2"]}}),
                    ),
                )
                .await?;
            services.delete("outside", &DeleteParams::default()).await?;
            Ok(())
        },
        named("outside", true),
    )
    .await?;
    both_ways::<EndpointSlice, _>(
        &client,
        3,
        async {
            slices
                .patch(
                    "web-empty",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"endpoints": [
                        {"addresses": ["198.19.3.1"], "conditions": {"ready": true}}
                    ]})),
                )
                .await?;
            slices.delete("web-1", &DeleteParams::default()).await?;
            Ok(())
        },
        named("web-1", true),
    )
    .await?;
    both_ways::<Node, _>(
        &client,
        1,
        async {
            nodes
                .patch_status(
                    NODE,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"addresses": [
                        {"type": "InternalIP", "address": "198.18.130.2"}
                    ]}})),
                )
                .await?;
            nodes.delete(NODE, &DeleteParams::default()).await?;
            Ok(())
        },
        named(NODE, true),
    )
    .await?;
    // The guest's tests run next against the same API server, and their
    // proxies would program these Services.
    Api::<Namespace>::all(client.clone())
        .delete(NAMESPACE, &DeleteParams::default())
        .await?;
    Ok(())
}
