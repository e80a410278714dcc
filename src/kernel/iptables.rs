//! iptables: kube-proxy's chains, written with `iptables-restore
//! --noflush` so that nothing but our chains is touched.

use std::future::Future;

use super::KernelError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

pub trait Iptables {
    /// `iptables-save -t TABLE` (or ip6tables) output.
    fn save(
        &mut self,
        family: Family,
        table: &str,
    ) -> impl Future<Output = Result<String, KernelError>> + Send;

    /// Feeds `payload` (one table's `*table … COMMIT` block) to
    /// `iptables-restore --noflush`.
    fn restore(
        &mut self,
        family: Family,
        payload: &str,
    ) -> impl Future<Output = Result<(), KernelError>> + Send;
}
