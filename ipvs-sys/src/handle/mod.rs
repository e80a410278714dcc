//! The async half: the connection, the [`Handle`] every request starts
//! from, and the requests (services, destinations, batches, global
//! settings). The message types it sends (`crate::message`,
//! `crate::service`, `crate::dest`) never refer back to it, as
//! `netlink-packet-route` never refers to `rtnetlink`.

pub(crate) mod batch;
pub(crate) mod dest;
pub(crate) mod global;
pub(crate) mod request;
pub(crate) mod service;

use std::{
    fmt, io,
    sync::{Arc, OnceLock},
};

use futures::{channel::mpsc::UnboundedReceiver, lock::Mutex};
use genetlink::{message::RawGenlMessage, GenetlinkError, GenetlinkHandle};
use netlink_packet_core::NetlinkMessage;
use netlink_proto::{
    sys::{AsyncSocket, SocketAddr},
    Connection,
};

use self::{
    batch::Batch,
    dest::DestHandle,
    global::{InfoRequest, TimeoutsHandle},
    request::WriteRequest,
    service::ServiceHandle,
};
use crate::{
    error::{Error, Operation},
    message::IpvsMessage,
    service::ServiceKey,
};

/// A larger receive buffer lets a batch keep more acknowledgements in
/// flight before the connection task drains them. Best effort: the kernel
/// caps it at `net.core.rmem_max` for unprivileged callers.
const RX_BUFFER_BYTES: usize = 4 << 20;

/// Unsolicited messages (IPVS sends none; kept for API symmetry).
pub type Unsolicited =
    UnboundedReceiver<(NetlinkMessage<RawGenlMessage>, SocketAddr)>;

/// Open a generic netlink socket for IPVS on tokio.
///
/// Returns the connection (spawn it: `tokio::spawn(conn)`), a [`Handle`]
/// and the unsolicited message channel, like `rtnetlink::new_connection`.
/// The IPVS family is resolved on the first request, not here, so this
/// works (and requests fail with [`Error::IpvsUnavailable`]) on kernels
/// without IPVS.
#[allow(clippy::type_complexity)]
pub fn new_connection(
) -> io::Result<(Connection<RawGenlMessage>, Handle, Unsolicited)> {
    new_connection_with_socket()
}

/// [`new_connection`] on another socket type (e.g. smol's).
#[allow(clippy::type_complexity)]
pub fn new_connection_with_socket<S>(
) -> io::Result<(Connection<RawGenlMessage, S>, Handle, Unsolicited)>
where
    S: AsyncSocket,
{
    let (mut conn, genl, messages) =
        genetlink::new_connection_with_socket::<S>()?;
    // Acknowledgements and the end of dumps are forwarded so that every
    // request can tell "the kernel said yes" from "the connection went
    // away": a dump cut short must not look like an empty table.
    conn.set_forward_ack(true);
    conn.set_forward_done(true);
    let socket = conn.socket_mut().socket_mut();
    // Acks then carry only the request's header, not its whole payload.
    let _ = socket.set_cap_ack(true);
    let _ = socket.set_rx_buf_sz(RX_BUFFER_BYTES);
    Ok((conn, Handle::new(genl), messages))
}

/// Entry point of every request. Cheap to clone; clones share the
/// connection and the resolved family id.
#[derive(Clone)]
pub struct Handle {
    genl: GenetlinkHandle,
    family_id: Arc<OnceLock<u16>>,
    /// A netlink socket runs one dump at a time (another gets EBUSY), so
    /// dumps on this connection take turns.
    dumps: Arc<Mutex<()>>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("family_id", &self.family_id.get())
            .finish_non_exhaustive()
    }
}

impl Handle {
    /// Wrap a genetlink handle. Its connection must forward acks and
    /// `NLMSG_DONE` (as [`new_connection`] sets up), or every write will
    /// report an unexpected reply.
    pub(crate) fn new(genl: GenetlinkHandle) -> Self {
        Self {
            genl,
            family_id: Arc::new(OnceLock::new()),
            dumps: Arc::new(Mutex::new(())),
        }
    }

    /// Virtual services.
    pub fn service(&self) -> ServiceHandle {
        ServiceHandle::new(self.clone())
    }

    /// Destinations of one service.
    pub fn dest(&self, service: impl AsRef<ServiceKey>) -> DestHandle {
        DestHandle::new(self.clone(), *service.as_ref())
    }

    /// Connection timeouts.
    pub fn timeouts(&self) -> TimeoutsHandle {
        TimeoutsHandle::new(self.clone())
    }

    /// Version and connection table size.
    pub fn info(&self) -> InfoRequest {
        InfoRequest::new(self.clone())
    }

    /// Delete every service and destination (`ipvsadm -C`).
    pub fn flush(&self) -> WriteRequest {
        WriteRequest::new(
            self.clone(),
            IpvsMessage::flush(),
            Operation::Flush,
            "all services".to_owned(),
        )
    }

    /// Zero the counters of every service (`ipvsadm -Z`).
    pub fn zero(&self) -> WriteRequest {
        WriteRequest::new(
            self.clone(),
            IpvsMessage::zero(None),
            Operation::Zero,
            "all services".to_owned(),
        )
    }

    /// Many writes in flight at once; see [`Batch`].
    pub fn batch(&self) -> Batch {
        Batch::new(self.clone())
    }

    /// The kernel's id for the "IPVS" family, resolved once per handle
    /// (and its clones).
    pub async fn family_id(&self) -> Result<u16, Error> {
        if let Some(id) = self.family_id.get() {
            return Ok(*id);
        }
        let family =
            self.genl
                .resolve_family::<IpvsMessage>()
                .await
                .map_err(|err| match &err {
                    GenetlinkError::NetlinkError(io)
                        if io.raw_os_error() == Some(libc::ENOENT) =>
                    {
                        Error::IpvsUnavailable
                    }
                    _ => Error::Transport {
                        operation: Operation::ResolveFamily,
                        object: "IPVS".to_owned(),
                        source: err,
                    },
                })?;
        // A concurrent resolution may have won; both read the same id.
        Ok(*self.family_id.get_or_init(|| family.id))
    }

    pub(crate) fn dump_turn(&self) -> Arc<Mutex<()>> {
        self.dumps.clone()
    }

    pub(crate) fn genl(&self) -> GenetlinkHandle {
        self.genl.clone()
    }
}
