//! The proxy as a DaemonSet's Pod on the node under test, on kind and on
//! the real node alike: finding it, replacing it as a rollout or an
//! eviction would, and reading its log through the API server (which asks
//! the kubelet, so the kubelet's log path is what is read).

use std::time::Instant;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, LogParams};

use crate::api::Namespaced;
use crate::scenarios::{self, metric, Cluster};

/// The label deploy/kube-ipvs-proxy.yaml gives the proxy's Pods.
pub const PROXY_LABEL: &str = "app.kubernetes.io/name=kube-ipvs-proxy";

/// The Pods of one DaemonSet (by label) on one node.
pub struct DaemonSetPods<'a> {
    pub api: &'a Namespaced,
    pub namespace: &'a str,
    pub label: &'a str,
    pub node: &'a str,
}

impl DaemonSetPods<'_> {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.api.client.clone(), self.namespace)
    }

    /// The Pod on the node that is not being deleted.
    pub fn current(&self) -> Result<Option<Pod>> {
        let params = ListParams::default()
            .labels(self.label)
            .fields(&format!("spec.nodeName={}", self.node));
        let pods = self.api.rt.block_on(self.pods().list(&params))?;
        Ok(pods
            .items
            .into_iter()
            .find(|p| p.metadata.deletion_timestamp.is_none()))
    }

    /// Whether no Pod of the DaemonSet is left on the node, terminating
    /// ones included.
    pub fn gone(&self) -> Result<bool> {
        let params = ListParams::default()
            .labels(self.label)
            .fields(&format!("spec.nodeName={}", self.node));
        Ok(self
            .api
            .rt
            .block_on(self.pods().list(&params))?
            .items
            .is_empty())
    }

    /// Deletes the Pod on the node and waits until its replacement runs
    /// and has synced (the first sync's timestamp on the node's
    /// `/metrics`, which only the new process can serve once the old Pod
    /// is gone).
    pub fn replace(&self, cluster: &dyn Cluster) -> Result<()> {
        let old = self.current()?.context("no proxy Pod on the node")?;
        let old_name = old.metadata.name.clone().unwrap_or_default();
        self.api.rt.block_on(
            self.pods().delete(&old_name, &DeleteParams::default()),
        )?;
        let started = Instant::now();
        scenarios::wait_for(
            cluster,
            "the old proxy Pod gone and a new one running",
            || {
                let gone = self
                    .api
                    .rt
                    .block_on(self.pods().get_opt(&old_name))?
                    .is_none();
                Ok(gone && self.current()?.as_ref().is_some_and(is_running))
            },
        )?;
        wait_synced(cluster)?;
        println!(
            "cluster_e2e: the proxy Pod replaced in {:.1?}",
            started.elapsed()
        );
        Ok(())
    }

    /// The current Pod's log (its last 300 lines), or why there is none.
    pub fn log(&self) -> String {
        let pod = match self.current() {
            Ok(Some(p)) => p.metadata.name.unwrap_or_default(),
            Ok(None) => return "no proxy Pod on the node".to_string(),
            Err(e) => return e.to_string(),
        };
        let params = LogParams {
            tail_lines: Some(300),
            ..LogParams::default()
        };
        self.api
            .rt
            .block_on(self.pods().logs(&pod, &params))
            .unwrap_or_else(|e| format!("no log from {pod}: {e}"))
    }
}

/// Waits until the proxy on the node has synced.
pub fn wait_synced(cluster: &dyn Cluster) -> Result<()> {
    let node = cluster.node();
    scenarios::wait_for(cluster, "the proxy's first sync", || {
        Ok(metric(
            node.as_ref(),
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        )? > 0.0)
    })
}

pub fn pod_ip(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.pod_ip.as_deref()
}

pub fn is_running(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Running")
}

/// Running, and its Ready condition true.
pub fn is_ready(pod: &Pod) -> bool {
    is_running(pod)
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
            })
}
