//! Virtual services: attributes, flags and the typed [`Service`]. The
//! requests that manage them hang off the handle
//! ([`ServiceHandle`](crate::ServiceHandle)).

mod attribute;
mod entry;
mod flags;

pub use self::{
    attribute::ServiceAttribute,
    entry::{
        Service, ServiceKey, DEFAULT_PERSISTENCE_TIMEOUT, DEFAULT_SCHEDULER,
    },
    flags::{FlagsMask, ServiceFlags},
};
