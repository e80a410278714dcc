//! The API-server source: kube-runtime watchers on Services,
//! EndpointSlices and our own Node, merged into one stream of
//! [`SourceEvent`]s.
//!
//! The selectors are upstream kube-proxy's: Services and EndpointSlices
//! that belong to another service proxy, or to a headless Service, are
//! filtered out by the API server, so they never reach the proxy at all.

use std::borrow::Cow;

use ::kube::{
    runtime::{watcher, WatchStreamExt},
    Api, Client, Resource,
};
use futures::{stream, Stream, StreamExt};
use k8s_openapi::{
    api::{
        core::v1::{
            LoadBalancerStatus, Node, Service, ServiceSpec, ServiceStatus,
        },
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use serde::Deserialize;

use super::SourceEvent;

#[cfg(test)]
mod tests;

/// Label naming the proxy that should handle a Service (and its slices).
pub const SERVICE_PROXY_NAME_LABEL: &str =
    "service.kubernetes.io/service-proxy-name";
/// Label the EndpointSlice controller puts on slices of headless Services
/// (and which may be put on Services, as upstream also filters them).
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// A label value longer than this is refused by the API server.
const MAX_LABEL_VALUE_LEN: usize = 63;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    #[error(
        "service proxy name {0:?} is not a valid label value (at most 63 \
         characters: alphanumerics, '-', '_' or '.', beginning and ending \
         with an alphanumeric)"
    )]
    InvalidServiceProxyName(String),
    #[error("node name must not be empty")]
    EmptyNodeName,
}

/// The label selector for Services and EndpointSlices.
///
/// Without a name (or an empty one): everything that no other proxy
/// claims, as upstream kube-proxy. With one: only what is labelled for this proxy, so that it
/// can run beside the default proxy as an alternative one. Headless
/// services are excluded in both cases: nothing is proxied for them.
pub fn label_selector(
    service_proxy_name: Option<&str>,
) -> Result<String, SelectorError> {
    match service_proxy_name {
        None | Some("") => {
            Ok(format!("!{SERVICE_PROXY_NAME_LABEL},!{HEADLESS_LABEL}"))
        }
        Some(name) if is_label_value(name) => Ok(format!(
            "{SERVICE_PROXY_NAME_LABEL}={name},!{HEADLESS_LABEL}"
        )),
        Some(name) => {
            Err(SelectorError::InvalidServiceProxyName(name.to_string()))
        }
    }
}

/// The field selector for our own Node.
pub fn node_field_selector(node_name: &str) -> Result<String, SelectorError> {
    if node_name.is_empty() {
        return Err(SelectorError::EmptyNodeName);
    }
    Ok(format!("metadata.name={}", escape_field_value(node_name)))
}

/// Syntax of a non-empty label value.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= MAX_LABEL_VALUE_LEN
                && alnum(first)
                && alnum(last)
                && bytes
                    .iter()
                    .all(|b| alnum(b) || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Field selector values escape the selector's own syntax characters.
fn escape_field_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Watches the three kinds and merges them into one stream that never
/// ends: watcher errors are logged and retried with kube-runtime's default
/// backoff, and each watcher restarts with a relist (`Init` … `InitDone`)
/// that the store turns into a diff.
pub fn watch(
    client: Client,
    node_name: &str,
    service_proxy_name: Option<&str>,
) -> Result<impl Stream<Item = SourceEvent> + Send + 'static, SelectorError> {
    let fields = node_field_selector(node_name)?;
    watch_nodes(client, Some(&fields), service_proxy_name)
}

/// As [`watch`], with every Node: the API side's, which serves them all.
pub fn watch_cluster(
    client: Client,
    service_proxy_name: Option<&str>,
) -> Result<impl Stream<Item = SourceEvent> + Send + 'static, SelectorError> {
    watch_nodes(client, None, service_proxy_name)
}

fn watch_nodes(
    client: Client,
    node_fields: Option<&str>,
    service_proxy_name: Option<&str>,
) -> Result<impl Stream<Item = SourceEvent> + Send + 'static, SelectorError> {
    let labels = label_selector(service_proxy_name)?;
    let fields = node_fields.unwrap_or_default();
    tracing::info!(
        label_selector = %labels,
        field_selector = %fields,
        "watching the API server"
    );

    let services = watcher(
        Api::<WatchedService>::all(client.clone()),
        watcher::Config::default().labels(&labels),
    )
    .default_backoff()
    .map(|event| event.map(|event| map_event(event, |svc| svc.0)));
    let slices = watcher(
        Api::<EndpointSlice>::all(client.clone()),
        watcher::Config::default().labels(&labels),
    )
    .default_backoff();
    let mut node_config = watcher::Config::default();
    if !fields.is_empty() {
        node_config = node_config.fields(fields);
    }
    let nodes =
        watcher(Api::<Node>::all(client), node_config).default_backoff();

    Ok(stream::select(
        log_errors("Service", services).map(SourceEvent::Service),
        stream::select(
            log_errors("EndpointSlice", slices).map(SourceEvent::EndpointSlice),
            log_errors("Node", nodes).map(SourceEvent::Node),
        ),
    ))
}

/// A Service as the proxy reads it: without `status.conditions`, which no
/// proxy uses and whose entries the generated type holds to the schema
/// that the API server does not enforce (Kubernetes' own e2e suite writes
/// a condition with a null lastTransitionTime). One such Service would
/// otherwise fail every watch and list of Services, cluster-wide, for as
/// long as it exists.
#[derive(Clone, Debug)]
struct WatchedService(Service);

impl<'de> Deserialize<'de> for WatchedService {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Self, D::Error> {
        // Straight from the stream, no intermediate tree: a cold start
        // decodes every Service of the cluster. Unknown fields are
        // skipped, the conditions among them.
        #[derive(Deserialize)]
        struct Fields {
            #[serde(default)]
            metadata: ObjectMeta,
            spec: Option<ServiceSpec>,
            status: Option<StatusFields>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct StatusFields {
            load_balancer: Option<LoadBalancerStatus>,
        }
        let Fields {
            metadata,
            spec,
            status,
        } = Fields::deserialize(deserializer)?;
        Ok(WatchedService(Service {
            metadata,
            spec,
            status: status.map(|s| ServiceStatus {
                load_balancer: s.load_balancer,
                conditions: None,
            }),
        }))
    }
}

impl Resource for WatchedService {
    type DynamicType = ();
    type Scope = <Service as Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Service::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Service::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Service::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Service::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// The same event, its object turned into another type.
fn map_event<A, B>(
    event: watcher::Event<A>,
    f: impl FnOnce(A) -> B,
) -> watcher::Event<B> {
    use watcher::Event;
    match event {
        Event::Apply(obj) => Event::Apply(f(obj)),
        Event::Delete(obj) => Event::Delete(f(obj)),
        Event::InitApply(obj) => Event::InitApply(f(obj)),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

/// Drops watcher errors after logging them: the watcher itself recovers
/// (after the backoff delays its next poll), so an error must not end the
/// stream that the whole proxy hangs on.
pub fn log_errors<S, K>(
    kind: &'static str,
    events: S,
) -> impl Stream<Item = watcher::Event<K>>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    events.filter_map(move |res| {
        std::future::ready(match res {
            Ok(event) => Some(event),
            Err(err) => {
                tracing::warn!(kind, error = %err, "watch failed; retrying");
                None
            }
        })
    })
}
