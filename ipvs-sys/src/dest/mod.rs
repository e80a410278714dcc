//! Destinations (real servers): attributes, forwarding methods, tunnels
//! and the typed [`Destination`]. The requests that manage them hang off
//! the handle ([`DestHandle`](crate::DestHandle)).

mod attribute;
mod entry;
mod forward;
mod tunnel;

pub use self::{
    attribute::DestAttribute,
    entry::{ConnCounts, Destination},
    forward::ForwardMethod,
    tunnel::{Tunnel, TunnelFlags, TunnelType},
};
