//! IPVS through generic netlink (ipvs-sys): no process per operation, a
//! whole apply in flight at once.

use std::{
    collections::{BTreeMap, HashSet},
    io,
    sync::Arc,
};

use futures::{future, StreamExt};
use ipvs_sys::{
    Destination, ForwardMethod, Handle, Protocol as IpvsProtocol, Service,
    ServiceFlags, SockoptSocket, Write,
};
use tracing::warn;

use super::{
    proc_table::ProcTable, DestKey, DestSpec, DestState, Ipvs, IpvsOp,
    IpvsTable, ServiceEntry, ServiceSpec, VirtualServerKey,
};
use crate::{
    kernel::{read_thread, DetachedRead, ErrorKind, KernelError},
    model::{Protocol, SchedulerFlags},
};

/// What dumps and connection errors name.
const TABLE_OBJECT: &str = "IPVS table";

/// IPVS in the running kernel.
///
/// Writes to IPv4 virtual servers are one `setsockopt` each (IPVS's
/// older interface: no message to build, no acknowledgement to read back
/// through a connection task, which a sync of a few changes paid for
/// each write around the kernel's own work). The rest, and all of them
/// once the options are refused, go through one netlink connection, as
/// one ipvs-sys batch per [`Ipvs::apply`]. A socket runs one dump at a
/// time, so reading every service's real servers takes one dump per
/// service in turn; extra connections
/// ([`NetlinkIpvs::with_dump_connections`]) let those dumps overlap.
/// [`Ipvs::dump_detached`] reads over a connection of its own that runs,
/// with the read, on the reads' thread: a repair's read never queues
/// behind writes, nor holds up the sync loop.
///
/// Where the kernel has `/proc/net/ip_vs`, full reads take the real
/// servers from it instead, in one pass (see `proc_table`), and
/// dump over netlink only the virtual servers it did not list.
///
/// The real servers of one IPv4 service ([`Ipvs::dests`], read before
/// every removal) come over IPVS's `getsockopt` interface: one system
/// call, about a twentieth of a dump's cost in the guest (`make
/// bench-ipvs`). IPv6 services are dumped, and so is every read once the
/// option has refused one.
#[derive(Debug, Clone)]
pub struct NetlinkIpvs {
    handle: Handle,
    /// Connections for real-server dumps, `handle` first.
    dumpers: Vec<Handle>,
    /// The detached reads' connection.
    reader: Handle,
    text: Option<ProcTable>,
    sockopt: Option<Arc<SockoptSocket>>,
}

impl NetlinkIpvs {
    /// Opens one netlink connection and spawns its task on the current
    /// tokio runtime (outside one, an error). IPVS itself is looked up on
    /// first use: a kernel without it fails then, with
    /// [`ErrorKind::Unavailable`].
    pub fn new() -> Result<Self, KernelError> {
        Self::with_dump_connections(1)
    }

    /// Like [`NetlinkIpvs::new`], with `dump_connections` (at least
    /// one) connections sharing the real-server dumps of a full dump.
    pub fn with_dump_connections(
        dump_connections: usize,
    ) -> Result<Self, KernelError> {
        let mut dumpers = Vec::new();
        for _ in 0..dump_connections.max(1) {
            dumpers.push(open()?);
        }
        let handle = dumpers
            .first()
            .cloned()
            .ok_or_else(|| transport("no connection opened"))?;
        Ok(Self {
            handle,
            dumpers,
            reader: open_reader()?,
            text: ProcTable::open(),
            sockopt: open_sockopt(),
        })
    }

    /// Full reads over netlink alone, one real-server dump per virtual
    /// server, as on a kernel without `/proc/net/ip_vs`.
    #[cfg(any(test, feature = "test-support"))]
    pub fn without_text_table(mut self) -> Self {
        self.text = None;
        self
    }

    /// Every read and write over generic netlink, as where IPVS's socket
    /// options are refused.
    #[cfg(any(test, feature = "test-support"))]
    pub fn without_socket_options(mut self) -> Self {
        self.sockopt = None;
        self
    }

    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// One IPv4 service's real servers through the socket option; `None`
    /// where it cannot answer, for the dump to. A missing service is an
    /// answer (none), so a refusal says the option itself does not work
    /// here (no `CAP_NET_ADMIN`, IPVS gone, a layout this kernel does not
    /// take): it is dropped at the first, rather than tried before every
    /// dump that follows.
    fn sockopt_dests(
        &mut self,
        service: &VirtualServerKey,
    ) -> Option<BTreeMap<DestKey, DestState>> {
        let socket = self
            .sockopt
            .as_ref()
            .filter(|_| service.address.is_ipv4())?;
        match socket.dests(&to_key(service)) {
            Ok(dests) => Some(dests.iter().map(from_destination).collect()),
            Err(err) => {
                warn!(
                    service = %service, error = %err,
                    "IPVS's socket option refused a read: reading real servers by dump from now on"
                );
                self.sockopt = None;
                None
            }
        }
    }
}

/// Without `CAP_NET_RAW` (or IPv4) there is no raw socket: every read of
/// one service's real servers is then a dump.
fn open_sockopt() -> Option<Arc<SockoptSocket>> {
    match SockoptSocket::open() {
        Ok(socket) => Some(Arc::new(socket)),
        Err(err) => {
            warn!(error = %err, "IPVS's socket option unavailable: reading real servers by dump");
            None
        }
    }
}

async fn list_services(
    handle: &Handle,
) -> Result<Vec<ServiceSpec>, KernelError> {
    let mut replies = handle.service().list().execute();
    let mut specs = Vec::new();
    while let Some(reply) = replies.next().await {
        match reply {
            Ok(service) => specs.extend(from_service(&service)),
            // One entry the decoder cannot read (a newer kernel's
            // address family?) must not hide the rest of the table.
            Err(err @ ipvs_sys::Error::Decode { .. }) => {
                warn!(error = %err, "skipping an unreadable IPVS service")
            }
            Err(err) => return Err(kernel_error(TABLE_OBJECT, &err)),
        }
    }
    Ok(specs)
}

/// A connection whose task runs on the caller's runtime. Outside one
/// there is nothing to drive it: an error, where tokio would panic.
pub(super) fn open() -> Result<Handle, KernelError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        transport("no tokio runtime to drive a netlink connection")
    })?;
    let (conn, handle, _) = ipvs_sys::new_connection()
        .map_err(|err| transport(format!("netlink socket: {err}")))?;
    runtime.spawn(conn);
    Ok(handle)
}

/// A connection whose task runs on the reads' thread, for the detached
/// reads (see [`read_thread`]).
fn open_reader() -> Result<Handle, KernelError> {
    let runtime = read_thread::handle()?;
    // The socket registers with the runtime it is created in.
    let _inside = runtime.enter();
    let (conn, handle, _) = ipvs_sys::new_connection()
        .map_err(|err| transport(format!("netlink socket: {err}")))?;
    runtime.spawn(conn);
    Ok(handle)
}

fn transport(message: impl Into<String>) -> KernelError {
    KernelError::new(ErrorKind::Transport, TABLE_OBJECT, message)
}

/// The real servers of one service, through `handle`.
async fn list_dests(
    handle: &Handle,
    service: &VirtualServerKey,
) -> Result<BTreeMap<DestKey, DestState>, KernelError> {
    let mut replies = handle.dest(to_key(service)).list().execute();
    let mut dests = BTreeMap::new();
    while let Some(reply) = replies.next().await {
        match reply {
            Ok(dest) => {
                let (key, state) = from_destination(&dest);
                dests.insert(key, state);
            }
            Err(err @ ipvs_sys::Error::Decode { .. }) => {
                warn!(
                    service = %service, error = %err,
                    "skipping an unreadable IPVS real server"
                )
            }
            Err(err) => {
                return Err(kernel_error(
                    format!("real servers of {service}"),
                    &err,
                ))
            }
        }
    }
    Ok(dests)
}

/// Every service over `dumpers[0]`, then their real servers: service i
/// over connection i mod n; each connection's dumps run in turn, the
/// connections side by side.
async fn dump_table(dumpers: &[Handle]) -> Result<IpvsTable, KernelError> {
    let Some(first) = dumpers.first() else {
        return Err(transport("no connection opened"));
    };
    let specs = list_services(first).await?;
    let lanes = dumpers.len();
    let per_lane = dumpers.iter().enumerate().map(|(lane, handle)| {
        let mine: Vec<&ServiceSpec> =
            specs.iter().skip(lane).step_by(lanes).collect();
        async move {
            let mut out = Vec::with_capacity(mine.len());
            for spec in mine {
                out.push((spec, list_dests(handle, &spec.key).await?));
            }
            Ok::<_, KernelError>(out)
        }
    });
    let mut table = IpvsTable::default();
    for lane in future::join_all(per_lane).await {
        for (spec, dests) in lane? {
            table.services.insert(
                spec.key,
                ServiceEntry {
                    spec: spec.clone(),
                    dests,
                },
            );
        }
    }
    Ok(table)
}

/// Every virtual server over `handle`, with the real servers `text`
/// lists; those it does not list whole (added since, or a line it could
/// not read) are dumped over netlink. The text is read first: a virtual
/// server deleted between the two reads is then left out, and one added
/// between is read whole.
async fn dump_with_text(
    handle: &Handle,
    text: &ProcTable,
) -> Result<IpvsTable, KernelError> {
    let mut listed = text.read().await?;
    for line in &listed.unreadable {
        warn!("skipping an unreadable line of /proc/net/ip_vs: {line}");
    }
    let mut table = IpvsTable::default();
    for spec in list_services(handle).await? {
        let dests = match listed.dests.remove(&spec.key) {
            Some(dests) => dests,
            None => list_dests(handle, &spec.key).await?,
        };
        table
            .services
            .insert(spec.key, ServiceEntry { spec, dests });
    }
    Ok(table)
}

impl Ipvs for NetlinkIpvs {
    async fn dump(&mut self) -> Result<IpvsTable, KernelError> {
        match &self.text {
            Some(text) => dump_with_text(&self.handle, text).await,
            None => dump_table(&self.dumpers).await,
        }
    }

    fn dump_detached(&self) -> impl DetachedRead<IpvsTable> + use<> {
        let reader = self.reader.clone();
        let text = self.text.clone();
        read_thread::run(async move {
            match text {
                Some(text) => dump_with_text(&reader, &text).await,
                None => dump_table(std::slice::from_ref(&reader)).await,
            }
        })
    }

    async fn service(
        &mut self,
        key: &VirtualServerKey,
    ) -> Result<Option<ServiceEntry>, KernelError> {
        let spec = match self.handle.service().get(to_key(key)).execute().await
        {
            Ok(service) => from_service(&service),
            Err(err) if err.is_not_found() => return Ok(None),
            Err(err) => return Err(kernel_error(key, &err)),
        };
        let Some(spec) = spec else {
            return Ok(None);
        };
        let dests = list_dests(&self.handle, key).await?;
        Ok(Some(ServiceEntry { spec, dests }))
    }

    async fn dests(
        &mut self,
        service: &VirtualServerKey,
    ) -> Result<BTreeMap<DestKey, DestState>, KernelError> {
        match self.sockopt_dests(service) {
            Some(dests) => Ok(dests),
            None => list_dests(&self.handle, service).await,
        }
    }

    async fn apply(&mut self, ops: &[IpvsOp]) -> Vec<Result<(), KernelError>> {
        let mut results: Vec<Option<Result<(), KernelError>>> =
            std::iter::repeat_with(|| None).take(ops.len()).collect();
        let by_sockopt = if self.sockopt.is_some() {
            sockopt_route(ops)
        } else {
            vec![false; ops.len()]
        };
        // Lowered once, whichever path takes each.
        let writes: Vec<Write> = ops.iter().map(to_write).collect();
        let mut to_netlink = Vec::new();
        let mut written = 0usize;
        for (i, (op, write)) in ops.iter().zip(&writes).enumerate() {
            let socket = self.sockopt.as_ref().filter(|_| by_sockopt[i]);
            let Some(socket) = socket else {
                to_netlink.push(i);
                continue;
            };
            match socket.write(write) {
                Err(err) if err.errno() == Some(libc::ENOPROTOOPT) => {
                    // IPVS's options are not registered (the module gone
                    // since start): netlink says what is wrong, for this
                    // one and all that follow.
                    warn!(
                        object = %op.object(), error = %err,
                        "IPVS's socket options refused a write: writing by generic netlink from now on"
                    );
                    self.sockopt = None;
                    to_netlink.push(i);
                }
                result => {
                    results[i] =
                        Some(result.map_err(|e| kernel_error(op.object(), &e)));
                }
            }
            written += 1;
            // Each write is a blocking call on the loop's thread: let the
            // runtime's other tasks in now and then during a long apply
            // (a cold sync).
            if written.is_multiple_of(SOCKOPT_WRITES_BETWEEN_YIELDS) {
                tokio::task::yield_now().await;
            }
        }
        if !to_netlink.is_empty() {
            let netlink: Vec<(&IpvsOp, &Write)> =
                to_netlink.iter().map(|&i| (&ops[i], &writes[i])).collect();
            for (i, result) in to_netlink
                .into_iter()
                .zip(self.apply_by_netlink(&netlink).await)
            {
                results[i] = Some(result);
            }
        }
        results
            .into_iter()
            .zip(ops)
            .map(|(result, op)| {
                result.unwrap_or_else(|| {
                    Err(KernelError::new(
                        ErrorKind::Transport,
                        op.object(),
                        "no result recorded",
                    ))
                })
            })
            .collect()
    }
}

/// Blocking writes between two yields to the runtime; about a
/// millisecond of the kernel's work natively.
const SOCKOPT_WRITES_BETWEEN_YIELDS: usize = 128;

impl NetlinkIpvs {
    async fn apply_by_netlink(
        &self,
        ops: &[(&IpvsOp, &Write)],
    ) -> Vec<Result<(), KernelError>> {
        let mut batch = self.handle.batch().window(ipvs_sys::DEFAULT_WINDOW);
        for (_, write) in ops {
            batch.write(write);
        }
        match batch.execute().await {
            Ok(results) => ops
                .iter()
                .zip(results)
                .map(|((op, _), result)| {
                    result.map_err(|err| kernel_error(op.object(), &err))
                })
                .collect(),
            // Nothing was sent (IPVS missing): every operation failed so.
            Err(err) => ops
                .iter()
                .map(|(op, _)| Err(kernel_error(op.object(), &err)))
                .collect(),
        }
    }
}

/// Which of `ops` go over the socket options: those about IPv4
/// virtual servers, unless a change to the same virtual server in
/// this apply cannot (an IPv6 real server), so that each virtual
/// server's changes stay on one path, in their order.
pub(super) fn sockopt_route(ops: &[IpvsOp]) -> Vec<bool> {
    // Virtual servers with a real server of the other family in this
    // apply: their changes all stay on netlink.
    let mixed: HashSet<VirtualServerKey> = ops
        .iter()
        .filter_map(|op| match op {
            IpvsOp::AddDest(key, DestSpec { key: dest, .. })
            | IpvsOp::UpdateDest(key, DestSpec { key: dest, .. })
            | IpvsOp::DeleteDest(key, dest)
                if !dest.address.is_ipv4() =>
            {
                Some(*key)
            }
            _ => None,
        })
        .collect();
    ops.iter()
        .map(|op| {
            let service = op.service();
            service.address.is_ipv4() && !mixed.contains(&service)
        })
        .collect()
}

/// An operation as the one write of ipvs-sys's that both of its write
/// paths take.
fn to_write(op: &IpvsOp) -> Write {
    match op {
        IpvsOp::AddService(spec) => Write::AddService(to_service(spec)),
        IpvsOp::UpdateService(spec) => Write::SetService(to_service(spec)),
        IpvsOp::DeleteService(key) => Write::DelService(to_key(key)),
        IpvsOp::AddDest(service, dest) => {
            Write::AddDest(to_key(service), to_destination(dest))
        }
        IpvsOp::UpdateDest(service, dest) => {
            Write::SetDest(to_key(service), to_destination(dest))
        }
        IpvsOp::DeleteDest(service, dest) => Write::DelDest(
            to_key(service),
            Destination::new(dest.address, dest.port),
        ),
    }
}

/// An ipvs-sys error as the facility-independent [`KernelError`], naming
/// our object and keeping the errno.
pub(crate) fn kernel_error(
    object: impl std::fmt::Display,
    err: &ipvs_sys::Error,
) -> KernelError {
    let operation = err.operation().map(|op| op.as_str()).unwrap_or("ipvs");
    match err {
        ipvs_sys::Error::Kernel { errno, .. }
        | ipvs_sys::Error::Sockopt { errno, .. } => {
            let kind = if err.is_exists() {
                ErrorKind::Exists
            } else if err.is_not_found() {
                ErrorKind::NotFound
            } else if err.is_invalid() {
                ErrorKind::Invalid
            } else {
                ErrorKind::Other
            };
            let reason = io::Error::from_raw_os_error(*errno);
            KernelError::new(kind, object, format!("{operation}: {reason}"))
                .with_errno(*errno)
        }
        ipvs_sys::Error::IpvsUnavailable => {
            KernelError::new(ErrorKind::Unavailable, object, err.to_string())
        }
        ipvs_sys::Error::InvalidRequest { reason, .. } => KernelError::new(
            ErrorKind::Invalid,
            object,
            format!("{operation}: {reason}"),
        ),
        _ => KernelError::new(ErrorKind::Transport, object, err.to_string()),
    }
}

pub(crate) fn to_key(key: &VirtualServerKey) -> ipvs_sys::ServiceKey {
    let protocol = match key.protocol {
        Protocol::Tcp => IpvsProtocol::Tcp,
        Protocol::Udp => IpvsProtocol::Udp,
        Protocol::Sctp => IpvsProtocol::Sctp,
    };
    ipvs_sys::ServiceKey::Inet {
        protocol,
        address: key.address,
        port: key.port,
    }
}

/// The service kube-proxy's libipvs call sends: the address's full
/// netmask (0xffffffff, or 128 for IPv6), persistence as the flag plus
/// its timeout, and the scheduler's flags.
pub(crate) fn to_service(spec: &ServiceSpec) -> Service {
    let mut service =
        Service::new(to_key(&spec.key)).with_scheduler(&spec.scheduler);
    if let Some(timeout) = spec.persistence {
        service = service.persistent(timeout);
    }
    service.flags |= ServiceFlags(spec.flags.to_kernel());
    service
}

/// Our view of a kernel service; `None` for those we never program
/// (fwmark services, other protocols).
pub(crate) fn from_service(service: &Service) -> Option<ServiceSpec> {
    let flags = service.flags;
    Some(ServiceSpec {
        key: from_key(&service.key)?,
        scheduler: service.scheduler.clone(),
        persistence: flags
            .contains(ServiceFlags::PERSISTENT)
            .then_some(service.timeout),
        flags: SchedulerFlags::from_kernel(flags.0),
    })
}

/// Our key of a kernel service; `None` for those we never program.
pub(crate) fn from_key(key: &ipvs_sys::ServiceKey) -> Option<VirtualServerKey> {
    let ipvs_sys::ServiceKey::Inet {
        protocol,
        address,
        port,
    } = *key
    else {
        return None;
    };
    let protocol = match protocol {
        IpvsProtocol::Tcp => Protocol::Tcp,
        IpvsProtocol::Udp => Protocol::Udp,
        IpvsProtocol::Sctp => Protocol::Sctp,
        _ => return None,
    };
    Some(VirtualServerKey {
        address,
        port,
        protocol,
    })
}

pub(crate) fn to_destination(dest: &DestSpec) -> Destination {
    Destination::new(dest.key.address, dest.key.port)
        .with_fwd_method(ForwardMethod::Masquerade)
        .with_weight(dest.weight)
}

pub(crate) fn from_destination(dest: &Destination) -> (DestKey, DestState) {
    let conns = dest.conns.unwrap_or_default();
    (
        DestKey {
            address: dest.address,
            port: dest.port,
        },
        DestState {
            weight: dest.weight,
            active_conns: conns.active,
            inactive_conns: conns.inactive,
        },
    )
}
