//! What the one-shot commands (`plan`, `list`) read: a node's state,
//! synced once from the source the proxy's own configuration names (a
//! state file, the API side, the API server), on a runtime of their own.
//! Run in the proxy's Pod with its flags, they see what it sees.

use std::{future::Future, time::Duration};

use super::{clients, hostname, Failure, Source};
use crate::{
    config::Config,
    nodeview::endpoint::{ApiEndpoint, Credentials},
    source::{
        self,
        kube::{Admission, Release},
    },
    sync::{self, NodeSettings, SyncState},
};

/// How long a one-shot command waits for its source to answer.
const SOURCE_TIMEOUT: Duration = Duration::from_secs(30);

/// What the command line asked of the source.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked<'a> {
    /// The node; by default a state file's only Node, else the one the
    /// proxy would be (`--hostname-override`, the Pod's `NODE_NAME`, the
    /// host's name).
    pub node: Option<&'a str>,
    /// A state file read as this release's proxy would read it.
    pub kubernetes_version: Option<(u32, u32)>,
    /// The node is this host whatever the source (`list`, which reads
    /// this host's kernel): its NodePorts are on this host's addresses.
    pub this_host: bool,
}

/// The node's state from `source`, synced once.
pub fn node_state(
    config: &Config,
    source: Source,
    asked: Asked<'_>,
) -> Result<SyncState, Failure> {
    let settings = NodeSettings::from_config(config);
    // The proxy's NodePorts listen on its host's addresses, not only the
    // Node's: read them when the node asked about is this host, as it is
    // by default but for a state file (a cluster of its own).
    let this_host = asked.this_host
        || (asked.node.is_none() && !matches!(source, Source::StateFile(_)));
    let local = if this_host { host_addresses() } else { None };
    match source {
        Source::StateFile(path) => {
            let release = asked
                .kubernetes_version
                .map_or(Release::NEWEST, |(a, b)| Release::new(a, b));
            let admission =
                Admission::new(config.service_proxy_name.as_deref(), release);
            let snapshot = source::file::load(&path)
                .map_err(anyhow::Error::from)?
                .admitted(&admission);
            let Some(node) = sync::plan_node_name(&snapshot, asked.node) else {
                return Err(Failure::bad_config(format!(
                    "{} has {} Node objects; name one with --node",
                    path.display(),
                    snapshot.nodes.len()
                )));
            };
            Ok(sync::synced(&snapshot, &node, &settings, local))
        }
        Source::ApiSide {
            endpoint,
            credentials,
        } => {
            let node = node_name(config, asked);
            let update = first_view(&endpoint, &credentials, &node)?;
            Ok(sync::synced_from_view(update, &node, &settings, local))
        }
        Source::ApiServer { kubeconfig, master } => {
            let node = node_name(config, asked);
            let proxy_name = config.service_proxy_name.as_deref();
            let listed = on_own_runtime("the API server", async {
                let client = clients::kube_client(
                    kubeconfig.as_deref(),
                    master.as_deref(),
                )
                .await?;
                source::snapshot::list(&client, Some(&node), proxy_name).await
            })?;
            let (snapshot, _) = listed;
            Ok(sync::synced(&snapshot, &node, &settings, local))
        }
    }
}

/// This host's addresses but kube-ipvs0's, as the proxy reads them (no
/// privilege needed); `None`, with a warning, when they cannot be read.
fn host_addresses() -> Option<Vec<std::net::IpAddr>> {
    use crate::kernel::addresses::{Addresses as _, NetlinkAddresses};
    let read = on_own_runtime("this host's addresses", async {
        let mut addresses = NetlinkAddresses::new()?;
        Ok(addresses
            .local_addresses(crate::proxier::DUMMY_LINK)
            .await?)
    });
    match read {
        Ok(local) => Some(local),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "NodePorts are on the Node's addresses only"
            );
            None
        }
    }
}

/// The node the proxy itself would be, unless one is asked for: in the
/// DaemonSet's Pod, whose host name need not be the node's, the
/// `NODE_NAME` its manifests set (what they pass the proxy as
/// `--hostname-override`), for a command run there without that flag.
fn node_name(config: &Config, asked: Asked<'_>) -> String {
    if let Some(node) = asked.node {
        return node.to_owned();
    }
    if config.hostname_override.is_none() {
        if let Some(node) = std::env::var("NODE_NAME")
            .ok()
            .filter(|n| !n.trim().is_empty())
        {
            return node.trim().to_lowercase();
        }
    }
    config.node_name(&hostname())
}

/// The node's first view from the API side.
fn first_view(
    endpoint: &ApiEndpoint,
    credentials: &Credentials,
    node: &str,
) -> Result<crate::nodeview::Update, Failure> {
    let from = format!("the view of {node} from {endpoint}");
    on_own_runtime(&from, async {
        source::nodeview::first_view(endpoint, credentials, node)
            .await
            .map_err(anyhow::Error::from)
    })
}

/// Runs `work` on a runtime of its own, within [`SOURCE_TIMEOUT`].
pub(super) fn on_own_runtime<T>(
    what: &str,
    work: impl Future<Output = anyhow::Result<T>>,
) -> Result<T, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the runtime: {e}"))?;
    // The timer is made inside the runtime, which it needs.
    let bounded = runtime
        .block_on(async { tokio::time::timeout(SOURCE_TIMEOUT, work).await });
    match bounded {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(anyhow::anyhow!("reading {what}: {e:#}").into()),
        Err(_) => Err(anyhow::anyhow!(
            "no answer reading {what} within {SOURCE_TIMEOUT:?}"
        )
        .into()),
    }
}
