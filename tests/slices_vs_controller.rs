//! Our EndpointSlice reconciler against the real kube-controller-manager:
//! the same Services, Pods and Nodes go to the loopback control plane of
//! tests/e2e/control-plane.sh, whose EndpointSlice controller writes its
//! slices; our `desired_slices` computes slices from the objects as the API
//! server returns them; both must agree on everything but names and
//! resource versions.
//!
//! Runs on the host (no kernel needed) with `--features e2e-tests` and
//! KUBECONFIG naming the control plane's admin; `make e2e` does both.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{
    Namespace, Node, Pod, Service, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams,
};
use kube::Client;
use kube_ipvs_proxy::endpointslice::{
    desired_slices, is_controller_slice_of, ReconcileConfig,
};
use serde_json::{json, Value};

const NAMESPACE: &str = "slices-vs-controller";
/// Holds terminating Pods: no kubelet here would ever let them go.
const FINALIZER: &str = "e2e.invalid/hold";
/// Nodes of the scenario; `node-gone` is named by a Pod but never created.
const ZONED_NODE: &str = "node-zoned";
const MISSING_NODE: &str = "node-gone";
/// The controller's default `--max-endpoints-per-slice`, and ours.
const MAX_PER_SLICE: usize = 100;

#[derive(Clone)]
struct PodFixture {
    name: String,
    app: &'static str,
    node: &'static str,
    ips: Vec<String>,
    ready: bool,
    terminating: bool,
    /// (name, containerPort) of the one container.
    ports: Vec<(&'static str, i32)>,
    hostname: Option<&'static str>,
}

impl PodFixture {
    fn new(name: impl Into<String>, app: &'static str, ip: &str) -> Self {
        Self {
            name: name.into(),
            app,
            node: "node-a",
            ips: vec![ip.to_string()],
            ready: true,
            terminating: false,
            ports: Vec::new(),
            hostname: None,
        }
    }

    fn object(&self) -> Result<Pod> {
        let ports: Vec<Value> = self
            .ports
            .iter()
            .map(|(name, port)| json!({"name": name, "containerPort": port}))
            .collect();
        let mut spec = json!({
            "nodeName": self.node,
            "containers": [{"name": "c", "image": "e2e.invalid/none", "ports": ports}],
        });
        if let Some(hostname) = self.hostname {
            spec["hostname"] = json!(hostname);
            spec["subdomain"] = json!(self.app);
        }
        let mut metadata =
            json!({"name": self.name, "labels": {"app": self.app}});
        if self.terminating {
            metadata["finalizers"] = json!([FINALIZER]);
        }
        Ok(serde_json::from_value(
            json!({"metadata": metadata, "spec": spec}),
        )?)
    }

    fn status(&self) -> Value {
        let ready = if self.ready { "True" } else { "False" };
        json!({"status": {
            "phase": "Running",
            "podIP": self.ips.first(),
            "podIPs": self.ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
            "conditions": [{"type": "Ready", "status": ready}],
        }})
    }
}

fn service_fixtures() -> Vec<Value> {
    let svc = |name: &str, ports: Value, extra: Value| {
        let mut spec = json!({"selector": {"app": name}, "ports": ports});
        if let (Some(spec), Some(extra)) =
            (spec.as_object_mut(), extra.as_object())
        {
            spec.extend(extra.clone());
        }
        json!({"metadata": {"name": name, "labels": {"team": "e2e"}}, "spec": spec})
    };
    vec![
        svc(
            "named",
            json!([
                {"name": "http", "port": 80, "targetPort": "web"},
                {"name": "metrics", "port": 9090, "targetPort": 9090},
            ]),
            json!({}),
        ),
        svc(
            "readiness",
            json!([{"name": "http", "port": 80, "targetPort": 8080}]),
            json!({}),
        ),
        svc(
            "publish",
            json!([{"name": "http", "port": 80, "targetPort": 8080}]),
            json!({"publishNotReadyAddresses": true}),
        ),
        svc(
            "many",
            json!([{"name": "http", "port": 80, "targetPort": 8080, "protocol": "UDP"}]),
            json!({}),
        ),
        svc(
            "dual",
            json!([{"name": "http", "port": 80, "targetPort": 8080}]),
            json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"]}),
        ),
        svc(
            "headless",
            json!([{"name": "http", "port": 80, "targetPort": 8080}]),
            json!({"clusterIP": "None"}),
        ),
    ]
}

fn pod_fixtures() -> Vec<PodFixture> {
    let mut pods = Vec::new();
    // Named target ports: two numbers for "web", and a pod without it,
    // which keeps only the numeric port.
    for (i, port) in [(0, 8080), (1, 8080), (2, 8081)] {
        let mut p = PodFixture::new(
            format!("named-{i}"),
            "named",
            &format!("198.19.20.{}", i + 2),
        );
        p.ports = vec![("web", port)];
        pods.push(p);
    }
    let mut p = PodFixture::new("named-3", "named", "198.19.20.5");
    p.ports = vec![("other", 7000)];
    pods.push(p);

    let base = |name: &str, ip: &str| PodFixture::new(name, "readiness", ip);
    pods.push(base("ready", "198.19.21.2"));
    pods.push(PodFixture {
        ready: false,
        ..base("not-ready", "198.19.21.3")
    });
    pods.push(PodFixture {
        terminating: true,
        ..base("terminating", "198.19.21.4")
    });
    pods.push(PodFixture {
        terminating: true,
        ready: false,
        ..base("terminating-not-ready", "198.19.21.5")
    });
    pods.push(PodFixture {
        node: ZONED_NODE,
        ..base("zoned", "198.19.21.6")
    });
    pods.push(PodFixture {
        node: MISSING_NODE,
        ..base("lost", "198.19.21.7")
    });
    pods.push(PodFixture {
        hostname: Some("h0"),
        ..base("named-host", "198.19.21.8")
    });

    let publish = |name: &str, ip: &str| PodFixture::new(name, "publish", ip);
    pods.push(publish("p-ready", "198.19.22.2"));
    pods.push(PodFixture {
        ready: false,
        ..publish("p-not-ready", "198.19.22.3")
    });
    pods.push(PodFixture {
        node: MISSING_NODE,
        ..publish("p-lost", "198.19.22.4")
    });

    // More than one slice's worth.
    for i in 0..130u32 {
        pods.push(PodFixture::new(
            format!("many-{i}"),
            "many",
            &format!("198.19.{}.{}", 30 + i / 200, 2 + i % 200),
        ));
    }

    for i in 0..3u32 {
        let mut p = PodFixture::new(
            format!("dual-{i}"),
            "dual",
            &format!("198.19.23.{}", i + 2),
        );
        p.ips.push(format!("2001:db8:23::{}", i + 2));
        pods.push(p);
    }
    for i in 0..2u32 {
        pods.push(PodFixture::new(
            format!("headless-{i}"),
            "headless",
            &format!("198.19.24.{}", i + 2),
        ));
    }
    pods
}

/// A slice as the comparison sees it: no name, owner or resource version,
/// endpoints sorted. Slices of one port set are then pooled (see
/// [`normalise`]).
fn slice_view(slice: &EndpointSlice) -> Result<(Value, Vec<Value>)> {
    let mut ports: Vec<Value> = slice
        .ports
        .iter()
        .flatten()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    ports.sort_by_key(|p| p["name"].to_string());
    let mut labels = slice.metadata.labels.clone().unwrap_or_default();
    // Set from the Service's update time; nothing to compare.
    labels.remove("endpointslice.kubernetes.io/skip-mirror");
    let key = json!({
        "addressType": slice.address_type,
        "ports": ports,
        "labels": labels,
    });
    let mut endpoints: Vec<Value> = slice
        .endpoints
        .iter()
        .flatten()
        .map(|e| {
            let mut v = serde_json::to_value(e)?;
            if let Some(target) =
                v.get_mut("targetRef").and_then(Value::as_object_mut)
            {
                target.remove("resourceVersion");
            }
            Ok(v)
        })
        .collect::<Result<_, serde_json::Error>>()?;
    endpoints.sort_by_key(|e| e["addresses"].to_string());
    Ok((key, endpoints))
}

/// Which endpoints share a slice with which, and so each slice's size,
/// depends on the history of the controller's syncs (it fills slices as
/// Pods arrive: one run split 130 Pods 98+32, another 97+33, while a
/// reconcile from nothing gives 100+30). So slices with the same address
/// type, ports and labels are pooled: the pool's endpoints and its number
/// of slices must match, and every slice must respect the limit.
fn normalise(slices: &[EndpointSlice]) -> Result<BTreeMap<String, Value>> {
    let mut pools: BTreeMap<String, (usize, BTreeSet<String>)> =
        BTreeMap::new();
    for slice in slices {
        let (key, endpoints) = slice_view(slice)?;
        if endpoints.len() > MAX_PER_SLICE {
            bail!("a slice of {} endpoints: {key}", endpoints.len());
        }
        let pool = pools.entry(key.to_string()).or_default();
        pool.0 += 1;
        pool.1.extend(endpoints.iter().map(Value::to_string));
    }
    Ok(pools
        .into_iter()
        .map(|(key, (count, endpoints))| {
            let endpoints: Vec<Value> = endpoints
                .iter()
                .filter_map(|e| serde_json::from_str(e).ok())
                .collect();
            (key, json!({"slices": count, "endpoints": endpoints}))
        })
        .collect())
}

async fn reset_namespace(client: &Client) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(NAMESPACE).await?.is_some() {
        release_pods(client).await?;
        let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
        let deadline = Instant::now() + Duration::from_secs(120);
        while namespaces.get_opt(NAMESPACE).await?.is_some() {
            if Instant::now() > deadline {
                bail!("namespace {NAMESPACE} from an earlier run does not go away");
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
    // The API server admits no Pod before the controller manager has made
    // the namespace's default ServiceAccount.
    let accounts: Api<ServiceAccount> =
        Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(60);
    while accounts.get_opt("default").await?.is_none() {
        if Instant::now() > deadline {
            bail!("no default ServiceAccount in {NAMESPACE} after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Drops our finalizers and force-deletes the Pods: without a kubelet,
/// nothing else ever would.
async fn release_pods(client: &Client) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for pod in api.list(&ListParams::default()).await? {
        let Some(name) = pod.metadata.name.as_deref() else {
            continue;
        };
        if pod.metadata.finalizers.is_some() {
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await?;
        }
        let _ = api
            .delete(
                name,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await;
    }
    Ok(())
}

async fn ensure_zoned_node(client: &Client) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    if nodes.get_opt(ZONED_NODE).await?.is_none() {
        let node = json!({"metadata": {
            "name": ZONED_NODE,
            "labels": {"topology.kubernetes.io/zone": "zone-b"},
        }});
        nodes
            .create(&PostParams::default(), &serde_json::from_value(node)?)
            .await?;
    }
    Ok(())
}

async fn create_objects(client: &Client) -> Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    for svc in service_fixtures() {
        let name = svc["metadata"]["name"].to_string();
        services
            .create(&PostParams::default(), &serde_json::from_value(svc)?)
            .await
            .with_context(|| format!("creating Service {name} (dual-stack needs an IPv6 service range)"))?;
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for pod in pod_fixtures() {
        api.create(&PostParams::default(), &pod.object()?)
            .await
            .with_context(|| format!("creating Pod {}", pod.name))?;
        api.patch_status(
            &pod.name,
            &PatchParams::default(),
            &Patch::Merge(pod.status()),
        )
        .await
        .with_context(|| format!("setting Pod {}'s status", pod.name))?;
        if pod.terminating {
            api.delete(&pod.name, &DeleteParams::default()).await?;
        }
    }
    Ok(())
}

/// Per Service: the controller's slices and ours, normalised, from one
/// read of the API.
async fn both_sides(
    client: &Client,
) -> Result<BTreeMap<String, (Value, Value)>> {
    let services: Vec<Service> = Api::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?
        .items;
    let pods: Vec<Pod> = Api::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?
        .items;
    let nodes: Vec<Node> = Api::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let slices: Vec<EndpointSlice> = Api::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?
        .items;
    let mut out = BTreeMap::new();
    for svc in &services {
        let name = svc.metadata.name.clone().unwrap_or_default();
        let theirs: Vec<EndpointSlice> = slices
            .iter()
            .filter(|s| is_controller_slice_of(svc, s))
            .cloned()
            .collect();
        let (ours, _errors) = desired_slices(
            svc,
            &pods,
            &nodes,
            &[],
            &ReconcileConfig::default(),
        );
        out.insert(
            name,
            (
                serde_json::to_value(normalise(&theirs)?)?,
                serde_json::to_value(normalise(&ours)?)?,
            ),
        );
    }
    Ok(out)
}

#[tokio::test]
#[cfg_attr(
    not(feature = "e2e-tests"),
    ignore = "needs the loopback control plane: run `make e2e`"
)]
async fn our_slices_match_the_controllers() -> Result<()> {
    let client = Client::try_default()
        .await
        .context("KUBECONFIG must name the e2e control plane's admin")?;
    reset_namespace(&client).await?;
    ensure_zoned_node(&client).await?;
    create_objects(&client).await?;

    // The controller works asynchronously (and batches Pod updates for a
    // second): compare until both agree, and report the last difference.
    let deadline = Instant::now() + Duration::from_secs(60);
    let result = loop {
        let sides = both_sides(&client).await?;
        let differing: Vec<&String> = sides
            .iter()
            .filter(|(_, (t, o))| t != o)
            .map(|(n, _)| n)
            .collect();
        if differing.is_empty() {
            break Ok(sides.len());
        }
        if Instant::now() > deadline {
            let mut report = String::new();
            for name in differing {
                let (theirs, ours) = &sides[name];
                report.push_str(&format!(
                    "Service {name}:\n  controller: {}\n  ours:       {}\n",
                    serde_json::to_string_pretty(theirs)?,
                    serde_json::to_string_pretty(ours)?
                ));
            }
            break Err(anyhow::anyhow!("slices differ after 60 s:\n{report}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    release_pods(&client).await?;
    let compared = result?;
    assert_eq!(compared, service_fixtures().len(), "every Service compared");
    Ok(())
}
