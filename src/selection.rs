//! Endpoint selection (topology, traffic policies).
//!
//! Placeholder with the final signatures; the full upstream rules land
//! with the trackers branch.

use std::sync::Arc;

use crate::model::{EndpointInfo, ServicePortInfo};

#[derive(Debug, Clone, Default)]
pub struct Categorized {
    pub cluster: Vec<Arc<EndpointInfo>>,
    pub local: Vec<Arc<EndpointInfo>>,
    pub all_reachable: Vec<Arc<EndpointInfo>>,
    pub has_any_endpoints: bool,
}

pub fn categorize_endpoints(
    endpoints: &[Arc<EndpointInfo>],
    _svc: &ServicePortInfo,
    _node_name: &str,
    _node_zone: &str,
) -> Categorized {
    let cluster: Vec<_> =
        endpoints.iter().filter(|e| e.ready).cloned().collect();
    let local: Vec<_> =
        cluster.iter().filter(|e| e.is_local).cloned().collect();
    Categorized {
        all_reachable: cluster.clone(),
        cluster,
        local,
        has_any_endpoints: !endpoints.is_empty(),
    }
}

pub fn ipvs_real_servers(
    c: &Categorized,
    only_local: bool,
) -> &[Arc<EndpointInfo>] {
    if only_local {
        &c.local
    } else {
        &c.cluster
    }
}
