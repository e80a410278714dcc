//! The typed virtual service and its conversions to and from attributes.

use std::{fmt, net::IpAddr};

use netlink_packet_core::DecodeError;

use super::{
    attribute::ServiceAttribute,
    flags::{FlagsMask, ServiceFlags},
};
use crate::{
    address::{AddressFamily, InetAddr, Protocol, SocketDisplay},
    stats::Stats,
};

/// What identifies a virtual service in the kernel's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceKey {
    /// `ipvsadm -t/-u/--sctp-service ADDR:PORT`.
    Inet {
        /// The transport protocol.
        protocol: Protocol,
        /// The virtual address.
        address: IpAddr,
        /// The virtual port.
        port: u16,
    },
    /// `ipvsadm -f MARK` (with `-6` for IPv6).
    Fwmark {
        /// IPv4 or IPv6 (`-6`).
        family: AddressFamily,
        /// The firewall mark packets carry.
        mark: u32,
    },
}

impl ServiceKey {
    /// A TCP service.
    pub fn tcp(address: IpAddr, port: u16) -> Self {
        Self::Inet {
            protocol: Protocol::Tcp,
            address,
            port,
        }
    }

    /// A UDP service.
    pub fn udp(address: IpAddr, port: u16) -> Self {
        Self::Inet {
            protocol: Protocol::Udp,
            address,
            port,
        }
    }

    /// An SCTP service.
    pub fn sctp(address: IpAddr, port: u16) -> Self {
        Self::Inet {
            protocol: Protocol::Sctp,
            address,
            port,
        }
    }

    /// A firewall-mark service.
    pub fn fwmark(family: AddressFamily, mark: u32) -> Self {
        Self::Fwmark { family, mark }
    }

    /// The family of the address, or the fwmark service's.
    pub fn family(&self) -> AddressFamily {
        match self {
            Self::Inet { address, .. } => AddressFamily::of(address),
            Self::Fwmark { family, .. } => *family,
        }
    }

    /// The attributes the kernel looks a service up by.
    pub fn attributes(&self) -> Vec<ServiceAttribute> {
        match self {
            Self::Inet {
                protocol,
                address,
                port,
            } => vec![
                ServiceAttribute::AddressFamily(AddressFamily::of(address)),
                ServiceAttribute::Protocol(*protocol),
                ServiceAttribute::Address(InetAddr::from(*address)),
                ServiceAttribute::Port(*port),
            ],
            Self::Fwmark { family, mark } => vec![
                ServiceAttribute::AddressFamily(*family),
                ServiceAttribute::Fwmark(*mark),
            ],
        }
    }
}

impl fmt::Display for ServiceKey {
    /// `TCP 198.18.0.10:80`, `UDP [2001:db8::1]:53`, `FWM 7`, `FWM 7 IPv6`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inet {
                protocol,
                address,
                port,
            } => write!(f, "{protocol} {}", SocketDisplay(address, *port)),
            Self::Fwmark {
                family: AddressFamily::Inet,
                mark,
            } => write!(f, "FWM {mark}"),
            Self::Fwmark { family, mark } => write!(f, "FWM {mark} {family}"),
        }
    }
}

/// A virtual service, as added with `ipvsadm -A` and listed by
/// `ipvsadm -Ln`.
///
/// Build one with [`Service::new`] and the `with_*` setters; the defaults
/// are ipvsadm's (`wlc`, no flags, 300 s timeout used only when
/// persistent, full netmask).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// What identifies it.
    pub key: ServiceKey,
    /// Scheduler name; the kernel refuses unknown ones with ENOENT.
    pub scheduler: String,
    /// Its flags (`PERSISTENT`, the scheduler's flags).
    pub flags: ServiceFlags,
    /// Persistence timeout in seconds (meaningful with `PERSISTENT`).
    pub timeout: u32,
    /// Persistence netmask as a prefix length: 0..=32 for IPv4,
    /// 1..=128 for IPv6.
    pub netmask: u8,
    /// Persistence engine (`sip`), rarely used.
    pub persistence_engine: Option<String>,
    /// Counters with 32-bit fields, filled by the kernel in replies.
    pub stats: Option<Stats>,
    /// Counters with 64-bit fields, filled by the kernel in replies.
    pub stats64: Option<Stats>,
}

/// ipvsadm's default scheduler.
pub const DEFAULT_SCHEDULER: &str = "wlc";
/// ipvsadm's default persistence timeout, in seconds.
pub const DEFAULT_PERSISTENCE_TIMEOUT: u32 = 300;

impl Service {
    /// A service with ipvsadm's defaults.
    pub fn new(key: ServiceKey) -> Self {
        let netmask = match key.family() {
            AddressFamily::Inet6 => 128,
            _ => 32,
        };
        Self {
            key,
            scheduler: DEFAULT_SCHEDULER.to_owned(),
            flags: ServiceFlags::EMPTY,
            timeout: 0,
            netmask,
            persistence_engine: None,
            stats: None,
            stats64: None,
        }
    }

    /// Sets the scheduler.
    #[must_use]
    pub fn with_scheduler(mut self, scheduler: impl Into<String>) -> Self {
        self.scheduler = scheduler.into();
        self
    }

    /// Replaces the flags.
    #[must_use]
    pub fn with_flags(mut self, flags: ServiceFlags) -> Self {
        self.flags = flags;
        self
    }

    /// Make the service persistent for `timeout` seconds.
    #[must_use]
    pub fn persistent(mut self, timeout: u32) -> Self {
        self.flags |= ServiceFlags::PERSISTENT;
        self.timeout = timeout;
        self
    }

    /// Sets the persistence netmask as a prefix length.
    #[must_use]
    pub fn with_netmask(mut self, prefix_len: u8) -> Self {
        self.netmask = prefix_len;
        self
    }

    /// The service's address family.
    pub fn family(&self) -> AddressFamily {
        self.key.family()
    }

    /// The best counters available: 64-bit if the kernel sent them.
    pub fn counters(&self) -> Option<Stats> {
        self.stats64.or(self.stats)
    }

    /// The netmask as the kernel stores it (see
    /// [`ServiceAttribute::Netmask`]).
    pub fn raw_netmask(&self) -> u32 {
        match self.family() {
            AddressFamily::Inet6 => {
                u32::from_be_bytes(u32::from(self.netmask).to_ne_bytes())
            }
            _ => match self.netmask {
                0 => 0,
                len => u32::MAX << (32 - u32::from(len.min(32))),
            },
        }
    }

    /// Every attribute a `NEW_SERVICE`/`SET_SERVICE` request needs, plus
    /// the kernel-filled counters when present.
    pub fn attributes(&self) -> Vec<ServiceAttribute> {
        let mut attrs = self.key.attributes();
        attrs.push(ServiceAttribute::Scheduler(self.scheduler.clone()));
        if let Some(pe) = &self.persistence_engine {
            attrs.push(ServiceAttribute::PersistenceEngine(pe.clone()));
        }
        attrs.push(ServiceAttribute::Flags(FlagsMask::all(self.flags)));
        attrs.push(ServiceAttribute::Timeout(self.timeout));
        attrs.push(ServiceAttribute::Netmask(self.raw_netmask()));
        if let Some(stats) = self.stats {
            attrs.push(ServiceAttribute::Stats(stats));
        }
        if let Some(stats) = self.stats64 {
            attrs.push(ServiceAttribute::Stats64(stats));
        }
        attrs
    }

    /// Build a service from the attributes of a kernel reply. Unknown
    /// attributes are ignored; a missing key or an unreadable address is
    /// an error.
    pub fn from_attributes(
        attrs: &[ServiceAttribute],
    ) -> Result<Self, DecodeError> {
        let mut family = None;
        let mut protocol = None;
        let mut address = None;
        let mut port = None;
        let mut fwmark = None;
        let mut scheduler = None;
        let mut flags = ServiceFlags::EMPTY;
        let mut timeout = 0;
        let mut netmask = None;
        let mut persistence_engine = None;
        let mut stats = None;
        let mut stats64 = None;
        for attr in attrs {
            match attr {
                ServiceAttribute::AddressFamily(af) => family = Some(*af),
                ServiceAttribute::Protocol(p) => protocol = Some(*p),
                ServiceAttribute::Address(a) => address = Some(*a),
                ServiceAttribute::Port(p) => port = Some(*p),
                ServiceAttribute::Fwmark(m) => fwmark = Some(*m),
                ServiceAttribute::Scheduler(s) => scheduler = Some(s.clone()),
                ServiceAttribute::Flags(f) => flags = f.flags,
                ServiceAttribute::Timeout(t) => timeout = *t,
                ServiceAttribute::Netmask(m) => netmask = Some(*m),
                ServiceAttribute::PersistenceEngine(pe) => {
                    persistence_engine = Some(pe.clone())
                }
                ServiceAttribute::Stats(s) => stats = Some(*s),
                ServiceAttribute::Stats64(s) => stats64 = Some(*s),
                ServiceAttribute::Other(_) => {}
            }
        }
        let family = family.ok_or_else(|| {
            DecodeError::from("service has no address family")
        })?;
        // A non-zero fwmark identifies the service whatever else is sent,
        // as in the kernel's lookup.
        let key = match (fwmark, protocol, address, port) {
            (Some(mark), ..) if mark != 0 => {
                ServiceKey::Fwmark { family, mark }
            }
            (_, Some(protocol), Some(address), Some(port)) => {
                ServiceKey::Inet {
                    protocol,
                    address: address.to_ip(family)?,
                    port,
                }
            }
            _ => return Err(DecodeError::from(
                "service has neither a fwmark nor protocol, address and port",
            )),
        };
        let netmask = match netmask {
            None => Service::new(key).netmask,
            Some(raw) => prefix_len(family, raw)?,
        };
        Ok(Self {
            key,
            scheduler: scheduler.unwrap_or_default(),
            flags,
            timeout,
            netmask,
            persistence_engine,
            stats,
            stats64,
        })
    }
}

/// The prefix length behind a raw kernel netmask.
fn prefix_len(family: AddressFamily, raw: u32) -> Result<u8, DecodeError> {
    match family {
        AddressFamily::Inet6 => {
            let len = u32::from_ne_bytes(raw.to_be_bytes());
            u8::try_from(len)
                .ok()
                .filter(|len| *len <= 128)
                .ok_or_else(|| {
                    DecodeError::from(format!(
                        "IPv6 service netmask {len} is not a prefix length"
                    ))
                })
        }
        _ => {
            let ones = raw.leading_ones();
            if raw.checked_shl(ones).unwrap_or(0) != 0 {
                return Err(DecodeError::from(format!(
                    "IPv4 service netmask {raw:#010x} is not contiguous"
                )));
            }
            // leading_ones() of a u32 is at most 32.
            Ok(ones as u8)
        }
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.key, f)
    }
}

impl AsRef<ServiceKey> for ServiceKey {
    fn as_ref(&self) -> &ServiceKey {
        self
    }
}

impl AsRef<ServiceKey> for Service {
    fn as_ref(&self) -> &ServiceKey {
        &self.key
    }
}
