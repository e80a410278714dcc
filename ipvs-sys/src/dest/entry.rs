//! The typed destination and its conversions to and from attributes.

use std::{fmt, net::IpAddr};

use netlink_packet_core::DecodeError;

use super::{attribute::DestAttribute, forward::ForwardMethod, tunnel::Tunnel};
use crate::{
    address::{AddressFamily, InetAddr, SocketDisplay},
    stats::Stats,
};

/// Connection counts the kernel reports for a destination.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ConnCounts {
    /// Connections in the established state.
    pub active: u32,
    /// Connections in any other state.
    pub inactive: u32,
    /// Persistence templates pointing at the destination.
    pub persistent: u32,
}

/// A destination (real server) of a virtual service, as added with
/// `ipvsadm -a`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// The real server's address.
    pub address: IpAddr,
    /// 0 is allowed for fwmark services (the packet's port is kept).
    pub port: u16,
    /// How packets reach it; kube-proxy uses masquerading (NAT).
    pub fwd_method: ForwardMethod,
    /// The kernel refuses weights above `i32::MAX` with ERANGE.
    pub weight: u32,
    /// Upper connection threshold; 0 is unlimited.
    pub upper_threshold: u32,
    /// Lower connection threshold; 0 is unset.
    pub lower_threshold: u32,
    /// Tunnel settings; sent when present, and always filled in by kernels
    /// from 5.2 on.
    pub tunnel: Option<Tunnel>,
    /// Filled by the kernel in replies; never sent.
    pub conns: Option<ConnCounts>,
    /// Counters with 32-bit fields, filled by the kernel in replies.
    pub stats: Option<Stats>,
    /// Counters with 64-bit fields, filled by the kernel in replies.
    pub stats64: Option<Stats>,
}

impl Destination {
    /// A masquerading destination of weight 1 (ipvsadm's defaults).
    pub fn new(address: IpAddr, port: u16) -> Self {
        Self {
            address,
            port,
            fwd_method: ForwardMethod::Masquerade,
            weight: 1,
            upper_threshold: 0,
            lower_threshold: 0,
            tunnel: None,
            conns: None,
            stats: None,
            stats64: None,
        }
    }

    /// Sets the scheduling weight.
    #[must_use]
    pub fn with_weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Sets the forwarding method.
    #[must_use]
    pub fn with_fwd_method(mut self, method: ForwardMethod) -> Self {
        self.fwd_method = method;
        self
    }

    /// Sets the upper and lower connection thresholds (0 for none).
    #[must_use]
    pub fn with_thresholds(mut self, upper: u32, lower: u32) -> Self {
        self.upper_threshold = upper;
        self.lower_threshold = lower;
        self
    }

    /// Sets the tunnel parameters (with [`ForwardMethod::Tunnel`]).
    #[must_use]
    pub fn with_tunnel(mut self, tunnel: Tunnel) -> Self {
        self.tunnel = Some(tunnel);
        self
    }

    /// The family of the destination's address.
    pub fn family(&self) -> AddressFamily {
        AddressFamily::of(&self.address)
    }

    /// The best counters available: 64-bit if the kernel sent them.
    pub fn counters(&self) -> Option<Stats> {
        self.stats64.or(self.stats)
    }

    /// The attributes a `DEL_DEST` request needs.
    pub fn key_attributes(&self) -> Vec<DestAttribute> {
        vec![
            DestAttribute::Address(InetAddr::from(self.address)),
            DestAttribute::Port(self.port),
            DestAttribute::AddressFamily(self.family()),
        ]
    }

    /// Every attribute, in the kernel's order: what `NEW_DEST`/`SET_DEST`
    /// need, then the kernel-filled counts when present.
    pub fn attributes(&self) -> Vec<DestAttribute> {
        let mut attrs = vec![
            DestAttribute::Address(InetAddr::from(self.address)),
            DestAttribute::Port(self.port),
            DestAttribute::ForwardMethod(self.fwd_method),
            DestAttribute::Weight(self.weight),
        ];
        if let Some(tunnel) = self.tunnel {
            attrs.push(DestAttribute::TunnelType(tunnel.kind));
            attrs.push(DestAttribute::TunnelPort(tunnel.port));
            attrs.push(DestAttribute::TunnelFlags(tunnel.flags));
        }
        attrs.push(DestAttribute::UpperThreshold(self.upper_threshold));
        attrs.push(DestAttribute::LowerThreshold(self.lower_threshold));
        if let Some(conns) = self.conns {
            attrs.push(DestAttribute::ActiveConns(conns.active));
            attrs.push(DestAttribute::InactiveConns(conns.inactive));
            attrs.push(DestAttribute::PersistentConns(conns.persistent));
        }
        attrs.push(DestAttribute::AddressFamily(self.family()));
        if let Some(stats) = self.stats {
            attrs.push(DestAttribute::Stats(stats));
        }
        if let Some(stats) = self.stats64 {
            attrs.push(DestAttribute::Stats64(stats));
        }
        attrs
    }

    /// Build a destination from a kernel reply. `service_family` reads the
    /// address when the reply has no `AddressFamily` (kernels before 3.18).
    /// Unknown attributes are ignored; a missing address or port is an
    /// error.
    pub fn from_attributes(
        attrs: &[DestAttribute],
        service_family: AddressFamily,
    ) -> Result<Self, DecodeError> {
        let mut address = None;
        let mut port = None;
        let mut family = None;
        let mut dest = Destination::new(IpAddr::from([0, 0, 0, 0]), 0);
        dest.weight = 0;
        let mut tunnel: Option<Tunnel> = None;
        let mut conns: Option<ConnCounts> = None;
        for attr in attrs {
            match attr {
                DestAttribute::Address(a) => address = Some(*a),
                DestAttribute::Port(p) => port = Some(*p),
                DestAttribute::AddressFamily(af) => family = Some(*af),
                DestAttribute::ForwardMethod(m) => dest.fwd_method = *m,
                DestAttribute::Weight(w) => dest.weight = *w,
                DestAttribute::UpperThreshold(t) => dest.upper_threshold = *t,
                DestAttribute::LowerThreshold(t) => dest.lower_threshold = *t,
                DestAttribute::ActiveConns(n) => {
                    conns.get_or_insert_with(Default::default).active = *n
                }
                DestAttribute::InactiveConns(n) => {
                    conns.get_or_insert_with(Default::default).inactive = *n
                }
                DestAttribute::PersistentConns(n) => {
                    conns.get_or_insert_with(Default::default).persistent = *n
                }
                DestAttribute::TunnelType(t) => {
                    tunnel.get_or_insert_with(Default::default).kind = *t
                }
                DestAttribute::TunnelPort(p) => {
                    tunnel.get_or_insert_with(Default::default).port = *p
                }
                DestAttribute::TunnelFlags(f) => {
                    tunnel.get_or_insert_with(Default::default).flags = *f
                }
                DestAttribute::Stats(s) => dest.stats = Some(*s),
                DestAttribute::Stats64(s) => dest.stats64 = Some(*s),
                DestAttribute::Other(_) => {}
            }
        }
        let address = address
            .ok_or_else(|| DecodeError::from("destination has no address"))?;
        dest.port =
            port.ok_or_else(|| DecodeError::from("destination has no port"))?;
        dest.address = address.to_ip(family.unwrap_or(service_family))?;
        dest.tunnel = tunnel;
        dest.conns = conns;
        Ok(dest)
    }
}

impl fmt::Display for Destination {
    /// `198.19.0.5:8080` or `[2001:db8::5]:8080`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&SocketDisplay(&self.address, self.port), f)
    }
}
