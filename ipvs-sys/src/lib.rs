//! Linux IPVS (IP Virtual Server) over generic netlink.
//!
//! Two layers, split the way `netlink-packet-route` and `rtnetlink` are:
//!
//! * **Message types**, pure and synchronous: [`IpvsMessage`] (a command
//!   and its [`IpvsAttribute`]s) implements
//!   [`GenlFamily`](netlink_packet_generic::GenlFamily) (family `"IPVS"`,
//!   version 1), [`Emitable`](netlink_packet_core::Emitable) and
//!   [`ParseableParametrized<[u8], GenlHeader>`](netlink_packet_core::ParseableParametrized).
//!   Nested attributes are [`ServiceAttribute`], [`DestAttribute`],
//!   [`DaemonAttribute`] and [`InfoAttribute`]; each keeps attributes it does
//!   not know as `Other(DefaultNla)`. Typed views: [`Service`],
//!   [`Destination`], [`Info`], [`Timeouts`].
//! * **An async handle** on `genetlink`: [`new_connection`] returns
//!   `(connection, Handle, messages)`; requests hang off the handle and end
//!   in `execute()`.
//!
//! Beside them, [`SockoptSocket`] speaks IPVS's older socket options for
//! IPv4: one blocking system call to write a virtual or real server, or
//! to read one service's real servers, where a few at a time make
//! generic netlink's round trip the larger cost. A [`Write`] is one write
//! as a value, which both a [`Batch`] and the socket take.
//!
//! ```no_run
//! use ipvs_sys::{Destination, Service, ServiceKey};
//! use futures::TryStreamExt;
//!
//! # async fn example() -> Result<(), ipvs_sys::Error> {
//! let (conn, handle, _) = ipvs_sys::new_connection()?;
//! tokio::spawn(conn);
//!
//! let svc = Service::new(ServiceKey::tcp("198.18.0.10".parse().unwrap(), 80))
//!     .with_scheduler("rr");
//! handle.service().add(&svc).execute().await?;
//! handle
//!     .dest(&svc)
//!     .add(&Destination::new("198.19.0.5".parse().unwrap(), 8080))
//!     .execute()
//!     .await?;
//!
//! let services: Vec<Service> =
//!     handle.service().list().execute().try_collect().await?;
//! # let _ = services;
//! # Ok(()) }
//! ```
//!
//! Errors name the object and carry the errno:
//! `add_service TCP 198.18.0.10:80: File exists (os error 17) (EEXIST)`;
//! [`Error::is_exists`], [`Error::is_not_found`] and [`Error::is_invalid`]
//! tell the usual ones apart. A kernel without IPVS gives
//! [`Error::IpvsUnavailable`].
//!
//! Decoding never panics: a truncated or malformed buffer is a
//! [`DecodeError`](netlink_packet_core::DecodeError).

// Input from the API and the kernel must never panic the proxy: no
// unwrap, expect or panic! outside tests.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
#![deny(missing_docs)]

mod address;
pub mod daemon;
pub mod dest;
mod error;
mod handle;
mod info;
mod message;
mod nla;
pub mod service;
mod sockopt;
mod stats;
mod timeout;
mod write;

pub use self::{
    address::{AddressFamily, InetAddr, Protocol, INET_ADDR_LEN},
    daemon::{DaemonAttribute, DaemonState},
    dest::{
        ConnCounts, DestAttribute, Destination, ForwardMethod, Tunnel,
        TunnelFlags, TunnelType,
    },
    error::{Error, Operation},
    handle::{
        batch::{Batch, DEFAULT_WINDOW},
        dest::{DestHandle, DestListRequest},
        global::{InfoRequest, TimeoutsGetRequest, TimeoutsHandle},
        new_connection, new_connection_with_socket,
        request::WriteRequest,
        service::{ServiceGetRequest, ServiceHandle, ServiceListRequest},
        Handle, Unsolicited,
    },
    info::{Info, InfoAttribute, IpvsVersion},
    message::{
        IpvsAttribute, IpvsCmd, IpvsMessage, IPVS_GENL_NAME, IPVS_GENL_VERSION,
    },
    service::{FlagsMask, Service, ServiceAttribute, ServiceFlags, ServiceKey},
    sockopt::SockoptSocket,
    stats::Stats,
    timeout::Timeouts,
    write::Write,
};

#[cfg(test)]
mod tests;

#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzz;
