//! IPVS's connection timeouts (`ipvsadm --set tcp tcpfin udp`), global to
//! the network namespace.
//!
//! Upstream's IPVS proxier sets them once when it starts, from
//! `ipvs.tcpTimeout`, `ipvs.tcpFinTimeout` and `ipvs.udpTimeout`, and only
//! if one of them is set; a zero leaves that timeout as the kernel has it,
//! and a failure is logged, not fatal. The values go to the kernel in whole
//! seconds, fractions dropped, as upstream's netlink library converts them.

use std::{fmt, time::Duration};

use super::{real::kernel_error, NetlinkIpvs};
use crate::kernel::KernelError;

/// Timeouts in seconds; `None` leaves that one unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnTimeouts {
    pub tcp: Option<u32>,
    pub tcp_fin: Option<u32>,
    pub udp: Option<u32>,
}

fn seconds(d: Option<Duration>) -> Option<u32> {
    d.map(|d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX))
        .filter(|s| *s > 0)
}

impl ConnTimeouts {
    /// What to set for the configured durations; `None` when there is
    /// nothing to set, in which case upstream does not touch the kernel.
    pub fn from_config(
        tcp: Option<Duration>,
        tcp_fin: Option<Duration>,
        udp: Option<Duration>,
    ) -> Option<Self> {
        let timeouts = Self {
            tcp: seconds(tcp),
            tcp_fin: seconds(tcp_fin),
            udp: seconds(udp),
        };
        (timeouts != Self::default()).then_some(timeouts)
    }

    fn to_sys(self) -> ipvs_sys::Timeouts {
        ipvs_sys::Timeouts {
            tcp: self.tcp,
            tcp_fin: self.tcp_fin,
            udp: self.udp,
        }
    }
}

impl fmt::Display for ConnTimeouts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.to_sys(), f)
    }
}

const OBJECT: &str = "IPVS timeouts";

impl NetlinkIpvs {
    /// Sets the timeouts that are `Some`.
    pub async fn set_timeouts(
        &self,
        timeouts: &ConnTimeouts,
    ) -> Result<(), KernelError> {
        self.handle()
            .timeouts()
            .set(&timeouts.to_sys())
            .execute()
            .await
            .map_err(|e| kernel_error(OBJECT, &e))
    }

    /// The kernel's current timeouts.
    #[cfg(any(test, feature = "test-support"))]
    pub async fn timeouts(&self) -> Result<ConnTimeouts, KernelError> {
        let t = self
            .handle()
            .timeouts()
            .get()
            .execute()
            .await
            .map_err(|e| kernel_error(OBJECT, &e))?;
        Ok(ConnTimeouts {
            tcp: t.tcp,
            tcp_fin: t.tcp_fin,
            udp: t.udp,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    #[test]
    fn nothing_to_set_unless_one_is_configured() {
        assert_eq!(ConnTimeouts::from_config(None, None, None), None);
        assert_eq!(
            ConnTimeouts::from_config(
                secs(0),
                Some(Duration::from_millis(900)),
                None
            ),
            None,
            "zero, and less than a second, leave the kernel alone"
        );
    }

    #[test]
    fn whole_seconds_and_unset_ones_left_alone() {
        let t = ConnTimeouts::from_config(
            Some(Duration::from_millis(900_500)),
            None,
            secs(30),
        )
        .unwrap();
        assert_eq!(
            t,
            ConnTimeouts {
                tcp: Some(900),
                tcp_fin: None,
                udp: Some(30)
            }
        );
        assert_eq!(t.to_string(), "tcp 900 tcpfin - udp 30");
    }
}
