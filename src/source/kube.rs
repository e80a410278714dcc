//! The API-server source: kube-runtime watchers on Services,
//! EndpointSlices and our own Node, merged into one stream of
//! [`SourceEvent`]s.
//!
//! The selectors are upstream kube-proxy's of the API server's release:
//! Services that belong to another service proxy, and EndpointSlices of
//! headless Services, are filtered out by the API server, so they never
//! reach the proxy at all. Before 1.36 kube-proxy put both labels on both
//! kinds, and that release's own e2e suite expects it.

use ::kube::{
    runtime::{watcher, WatchStreamExt},
    Client,
};
use futures::{stream, Stream, StreamExt};
use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};

use super::{
    listwatch::{list_watch, Accept, Selectors as Query},
    SourceEvent,
};
use crate::version::Kubernetes;

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

/// A Kubernetes release, major.minor, as the API server's `/version`
/// gives it: what upstream's kube-proxy of that release would do, where
/// releases differ in what a proxy can observe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
}

impl Release {
    /// The newest release this proxy follows: what it does when no API
    /// server says otherwise.
    pub const NEWEST: Release = Release::new(1, 37);

    /// What `kubernetes_build_info` says without an API server (the state
    /// file): the release, with no patch level to claim. Returned, for
    /// the API side's nodes.
    pub fn report_without_api_server(self) -> Kubernetes {
        let kubernetes = Kubernetes {
            major: self.major.to_string(),
            minor: self.minor.to_string(),
            git_version: format!("v{self}"),
        };
        crate::telemetry::exporter::behaving_as(
            &kubernetes,
            &crate::version::BUILD,
        );
        kubernetes
    }
    /// Services and EndpointSlices got selectors of their own.
    const SPLIT_SELECTORS: Release = Release::new(1, 36);
    const BEFORE_SPLIT: Release = Release::new(1, 35);

    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// `/version`'s fields, which managed clusters suffix (`"37+"`).
    pub fn parse(major: &str, minor: &str) -> Option<Self> {
        let number = |text: &str| {
            let digits: String =
                text.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        };
        Some(Self::new(number(major)?, number(minor)?))
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The label selectors of the two watched kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selectors {
    pub services: String,
    pub endpoint_slices: String,
}

/// Upstream's selectors at `release`: from 1.36 Services by the service
/// proxy name only and EndpointSlices by the headless label only (a
/// Service labelled headless with a cluster IP is proxied, a slice of
/// another proxy's Service is read and unused); before, the
/// [`label_selector`] of both on both.
pub fn selectors(
    service_proxy_name: Option<&str>,
    release: Release,
) -> Result<Selectors, SelectorError> {
    let both = label_selector(service_proxy_name)?;
    if release < Release::SPLIT_SELECTORS {
        return Ok(Selectors {
            services: both.clone(),
            endpoint_slices: both,
        });
    }
    let services = match service_proxy_name {
        None | Some("") => format!("!{SERVICE_PROXY_NAME_LABEL}"),
        Some(name) => format!("{SERVICE_PROXY_NAME_LABEL}={name}"),
    };
    Ok(Selectors {
        services,
        endpoint_slices: format!("!{HEADLESS_LABEL}"),
    })
}

/// Which objects a proxy at a release reads, for objects that reach it
/// without an API server to filter them (a state file): exactly what
/// [`selectors`] let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    service_proxy_name: Option<String>,
    release: Release,
}

type Labels = std::collections::BTreeMap<String, String>;

impl Admission {
    /// What the newest release reads: a state file's default.
    pub fn newest(service_proxy_name: Option<&str>) -> Self {
        Self::new(service_proxy_name, Release::NEWEST)
    }

    pub fn new(service_proxy_name: Option<&str>, release: Release) -> Self {
        Self {
            service_proxy_name: service_proxy_name
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
            release,
        }
    }

    pub fn service(&self, labels: Option<&Labels>) -> bool {
        self.proxy_named(labels)
            && (self.release >= Release::SPLIT_SELECTORS || !headless(labels))
    }

    pub fn endpoint_slice(&self, labels: Option<&Labels>) -> bool {
        !headless(labels)
            && (self.release >= Release::SPLIT_SELECTORS
                || self.proxy_named(labels))
    }

    /// `!service-proxy-name`, or `service-proxy-name=NAME`.
    fn proxy_named(&self, labels: Option<&Labels>) -> bool {
        let value = labels.and_then(|l| l.get(SERVICE_PROXY_NAME_LABEL));
        value.map(String::as_str) == self.service_proxy_name.as_deref()
    }
}

fn headless(labels: Option<&Labels>) -> bool {
    labels.is_some_and(|l| l.contains_key(HEADLESS_LABEL))
}

/// The API server's release, asked until it answers: the proxy can do
/// nothing without it anyway, and the kernel keeps the last state
/// meanwhile. One that cannot be read as a release is taken as the
/// newest. Reported as `kubernetes_build_info`, and returned with the
/// API server's words for it.
pub async fn release(client: &Client) -> (Release, Kubernetes) {
    let mut delay = std::time::Duration::from_millis(500);
    loop {
        match client.apiserver_version().await {
            Ok(info) => {
                let kubernetes = Kubernetes {
                    major: info.major,
                    minor: info.minor,
                    git_version: info.git_version,
                };
                crate::telemetry::exporter::behaving_as(
                    &kubernetes,
                    &crate::version::BUILD,
                );
                let release =
                    Release::parse(&kubernetes.major, &kubernetes.minor)
                        .unwrap_or_else(|| {
                            tracing::warn!(
                                major = %kubernetes.major,
                                minor = %kubernetes.minor,
                                newest = %Release::NEWEST,
                                "the API server's version is not a release; \
                                 behaving as the newest"
                            );
                            Release::NEWEST
                        });
                return (release, kubernetes);
            }
            Err(error) => {
                tracing::warn!(
                    %error,
                    "cannot read the API server's version; retrying in {:?}",
                    delay
                );
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(30));
            }
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
///
/// The API server's release ([`release`]) is asked first, inside the
/// stream, so that the servers a caller starts meanwhile already answer.
pub fn watch(
    client: Client,
    accept: Accept,
    node_name: &str,
    service_proxy_name: Option<&str>,
) -> Result<impl Stream<Item = SourceEvent> + Send + 'static, SelectorError> {
    let fields = node_field_selector(node_name)?;
    watch_nodes(
        client,
        accept,
        Some(fields),
        service_proxy_name,
        Box::new(|_| {}),
    )
}

/// Called with the API server's release once it is read.
pub type Announce = Box<dyn FnOnce(&Kubernetes) + Send>;

/// As [`watch`], with every Node: the API side's, which serves them all
/// and tells `announce` the release it behaves as, for its nodes.
pub fn watch_cluster(
    client: Client,
    accept: Accept,
    service_proxy_name: Option<&str>,
    announce: Announce,
) -> Result<impl Stream<Item = SourceEvent> + Send + 'static, SelectorError> {
    watch_nodes(client, accept, None, service_proxy_name, announce)
}

fn watch_nodes(
    client: Client,
    accept: Accept,
    node_fields: Option<String>,
    service_proxy_name: Option<&str>,
    announce: Announce,
) -> Result<impl Stream<Item = SourceEvent> + Send + 'static, SelectorError> {
    // Both kinds of selector made now, so that a bad name is refused at
    // once rather than when the API server answers.
    let newest = selectors(service_proxy_name, Release::NEWEST)?;
    let before_split = selectors(service_proxy_name, Release::BEFORE_SPLIT)?;
    Ok(stream::once(async move {
        let (release, kubernetes) = release(&client).await;
        announce(&kubernetes);
        let labels = if release < Release::SPLIT_SELECTORS {
            before_split
        } else {
            newest
        };
        watch_release(client, accept, node_fields, labels, release)
    })
    .flatten())
}

fn watch_release(
    client: Client,
    accept: Accept,
    node_fields: Option<String>,
    labels: Selectors,
    release: Release,
) -> impl Stream<Item = SourceEvent> + Send + 'static {
    let fields = node_fields.unwrap_or_default();
    tracing::info!(
        kubernetes = %release,
        service_selector = %labels.services,
        endpoint_slice_selector = %labels.endpoint_slices,
        field_selector = %fields,
        accept = %accept,
        "watching the API server"
    );

    let query = |labels: &str, fields: &str| Query {
        labels: labels.to_owned(),
        fields: fields.to_owned(),
    };
    let services = list_watch::<Service>(
        client.clone(),
        accept.clone(),
        query(&labels.services, ""),
    )
    .default_backoff();
    let slices = list_watch::<EndpointSlice>(
        client.clone(),
        accept.clone(),
        query(&labels.endpoint_slices, ""),
    )
    .default_backoff();
    let nodes = list_watch::<Node>(client, accept, query("", &fields))
        .default_backoff();

    stream::select(
        log_errors("Service", services).map(SourceEvent::Service),
        stream::select(
            log_errors("EndpointSlice", slices).map(SourceEvent::EndpointSlice),
            log_errors("Node", nodes).map(SourceEvent::Node),
        ),
    )
}

/// Drops watcher errors after logging them: the watcher itself recovers
/// (after the backoff delays its next poll), so an error must not end the
/// stream that the whole proxy hangs on.
pub fn log_errors<S, K, E>(
    kind: &'static str,
    events: S,
) -> impl Stream<Item = watcher::Event<K>>
where
    S: Stream<Item = Result<watcher::Event<K>, E>>,
    E: std::fmt::Display,
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
