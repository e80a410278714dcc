//! ipset's nfnetlink protocol (`NFNL_SUBSYS_IPSET`, protocol version 6),
//! spoken directly on a `NETLINK_NETFILTER` socket: one message per
//! operation, pipelined, each acknowledged.

pub(crate) mod attribute;
pub(crate) mod entry;
pub(crate) mod errno;
pub(crate) mod message;
pub(crate) mod socket;

/// A reply the kernel sent that we cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("truncated {what} ({len} bytes)")]
    Truncated { what: &'static str, len: usize },
    #[error("attribute length {len} exceeds the {available} bytes left")]
    BadAttrLength { len: usize, available: usize },
    #[error("message length {len} exceeds the {available} bytes left")]
    BadMessageLength { len: usize, available: usize },
    #[error("attribute {attr} is {len} bytes, expected {want}")]
    AttrTooShort { attr: u16, len: usize, want: usize },
    #[error("address attribute of {len} bytes")]
    BadAddress { len: usize },
    #[error("missing {0}")]
    MissingAttr(&'static str),
    #[error("unsupported {0}")]
    Unsupported(String),
}

#[cfg(test)]
mod tests;
