//! [`Addresses`] over rtnetlink: requests pipelined on a socket of the
//! thread that sends them.

use std::{collections::BTreeSet, future::Future, net::IpAddr, sync::OnceLock};

use futures::{StreamExt, TryStreamExt};
use rtnetlink::{
    packet_route::{
        address::{AddressAttribute, AddressMessage},
        AddressFamily,
    },
    Handle, LinkDummy,
};

use super::{errno_error, host_prefix_len, AddressOp, Addresses, ENODEV};
use crate::kernel::{read_thread, DetachedRead, ErrorKind, KernelError};

/// Requests in flight at once. The kernel answers each into our socket's
/// receive buffer and drops answers that do not fit, so an unbounded
/// pipeline could lose acknowledgements; a few hundred requests fit with
/// room to spare and already hide the round trips.
const IN_FLIGHT: usize = 256;

/// The rtnetlink implementation. One connection, for this handle's
/// requests, runs as a task on the tokio runtime that created it; the
/// detached reads' connection runs on the reads' thread, and the
/// detached writes' on a thread of their own: a connection's task is
/// where its requests are sent, and so where the kernel does their work.
#[derive(Clone)]
pub struct NetlinkAddresses {
    handle: Handle,
    reader: Handle,
    writer: Handle,
}

static WRITES: OnceLock<Result<tokio::runtime::Handle, String>> =
    OnceLock::new();

/// The detached writes' runtime, started on first use. Unlike the reads'
/// it keeps the process's priority: a full reconcile's binds are the
/// sync's own work.
fn writes() -> Result<&'static tokio::runtime::Handle, KernelError> {
    WRITES
        .get_or_init(|| crate::runtime_thread::start("address-writes", || {}))
        .as_ref()
        .map_err(|e| {
            KernelError::new(ErrorKind::Transport, "address writes thread", e)
        })
}

impl NetlinkAddresses {
    /// Opens the socket with strict checking on, so that a dump of one
    /// link's addresses is filtered by the kernel rather than walking
    /// every address of the node.
    pub fn new() -> Result<Self, KernelError> {
        let transport = |e: String| {
            KernelError::new(ErrorKind::Transport, "rtnetlink socket", e)
        };
        // Outside a runtime the socket and `spawn` would panic; say so.
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| transport(e.to_string()))?;
        // rtnetlink's `new_connection_with_strict_check` is this, in a
        // release on a netlink-proto the rest of the tree does not use.
        use netlink_proto::sys::AsyncSocket;
        let connect = || {
            let (mut connection, handle, _) = rtnetlink::new_connection()
                .map_err(|e| transport(e.to_string()))?;
            connection
                .socket_mut()
                .socket_mut()
                .set_netlink_get_strict_chk(true)
                .map_err(|e| transport(e.to_string()))?;
            Ok::<_, KernelError>((connection, handle))
        };
        let open = || {
            let (connection, handle) = connect()?;
            runtime.spawn(connection);
            Ok::<_, KernelError>(handle)
        };
        let handle = open()?;
        // The detached reads' and writes' connections run on their own
        // threads, and each socket must be created inside the runtime it
        // belongs to.
        let on = |runtime: &tokio::runtime::Handle| {
            let _inside = runtime.enter();
            let (connection, handle) = connect()?;
            runtime.spawn(connection);
            Ok::<_, KernelError>(handle)
        };
        let reader = on(read_thread::handle()?)?;
        let writer = on(writes()?)?;
        Ok(Self {
            handle,
            reader,
            writer,
        })
    }
}

/// The link's index; `None` when there is no such link.
async fn link_index(
    handle: &Handle,
    link: &str,
) -> Result<Option<u32>, KernelError> {
    let mut links = handle.link().get().match_name(link.to_owned()).execute();
    match links.try_next().await {
        Ok(Some(msg)) => Ok(Some(msg.header.index)),
        Ok(None) => Ok(None),
        Err(e) if netlink_errno(&e) == Some(ENODEV) => Ok(None),
        Err(e) => Err(to_kernel_error(format!("link {link}"), e, "get")),
    }
}

async fn addresses(
    handle: &Handle,
    index: Option<u32>,
    what: &str,
) -> Result<Vec<(u32, IpAddr)>, KernelError> {
    let mut request = handle.address().get();
    if let Some(index) = index {
        request.message_mut().header.index = index;
        request = request.set_link_index_filter(index);
    }
    let messages: Vec<AddressMessage> =
        request
            .execute()
            .try_collect()
            .await
            .map_err(|e| to_kernel_error(what, e, "dump"))?;
    Ok(messages
        .iter()
        .filter_map(|m| address_of(m).map(|ip| (m.header.index, ip)))
        .collect())
}

/// The addresses on `link`; empty when the link does not exist.
async fn list(
    handle: &Handle,
    link: &str,
) -> Result<BTreeSet<IpAddr>, KernelError> {
    let Some(index) = link_index(handle, link).await? else {
        return Ok(BTreeSet::new());
    };
    let what = format!("addresses of {link}");
    Ok(addresses(handle, Some(index), &what)
        .await?
        .into_iter()
        // Belt and braces: a kernel without strict checking ignores the
        // index and dumps everything.
        .filter(|(i, _)| *i == index)
        .map(|(_, ip)| ip)
        .collect())
}

/// Every address on every link but `except_link`, sorted, deduplicated.
async fn local_addresses(
    handle: &Handle,
    except_link: &str,
) -> Result<Vec<IpAddr>, KernelError> {
    let except = link_index(handle, except_link).await?;
    let mut all: Vec<IpAddr> = addresses(handle, None, "local addresses")
        .await?
        .into_iter()
        .filter(|(i, _)| Some(*i) != except)
        .map(|(_, ip)| ip)
        .collect();
    all.sort();
    all.dedup();
    Ok(all)
}

/// The address a message carries. IFA_LOCAL is the interface's own
/// address on IPv4 (IFA_ADDRESS is the peer on point-to-point links);
/// IPv6 sends IFA_ADDRESS only. A message with neither is skipped.
pub(crate) fn address_of(message: &AddressMessage) -> Option<IpAddr> {
    let find = |local: bool| {
        message.attributes.iter().find_map(|a| match (a, local) {
            (AddressAttribute::Local(ip), true) => Some(*ip),
            (AddressAttribute::Address(ip), false) => Some(*ip),
            _ => None,
        })
    };
    find(true).or_else(|| find(false))
}

fn netlink_errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) if m.raw_code() != 0 => {
            Some(m.raw_code().saturating_abs())
        }
        _ => None,
    }
}

fn to_kernel_error(
    object: impl std::fmt::Display,
    e: rtnetlink::Error,
    what: &str,
) -> KernelError {
    match netlink_errno(&e) {
        Some(errno) => errno_error(object, errno, format!("{what} failed")),
        None => KernelError::new(
            ErrorKind::Transport,
            object,
            format!("{what}: {e}"),
        ),
    }
}

/// The message that adds or deletes `ip` as a host address of the link:
/// the address as both IFA_LOCAL and IFA_ADDRESS, as `ip address` writes
/// it. rtnetlink's builder leaves both out for an IPv4 multicast address
/// (and writes an IPv6 one as IFA_MULTICAST), and a deletion without an
/// address removes the link's first address of that length instead.
pub(crate) fn host_message(index: u32, ip: IpAddr) -> AddressMessage {
    let mut message = AddressMessage::default();
    message.header.family = match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    message.header.prefix_len = host_prefix_len(ip);
    message.header.index = index;
    message.attributes =
        vec![AddressAttribute::Address(ip), AddressAttribute::Local(ip)];
    message
}

async fn apply_one(
    handle: Handle,
    index: u32,
    link: &str,
    op: AddressOp,
) -> Result<(), KernelError> {
    let object = op.object(link);
    let result = match op {
        AddressOp::Add(ip) => {
            let mut request =
                handle.address().add(index, ip, host_prefix_len(ip));
            *request.message_mut() = host_message(index, ip);
            request.execute().await
        }
        AddressOp::Delete(ip) => {
            handle
                .address()
                .del(host_message(index, ip))
                .execute()
                .await
        }
    };
    let what = match op {
        AddressOp::Add(_) => "add",
        AddressOp::Delete(_) => "delete",
    };
    result.map_err(|e| to_kernel_error(object, e, what))
}

impl Addresses for NetlinkAddresses {
    async fn ensure_dummy(&mut self, link: &str) -> Result<(), KernelError> {
        if link_index(&self.handle, link).await?.is_some() {
            return Ok(());
        }
        // Built without `up()`: the link stays down.
        let created = self
            .handle
            .link()
            .add(LinkDummy::new(link).build())
            .execute()
            .await;
        match created {
            Ok(()) => Ok(()),
            // Created meanwhile by someone else: it exists, as asked.
            Err(e) if netlink_errno(&e) == Some(libc::EEXIST) => Ok(()),
            Err(e) => Err(to_kernel_error(format!("link {link}"), e, "create")),
        }
    }

    async fn delete_link(&mut self, link: &str) -> Result<(), KernelError> {
        let object = format!("link {link}");
        let Some(index) = link_index(&self.handle, link).await? else {
            return Err(errno_error(object, ENODEV, "no such link"));
        };
        self.handle
            .link()
            .del(index)
            .execute()
            .await
            .map_err(|e| to_kernel_error(object, e, "delete"))
    }

    async fn list(
        &mut self,
        link: &str,
    ) -> Result<BTreeSet<IpAddr>, KernelError> {
        list(&self.handle, link).await
    }

    async fn local_addresses(
        &mut self,
        except_link: &str,
    ) -> Result<Vec<IpAddr>, KernelError> {
        local_addresses(&self.handle, except_link).await
    }

    fn list_detached(
        &self,
        link: &str,
    ) -> impl DetachedRead<BTreeSet<IpAddr>> + use<> {
        let (reader, link) = (self.reader.clone(), link.to_owned());
        read_thread::run(async move { list(&reader, &link).await })
    }

    fn local_addresses_detached(
        &self,
        except_link: &str,
    ) -> impl DetachedRead<Vec<IpAddr>> + use<> {
        let (reader, except) = (self.reader.clone(), except_link.to_owned());
        read_thread::run(async move { local_addresses(&reader, &except).await })
    }

    async fn apply(
        &mut self,
        link: &str,
        ops: &[AddressOp],
    ) -> Vec<Result<(), KernelError>> {
        apply(&self.handle, link, ops).await
    }

    fn apply_detached(
        &mut self,
        link: &str,
        ops: Vec<AddressOp>,
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send + 'static + use<>
    {
        let (writer, object) = (self.writer.clone(), link.to_owned());
        let link = object.clone();
        let count = ops.len();
        let spawned = writes().map(|runtime| {
            runtime.spawn(async move { apply(&writer, &link, &ops).await })
        });
        async move {
            let failed = |message: String| {
                let e =
                    KernelError::new(ErrorKind::Transport, &object, message);
                std::iter::repeat_n(Err(e), count).collect()
            };
            match spawned {
                Ok(task) => match task.await {
                    Ok(results) => results,
                    Err(e) => failed(format!("the address writes failed: {e}")),
                },
                Err(e) => failed(e.to_string()),
            }
        }
    }
}

/// Adds and deletes addresses on `link` over `handle`, pipelined.
async fn apply(
    handle: &Handle,
    link: &str,
    ops: &[AddressOp],
) -> Vec<Result<(), KernelError>> {
    if ops.is_empty() {
        return Vec::new();
    }
    // One lookup per batch, not per operation.
    let index = match link_index(handle, link).await {
        Ok(Some(index)) => index,
        Ok(None) => {
            return ops
                .iter()
                .map(|op| {
                    Err(errno_error(op.object(link), ENODEV, "no such link"))
                })
                .collect()
        }
        Err(e) => return ops.iter().map(|_| Err(e.clone())).collect(),
    };
    // Built up front: a closure inside the stream would make this
    // future's Send-ness higher-ranked, which rustc cannot prove.
    let requests: Vec<_> = ops
        .iter()
        .map(|op| apply_one(handle.clone(), index, link, *op))
        .collect();
    futures::stream::iter(requests)
        .buffered(IN_FLIGHT)
        .collect()
        .await
}
