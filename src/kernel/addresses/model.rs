//! An in-memory kernel for [`Addresses`]: links by name, each with its
//! addresses, answering with the errnos the kernel uses.

use std::{
    collections::{BTreeMap, BTreeSet},
    future::{ready, Future},
    net::IpAddr,
};

use super::{errno_error, AddressOp, Addresses, EADDRNOTAVAIL, ENODEV};
use crate::kernel::{DetachedRead, KernelError};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelLink {
    pub dummy: bool,
    pub up: bool,
    pub addresses: BTreeSet<IpAddr>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressesModel {
    pub links: BTreeMap<String, ModelLink>,
    /// How many address operations `apply` was given, for tests that
    /// check a sync's cost follows its change.
    pub address_ops: usize,
}

impl AddressesModel {
    pub fn new() -> Self {
        Self::default()
    }

    /// A node interface (`eth0`, `lo`) that is up and has `addresses`.
    pub fn with_link(
        mut self,
        name: &str,
        addresses: impl IntoIterator<Item = IpAddr>,
    ) -> Self {
        self.links.insert(
            name.to_owned(),
            ModelLink {
                dummy: false,
                up: true,
                addresses: addresses.into_iter().collect(),
            },
        );
        self
    }

    /// Sorted and deduplicated, as the real implementation returns them.
    fn local_now(&self, except_link: &str) -> Vec<IpAddr> {
        let all: BTreeSet<IpAddr> = self
            .links
            .iter()
            .filter(|(name, _)| name.as_str() != except_link)
            .flat_map(|(_, l)| l.addresses.iter().copied())
            .collect();
        all.into_iter().collect()
    }

    fn apply_one(
        &mut self,
        link: &str,
        op: AddressOp,
    ) -> Result<(), KernelError> {
        let object = op.object(link);
        let Some(l) = self.links.get_mut(link) else {
            return Err(errno_error(object, ENODEV, "no such link"));
        };
        match op {
            AddressOp::Add(ip) => {
                if l.addresses.insert(ip) {
                    Ok(())
                } else {
                    Err(KernelError::exists(object))
                }
            }
            AddressOp::Delete(ip) => {
                if l.addresses.remove(&ip) {
                    Ok(())
                } else {
                    Err(errno_error(object, EADDRNOTAVAIL, "not bound"))
                }
            }
        }
    }
}

impl Addresses for AddressesModel {
    fn ensure_dummy(
        &mut self,
        link: &str,
    ) -> impl Future<Output = Result<(), KernelError>> + Send {
        // Like the real implementation (and upstream), a link of that
        // name is accepted whatever its type.
        self.links.entry(link.to_owned()).or_insert(ModelLink {
            dummy: true,
            up: false,
            addresses: BTreeSet::new(),
        });
        ready(Ok(()))
    }

    fn delete_link(
        &mut self,
        link: &str,
    ) -> impl Future<Output = Result<(), KernelError>> + Send {
        ready(match self.links.remove(link) {
            Some(_) => Ok(()),
            None => {
                Err(errno_error(format!("link {link}"), ENODEV, "no such link"))
            }
        })
    }

    fn list(
        &mut self,
        link: &str,
    ) -> impl Future<Output = Result<BTreeSet<IpAddr>, KernelError>> + Send
    {
        ready(Ok(self
            .links
            .get(link)
            .map(|l| l.addresses.clone())
            .unwrap_or_default()))
    }

    fn local_addresses(
        &mut self,
        except_link: &str,
    ) -> impl Future<Output = Result<Vec<IpAddr>, KernelError>> + Send {
        ready(Ok(self.local_now(except_link)))
    }

    /// The link as it is now: a read that finished at once.
    fn list_detached(
        &self,
        link: &str,
    ) -> impl DetachedRead<BTreeSet<IpAddr>> + use<> {
        ready(Ok(self
            .links
            .get(link)
            .map(|l| l.addresses.clone())
            .unwrap_or_default()))
    }

    fn local_addresses_detached(
        &self,
        except_link: &str,
    ) -> impl DetachedRead<Vec<IpAddr>> + use<> {
        ready(Ok(self.local_now(except_link)))
    }

    fn apply(
        &mut self,
        link: &str,
        ops: &[AddressOp],
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send {
        self.address_ops += ops.len();
        let results = ops.iter().map(|op| self.apply_one(link, *op)).collect();
        ready(results)
    }

    /// Applied at once: the real ones may be, too.
    fn apply_detached(
        &mut self,
        link: &str,
        ops: Vec<AddressOp>,
    ) -> impl Future<Output = Vec<Result<(), KernelError>>> + Send + 'static + use<>
    {
        self.address_ops += ops.len();
        let results = ops.iter().map(|op| self.apply_one(link, *op)).collect();
        ready(results)
    }
}
