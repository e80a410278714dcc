//! The API server read once: the Services, EndpointSlices and Node that
//! a proxy's watches would list, with the same selectors, as a state
//! file's [`Snapshot`]. For the one-shot commands (`plan`, `list`), which
//! run beside the proxy in its Pod with its configuration.

use ::kube::{
    api::{ListParams, ObjectList},
    Api, Client, Resource,
};
use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};
use serde::de::DeserializeOwned;

use super::{
    file::Snapshot,
    kube::{node_field_selector, release, selectors, Release},
    watched::Watched,
};

/// How many objects one list request asks for: the API server pages a
/// large cluster's lists instead of building one huge answer.
const PAGE: u32 = 500;

/// Lists the cluster as the node `node_name` (every Node without one)
/// would watch it at the API server's release, which is returned too.
pub async fn list(
    client: &Client,
    node_name: Option<&str>,
    service_proxy_name: Option<&str>,
) -> anyhow::Result<(Snapshot, Release)> {
    let node_fields = node_name.map(node_field_selector).transpose()?;
    // The selectors checked before anything is asked.
    selectors(service_proxy_name, Release::NEWEST)?;
    let (release, _) = release(client).await;
    let labels = selectors(service_proxy_name, release)?;
    let services: Vec<Watched<Service>> = all(
        Api::all(client.clone()),
        ListParams::default().labels(&labels.services),
    )
    .await?;
    let endpoint_slices: Vec<Watched<EndpointSlice>> = all(
        Api::all(client.clone()),
        ListParams::default().labels(&labels.endpoint_slices),
    )
    .await?;
    let mut node_params = ListParams::default();
    if let Some(fields) = &node_fields {
        node_params = node_params.fields(fields);
    }
    let nodes: Vec<Watched<Node>> =
        all(Api::all(client.clone()), node_params).await?;
    let snapshot = Snapshot {
        services: services.into_iter().map(|s| s.0).collect(),
        endpoint_slices: endpoint_slices.into_iter().map(|s| s.0).collect(),
        nodes: nodes.into_iter().map(|n| n.0).collect(),
        others: Vec::new(),
    };
    Ok((snapshot, release))
}

/// Every object of one kind that `params` select, page by page.
async fn all<K>(api: Api<K>, params: ListParams) -> anyhow::Result<Vec<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut objects = Vec::new();
    let mut params = params.limit(PAGE);
    loop {
        let page: ObjectList<K> = api.list(&params).await.map_err(|e| {
            anyhow::anyhow!("listing {}: {e}", api.resource_url())
        })?;
        objects.extend(page.items);
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(objects),
        }
    }
}
