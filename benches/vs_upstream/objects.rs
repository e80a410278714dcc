//! The benchmark's objects: bench_support::fixtures' services and slices,
//! numbered from [`FIRST`] so that their cluster IPs (198.18.16.0 on)
//! keep clear of the `kubernetes` service (198.18.0.1) and of the node's
//! address (198.18.100.1).

use std::net::{IpAddr, Ipv4Addr};

use anyhow::Context;
use bench_support::fixtures::{self, ENDPOINTS_PER_SERVICE};
use ipvs_sys::Destination;
use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

pub const NAMESPACE: &str = "bench";
pub const FIRST: usize = 4096;
/// Room for the new services after them, below the node's address.
pub const MAX_SERVICES: usize = 20_000;
pub const PORT: u16 = 80;
const TRIGGER: &str = "endpoints.kubernetes.io/last-change-trigger-time";

pub fn service(k: usize) -> Service {
    fixtures::service(FIRST + k)
}

pub fn service_name(k: usize) -> String {
    format!("svc-{}", FIRST + k)
}

pub fn slice_name(k: usize) -> String {
    format!("svc-{}-abcde", FIRST + k)
}

/// Service `k`'s slice with all ten endpoints ready, or the last one not
/// ready, stamped with the trigger time an EndpointSlice controller would
/// set (now), which both proxies turn into their network programming
/// latency metric.
pub fn slice(k: usize, all_ready: bool) -> EndpointSlice {
    slice_triggered(k, all_ready, k8s_openapi::jiff::Timestamp::now())
}

/// [`slice`] stamped with a trigger time of the caller's: a slice written
/// on the guest's behalf carries the guest's time.
fn slice_triggered(
    k: usize,
    all_ready: bool,
    trigger: k8s_openapi::jiff::Timestamp,
) -> EndpointSlice {
    let ready = if all_ready {
        ENDPOINTS_PER_SERVICE
    } else {
        ENDPOINTS_PER_SERVICE - 1
    };
    let mut slice = fixtures::slice(FIRST + k, ready);
    slice.metadata.annotations =
        Some([(TRIGGER.to_string(), trigger.to_string())].into());
    slice
}

/// Service `k`'s slice with its last endpoint moved to `address`, as a
/// pod replaced by another would: each churn change gets an address of
/// its own, so that the kernel showing it says which change it shows.
/// `trigger` is when the change was asked for.
pub fn slice_replacing(
    k: usize,
    address: Ipv4Addr,
    trigger: k8s_openapi::jiff::Timestamp,
) -> EndpointSlice {
    let mut slice = slice_triggered(k, true, trigger);
    if let Some(last) = slice.endpoints.get_or_insert_default().last_mut() {
        last.addresses = vec![address.to_string()];
    }
    slice
}

/// The address of the `c`th churn change: 198.18.128.0/17, clear of the
/// services' (198.18.16.0 on, up to the node's 198.18.100.1) and the
/// fixtures' endpoints (198.19.0.0/16); unique among a run's changes up
/// to 32,768 of them.
pub fn churn_address(c: usize) -> Ipv4Addr {
    let n = (c % 32_768) as u32;
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 128, 0)) + n)
}

/// The service the `c`th churn change goes to when the host's relay
/// makes the writes (relay.rs): round robin, so that the guest and the
/// relay agree on it without naming it.
pub fn churn_service(c: usize, services: usize) -> usize {
    c % services.max(1)
}

pub fn cluster_ip(k: usize) -> anyhow::Result<IpAddr> {
    let svc = service(k);
    let ip = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref());
    ip.context("fixture service without a cluster IP")?
        .parse()
        .context("fixture cluster IP")
}

/// The endpoint whose readiness flips: service `k`'s last.
pub fn flipping_endpoint(k: usize) -> anyhow::Result<IpAddr> {
    let slice = fixtures::slice(FIRST + k, ENDPOINTS_PER_SERVICE);
    let last = slice
        .endpoints
        .as_deref()
        .unwrap_or_default()
        .last()
        .context("fixture slice is empty")?;
    last.addresses[0]
        .parse()
        .context("fixture endpoint address")
}

/// The services' addresses, computed once: the churn looks them up at
/// every poll.
pub struct Addresses {
    pub vips: Vec<IpAddr>,
    pub flipping: Vec<IpAddr>,
}

impl Addresses {
    /// Of services 0..n.
    pub fn new(n: usize) -> anyhow::Result<Self> {
        Ok(Self {
            vips: (0..n).map(cluster_ip).collect::<Result<_, _>>()?,
            flipping: (0..n)
                .map(flipping_endpoint)
                .collect::<Result<_, _>>()?,
        })
    }
}

/// Whether service `k`'s real servers show the slice `slice(k,
/// all_ready)`: all ten, or nine without the flipping endpoint. A real
/// server at weight 0 is on its way out (graceful termination) and does
/// not count.
pub fn shows(dests: &[Destination], flipping: IpAddr, all_ready: bool) -> bool {
    let serving: Vec<&Destination> =
        dests.iter().filter(|d| d.weight > 0).collect();
    let has_flipping = serving.iter().any(|d| d.address == flipping);
    if all_ready {
        serving.len() == ENDPOINTS_PER_SERVICE && has_flipping
    } else {
        serving.len() == ENDPOINTS_PER_SERVICE - 1 && !has_flipping
    }
}
