//! Kubernetes Events the proxy records, as upstream kube-proxy does: at
//! start-up, once it watches the API server, a `Normal` event `Starting`
//! (action `StartKubeProxy`) on its Node; and a `Warning`
//! `FailedToStartServiceHealthcheck` (action `Listen`) on a Service whose
//! health check node port cannot be opened. Same reporting controller
//! (`kube-proxy`), reasons, actions and references as upstream, so
//! `kubectl describe` and event exporters see what they expect; the
//! start-up note names this proxy and its version.
//! Ours besides: a `Warning` `IPVSSchedulingNotUsed` (action `Sync`) on a
//! Service whose scheduling annotation is bad or names a scheduler the
//! node will not run.
//!
//! Events go through kube-rs' recorder (`events.k8s.io/v1`, create and
//! patch: the only verbs the ClusterRole grants on events). A Node is
//! cluster-scoped, so its events land in the `default` namespace, as
//! upstream's do. Publishing never blocks the proxy: events are queued to
//! a task, and one that cannot be published is logged and dropped.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    runtime::events::{Event, EventType, Recorder, Reporter},
    Client,
};
use tokio::sync::mpsc;

use crate::{model::NamespacedName, version::BUILD};

#[cfg(test)]
mod tests;

/// Upstream's reporting controller name.
pub const REPORTING_CONTROLLER: &str = "kube-proxy";

/// Events waiting for the publishing task; beyond this they are dropped
/// (an API server that is down must not grow the queue without bound).
const QUEUE: usize = 64;

/// Where the proxy's events go. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EventSink {
    tx: mpsc::Sender<(ObjectReference, Event)>,
    node: std::sync::Arc<str>,
}

impl EventSink {
    /// Starts the publishing task for `node_name`'s proxy on the current
    /// tokio runtime.
    pub fn spawn(client: Client, node_name: &str) -> Self {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.to_owned(),
            instance: Some(format!("{REPORTING_CONTROLLER}-{node_name}")),
        };
        let recorder = Recorder::new(client, reporter);
        let (tx, mut rx) = mpsc::channel::<(ObjectReference, Event)>(QUEUE);
        tokio::spawn(async move {
            while let Some((reference, event)) = rx.recv().await {
                if let Err(error) = recorder.publish(&event, &reference).await {
                    tracing::warn!(
                        reason = %event.reason,
                        kind = reference.kind.as_deref().unwrap_or_default(),
                        name = reference.name.as_deref().unwrap_or_default(),
                        %error,
                        "event not recorded"
                    );
                }
            }
        });
        EventSink {
            tx,
            node: node_name.into(),
        }
    }

    /// Queues an event; a full queue drops it with a log line.
    pub fn record(&self, reference: ObjectReference, event: Event) {
        if let Err(e) = self.tx.try_send((reference, event)) {
            tracing::warn!(error = %e, "event dropped");
        }
    }

    /// Upstream's birth cry: the proxy started on its Node.
    pub fn starting(&self) {
        self.record(node_reference(&self.node), starting_event());
    }

    /// A Service's scheduling annotation that is not used.
    pub fn scheduling_not_used(&self, service: &NamespacedName, why: &str) {
        self.record(
            service_reference(service),
            scheduling_not_used_event(&self.node, why),
        );
    }

    /// A health check node port that could not be opened.
    pub fn health_check_failed(
        &self,
        service: &NamespacedName,
        port: u16,
        error: &dyn std::fmt::Display,
    ) {
        self.record(
            service_reference(service),
            health_check_failed_event(&self.node, service, port, error),
        );
    }
}

/// Ours: a Service's scheduling annotation that the node does not use,
/// and why (the message of the invalid-objects log line).
pub fn scheduling_not_used_event(node_name: &str, why: &str) -> Event {
    Event {
        type_: EventType::Warning,
        reason: "IPVSSchedulingNotUsed".to_owned(),
        note: Some(format!("node {node_name}: {why}")),
        action: "Sync".to_owned(),
        secondary: None,
    }
}

/// How upstream refers to a Service in its events (since 1.35): the
/// API version, kind, namespace and name, no UID.
pub fn service_reference(service: &NamespacedName) -> ObjectReference {
    ObjectReference {
        kind: Some("Service".to_owned()),
        namespace: Some(service.namespace.clone()),
        name: Some(service.name.clone()),
        api_version: Some("v1".to_owned()),
        ..ObjectReference::default()
    }
}

/// Upstream's `FailedToStartServiceHealthcheck`, with its message.
pub fn health_check_failed_event(
    node_name: &str,
    service: &NamespacedName,
    port: u16,
    error: &dyn std::fmt::Display,
) -> Event {
    Event {
        type_: EventType::Warning,
        reason: "FailedToStartServiceHealthcheck".to_owned(),
        note: Some(format!(
            "node {node_name} failed to start healthcheck \"{}/{}\" on port \
             {port}: {error}",
            service.namespace, service.name
        )),
        action: "Listen".to_owned(),
        secondary: None,
    }
}

/// How upstream refers to its Node (since 1.35): the API version, kind
/// and name, no UID (kube-proxy does not read the Node's).
pub fn node_reference(node_name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("Node".to_owned()),
        name: Some(node_name.to_owned()),
        api_version: Some("v1".to_owned()),
        ..ObjectReference::default()
    }
}

/// `Normal` / `Starting` / `StartKubeProxy`, as upstream records it.
pub fn starting_event() -> Event {
    Event {
        type_: EventType::Normal,
        reason: "Starting".to_owned(),
        note: Some(format!("kube-ipvs-proxy {}", BUILD.git_version)),
        action: "StartKubeProxy".to_owned(),
        secondary: None,
    }
}
