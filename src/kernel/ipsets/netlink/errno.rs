//! The kernel's answers to ipset requests, as [`KernelError`]s. ipset
//! reports most failures with private codes above 4096 whose meaning
//! depends on the command (`IPSET_ERR_EXIST` is "already added" for an
//! add and "not there" for a delete), so the mapping takes the command.

use super::message::Command;
use crate::kernel::{ErrorKind, KernelError};

use libc::{
    EBUSY, EEXIST, EINVAL, EMSGSIZE, ENOENT, ENOMEM, EOPNOTSUPP, EPERM, ERANGE,
};

pub(crate) const IPSET_ERR_PROTOCOL: i32 = 4097;
const IPSET_ERR_FIND_TYPE: i32 = 4098;
const IPSET_ERR_MAX_SETS: i32 = 4099;
pub(crate) const IPSET_ERR_BUSY: i32 = 4100;
const IPSET_ERR_EXIST_SETNAME2: i32 = 4101;
const IPSET_ERR_TYPE_MISMATCH: i32 = 4102;
pub(crate) const IPSET_ERR_EXIST: i32 = 4103;
pub(crate) const IPSET_ERR_INVALID_CIDR: i32 = 4104;
const IPSET_ERR_INVALID_NETMASK: i32 = 4105;
const IPSET_ERR_INVALID_FAMILY: i32 = 4106;
const IPSET_ERR_TIMEOUT: i32 = 4107;
const IPSET_ERR_REFERENCED: i32 = 4108;
pub(crate) const IPSET_ERR_IPADDR_IPV4: i32 = 4109;
pub(crate) const IPSET_ERR_IPADDR_IPV6: i32 = 4110;
const IPSET_ERR_COUNTER: i32 = 4111;
const IPSET_ERR_COMMENT: i32 = 4112;
const IPSET_ERR_INVALID_MARKMASK: i32 = 4113;
const IPSET_ERR_SKBINFO: i32 = 4114;
/// Codes from here on belong to the set type: for hash types 4352 is
/// "hash full", for bitmap types "outside the range".
const IPSET_ERR_TYPE_SPECIFIC: i32 = 4352;

/// What a (positive) errno means for `command` on `object`.
pub(crate) fn to_kernel_error(
    command: Command,
    object: &str,
    errno: i32,
) -> KernelError {
    let (kind, message) = classify(command, errno);
    KernelError::new(kind, object, message).with_errno(errno)
}

fn classify(command: Command, errno: i32) -> (ErrorKind, String) {
    use ErrorKind::*;
    let known = |kind: ErrorKind, text: &str| (kind, text.to_string());
    match (command, errno) {
        (Command::Create, EEXIST) => known(Exists, "set already exists"),
        (Command::Add, IPSET_ERR_EXIST) => {
            known(Exists, "IPSET_ERR_EXIST: element already added")
        }
        (Command::Del, IPSET_ERR_EXIST) => {
            known(NotFound, "IPSET_ERR_EXIST: element is not in the set")
        }
        (_, ENOENT) => known(NotFound, "set does not exist"),
        (_, EEXIST) => known(Exists, "already exists"),
        (_, EINVAL) => known(Invalid, "invalid argument"),
        (_, EPERM) => known(Other, "operation not permitted"),
        (_, EBUSY) => known(Other, "busy"),
        (_, ENOMEM) => known(Other, "out of memory"),
        (_, ERANGE) => {
            known(Invalid, "attribute out of range (name too long?)")
        }
        (_, EMSGSIZE) => known(Invalid, "message too long"),
        (_, EOPNOTSUPP) => known(Unavailable, "not supported by this kernel"),
        (_, IPSET_ERR_PROTOCOL) => known(
            Invalid,
            "IPSET_ERR_PROTOCOL: the kernel rejected the request's \
             attributes (an element of the wrong kind for the set's type?)",
        ),
        (_, IPSET_ERR_FIND_TYPE) => known(
            Unavailable,
            "IPSET_ERR_FIND_TYPE: set type or revision not in this kernel",
        ),
        (_, IPSET_ERR_MAX_SETS) => {
            known(Other, "IPSET_ERR_MAX_SETS: the kernel's set limit")
        }
        (_, IPSET_ERR_BUSY) => known(
            Other,
            "IPSET_ERR_BUSY: set is in use (referenced by an iptables \
             rule or a list:set)",
        ),
        (_, IPSET_ERR_EXIST_SETNAME2) => {
            known(Exists, "IPSET_ERR_EXIST_SETNAME2: second set exists")
        }
        (_, IPSET_ERR_TYPE_MISMATCH) => {
            known(Invalid, "IPSET_ERR_TYPE_MISMATCH: set types differ")
        }
        (_, IPSET_ERR_EXIST) => known(Other, "IPSET_ERR_EXIST"),
        (_, IPSET_ERR_INVALID_CIDR) => {
            known(Invalid, "IPSET_ERR_INVALID_CIDR: invalid prefix length")
        }
        (_, IPSET_ERR_INVALID_NETMASK) => {
            known(Invalid, "IPSET_ERR_INVALID_NETMASK")
        }
        (_, IPSET_ERR_INVALID_FAMILY) => known(
            Invalid,
            "IPSET_ERR_INVALID_FAMILY: family not supported by the type",
        ),
        (_, IPSET_ERR_TIMEOUT) => known(Invalid, "IPSET_ERR_TIMEOUT"),
        (_, IPSET_ERR_REFERENCED) => {
            known(Other, "IPSET_ERR_REFERENCED: set is referenced")
        }
        (_, IPSET_ERR_IPADDR_IPV4) => known(
            Invalid,
            "IPSET_ERR_IPADDR_IPV4: an IPv4 address is required",
        ),
        (_, IPSET_ERR_IPADDR_IPV6) => known(
            Invalid,
            "IPSET_ERR_IPADDR_IPV6: an IPv6 address is required",
        ),
        (_, IPSET_ERR_COUNTER) => known(Invalid, "IPSET_ERR_COUNTER"),
        (_, IPSET_ERR_COMMENT) => known(Invalid, "IPSET_ERR_COMMENT"),
        (_, IPSET_ERR_INVALID_MARKMASK) => {
            known(Invalid, "IPSET_ERR_INVALID_MARKMASK")
        }
        (_, IPSET_ERR_SKBINFO) => known(Invalid, "IPSET_ERR_SKBINFO"),
        (_, e) if e >= IPSET_ERR_TYPE_SPECIFIC => (
            Other,
            format!(
                "set-type specific error {} (hash:* full, or bitmap \
                 element outside the range)",
                e - IPSET_ERR_TYPE_SPECIFIC
            ),
        ),
        (_, e) if e > 4096 => (Other, format!("ipset error {e}")),
        (_, e) => (Other, format!("errno {e}")),
    }
}
