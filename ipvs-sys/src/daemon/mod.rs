//! Connection sync daemon attributes. Decoded and encoded so that replies
//! and requests round-trip; no handle is offered for the daemon commands
//! yet (build an [`IpvsMessage`](crate::IpvsMessage) to use them).

mod attribute;

pub use self::attribute::{DaemonAttribute, DaemonState};
