//! ipset's nfnetlink messages: a netlink header, the nfnetlink `nfgenmsg`,
//! then attributes. Requests are encoded straight into a batch buffer;
//! replies are read in place.

use super::{
    attribute::{align, Attr, AttrWriter, Attrs},
    entry, DecodeError,
};
use crate::desired::{SetEntry, SetType};

const NFNL_SUBSYS_IPSET: u16 = 6;
const NFNETLINK_V0: u8 = 0;
/// The protocol version we speak; every kernel since ipset's merge
/// (2.6.39) accepts 6, and 7 changed nothing we use.
const IPSET_PROTOCOL: u8 = 6;
const AF_INET: u8 = 2;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
/// Without it ipset behaves as `-exist` and forgives a duplicate create
/// or add and a delete of an absent element; the contract needs those
/// errors, so every request carries it.
pub(crate) const NLM_F_EXCL: u16 = 0x200;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;

const NLMSG_HEADER_LEN: usize = 16;
const NFGENMSG_LEN: usize = 4;

const IPSET_ATTR_PROTOCOL: u16 = 1;
const IPSET_ATTR_SETNAME: u16 = 2;
const IPSET_ATTR_TYPENAME: u16 = 3;
const IPSET_ATTR_REVISION: u16 = 4;
const IPSET_ATTR_FAMILY: u16 = 5;
const IPSET_ATTR_DATA: u16 = 7;
const IPSET_ATTR_ADT: u16 = 8;
const IPSET_ATTR_REVISION_MIN: u16 = 10;

const IPSET_ATTR_PORT_FROM: u16 = 4;
const IPSET_ATTR_PORT_TO: u16 = 5;
const IPSET_ATTR_HASHSIZE: u16 = 18;
const IPSET_ATTR_MAXELEM: u16 = 19;

/// kube-proxy's create parameters (pkg/proxy/ipvs/ipset: hash size 1024,
/// maxelem 65536, bitmap:port over every port).
const HASH_SIZE: u32 = 1024;
const MAX_ELEM: u32 = 65536;
const PORT_RANGE: (u16, u16) = (0, 65535);

/// Address families as ipset stores them (`NFPROTO_*`).
pub(crate) const NFPROTO_UNSPEC: u8 = 0;
pub(crate) const NFPROTO_IPV4: u8 = 2;
pub(crate) const NFPROTO_IPV6: u8 = 10;

/// The ipset commands we send (`enum ipset_cmd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    Protocol,
    Create,
    Destroy,
    List,
    Add,
    Del,
    Type,
}

impl Command {
    fn code(self) -> u16 {
        match self {
            Command::Protocol => 1,
            Command::Create => 2,
            Command::Destroy => 3,
            Command::List => 7,
            Command::Add => 9,
            Command::Del => 10,
            Command::Type => 13,
        }
    }
}

/// The family ipset keeps for a set: bitmap:port has none.
pub(crate) fn set_family(set_type: SetType, ipv6: bool) -> u8 {
    match (set_type, ipv6) {
        (SetType::BitmapPort, _) => NFPROTO_UNSPEC,
        (_, false) => NFPROTO_IPV4,
        (_, true) => NFPROTO_IPV6,
    }
}

/// Appends one request to `buf`; `body` writes the attributes after the
/// protocol version every ipset request starts with.
pub(crate) fn encode_request(
    buf: &mut Vec<u8>,
    command: Command,
    flags: u16,
    seq: u32,
    body: impl FnOnce(&mut AttrWriter<'_>),
) {
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]); // length, patched below
    let kind = (NFNL_SUBSYS_IPSET << 8) | command.code();
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    buf.extend_from_slice(&[AF_INET, NFNETLINK_V0, 0, 0]);
    let mut w = AttrWriter::new(buf);
    w.u8(IPSET_ATTR_PROTOCOL, IPSET_PROTOCOL);
    body(&mut w);
    let len = (buf.len() - start) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
}

pub(crate) fn create(
    w: &mut AttrWriter<'_>,
    name: &str,
    set_type: SetType,
    ipv6: bool,
    revision: u8,
) {
    w.cstr(IPSET_ATTR_SETNAME, name);
    w.cstr(IPSET_ATTR_TYPENAME, set_type.as_str());
    w.u8(IPSET_ATTR_REVISION, revision);
    w.u8(IPSET_ATTR_FAMILY, set_family(set_type, ipv6));
    w.nested(IPSET_ATTR_DATA, |w| match set_type {
        SetType::BitmapPort => {
            w.be16(IPSET_ATTR_PORT_FROM, PORT_RANGE.0);
            w.be16(IPSET_ATTR_PORT_TO, PORT_RANGE.1);
        }
        _ => {
            w.be32(IPSET_ATTR_HASHSIZE, HASH_SIZE);
            w.be32(IPSET_ATTR_MAXELEM, MAX_ELEM);
        }
    });
}

/// Destroy, flush: the set name alone.
pub(crate) fn named(w: &mut AttrWriter<'_>, name: &str) {
    w.cstr(IPSET_ATTR_SETNAME, name);
}

/// Add, delete: the set name and one element.
pub(crate) fn element(w: &mut AttrWriter<'_>, name: &str, entry: &SetEntry) {
    w.cstr(IPSET_ATTR_SETNAME, name);
    w.nested(IPSET_ATTR_DATA, |w| entry::encode(w, entry));
}

/// Asks which revisions of a type the kernel has.
pub(crate) fn type_query(
    w: &mut AttrWriter<'_>,
    set_type: SetType,
    ipv6: bool,
) {
    w.cstr(IPSET_ATTR_TYPENAME, set_type.as_str());
    w.u8(IPSET_ATTR_FAMILY, set_family(set_type, ipv6));
}

/// One netlink message of a received datagram.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reply<'a> {
    /// An ack (`errno` 0) or an error, for the request with `seq`. The
    /// errno is positive.
    Ack { seq: u32, errno: i32 },
    /// The end of a dump.
    Done { seq: u32 },
    /// An ipset message: a listed set (part) or a type answer.
    Ipset { seq: u32, attrs: &'a [u8] },
    /// Anything else (another subsystem, a no-op).
    Other,
}

/// Splits a datagram into its netlink messages.
pub(crate) fn replies(
    mut buf: &[u8],
) -> impl Iterator<Item = Result<Reply<'_>, DecodeError>> {
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let parsed = parse_one(buf);
        match parsed {
            Ok((reply, consumed)) => {
                buf = buf.get(consumed..).unwrap_or(&[]);
                Some(Ok(reply))
            }
            Err(e) => {
                buf = &[];
                Some(Err(e))
            }
        }
    })
}

fn parse_one(buf: &[u8]) -> Result<(Reply<'_>, usize), DecodeError> {
    let header = buf.get(..NLMSG_HEADER_LEN).ok_or(DecodeError::Truncated {
        what: "netlink header",
        len: buf.len(),
    })?;
    let word = |at: usize| {
        let b = header.get(at..at + 4).unwrap_or(&[0; 4]);
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    };
    let len = word(0) as usize;
    let kind = u16::from_ne_bytes([header[4], header[5]]);
    let seq = word(8);
    let body = buf.get(NLMSG_HEADER_LEN..len).ok_or(
        DecodeError::BadMessageLength {
            len,
            available: buf.len(),
        },
    )?;
    let consumed = align(len).min(buf.len());
    let reply = match kind {
        NLMSG_ERROR => {
            let b = body.get(..4).ok_or(DecodeError::Truncated {
                what: "netlink error",
                len: body.len(),
            })?;
            let code = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
            Reply::Ack {
                seq,
                errno: code.checked_neg().unwrap_or(i32::MAX),
            }
        }
        NLMSG_DONE => Reply::Done { seq },
        k if k >> 8 == NFNL_SUBSYS_IPSET => Reply::Ipset {
            seq,
            attrs: body.get(NFGENMSG_LEN..).unwrap_or(&[]),
        },
        _ => Reply::Other,
    };
    Ok((reply, consumed))
}

/// The core fields of a set, sent in the first message of its listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedHeader {
    pub type_name: String,
    pub family: u8,
    pub revision: u8,
}

/// One message of a list dump: a big set's elements span several
/// messages, and only the first carries the header.
#[derive(Debug)]
pub(crate) struct ListedPart<'a> {
    pub name: String,
    pub header: Option<ListedHeader>,
    /// The `IPSET_ATTR_DATA` nests of the elements in this message.
    pub elements: Vec<&'a [u8]>,
}

pub(crate) fn parse_list(attrs: &[u8]) -> Result<ListedPart<'_>, DecodeError> {
    let mut name = None;
    let mut type_name = None;
    let mut family = None;
    let mut revision = None;
    let mut elements = Vec::new();
    for attr in Attrs::new(attrs) {
        let attr = attr?;
        match attr.kind {
            IPSET_ATTR_SETNAME => name = Some(attr.cstr_lossy()),
            IPSET_ATTR_TYPENAME => type_name = Some(attr.cstr_lossy()),
            IPSET_ATTR_FAMILY => family = Some(attr.u8()?),
            IPSET_ATTR_REVISION => revision = Some(attr.u8()?),
            IPSET_ATTR_ADT => {
                for element in attr.nested() {
                    let element: Attr<'_> = element?;
                    if element.kind == IPSET_ATTR_DATA {
                        elements.push(element.payload);
                    }
                }
            }
            _ => {}
        }
    }
    let name = name.ok_or(DecodeError::MissingAttr("IPSET_ATTR_SETNAME"))?;
    let header = match (type_name, family, revision) {
        (Some(type_name), Some(family), Some(revision)) => Some(ListedHeader {
            type_name,
            family,
            revision,
        }),
        _ => None,
    };
    Ok(ListedPart {
        name,
        header,
        elements,
    })
}

/// The kernel's answer to a type query: the newest revision it has.
pub(crate) fn parse_type(attrs: &[u8]) -> Result<(u8, u8), DecodeError> {
    let mut max = None;
    let mut min = None;
    for attr in Attrs::new(attrs) {
        let attr = attr?;
        match attr.kind {
            IPSET_ATTR_REVISION => max = Some(attr.u8()?),
            IPSET_ATTR_REVISION_MIN => min = Some(attr.u8()?),
            _ => {}
        }
    }
    let max = max.ok_or(DecodeError::MissingAttr("IPSET_ATTR_REVISION"))?;
    Ok((min.unwrap_or(0), max))
}

/// The set type a listed type name stands for, if it is one of ours.
pub(crate) fn set_type_from_name(name: &str) -> Option<SetType> {
    [
        SetType::HashIp,
        SetType::HashIpPort,
        SetType::HashIpPortIp,
        SetType::HashIpPortNet,
        SetType::BitmapPort,
    ]
    .into_iter()
    .find(|t| t.as_str() == name)
}
