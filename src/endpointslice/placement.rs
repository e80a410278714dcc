//! Packing a Service's endpoints into slices of one address type the way
//! the controller does, to keep writes (and so the work of every consumer)
//! small: endpoints stay in the slice they are in, slices that are written
//! anyway are filled first, an untouched slice is filled only when all the
//! remaining endpoints fit in it, and new slices are made last.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::discovery::v1::{EndpointPort, EndpointSlice};

use super::{
    address::AddressType,
    endpoint::{self, EndpointKey, EndpointSet, PodCandidate},
    endpoints,
    ports::PortMapKey,
    slice::ServiceRef,
};

/// The writes for one address type. Slices to create have no name yet.
#[derive(Debug, Default)]
pub(super) struct Writes {
    pub(super) to_create: Vec<EndpointSlice>,
    pub(super) to_update: Vec<EndpointSlice>,
    pub(super) to_delete: Vec<EndpointSlice>,
}

/// Reconciles the `existing` slices of address type `family` with the
/// endpoints of `candidates`.
pub(super) fn reconcile_family(
    svc: &ServiceRef,
    family: AddressType,
    candidates: &[PodCandidate<'_>],
    existing: &[&EndpointSlice],
    max: usize,
) -> Writes {
    let mut writes = Writes::default();

    let mut existing_by_ports: BTreeMap<PortMapKey, Vec<&EndpointSlice>> =
        BTreeMap::new();
    for slice in existing {
        if svc.owns(slice) {
            let key =
                PortMapKey::new(slice.ports.as_deref().unwrap_or_default());
            existing_by_ports.entry(key).or_default().push(slice);
        } else {
            // Left over from an earlier Service of the same name.
            writes.to_delete.push((*slice).clone());
        }
    }

    // Pods whose ports resolve alike share slices; a group exists even when
    // none of its pods has an address of this family.
    let mut desired: BTreeMap<PortMapKey, (Vec<EndpointPort>, EndpointSet)> =
        BTreeMap::new();
    for c in candidates {
        let (_, set) = desired
            .entry(c.key.clone())
            .or_insert_with(|| (c.ports.clone(), EndpointSet::default()));
        if let Some(ep) = c.endpoint(svc, family) {
            set.insert(ep);
        }
    }

    for (key, (ports, set)) in desired {
        let slices = existing_by_ports.remove(&key).unwrap_or_default();
        let group = by_port_mapping(svc, family, &slices, set, ports, max);
        writes.to_create.extend(group.to_create);
        writes.to_update.extend(group.to_update);
        writes.to_delete.extend(group.to_delete);
    }
    // Port sets no pod resolves to any more.
    for slices in existing_by_ports.into_values() {
        writes.to_delete.extend(slices.into_iter().cloned());
    }

    if existing.len() == writes.to_delete.len() && writes.to_create.is_empty() {
        let placeholder = svc.new_slice(family, Vec::new());
        match writes.to_delete.as_slice() {
            [only] if svc.is_placeholder(only, &placeholder) => {
                writes.to_delete.clear();
            }
            _ => writes.to_create.push(placeholder),
        }
    }

    set_hints(svc, existing, &mut writes);
    writes
        .to_delete
        .sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    recycle_deleted(svc, &mut writes);
    writes
}

/// Gives every slice being written the hints the Service asks for, and
/// rewrites untouched slices whose hints are stale.
fn set_hints(
    svc: &ServiceRef,
    existing: &[&EndpointSlice],
    writes: &mut Writes,
) {
    let written: BTreeSet<&str> = writes
        .to_update
        .iter()
        .chain(&writes.to_delete)
        .filter_map(|s| s.metadata.name.as_deref())
        .collect();
    let stale: Vec<EndpointSlice> = existing
        .iter()
        .filter(|s| {
            s.metadata
                .name
                .as_deref()
                .is_some_and(|n| !written.contains(n))
        })
        .filter(|s| svc.hints.needs_update(s))
        .map(|s| (*s).clone())
        .collect();
    writes.to_update.extend(stale);
    for slice in writes.to_create.iter_mut().chain(&mut writes.to_update) {
        svc.hints.apply(slice);
    }
}

/// Turns creates into updates of slices that would be deleted, as the
/// controller does before writing: one write instead of two, and the
/// slice count never overshoots.
fn recycle_deleted(svc: &ServiceRef, writes: &mut Writes) {
    let mut kept = Vec::with_capacity(writes.to_delete.len());
    for old in std::mem::take(&mut writes.to_delete) {
        let reusable = svc.owns(&old)
            && writes
                .to_create
                .last()
                .is_some_and(|new| new.address_type == old.address_type);
        match writes.to_create.pop() {
            Some(mut new) if reusable => {
                new.metadata.name = old.metadata.name;
                writes.to_update.push(new);
            }
            new => {
                writes.to_create.extend(new);
                kept.push(old);
            }
        }
    }
    writes.to_delete = kept;
}

/// Reconciles the existing slices of one port group with its desired
/// endpoints.
fn by_port_mapping(
    svc: &ServiceRef,
    family: AddressType,
    existing: &[&EndpointSlice],
    mut desired: EndpointSet,
    ports: Vec<EndpointPort>,
    max: usize,
) -> Writes {
    let mut writes = Writes::default();
    let mut unchanged: Vec<EndpointSlice> = Vec::new();

    let mut existing = existing.to_vec();
    existing.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));

    // 1. Keep each desired endpoint where it already is (first slice wins
    //    for duplicates), drop the ones no longer desired, take the desired
    //    version of those that changed.
    for slice in existing {
        let mut kept = Vec::with_capacity(endpoints(slice).len());
        let mut endpoint_changed = false;
        for ep in endpoints(slice) {
            if let Some(want) = desired.take(&EndpointKey::of(ep)) {
                endpoint_changed |= !endpoint::same_beyond_key(&want, ep);
                kept.push(want);
            }
        }
        let (labels, labels_changed) =
            svc.labels_for(slice.metadata.labels.as_ref());
        if endpoint_changed || kept.len() != endpoints(slice).len() {
            if kept.is_empty() {
                writes.to_delete.push(slice.clone());
            } else {
                let mut s = slice.clone();
                s.endpoints = Some(kept);
                s.metadata.labels = Some(labels);
                writes.to_update.push(s);
            }
        } else if labels_changed {
            let mut s = slice.clone();
            s.metadata.labels = Some(labels);
            writes.to_update.push(s);
        } else {
            unchanged.push(slice.clone());
        }
    }

    // 2. Slices written anyway take new endpoints first, fullest first.
    if !desired.is_empty() {
        writes
            .to_update
            .sort_by_key(|s| std::cmp::Reverse(endpoints(s).len()));
        for slice in &mut writes.to_update {
            fill(slice, &mut desired, max);
        }
    }

    // 3. What is left goes into the untouched slice it fills best, if it
    //    fits in one, else into new slices.
    while !desired.is_empty() {
        let target = if desired.len() < max {
            slice_to_fill(&unchanged, desired.len(), max)
        } else {
            None
        };
        match target {
            Some(i) if i < unchanged.len() => {
                let mut slice = unchanged.remove(i);
                fill(&mut slice, &mut desired, max);
                writes.to_update.push(slice);
            }
            _ => {
                let mut slice = svc.new_slice(family, ports.clone());
                fill(&mut slice, &mut desired, max);
                writes.to_create.push(slice);
            }
        }
    }
    writes
}

fn fill(slice: &mut EndpointSlice, desired: &mut EndpointSet, max: usize) {
    let endpoints = slice.endpoints.get_or_insert_default();
    while endpoints.len() < max {
        let Some(ep) = desired.pop_first() else {
            break;
        };
        endpoints.push(ep);
    }
}

/// The slice that is closest to full once `n` endpoints are added, among
/// those they fit in; the first such slice on ties.
fn slice_to_fill(
    slices: &[EndpointSlice],
    n: usize,
    max: usize,
) -> Option<usize> {
    slices
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let room = max.checked_sub(n + endpoints(s).len())?;
            Some((room, i))
        })
        .min()
        .map(|(_, i)| i)
}
