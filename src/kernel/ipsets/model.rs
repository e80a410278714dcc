//! In-memory ipsets that answer as the kernel does, errno for errno: a
//! duplicate create or add fails, a delete of something absent fails, a
//! referenced set cannot be destroyed.

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
use crate::kernel::{DetachedRead, KernelError};

/// `IPSET_MAXNAMELEN` less the terminating NUL.
const MAX_NAME_LEN: usize = 31;

#[derive(Debug, Default, Clone)]
pub struct IpsetsModel {
    sets: BTreeMap<String, SetState>,
    referenced: BTreeSet<String>,
}

impl IpsetsModel {
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
                    return fail(Command::Create, libc::EINVAL);
                }
                if self.sets.contains_key(&spec.name) {
                    return fail(Command::Create, libc::EEXIST);
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
                    return fail(Command::Destroy, libc::ENOENT);
                }
                if self.referenced.contains(name) {
                    return fail(Command::Destroy, errno::IPSET_ERR_BUSY);
                }
                self.sets.remove(name);
                Ok(())
            }
            IpsetOp::Add(name, entry) | IpsetOp::Delete(name, entry) => {
                let adding = matches!(op, IpsetOp::Add(..));
                let command = if adding { Command::Add } else { Command::Del };
                let Some(set) = self.sets.get_mut(name) else {
                    return fail(command, libc::ENOENT);
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
/// and family, or the ipset errno it would answer. The kernel takes only
/// the element kind of the set's type (extra attributes are refused),
/// except that hash:ip,port,net's prefix length is optional, so an
/// `ip,port,ip` element goes in as a host network.
fn as_member(
    entry: &SetEntry,
    set_type: SetType,
    ipv6: bool,
) -> Result<SetEntry, i32> {
    let family = |addr: &IpAddr| match (addr.is_ipv6(), ipv6) {
        (false, true) => Err(errno::IPSET_ERR_IPADDR_IPV6),
        (true, false) => Err(errno::IPSET_ERR_IPADDR_IPV4),
        _ => Ok(()),
    };
    let stored = match (set_type, entry) {
        (SetType::HashIp, SetEntry::Ip(_))
        | (SetType::HashIpPort, SetEntry::IpPort(..))
        | (SetType::HashIpPortIp, SetEntry::IpPortIp(..))
        | (SetType::BitmapPort, SetEntry::Port(_)) => entry.clone(),
        (SetType::HashIpPortNet, SetEntry::IpPortNet(ip, proto, port, net)) => {
            if net.prefix_len() == 0 {
                return Err(errno::IPSET_ERR_INVALID_CIDR);
            }
            SetEntry::IpPortNet(*ip, *proto, *port, net.trunc())
        }
        (SetType::HashIpPortNet, SetEntry::IpPortIp(ip, proto, port, ip2)) => {
            SetEntry::IpPortNet(*ip, *proto, *port, IpNet::from(*ip2))
        }
        _ => return Err(errno::IPSET_ERR_PROTOCOL),
    };
    match &stored {
        SetEntry::Ip(a) | SetEntry::IpPort(a, ..) => family(a)?,
        SetEntry::IpPortIp(a, _, _, b) => {
            family(a)?;
            family(b)?;
        }
        SetEntry::IpPortNet(a, _, _, net) => {
            family(a)?;
            family(&net.addr())?;
        }
        SetEntry::Port(_) => {}
    }
    Ok(stored)
}

/// Every type exists in the model.
impl super::SetTypes for IpsetsModel {
    fn check_type(
        &mut self,
        _set_type: super::SetType,
    ) -> Result<(), KernelError> {
        Ok(())
    }
}

impl IpsetsModel {
    fn listing(&self, prefix: &str) -> BTreeMap<String, SetState> {
        self.sets
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
            .collect()
    }
}

impl Ipsets for IpsetsModel {
    async fn dump(
        &mut self,
        prefix: &str,
    ) -> Result<BTreeMap<String, SetState>, KernelError> {
        Ok(self.listing(prefix))
    }

    /// The sets as they are now: a read that finished at once.
    fn dump_detached(
        &self,
        prefix: &str,
    ) -> impl DetachedRead<BTreeMap<String, SetState>> + use<> {
        std::future::ready(Ok(self.listing(prefix)))
    }

    async fn apply(&mut self, ops: &[IpsetOp]) -> Vec<Result<(), KernelError>> {
        ops.iter().map(|op| self.apply_one(op)).collect()
    }
}
