//! The slice objects themselves: their metadata (labels, owner, name) and
//! the Service facts that metadata is derived from.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::{
        core::v1::Service,
        discovery::v1::{EndpointPort, EndpointSlice},
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};

use super::{
    address::AddressType,
    endpoints,
    hints::HintPolicy,
    ports::{Fnv1a, PortMapKey},
    CONTROLLER_NAME, LABEL_HEADLESS, LABEL_MANAGED_BY, LABEL_SERVICE_NAME,
};

/// The namespace of an object, `default` when unset as the API server would
/// have it.
pub(super) fn namespace_of(meta: &ObjectMeta) -> &str {
    match meta.namespace.as_deref() {
        None | Some("") => "default",
        Some(ns) => ns,
    }
}

/// What the reconciler needs of the Service, read once.
#[derive(Debug)]
pub(super) struct ServiceRef {
    pub(super) namespace: String,
    pub(super) name: String,
    uid: Option<String>,
    /// The Service's own labels, which its slices carry too, minus the ones
    /// the controller reserves for itself.
    labels: BTreeMap<String, String>,
    headless: bool,
    pub(super) publish_not_ready: bool,
    pub(super) hints: HintPolicy,
}

impl ServiceRef {
    pub(super) fn new(service: &Service) -> Self {
        let spec = service.spec.as_ref();
        let cluster_ip = spec.and_then(|s| s.cluster_ip.as_deref());
        Self {
            namespace: namespace_of(&service.metadata).to_owned(),
            name: service.metadata.name.clone().unwrap_or_default(),
            uid: service.metadata.uid.clone().filter(|u| !u.is_empty()),
            labels: unreserved(service.metadata.labels.as_ref()),
            headless: matches!(cluster_ip, None | Some("" | "None")),
            publish_not_ready: spec
                .and_then(|s| s.publish_not_ready_addresses)
                .unwrap_or(false),
            hints: HintPolicy::for_service(service),
        }
    }

    /// `namespace/name`, for errors.
    pub(super) fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The labels a slice of this Service should carry, and whether the
    /// Service's own labels differ from the slice's. Like upstream, only a
    /// change of the Service's labels counts: the reserved ones are always
    /// written when a slice is written anyway.
    pub(super) fn labels_for(
        &self,
        current: Option<&BTreeMap<String, String>>,
    ) -> (BTreeMap<String, String>, bool) {
        let changed = unreserved(current) != self.labels;
        let mut labels = self.labels.clone();
        if self.headless {
            labels.insert(LABEL_HEADLESS.to_owned(), String::new());
        }
        labels.insert(LABEL_SERVICE_NAME.to_owned(), self.name.clone());
        labels.insert(LABEL_MANAGED_BY.to_owned(), CONTROLLER_NAME.to_owned());
        (labels, changed)
    }

    fn owner_references(&self) -> Option<Vec<OwnerReference>> {
        let uid = self.uid.clone()?;
        Some(vec![OwnerReference {
            api_version: "v1".to_owned(),
            kind: "Service".to_owned(),
            name: self.name.clone(),
            uid,
            controller: Some(true),
            block_owner_deletion: Some(true),
        }])
    }

    /// Whether the Service owns `slice`. A Service without a uid (from a
    /// state file) cannot be referenced, so every slice handed in counts as
    /// its own.
    pub(super) fn owns(&self, slice: &EndpointSlice) -> bool {
        let Some(uid) = &self.uid else {
            return true;
        };
        slice.metadata.owner_references.iter().flatten().any(|o| {
            &o.uid == uid && o.kind == "Service" && o.api_version == "v1"
        })
    }

    /// A new, empty, unnamed slice for this Service; the name is given once
    /// all slices to create are known ([`fresh_name`]).
    pub(super) fn new_slice(
        &self,
        family: AddressType,
        ports: Vec<EndpointPort>,
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some(self.namespace.clone()),
                labels: Some(self.labels_for(None).0),
                owner_references: self.owner_references(),
                ..ObjectMeta::default()
            },
            address_type: family.as_str().to_owned(),
            endpoints: Some(Vec::new()),
            ports: Some(ports),
        }
    }

    /// Whether `slice` is (equivalent to) the placeholder this Service
    /// would get now: upstream keeps an empty slice per address type so
    /// that consumers can tell "no endpoints" from "not yet reconciled".
    pub(super) fn is_placeholder(
        &self,
        slice: &EndpointSlice,
        placeholder: &EndpointSlice,
    ) -> bool {
        let labels =
            |s: &EndpointSlice| s.metadata.labels.clone().unwrap_or_default();
        let owners = |s: &EndpointSlice| {
            s.metadata.owner_references.clone().unwrap_or_default()
        };
        let ports = |s: &EndpointSlice| s.ports.clone().unwrap_or_default();
        namespace_of(&slice.metadata) == namespace_of(&placeholder.metadata)
            && labels(slice) == labels(placeholder)
            && owners(slice) == owners(placeholder)
            && ports(slice) == ports(placeholder)
            && slice.address_type == placeholder.address_type
            // The API server returns the placeholder's empty list as
            // null (protobuf cannot tell them apart): the same slice.
            && endpoints(slice) == endpoints(placeholder)
    }
}

fn unreserved(
    labels: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    labels
        .into_iter()
        .flatten()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                LABEL_SERVICE_NAME | LABEL_MANAGED_BY | LABEL_HEADLESS
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The alphabet of `generateName` suffixes: no vowels (no words) and no
/// look-alike characters.
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const SUFFIX_LEN: usize = 5;

/// A name for a new slice of the Service, shaped like the API server's
/// `generateName` result (`<service>-<5 characters>`) but derived from the
/// service, address type and ports, so that equal inputs get equal names.
/// Names in `taken` are skipped.
pub(super) fn fresh_name(
    svc: &ServiceRef,
    slice: &EndpointSlice,
    taken: &BTreeSet<String>,
) -> String {
    let ports = PortMapKey::new(slice.ports.as_deref().unwrap_or_default());
    let mut seed = Fnv1a::default();
    seed.write(svc.namespace.as_bytes());
    seed.write(b"/");
    seed.write(svc.name.as_bytes());
    seed.write(b"/");
    seed.write(slice.address_type.as_bytes());
    seed.write(&ports.digest().to_be_bytes());
    let mut attempt = 0u64;
    loop {
        let mut h = seed;
        h.write(&attempt.to_be_bytes());
        let name = format!("{}-{}", svc.name, suffix(h.finish()));
        if !taken.contains(&name) {
            return name;
        }
        attempt = attempt.wrapping_add(1);
    }
}

fn suffix(mut bits: u64) -> String {
    let base = SUFFIX_ALPHABET.len() as u64;
    let mut out = String::with_capacity(SUFFIX_LEN);
    for _ in 0..SUFFIX_LEN {
        let i = (bits % base) as usize;
        out.push(char::from(SUFFIX_ALPHABET.get(i).copied().unwrap_or(b'x')));
        bits /= base;
    }
    out
}
