//! The changes both sides make and time: which endpoint flips, what the
//! kernel shows once a change is in, how often it is looked at, and the
//! median of the times it took.

use std::{net::IpAddr, time::Duration};

use bench_support::fixtures::ENDPOINTS_PER_SERVICE;
use ipvs_sys::Destination;

use crate::state;

pub const POLL: Duration = Duration::from_millis(1);

/// The endpoint that flips: the last of the middle service's.
pub struct Flip {
    pub service: usize,
    pub vip: IpAddr,
    pub rip: IpAddr,
}

impl Flip {
    pub fn new(services: usize) -> anyhow::Result<Self> {
        let service = services / 2;
        Ok(Self {
            service,
            vip: state::cluster_ip(service)?,
            rip: state::endpoint_ip(service, ENDPOINTS_PER_SERVICE - 1)?,
        })
    }

    /// Rep `k` takes the endpoint out (even `k`) or puts it back.
    pub fn ready(k: usize) -> bool {
        k % 2 == 1
    }

    /// Whether the kernel shows rep `k`'s outcome: the endpoint serving
    /// (weight above 0) exactly when ready, its siblings always.
    pub fn shown(&self, k: usize, dests: &[Destination]) -> bool {
        let serving: Vec<_> = dests
            .iter()
            .filter(|d| d.weight > 0)
            .map(|d| d.address)
            .collect();
        let ready = Self::ready(k);
        let want = ENDPOINTS_PER_SERVICE - usize::from(!ready);
        serving.len() == want && serving.contains(&self.rip) == ready
    }
}

pub fn all_serving(dests: &[Destination]) -> bool {
    dests.iter().filter(|d| d.weight > 0).count() == ENDPOINTS_PER_SERVICE
}

pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples
        .get(samples.len() / 2)
        .copied()
        .unwrap_or(Duration::ZERO)
}
