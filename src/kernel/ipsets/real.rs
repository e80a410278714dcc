//! [`Ipsets`] over ipset's netlink protocol: no process per sync, one
//! message per operation, a window of them per `sendmsg`, every ack
//! matched back to its operation by sequence number.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex, PoisonError},
};

use super::{
    family_of_listed,
    netlink::{
        errno::to_kernel_error,
        message::{
            self, encode_request, parse_list, parse_type, set_type_from_name,
            Command, NFPROTO_IPV6, NLM_F_ACK, NLM_F_DUMP, NLM_F_EXCL,
            NLM_F_REQUEST,
        },
        socket::{IpsetSocket, RequestError, WINDOW, WINDOW_BYTES},
    },
    IpsetOp, Ipsets, SetSpec, SetState, SetType, SetTypes,
};
use crate::kernel::{read_thread, DetachedRead, ErrorKind, KernelError};

/// The newest revision of each type that the `ipset` tool of this era
/// (v7.17) understands: creating a newer one would leave sets that
/// operators' `ipset list` cannot print. The kernel's own newest
/// revision wins when it is older.
fn revision_cap(set_type: SetType) -> u8 {
    match set_type {
        SetType::HashIp => 6,
        SetType::HashIpPort => 7,
        SetType::HashIpPortIp => 6,
        SetType::HashIpPortNet => 8,
        SetType::BitmapPort => 3,
    }
}

/// The real ipsets of the network namespace the socket was opened in
/// (the opening thread's namespace; the socket stays there).
///
/// `dump` and `apply` do their I/O on the calling thread without
/// yielding: the kernel handles each request inside `sendmsg`, so a call
/// never waits on anything but the kernel's own work (microseconds per
/// element, see `make bench-ipsets`). A lost answer is bounded
/// by a 5 s receive timeout and reported as a transport error for the
/// operations it covered. `dump_detached` reads over a second socket,
/// opened with the first (so in the same network namespace), on the
/// runtime's blocking threads: a whole listing is work proportional to
/// the sets' size that must not hold a runtime thread.
pub struct NetlinkIpsets {
    socket: IpsetSocket,
    reader: Arc<Mutex<IpsetSocket>>,
    revisions: HashMap<(SetType, bool), u8>,
    buf: Vec<u8>,
}

fn open_socket() -> Result<IpsetSocket, KernelError> {
    IpsetSocket::open().map_err(|e| {
        KernelError::new(
            ErrorKind::Transport,
            "ipset netlink socket",
            e.to_string(),
        )
        .with_errno(e.raw_os_error().unwrap_or(0))
    })
}

impl NetlinkIpsets {
    /// Opens the sockets and checks that the kernel speaks ipset.
    pub fn new() -> Result<Self, KernelError> {
        let mut this = Self {
            socket: open_socket()?,
            reader: Arc::new(Mutex::new(open_socket()?)),
            revisions: HashMap::new(),
            buf: Vec::with_capacity(WINDOW_BYTES + 1024),
        };
        this.probe()?;
        Ok(this)
    }

    fn probe(&mut self) -> Result<(), KernelError> {
        let seq = self.socket.reserve_seqs(1);
        let mut msg = Vec::new();
        encode_request(
            &mut msg,
            Command::Protocol,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            |_| {},
        );
        self.socket.request(&msg, seq, |_| Ok(())).map_err(|e| {
            request_error(e, "ipset protocol", |errno| {
                KernelError::new(
                    ErrorKind::Unavailable,
                    "ipset protocol",
                    "the kernel does not speak ipset protocol 6",
                )
                .with_errno(errno)
            })
        })
    }

    /// The revision to create `set_type` with: the kernel's newest, capped
    /// to what the `ipset` tool reads (see [`revision_cap`]).
    fn revision(
        &mut self,
        set_type: SetType,
        ipv6: bool,
    ) -> Result<u8, KernelError> {
        if let Some(rev) = self.revisions.get(&(set_type, ipv6)) {
            return Ok(*rev);
        }
        let seq = self.socket.reserve_seqs(1);
        let mut msg = Vec::new();
        encode_request(
            &mut msg,
            Command::Type,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            |w| message::type_query(w, set_type, ipv6),
        );
        let mut answer = None;
        let object = format!("set type {}", set_type.as_str());
        self.socket
            .request(&msg, seq, |attrs| {
                answer = Some(parse_type(attrs)?);
                Ok(())
            })
            .map_err(|e| {
                request_error(e, &object, |errno| {
                    to_kernel_error(Command::Type, &object, errno)
                })
            })?;
        let (min, max) = answer.ok_or_else(|| {
            KernelError::new(
                ErrorKind::Transport,
                &object,
                "the kernel acknowledged the type query without answering",
            )
        })?;
        let capped = max.min(revision_cap(set_type));
        let rev = if capped < min { max } else { capped };
        self.revisions.insert((set_type, ipv6), rev);
        Ok(rev)
    }

    fn encode(&mut self, op: &IpsetOp, seq: u32, revision: Option<u8>) {
        let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL;
        let buf = &mut self.buf;
        match op {
            IpsetOp::Create(spec) => {
                let rev = revision.unwrap_or(0);
                encode_request(buf, Command::Create, flags, seq, |w| {
                    message::create(
                        w,
                        &spec.name,
                        spec.set_type,
                        spec.ipv6,
                        rev,
                    )
                })
            }
            IpsetOp::Destroy(name) => {
                encode_request(buf, Command::Destroy, flags, seq, |w| {
                    message::named(w, name)
                })
            }
            IpsetOp::Add(name, entry) => {
                encode_request(buf, Command::Add, flags, seq, |w| {
                    message::element(w, name, entry)
                })
            }
            IpsetOp::Delete(name, entry) => {
                encode_request(buf, Command::Del, flags, seq, |w| {
                    message::element(w, name, entry)
                })
            }
        }
    }

    fn apply_now(&mut self, ops: &[IpsetOp]) -> Vec<Result<(), KernelError>> {
        let mut results: Vec<Option<Result<(), KernelError>>> =
            vec![None; ops.len()];
        let mut revisions = vec![None; ops.len()];
        for (i, op) in ops.iter().enumerate() {
            if let IpsetOp::Create(spec) = op {
                match self.revision(spec.set_type, spec.ipv6) {
                    Ok(rev) => revisions[i] = Some(rev),
                    Err(mut e) => {
                        e.object = spec.name.clone();
                        results[i] = Some(Err(e));
                    }
                }
            }
        }
        let mut next = 0;
        while next < ops.len() {
            self.buf.clear();
            let first_seq = self.socket.reserve_seqs(WINDOW);
            let mut window = Vec::with_capacity(WINDOW);
            while next < ops.len()
                && window.len() < WINDOW
                && self.buf.len() < WINDOW_BYTES
            {
                if results[next].is_none() {
                    let seq = first_seq.wrapping_add(window.len() as u32);
                    self.encode(&ops[next], seq, revisions[next]);
                    window.push(next);
                }
                next += 1;
            }
            if window.is_empty() {
                continue;
            }
            let (acks, failure) =
                self.socket.send_acked(&self.buf, first_seq, window.len());
            for (index, ack) in window.into_iter().zip(acks) {
                let op = &ops[index];
                results[index] = Some(match ack {
                    Some(0) => Ok(()),
                    Some(errno) => {
                        Err(to_kernel_error(command(op), &op.object(), errno))
                    }
                    None => Err(KernelError::new(
                        ErrorKind::Transport,
                        op.object(),
                        format!(
                            "no answer from the kernel: {}",
                            failure
                                .as_ref()
                                .map(ToString::to_string)
                                .unwrap_or_default()
                        ),
                    )),
                });
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(KernelError::new(
                        ErrorKind::Transport,
                        "ipset batch",
                        "operation was not sent",
                    ))
                })
            })
            .collect()
    }
}

/// Every set whose name starts with `prefix`, with its entries.
fn dump_on(
    socket: &mut IpsetSocket,
    prefix: &str,
) -> Result<BTreeMap<String, SetState>, KernelError> {
    let seq = socket.reserve_seqs(1);
    let mut msg = Vec::new();
    encode_request(
        &mut msg,
        Command::List,
        NLM_F_REQUEST | NLM_F_DUMP,
        seq,
        |_| {},
    );
    let mut sets: BTreeMap<String, SetState> = BTreeMap::new();
    let mut first_error: Option<KernelError> = None;
    // Undecodable messages are remembered, not returned: returning
    // would stop reading the dump halfway.
    let outcome = socket.request(&msg, seq, |attrs| {
        if let Err(e) = listed_message(&mut sets, prefix, attrs) {
            first_error.get_or_insert(e);
        }
        Ok(())
    });
    outcome.map_err(|e| {
        request_error(e, "ipset list", |errno| {
            to_kernel_error(Command::List, "ipset list", errno)
        })
    })?;
    match first_error {
        Some(e) => Err(e),
        None => Ok(sets),
    }
}

/// Reads one message of a list dump into the sets read so far, if it
/// lists a set whose name starts with `prefix`.
pub(crate) fn listed_message(
    sets: &mut BTreeMap<String, SetState>,
    prefix: &str,
    attrs: &[u8],
) -> Result<(), KernelError> {
    let part = parse_list(attrs).map_err(|e| {
        KernelError::new(
            ErrorKind::Transport,
            "ipset list",
            format!("undecodable listing message: {e}"),
        )
    })?;
    if !part.name.starts_with(prefix) {
        return Ok(());
    }
    absorb(sets, part)
}

/// Adds one listed message to the sets read so far.
fn absorb(
    sets: &mut BTreeMap<String, SetState>,
    part: message::ListedPart<'_>,
) -> Result<(), KernelError> {
    let name = part.name;
    if let Some(header) = part.header {
        let set_type =
            set_type_from_name(&header.type_name).ok_or_else(|| {
                KernelError::new(
                    ErrorKind::Invalid,
                    &name,
                    format!(
                        "set has type {}, which is not one of kube-proxy's",
                        header.type_name
                    ),
                )
            })?;
        let ipv6 = family_of_listed(set_type, &name)
            .unwrap_or(header.family == NFPROTO_IPV6);
        sets.entry(name.clone()).or_insert_with(|| SetState {
            spec: SetSpec {
                name: name.clone(),
                set_type,
                ipv6,
            },
            entries: BTreeSet::new(),
        });
    }
    let Some(state) = sets.get_mut(&name) else {
        return Err(KernelError::new(
            ErrorKind::Transport,
            &name,
            "listing continued a set whose header was never sent",
        ));
    };
    for data in part.elements {
        let entry = super::netlink::entry::decode(state.spec.set_type, data)
            .map_err(|e| {
                KernelError::new(
                    ErrorKind::Invalid,
                    &name,
                    format!("unreadable element: {e}"),
                )
            })?;
        state.entries.insert(entry);
    }
    Ok(())
}

fn request_error(
    e: RequestError,
    object: &str,
    from_errno: impl FnOnce(i32) -> KernelError,
) -> KernelError {
    match e {
        RequestError::Errno(errno) => from_errno(errno),
        RequestError::Io(io) => {
            let errno = io.raw_os_error().unwrap_or(0);
            KernelError::new(ErrorKind::Transport, object, io.to_string())
                .with_errno(errno)
        }
        RequestError::Decode(d) => KernelError::new(
            ErrorKind::Transport,
            object,
            format!("undecodable reply: {d}"),
        ),
    }
}

fn command(op: &IpsetOp) -> Command {
    match op {
        IpsetOp::Create(_) => Command::Create,
        IpsetOp::Destroy(_) => Command::Destroy,
        IpsetOp::Add(..) => Command::Add,
        IpsetOp::Delete(..) => Command::Del,
    }
}

impl SetTypes for NetlinkIpsets {
    /// The type query `NetlinkIpsets::revision` makes anyway (IPv4: a
    /// type's module serves both families).
    fn check_type(&mut self, set_type: SetType) -> Result<(), KernelError> {
        self.revision(set_type, false).map(|_| ())
    }
}

impl Ipsets for NetlinkIpsets {
    async fn dump(
        &mut self,
        prefix: &str,
    ) -> Result<BTreeMap<String, SetState>, KernelError> {
        dump_on(&mut self.socket, prefix)
    }

    fn dump_detached(
        &self,
        prefix: &str,
    ) -> impl DetachedRead<BTreeMap<String, SetState>> + use<> {
        let (reader, prefix) = (Arc::clone(&self.reader), prefix.to_owned());
        // On the reads' runtime, whose blocking threads yield to the
        // syncs as its own thread does.
        read_thread::run(async move {
            tokio::task::spawn_blocking(move || {
                let mut socket =
                    reader.lock().unwrap_or_else(PoisonError::into_inner);
                dump_on(&mut socket, &prefix)
            })
            .await
            .unwrap_or_else(|e| {
                Err(KernelError::new(
                    ErrorKind::Transport,
                    "ipset list",
                    format!("the reading thread failed: {e}"),
                ))
            })
        })
    }

    async fn apply(&mut self, ops: &[IpsetOp]) -> Vec<Result<(), KernelError>> {
        self.apply_now(ops)
    }
}
