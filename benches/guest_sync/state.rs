//! The cluster both sides load: the host benches' services and slices
//! (`bench_support::fixtures`), one Node that runs none of their endpoints, the
//! state file the proxy watches, and the merged desired state the kernel
//! tools are given.

use std::{net::IpAddr, path::PathBuf};

use anyhow::Context;
use bench_support::fixtures::{self, ENDPOINTS_PER_SERVICE};
use k8s_openapi::{
    api::{
        core::v1::{Node, NodeAddress, NodeStatus},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube_ipvs_proxy::{
    desired::Plan,
    source::file::Snapshot,
    sync::{self, NodeSettings},
};

/// Not one of the fixtures' node-0..2: no endpoint is local, as for a
/// node among many, so no KUBE-LOOP-BACK entries (a node hosting 40% of
/// 100,000 endpoints is not a cluster anyone runs).
pub const NODE: &str = "bench-node";
/// On the dummy link node0; outside the services' 198.18.0.0-198.18.99.x
/// for up to 25,600 services.
pub const NODE_IP: &str = "198.18.100.1";
pub const MAX_SERVICES: usize = 25_600;

pub fn node() -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(NODE.into()),
            labels: Some(
                [("kubernetes.io/hostname".to_string(), NODE.to_string())]
                    .into(),
            ),
            ..Default::default()
        },
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: NODE_IP.into(),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The state file as a `kubectl get -o json` List, kept as one JSON text
/// per object so that an edit re-serialises only what it changes.
pub struct StateFile {
    pub path: PathBuf,
    node: String,
    services: Vec<String>,
    slices: Vec<String>,
}

impl StateFile {
    pub fn new(path: PathBuf, services: usize) -> anyhow::Result<Self> {
        let mut file = Self {
            path,
            node: serde_json::to_string(&node())?,
            services: Vec::with_capacity(services),
            slices: Vec::with_capacity(services),
        };
        for i in 0..services {
            file.add_service(i)?;
        }
        Ok(file)
    }

    /// Service `i` and its slice with every endpoint ready.
    pub fn add_service(&mut self, i: usize) -> anyhow::Result<()> {
        self.services
            .push(serde_json::to_string(&fixtures::service(i))?);
        self.slices.push(serde_json::to_string(&fixtures::slice(
            i,
            ENDPOINTS_PER_SERVICE,
        ))?);
        Ok(())
    }

    /// Replaces service `i`'s slice (`i` below the number of services).
    pub fn set_slice(
        &mut self,
        i: usize,
        slice: &EndpointSlice,
    ) -> anyhow::Result<()> {
        let text = serde_json::to_string(slice)?;
        let at = self
            .slices
            .get_mut(i)
            .with_context(|| format!("no slice {i} to replace"))?;
        *at = text;
        Ok(())
    }

    pub fn text(&self) -> String {
        let mut items = Vec::with_capacity(1 + 2 * self.services.len());
        items.push(self.node.as_str());
        items.extend(self.services.iter().map(String::as_str));
        items.extend(self.slices.iter().map(String::as_str));
        format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[{}]}}\n",
            items.join(",\n")
        )
    }

    /// Replaces the file by rename, as editors do and as the proxy's
    /// file source expects, so it never reads half of it.
    pub fn write(&self) -> anyhow::Result<()> {
        let tmp = self.path.with_extension("json.new");
        std::fs::write(&tmp, self.text())
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("renaming to {}", self.path.display()))
    }
}

/// What the proxy should program for the first `services` services on
/// [`NODE`], computed by the same code as `kube-ipvs-proxy plan`.
pub fn plan(services: usize) -> Plan {
    let snapshot = Snapshot {
        services: (0..services).map(fixtures::service).collect(),
        endpoint_slices: (0..services)
            .map(|i| fixtures::slice(i, ENDPOINTS_PER_SERVICE))
            .collect(),
        nodes: vec![node()],
        others: Vec::new(),
    };
    sync::plan(&snapshot, NODE, &NodeSettings::default())
}

/// Service `i`'s virtual server address (its cluster IP).
pub fn cluster_ip(i: usize) -> anyhow::Result<IpAddr> {
    fixtures::service(i)
        .spec
        .and_then(|s| s.cluster_ip)
        .context("fixture service without a cluster IP")?
        .parse()
        .context("fixture cluster IP")
}

/// The address of endpoint `j` of service `i`.
pub fn endpoint_ip(i: usize, j: usize) -> anyhow::Result<IpAddr> {
    let slice = fixtures::slice(i, ENDPOINTS_PER_SERVICE);
    slice
        .endpoints
        .as_deref()
        .unwrap_or_default()
        .get(j)
        .and_then(|e| e.addresses.first())
        .with_context(|| format!("fixture slice {i} has no endpoint {j}"))?
        .parse()
        .context("fixture endpoint address")
}
