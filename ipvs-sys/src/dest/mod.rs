//! Destinations (real servers): attributes, forwarding methods, tunnels,
//! the typed [`Destination`] and the requests that manage them.

mod attribute;
mod entry;
mod forward;
mod handle;
mod tunnel;

pub use self::{
    attribute::DestAttribute,
    entry::{ConnCounts, Destination},
    forward::ForwardMethod,
    handle::{DestHandle, DestListRequest},
    tunnel::{Tunnel, TunnelFlags, TunnelType},
};
