//! The EndpointSlice controller's reconciler, as pure functions: given a
//! Service, the Pods and Nodes, and the slices the controller already owns
//! for that Service, compute the slices to create, update and delete the way
//! kube-controller-manager would.
//!
//! The state-file source uses it so that a file may list Pods instead of
//! EndpointSlices; benchmarks and tests use it to get realistic slices at any
//! scale.
//!
//! The computation follows upstream's reconciler in three layers:
//! per address type of the Service (`address`), per set of resolved ports
//! (pods whose named target ports resolve differently land in different
//! slices, `ports`), and per slice, where endpoints are packed so that
//! existing slices are kept and filled before new ones are made
//! (`placement`). Topology hints follow the Service's
//! `trafficDistribution` (`hints`).
//!
//! Where upstream relies on the API server (defaulting, `generateName`), the
//! defaults are applied here: missing protocols are TCP, a missing
//! targetPort is the port, a missing namespace is `default`, `podIP` stands in
//! for an empty `podIPs`, and new slices get a deterministic name derived
//! from the service, address type and ports.

mod address;
mod endpoint;
mod error;
mod hints;
mod placement;
mod ports;
mod slice;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::{
    core::v1::{Node, Pod, Service},
    discovery::v1::{Endpoint, EndpointSlice},
};

pub use address::AddressType;
pub use error::ReconcileError;
#[cfg(test)]
use ports::PortMapKey;

use slice::ServiceRef;

/// Label naming the Service a slice belongs to.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Label naming the controller that manages a slice.
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// The value of [`LABEL_MANAGED_BY`] on the slices this reconciler owns.
pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
/// Label the controller puts on slices of headless Services.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";

/// Upstream's default for `--max-endpoints-per-slice`.
pub const DEFAULT_MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// A slice's endpoints; since 1.37's API types the list may be absent,
/// which means none, as the API server reads it.
fn endpoints(slice: &EndpointSlice) -> &[Endpoint] {
    slice.endpoints.as_deref().unwrap_or_default()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileConfig {
    /// At most this many endpoints go in one slice. Zero is treated as one,
    /// since a slice that can hold nothing would never make progress.
    pub max_endpoints_per_slice: usize,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        Self {
            max_endpoints_per_slice: DEFAULT_MAX_ENDPOINTS_PER_SLICE,
        }
    }
}

/// The writes that bring a Service's slices to the desired state, sorted by
/// name, plus the problems met on the way (the writes already exclude the
/// objects that caused them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reconciled {
    pub to_create: Vec<EndpointSlice>,
    pub to_update: Vec<EndpointSlice>,
    pub to_delete: Vec<EndpointSlice>,
    pub errors: Vec<ReconcileError>,
}

impl Reconciled {
    /// True when the existing slices already are the desired ones.
    #[cfg(test)]
    pub fn is_noop(&self) -> bool {
        self.to_create.is_empty()
            && self.to_update.is_empty()
            && self.to_delete.is_empty()
    }
}

/// Computes the slice writes for `service`.
///
/// `pods` may hold any pods: only those in the Service's namespace matching
/// its selector are considered. `existing` are the slices the controller
/// owns for the Service; slices pending deletion are ignored, as upstream
/// does. Services without a selector and ExternalName Services get nothing to
/// do: their slices are not the controller's business.
pub fn reconcile(
    service: &Service,
    pods: &[Pod],
    nodes: &[Node],
    existing: &[EndpointSlice],
    config: &ReconcileConfig,
) -> Reconciled {
    let mut out = Reconciled::default();
    if !is_managed(service) {
        return out;
    }
    let svc = ServiceRef::new(service);
    let max = config.max_endpoints_per_slice.max(1);
    let families = address::for_service(service);

    let mut live: Vec<&EndpointSlice> = Vec::new();
    for slice in existing.iter().filter(|s| is_live(s)) {
        if slice.metadata.name.is_some() {
            live.push(slice);
        } else {
            out.errors
                .push(ReconcileError::UnnamedSlice { service: svc.key() });
        }
    }
    let mut by_family: BTreeMap<AddressType, Vec<&EndpointSlice>> =
        BTreeMap::new();
    for slice in &live {
        match AddressType::parse(&slice.address_type) {
            Some(family) if families.contains(&family) => {
                by_family.entry(family).or_default().push(slice)
            }
            // An address type the service no longer has (or one we do not
            // know, such as FQDN) is not reconcilable: it goes.
            _ => out.to_delete.push((*slice).clone()),
        }
    }

    let nodes: HashMap<&str, &Node> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
        .collect();
    let candidates =
        endpoint::candidates(&svc, service, pods, &nodes, &mut out.errors);

    let mut to_create = Vec::new();
    for family in families {
        let slices = by_family.remove(&family).unwrap_or_default();
        let writes = placement::reconcile_family(
            &svc,
            family,
            &candidates,
            &slices,
            max,
        );
        to_create.extend(writes.to_create);
        out.to_update.extend(writes.to_update);
        out.to_delete.extend(writes.to_delete);
    }

    // Creating slices for a Service that is going away would race the
    // garbage collector deleting them.
    if service.metadata.deletion_timestamp.is_none() {
        let mut taken: BTreeSet<String> = existing
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        for mut slice in to_create {
            slice.metadata.name = Some(slice::fresh_name(&svc, &slice, &taken));
            taken.extend(slice.metadata.name.clone());
            out.to_create.push(slice);
        }
    }

    for list in [&mut out.to_create, &mut out.to_update, &mut out.to_delete] {
        list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    }
    out
}

/// The Service's slices after applying [`reconcile`]'s writes to `existing`
/// (slices pending deletion or without a name are dropped), sorted by name,
/// and the problems met on the way. A Service the controller does not manage
/// keeps `existing` as it is.
pub fn desired_slices(
    service: &Service,
    pods: &[Pod],
    nodes: &[Node],
    existing: &[EndpointSlice],
    config: &ReconcileConfig,
) -> (Vec<EndpointSlice>, Vec<ReconcileError>) {
    if !is_managed(service) {
        return (existing.to_vec(), Vec::new());
    }
    let writes = reconcile(service, pods, nodes, existing, config);
    let replaced: BTreeSet<String> = writes
        .to_update
        .iter()
        .chain(&writes.to_delete)
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    let mut slices: Vec<EndpointSlice> = existing
        .iter()
        .filter(|s| is_live(s))
        .filter(|s| {
            s.metadata
                .name
                .as_deref()
                .is_some_and(|n| !replaced.contains(n))
        })
        .cloned()
        .chain(writes.to_update)
        .chain(writes.to_create)
        .collect();
    slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    (slices, writes.errors)
}

/// Whether `slice` is one of the slices this controller manages for
/// `service`, as it lists them: same namespace, labelled with the Service's
/// name and managed by [`CONTROLLER_NAME`]. Use it to pick the `existing`
/// slices for [`reconcile`] out of all slices.
pub fn is_controller_slice_of(
    service: &Service,
    slice: &EndpointSlice,
) -> bool {
    let labels = slice.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    slice::namespace_of(&slice.metadata)
        == slice::namespace_of(&service.metadata)
        && label(LABEL_SERVICE_NAME) == service.metadata.name.as_deref()
        && label(LABEL_MANAGED_BY) == Some(CONTROLLER_NAME)
}

/// Slices pending deletion are left alone so that the controller does not get
/// stuck on them, as upstream does.
fn is_live(slice: &EndpointSlice) -> bool {
    slice.metadata.deletion_timestamp.is_none()
}

/// Whether the controller derives this Service's slices from pods. An
/// empty selector counts as none: the API server does not keep an empty map,
/// so a real Service never has one.
fn is_managed(service: &Service) -> bool {
    let Some(spec) = &service.spec else {
        return false;
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return false;
    }
    spec.selector.as_ref().is_some_and(|s| !s.is_empty())
}
