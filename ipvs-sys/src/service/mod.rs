//! Virtual services: attributes, flags, the typed [`Service`] and the
//! requests that manage them.

mod attribute;
mod entry;
mod flags;
mod handle;

pub use self::{
    attribute::ServiceAttribute,
    entry::{
        Service, ServiceKey, DEFAULT_PERSISTENCE_TIMEOUT, DEFAULT_SCHEDULER,
    },
    flags::{FlagsMask, ServiceFlags},
    handle::{ServiceGetRequest, ServiceHandle, ServiceListRequest},
};
