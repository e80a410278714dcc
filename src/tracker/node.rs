//! Tracking of our own Node: its zone (for topology hints), its addresses
//! (for node ports when there is no kernel to ask), its eligibility (for
//! `/healthz`) and its pod CIDRs (for `detectLocalMode: NodeCIDR`).

use ipnet::IpNet;

use crate::model::NodeInfo;

#[cfg(test)]
mod tests;

/// What an update of our Node means for the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeUpdate {
    /// Nothing the proxy reads changed (or the object is another node's).
    Unchanged,
    /// Something the proxy reads changed; zone and addresses affect every
    /// service, so the caller recomputes everything.
    Changed(NodeInfo),
    /// Under `detectLocalMode: NodeCIDR` the local-traffic rules were
    /// built from `old`; they cannot be rebuilt in place, so the caller
    /// must exit and be restarted, as upstream kube-proxy does.
    PodCidrsChanged { old: Vec<IpNet>, new: Vec<IpNet> },
    /// Our Node object was deleted.
    Deleted,
}

#[derive(Debug)]
pub struct NodeTracker {
    node_name: String,
    detect_local_node_cidr: bool,
    current: Option<NodeInfo>,
    /// The first non-empty podCIDRs seen (upstream's NodePodCIDRHandler).
    adopted_pod_cidrs: Option<Vec<IpNet>>,
}

impl NodeTracker {
    pub fn new(
        node_name: impl Into<String>,
        detect_local_node_cidr: bool,
    ) -> Self {
        Self {
            node_name: node_name.into(),
            detect_local_node_cidr,
            current: None,
            adopted_pod_cidrs: None,
        }
    }

    /// The node as last seen, if it exists.
    pub fn node(&self) -> Option<&NodeInfo> {
        self.current.as_ref()
    }

    /// The pod CIDRs adopted for `detectLocalMode: NodeCIDR`.
    #[cfg(test)]
    pub fn pod_cidrs(&self) -> Option<&[IpNet]> {
        self.adopted_pod_cidrs.as_deref()
    }

    /// Takes one Node's change as a store hands it on. The kube source
    /// watches our Node alone, but the state file carries every Node, so
    /// a deletion names its Node by the object it removed: another's is
    /// not ours.
    pub fn change(
        &mut self,
        previous: Option<&NodeInfo>,
        current: Option<&NodeInfo>,
    ) -> NodeUpdate {
        if current
            .or(previous)
            .is_some_and(|node| node.name != self.node_name)
        {
            return NodeUpdate::Unchanged;
        }
        self.update(current)
    }

    /// Takes the current state of our Node: `None` when it was deleted.
    /// The node's view holds our Node whatever its name says: the API
    /// side chose it for us, and a fresh start from the view takes it.
    pub fn update(&mut self, current: Option<&NodeInfo>) -> NodeUpdate {
        let Some(info) = current else {
            return match self.current.take() {
                Some(_) => NodeUpdate::Deleted,
                None => NodeUpdate::Unchanged,
            };
        };
        let info = info.clone();

        // As upstream's NodePodCIDRHandler: the first non-empty list is
        // adopted; any later difference, losing the CIDRs included, is
        // fatal.
        if self.detect_local_node_cidr {
            match &self.adopted_pod_cidrs {
                None if info.pod_cidrs.is_empty() => {}
                None => self.adopted_pod_cidrs = Some(info.pod_cidrs.clone()),
                Some(adopted) if *adopted != info.pod_cidrs => {
                    tracing::error!(
                        node = self.node_name,
                        old = ?adopted,
                        new = ?info.pod_cidrs,
                        "node's podCIDRs changed; detectLocalMode NodeCIDR \
                         cannot follow, restart needed"
                    );
                    return NodeUpdate::PodCidrsChanged {
                        old: adopted.clone(),
                        new: info.pod_cidrs,
                    };
                }
                Some(_) => {}
            }
        }

        if self.current.as_ref() == Some(&info) {
            return NodeUpdate::Unchanged;
        }
        self.current = Some(info.clone());
        NodeUpdate::Changed(info)
    }
}
