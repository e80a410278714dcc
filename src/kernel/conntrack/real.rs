//! [`Conntrack`] over ctnetlink (NETLINK_NETFILTER).

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use futures::StreamExt;
use netlink_packet_core::{
    DecodeError, NetlinkDeserializable, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NetlinkSerializable, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_netfilter::{
    conntrack::{
        ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol,
        Tuple,
    },
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner,
    NetfilterProtoFamily,
};
use netlink_proto::{sys::SocketAddr as NlAddr, ConnectionHandle};

use super::{Conntrack, Flow, FlowTuple};
use crate::kernel::{addresses::errno_error, ErrorKind, KernelError};

const NETLINK_NETFILTER: isize = 12;
/// As for addresses: enough to hide round trips, few enough that the
/// kernel's acknowledgements fit in the socket's receive buffer.
const IN_FLIGHT: usize = 256;
/// A dump that has not finished by then will not: the socket is stuck.
const DUMP_TIMEOUT: Duration = Duration::from_secs(30);

/// nfnetlink's subsystem number for conntrack (`NFNL_SUBSYS_CTNETLINK`).
const SUBSYS_CTNETLINK: u16 = 1;

/// A message on the ctnetlink socket. Only conntrack's own subsystem is
/// parsed: the socket asks for nothing else, and the netfilter crate's
/// parsers of other subsystems (nftables) index past a malformed
/// attribute's end instead of failing, which would end the socket's task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ctnetlink {
    Conntrack(NetfilterMessage),
    /// Another subsystem's message, by its type, left unread.
    Foreign(u16),
}

impl NetlinkSerializable for Ctnetlink {
    fn message_type(&self) -> u16 {
        match self {
            Ctnetlink::Conntrack(m) => m.message_type(),
            Ctnetlink::Foreign(kind) => *kind,
        }
    }

    fn buffer_len(&self) -> usize {
        match self {
            Ctnetlink::Conntrack(m) => NetlinkSerializable::buffer_len(m),
            Ctnetlink::Foreign(_) => 0,
        }
    }

    fn serialize(&self, buffer: &mut [u8]) {
        if let Ctnetlink::Conntrack(m) = self {
            m.serialize(buffer)
        }
    }
}

impl NetlinkDeserializable for Ctnetlink {
    type Error = DecodeError;

    fn deserialize(
        header: &NetlinkHeader,
        payload: &[u8],
    ) -> Result<Self, Self::Error> {
        if header.message_type >> 8 != SUBSYS_CTNETLINK {
            return Ok(Ctnetlink::Foreign(header.message_type));
        }
        NetfilterMessage::deserialize(header, payload).map(Ctnetlink::Conntrack)
    }
}

impl From<Ctnetlink> for NetlinkPayload<Ctnetlink> {
    fn from(message: Ctnetlink) -> Self {
        NetlinkPayload::InnerMessage(message)
    }
}

/// The conntrack entry a message carries, if it is one.
pub(crate) fn entry(message: &Ctnetlink) -> Option<&[ConntrackAttribute]> {
    match message {
        Ctnetlink::Conntrack(NetfilterMessage {
            inner: NetfilterMessageInner::Conntrack(ConntrackMessage::New(a)),
            ..
        }) => Some(a),
        _ => None,
    }
}

#[derive(Clone)]
pub struct NetlinkConntrack {
    handle: ConnectionHandle<Ctnetlink>,
}

fn transport(
    object: impl std::fmt::Display,
    why: impl Into<String>,
) -> KernelError {
    KernelError::new(ErrorKind::Transport, object, why)
}

impl NetlinkConntrack {
    /// Opens the socket; its connection runs as a task on the current
    /// tokio runtime.
    pub fn new() -> Result<Self, KernelError> {
        // Outside a runtime the socket and `spawn` would panic; say so.
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| transport("ctnetlink socket", e.to_string()))?;
        let (connection, handle, _) =
            netlink_proto::new_connection(NETLINK_NETFILTER)
                .map_err(|e| transport("ctnetlink socket", e.to_string()))?;
        runtime.spawn(connection);
        Ok(Self { handle })
    }

    async fn dump(&self) -> Result<Vec<Flow>, KernelError> {
        // AF_UNSPEC dumps both families.
        let request = message(
            NLM_F_REQUEST | NLM_F_DUMP,
            NetfilterProtoFamily::Unspec,
            ConntrackMessage::Get(vec![]),
        );
        let mut replies = self
            .handle
            .request(request, NlAddr::new(0, 0))
            .map_err(|e| transport("conntrack dump", e.to_string()))?;
        let mut flows = Vec::new();
        while let Some(reply) = replies.next().await {
            match reply.payload {
                NetlinkPayload::InnerMessage(m) => {
                    flows.extend(entry(&m).and_then(udp_flow))
                }
                NetlinkPayload::Error(e) if e.raw_code() != 0 => {
                    return Err(errno_error(
                        "conntrack dump",
                        e.raw_code().saturating_abs(),
                        "dump failed",
                    ))
                }
                // Done, acknowledgements, other messages: nothing to keep.
                _ => {}
            }
        }
        Ok(flows)
    }
}

pub(crate) fn message(
    flags: u16,
    family: NetfilterProtoFamily,
    inner: ConntrackMessage,
) -> NetlinkMessage<Ctnetlink> {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    let mut message = NetlinkMessage::new(
        header,
        NetlinkPayload::from(Ctnetlink::Conntrack(NetfilterMessage::new(
            NetfilterHeader::new(family, 0, 0),
            inner,
        ))),
    );
    message.finalize();
    message
}

/// A UDP flow from an entry's attributes; `None` for other protocols and
/// for entries missing a field (never a panic on what the kernel sends).
pub(crate) fn udp_flow(attributes: &[ConntrackAttribute]) -> Option<Flow> {
    let mut original = None;
    let mut reply = None;
    for attribute in attributes {
        match attribute {
            ConntrackAttribute::CtaTupleOrig(t) => original = udp_tuple(t),
            ConntrackAttribute::CtaTupleReply(t) => reply = udp_tuple(t),
            _ => {}
        }
    }
    Some(Flow {
        original: original?,
        reply: reply?,
    })
}

pub(crate) fn udp_tuple(tuple: &[Tuple]) -> Option<FlowTuple> {
    let (mut src, mut dst, mut sport, mut dport) = (None, None, None, None);
    let mut udp = false;
    for part in tuple {
        match part {
            Tuple::Ip(ips) => {
                for ip in ips {
                    match ip {
                        IPTuple::SourceAddress(a) => src = Some(*a),
                        IPTuple::DestinationAddress(a) => dst = Some(*a),
                        _ => {}
                    }
                }
            }
            Tuple::Proto(protos) => {
                for p in protos {
                    match p {
                        ProtoTuple::Protocol(Protocol::Udp) => udp = true,
                        ProtoTuple::SourcePort(port) => sport = Some(*port),
                        ProtoTuple::DestinationPort(port) => {
                            dport = Some(*port)
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if !udp {
        return None;
    }
    Some(FlowTuple {
        src: SocketAddr::new(src?, sport?),
        dst: SocketAddr::new(dst?, dport?),
    })
}

pub(crate) fn tuple_attributes(t: &FlowTuple) -> Vec<Tuple> {
    vec![
        Tuple::Ip(vec![
            IPTuple::SourceAddress(t.src.ip()),
            IPTuple::DestinationAddress(t.dst.ip()),
        ]),
        Tuple::Proto(vec![
            ProtoTuple::Protocol(Protocol::Udp),
            ProtoTuple::SourcePort(t.src.port()),
            ProtoTuple::DestinationPort(t.dst.port()),
        ]),
    ]
}

async fn delete_one(
    handle: ConnectionHandle<Ctnetlink>,
    flow: Flow,
) -> Result<(), KernelError> {
    let family = match flow.original.src.ip() {
        IpAddr::V4(_) => NetfilterProtoFamily::IPv4,
        IpAddr::V6(_) => NetfilterProtoFamily::IPv6,
    };
    let request = message(
        NLM_F_REQUEST | NLM_F_ACK,
        family,
        ConntrackMessage::Delete(vec![ConntrackAttribute::CtaTupleOrig(
            tuple_attributes(&flow.original),
        )]),
    );
    let mut replies = handle
        .request(request, NlAddr::new(0, 0))
        .map_err(|e| transport(flow, e.to_string()))?;
    while let Some(reply) = replies.next().await {
        if let NetlinkPayload::Error(e) = reply.payload {
            if e.raw_code() != 0 {
                return Err(errno_error(
                    flow,
                    e.raw_code().saturating_abs(),
                    "delete failed",
                ));
            }
        }
    }
    Ok(())
}

impl Conntrack for NetlinkConntrack {
    async fn dump_udp(&mut self) -> Result<Vec<Flow>, KernelError> {
        tokio::time::timeout(DUMP_TIMEOUT, self.dump())
            .await
            .unwrap_or_else(|_| Err(transport("conntrack dump", "timed out")))
    }

    async fn delete(&mut self, flows: &[Flow]) -> Vec<Result<(), KernelError>> {
        let requests: Vec<_> = flows
            .iter()
            .map(|f| delete_one(self.handle.clone(), *f))
            .collect();
        futures::stream::iter(requests)
            .buffered(IN_FLIGHT)
            .collect()
            .await
    }
}
