//! In-memory ipsets that answer as the kernel does, errno for errno: a
//! duplicate create or add fails, a delete of something absent fails, a
//! referenced set cannot be destroyed.
//!
//! It also copies the kernel's leniency about element shapes: the kernel
//! reads only the fields the set's type uses, so `198.18.0.1,tcp:80`
//! added to a hash:ip set adds `198.18.0.1`, while an element missing a
//! field the type needs is rejected (`IPSET_ERR_PROTOCOL`).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use ipnet::IpNet;

use super::{
    family_of_listed,
    netlink::{errno, message::Command},
    IpsetOp, Ipsets, SetEntry, SetState, SetType,
};
use crate::kernel::{libc_errno, KernelError};

/// `IPSET_MAXNAMELEN` less the terminating NUL.
const MAX_NAME_LEN: usize = 31;

#[derive(Debug, Default, Clone)]
pub struct ModelIpsets {
    sets: BTreeMap<String, SetState>,
    referenced: BTreeSet<String>,
}

impl ModelIpsets {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks `name` as used by an iptables rule: destroying it then fails
    /// with the kernel's `IPSET_ERR_BUSY`.
    pub fn reference(&mut self, name: &str) {
        self.referenced.insert(name.to_string());
    }

    pub fn unreference(&mut self, name: &str) {
        self.referenced.remove(name);
    }

    pub fn sets(&self) -> &BTreeMap<String, SetState> {
        &self.sets
    }

    fn apply_one(&mut self, op: &IpsetOp) -> Result<(), KernelError> {
        let object = op.object();
        let fail = |command, errno| {
            Err(errno::to_kernel_error(command, &object, errno))
        };
        match op {
            IpsetOp::Create(spec) => {
                if spec.name.is_empty() || spec.name.len() > MAX_NAME_LEN {
                    return fail(Command::Create, libc_errno::EINVAL);
                }
                if self.sets.contains_key(&spec.name) {
                    return fail(Command::Create, libc_errno::EEXIST);
                }
                self.sets.insert(
                    spec.name.clone(),
                    SetState {
                        spec: spec.clone(),
                        entries: BTreeSet::new(),
                    },
                );
                Ok(())
            }
            IpsetOp::Destroy(name) => {
                if !self.sets.contains_key(name) {
                    return fail(Command::Destroy, libc_errno::ENOENT);
                }
                if self.referenced.contains(name) {
                    return fail(Command::Destroy, errno::IPSET_ERR_BUSY);
                }
                self.sets.remove(name);
                Ok(())
            }
            IpsetOp::Flush(name) => match self.sets.get_mut(name) {
                Some(set) => {
                    set.entries.clear();
                    Ok(())
                }
                None => fail(Command::Flush, libc_errno::ENOENT),
            },
            IpsetOp::Add(name, entry) | IpsetOp::Delete(name, entry) => {
                let adding = matches!(op, IpsetOp::Add(..));
                let command = if adding { Command::Add } else { Command::Del };
                let Some(set) = self.sets.get_mut(name) else {
                    return fail(command, libc_errno::ENOENT);
                };
                let stored =
                    match as_member(entry, set.spec.set_type, set.spec.ipv6) {
                        Ok(stored) => stored,
                        Err(code) => return fail(command, code),
                    };
                let changed = if adding {
                    set.entries.insert(stored)
                } else {
                    set.entries.remove(&stored)
                };
                if changed {
                    Ok(())
                } else {
                    fail(command, errno::IPSET_ERR_EXIST)
                }
            }
        }
    }
}

/// The element the kernel would store for `entry` in a set of this type
/// and family, or the ipset errno it would answer.
fn as_member(
    entry: &SetEntry,
    set_type: SetType,
    ipv6: bool,
) -> Result<SetEntry, i32> {
    // The fields the message carries (see netlink::entry::encode).
    let (ip, port, ip2, cidr2) = match entry {
        SetEntry::Ip(ip) => (Some(*ip), None, None, None),
        SetEntry::IpPort(ip, proto, port) => {
            (Some(*ip), Some((*proto, *port)), None, None)
        }
        SetEntry::IpPortIp(ip, proto, port, ip2) => {
            (Some(*ip), Some((*proto, *port)), Some(*ip2), None)
        }
        SetEntry::IpPortNet(ip, proto, port, net) => {
            let net = net.trunc();
            (
                Some(*ip),
                Some((*proto, *port)),
                Some(net.addr()),
                Some(net.prefix_len()),
            )
        }
        SetEntry::Port(port) => {
            (None, Some((crate::model::Protocol::Tcp, *port)), None, None)
        }
    };
    let family = |addr: IpAddr| match (addr.is_ipv6(), ipv6) {
        (false, true) => Err(errno::IPSET_ERR_IPADDR_IPV6),
        (true, false) => Err(errno::IPSET_ERR_IPADDR_IPV4),
        _ => Ok(addr),
    };
    let need_ip = || ip.ok_or(errno::IPSET_ERR_PROTOCOL).and_then(family);
    let need_port = || port.ok_or(errno::IPSET_ERR_PROTOCOL);
    let need_ip2 = || ip2.ok_or(errno::IPSET_ERR_PROTOCOL).and_then(family);
    Ok(match set_type {
        SetType::HashIp => SetEntry::Ip(need_ip()?),
        SetType::HashIpPort => {
            let ip = need_ip()?;
            let (proto, port) = need_port()?;
            // A bare port carries no protocol: the kernel assumes TCP.
            SetEntry::IpPort(ip, proto, port)
        }
        SetType::HashIpPortIp => {
            let ip = need_ip()?;
            let (proto, port) = need_port()?;
            SetEntry::IpPortIp(ip, proto, port, need_ip2()?)
        }
        SetType::HashIpPortNet => {
            let ip = need_ip()?;
            let (proto, port) = need_port()?;
            let addr = need_ip2()?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = cidr2.unwrap_or(max);
            if prefix == 0 {
                return Err(errno::IPSET_ERR_INVALID_CIDR);
            }
            let net = IpNet::new(addr, prefix)
                .map_err(|_| errno::IPSET_ERR_INVALID_CIDR)?;
            SetEntry::IpPortNet(ip, proto, port, net.trunc())
        }
        SetType::BitmapPort => SetEntry::Port(need_port()?.1),
    })
}

impl Ipsets for ModelIpsets {
    async fn dump(
        &mut self,
        prefix: &str,
    ) -> Result<BTreeMap<String, SetState>, KernelError> {
        Ok(self
            .sets
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, set)| {
                let mut set = set.clone();
                // The kernel keeps no family for bitmap:port; a listing
                // derives it from the name, and so does this one.
                if let Some(ipv6) = family_of_listed(set.spec.set_type, name) {
                    set.spec.ipv6 = ipv6;
                }
                (name.clone(), set)
            })
            .collect())
    }

    async fn apply(&mut self, ops: &[IpsetOp]) -> Vec<Result<(), KernelError>> {
        ops.iter().map(|op| self.apply_one(op)).collect()
    }
}
