//! conntrack's table size and timeouts, which upstream kube-proxy sets
//! when it starts, before its proxier (cmd/kube-proxy/app, `setupConntrack`
//! and its `Conntracker`):
//!
//! - `nf_conntrack_max` to `maxPerCore` × the node's CPUs, or `min` if
//!   that is more, unless `maxPerCore` is 0; then the hash table
//!   (the nf_conntrack module's `hashsize` parameter, in sysfs) grows to a
//!   quarter of that when it has fewer buckets;
//! - the established and close-wait TCP timeouts, and the two UDP ones,
//!   each only if positive; `tcp_be_liberal` only to turn it on.
//!
//! kubeadm writes the `conntrack` section all null, so upstream's
//! defaults (32768 per core, at least 131072; 24 hours established, one
//! hour close-wait) apply on most clusters. Each value is written only
//! when it differs, as upstream does.

use super::{write_if_differs, Change, Sysctls};
use crate::kernel::KernelError;

pub const MAX: &str = "net/netfilter/nf_conntrack_max";
pub const TCP_TIMEOUT_ESTABLISHED: &str =
    "net/netfilter/nf_conntrack_tcp_timeout_established";
pub const TCP_TIMEOUT_CLOSE_WAIT: &str =
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait";
pub const TCP_BE_LIBERAL: &str = "net/netfilter/nf_conntrack_tcp_be_liberal";
pub const UDP_TIMEOUT: &str = "net/netfilter/nf_conntrack_udp_timeout";
pub const UDP_TIMEOUT_STREAM: &str =
    "net/netfilter/nf_conntrack_udp_timeout_stream";

/// The nf_conntrack module's parameters, in sysfs rather than /proc/sys.
pub const MODULE_PARAMETERS: &str = "/sys/module/nf_conntrack/parameters";
pub const HASHSIZE: &str = "hashsize";

/// Where the kernel lists its online CPUs (`0-3,6`).
pub const CPU_DIR: &str = "/sys/devices/system/cpu";
pub const ONLINE_CPUS: &str = "online";

/// What to set; zero leaves a value as the kernel has it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConntrackSettings {
    pub max: u64,
    /// Seconds.
    pub tcp_established_timeout: u64,
    pub tcp_close_wait_timeout: u64,
    pub tcp_be_liberal: bool,
    pub udp_timeout: u64,
    pub udp_stream_timeout: u64,
}

/// Upstream's table size: `max_per_core` × `cpus`, at least `min`; 0
/// (leave it) when `max_per_core` is 0.
pub fn table_size(max_per_core: u32, min: u32, cpus: u32) -> u64 {
    if max_per_core == 0 {
        return 0;
    }
    (u64::from(max_per_core) * u64::from(cpus)).max(u64::from(min))
}

/// The number of CPUs in a kernel CPU list (`0-3,6,8-9` is 7); `None` if
/// it does not parse. Upstream counts the online logical CPUs (through
/// cAdvisor's topology), which is what this list holds.
pub fn count_cpus(list: &str) -> Option<u32> {
    let mut count = 0u32;
    for part in list.trim().split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let n = part.parse::<u32>().ok()?;
                (n, n)
            }
        };
        count = count.checked_add(last.checked_sub(first)? + 1)?;
    }
    Some(count)
}

/// The sysctls to set, in upstream's order (the hash table aside).
pub fn wanted(settings: &ConntrackSettings) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut positive = |path, value: u64| {
        if value > 0 {
            out.push((path, value.to_string()));
        }
    };
    positive(MAX, settings.max);
    positive(TCP_TIMEOUT_ESTABLISHED, settings.tcp_established_timeout);
    positive(TCP_TIMEOUT_CLOSE_WAIT, settings.tcp_close_wait_timeout);
    positive(TCP_BE_LIBERAL, u64::from(settings.tcp_be_liberal));
    positive(UDP_TIMEOUT, settings.udp_timeout);
    positive(UDP_TIMEOUT_STREAM, settings.udp_stream_timeout);
    out
}

/// Writes each wanted value that differs, and grows the hash table
/// (through `module`, the module's parameters) after the table size.
/// One result per write or failure; a second run on the same kernel
/// returns nothing.
pub fn ensure(
    sysctls: &mut impl Sysctls,
    module: &mut impl Sysctls,
    settings: &ConntrackSettings,
) -> Vec<Result<Change, KernelError>> {
    let mut results = Vec::new();
    for (path, value) in wanted(settings) {
        let result = write_if_differs(sysctls, path, &value);
        let failed = matches!(result, Some(Err(_)));
        results.extend(result);
        // As upstream, the table grows only once its size is set.
        if path == MAX && !failed {
            results.extend(grow_hash_table(module, settings.max));
        }
    }
    results
}

/// Upstream leaves a hash table of at least max/4 buckets alone, and
/// otherwise sets it to exactly that.
fn grow_hash_table(
    module: &mut impl Sysctls,
    max: u64,
) -> Option<Result<Change, KernelError>> {
    let buckets = max / 4;
    let current = match module.read(HASHSIZE) {
        Ok(text) => text,
        Err(e) => return Some(Err(e)),
    };
    match current.trim().parse::<u64>() {
        Ok(size) if size >= buckets => None,
        _ => write_if_differs(module, HASHSIZE, &buckets.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::sysctl::SysctlsModel;

    #[test]
    fn table_size_as_upstream_computes_it() {
        assert_eq!(table_size(32768, 131072, 2), 131072, "the minimum wins");
        assert_eq!(table_size(32768, 131072, 8), 262144, "per core wins");
        assert_eq!(table_size(32768, 0, 1), 32768);
        assert_eq!(table_size(0, 131072, 64), 0, "0 per core: leave it");
    }

    #[test]
    fn cpu_lists_count() {
        assert_eq!(count_cpus("0-1\n"), Some(2));
        assert_eq!(count_cpus("0"), Some(1));
        assert_eq!(count_cpus("0-3,6,8-9"), Some(7));
        assert_eq!(count_cpus(""), None);
        assert_eq!(count_cpus("3-1"), None);
        assert_eq!(count_cpus("x"), None);
    }

    fn kernel() -> SysctlsModel {
        SysctlsModel::new([
            (MAX, "65536"),
            (TCP_TIMEOUT_ESTABLISHED, "432000"),
            (TCP_TIMEOUT_CLOSE_WAIT, "60"),
            (TCP_BE_LIBERAL, "0"),
            (UDP_TIMEOUT, "30"),
            (UDP_TIMEOUT_STREAM, "120"),
        ])
    }

    /// kubeadm's all-null section: upstream's defaults on a 2-CPU node.
    const DEFAULTS: ConntrackSettings = ConntrackSettings {
        max: 131072,
        tcp_established_timeout: 86400,
        tcp_close_wait_timeout: 3600,
        tcp_be_liberal: false,
        udp_timeout: 0,
        udp_stream_timeout: 0,
    };

    #[test]
    fn defaults_raise_the_table_and_set_the_tcp_timeouts() {
        let mut k = kernel();
        let mut module = SysctlsModel::new([(HASHSIZE, "16384")]);
        let changes: Vec<_> = ensure(&mut k, &mut module, &DEFAULTS)
            .into_iter()
            .map(|c| c.map(|c| (c.path, c.to)))
            .collect();
        assert_eq!(
            changes,
            [
                Ok((MAX, "131072".to_owned())),
                Ok((HASHSIZE, "32768".to_owned())),
                Ok((TCP_TIMEOUT_ESTABLISHED, "86400".to_owned())),
                Ok((TCP_TIMEOUT_CLOSE_WAIT, "3600".to_owned())),
            ]
        );
        assert_eq!(k.values[UDP_TIMEOUT], "30", "zero leaves it alone");
        assert_eq!(k.values[TCP_BE_LIBERAL], "0");
        assert_eq!(ensure(&mut k, &mut module, &DEFAULTS), []);
    }

    #[test]
    fn a_big_enough_hash_table_is_left_alone() {
        let mut module = SysctlsModel::new([(HASHSIZE, "65536")]);
        ensure(&mut kernel(), &mut module, &DEFAULTS);
        assert_eq!(module.writes, []);
    }

    #[test]
    fn every_setting_and_nothing_when_all_zero() {
        let all = ConntrackSettings {
            max: 0,
            tcp_established_timeout: 100,
            tcp_close_wait_timeout: 0,
            tcp_be_liberal: true,
            udp_timeout: 10,
            udp_stream_timeout: 20,
        };
        let paths: Vec<_> = wanted(&all).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            paths,
            [
                TCP_TIMEOUT_ESTABLISHED,
                TCP_BE_LIBERAL,
                UDP_TIMEOUT,
                UDP_TIMEOUT_STREAM
            ]
        );
        assert_eq!(wanted(&ConntrackSettings::default()), []);
    }

    #[test]
    fn failures_are_reported_and_the_rest_still_set() {
        // No nf_conntrack_max (module not loaded) and no hash table.
        let mut k = kernel();
        k.values.remove(MAX);
        let mut module = SysctlsModel::default();
        let results = ensure(&mut k, &mut module, &DEFAULTS);
        assert!(results[0].is_err(), "{results:?}");
        assert_eq!(results.len(), 3, "{results:?}");
        assert_eq!(k.values[TCP_TIMEOUT_CLOSE_WAIT], "3600");
    }
}
