//! conntrack's table size and timeouts, which upstream kube-proxy sets
//! when it starts, before its proxier (cmd/kube-proxy/app, `setupConntrack`
//! and its `Conntracker`):
//!
//! - `nf_conntrack_max` to `maxPerCore` × the node's CPUs capped at
//!   [`MAX_TABLE_SIZE`], or `min` if that is more, unless `maxPerCore` is
//!   0; only ever raised, never lowered (kube-proxy since 1.37); then the
//!   hash table (the nf_conntrack module's `hashsize` parameter, in
//!   sysfs) grows to a quarter of that when it has fewer buckets, whether
//!   or not the table size itself had to change;
//! - the established and close-wait TCP timeouts, and the two UDP ones,
//!   each only if positive; `tcp_be_liberal` only to turn it on.
//!
//! kubeadm writes the `conntrack` section all null, so upstream's
//! defaults (32768 per core, at least 131072; 24 hours established, one
//! hour close-wait) apply on most clusters. Each value is written only
//! when it differs, as upstream does.
//!
//! Where upstream (since 1.36) exits on a failed write, a failure here is
//! reported and the rest still set: an unprivileged container with a
//! read-only `/sys` whose hash table is already big enough writes nothing
//! there, and one whose table is too small still runs, with a warning.

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

/// The most `maxPerCore` × CPUs may ask for (kube-proxy since 1.36): a
/// many-core node would otherwise reserve a table of millions of entries.
pub const MAX_TABLE_SIZE: u64 = 1 << 20;

/// Upstream's table size: `max_per_core` × `cpus`, capped at
/// [`MAX_TABLE_SIZE`] when above it, else at least `min`; 0 (leave it)
/// when `max_per_core` is 0. The cap comes first, as upstream's does: a
/// `min` above it applies only while the scaled value is below the cap.
pub fn table_size(max_per_core: u32, min: u32, cpus: u32) -> u64 {
    if max_per_core == 0 {
        return 0;
    }
    let scaled = u64::from(max_per_core) * u64::from(cpus);
    if scaled > MAX_TABLE_SIZE {
        return MAX_TABLE_SIZE;
    }
    scaled.max(u64::from(min))
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

/// The sysctls to set exactly, in upstream's order; the table size and
/// the hash table, which only grow, are [`ensure`]'s own.
pub fn wanted(settings: &ConntrackSettings) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut positive = |path, value: u64| {
        if value > 0 {
            out.push((path, value.to_string()));
        }
    };
    positive(TCP_TIMEOUT_ESTABLISHED, settings.tcp_established_timeout);
    positive(TCP_TIMEOUT_CLOSE_WAIT, settings.tcp_close_wait_timeout);
    positive(TCP_BE_LIBERAL, u64::from(settings.tcp_be_liberal));
    positive(UDP_TIMEOUT, settings.udp_timeout);
    positive(UDP_TIMEOUT_STREAM, settings.udp_stream_timeout);
    out
}

/// Raises the table size and grows the hash table (through `module`, the
/// module's parameters) when they are smaller than asked, then writes
/// each other wanted value that differs. One result per write or
/// failure; a second run on the same kernel returns nothing.
pub fn ensure(
    sysctls: &mut impl Sysctls,
    module: &mut impl Sysctls,
    settings: &ConntrackSettings,
) -> Vec<Result<Change, KernelError>> {
    let mut results = Vec::new();
    if settings.max > 0 {
        let raised = raise(sysctls, MAX, settings.max);
        let failed = matches!(raised, Some(Err(_)));
        results.extend(raised);
        // As upstream, whose failed write ends the process before it.
        if !failed {
            results.extend(raise(module, HASHSIZE, settings.max / 4));
        }
    }
    for (path, value) in wanted(settings) {
        results.extend(write_if_differs(sysctls, path, &value));
    }
    results
}

/// Writes `value` where the kernel has less, and leaves a bigger value
/// alone: an operator's (or another agent's) larger table stays. A value
/// that cannot be read is written, as upstream does; a hash table that
/// cannot be read is a failure, since growing it blind could shrink it.
fn raise(
    sysctls: &mut impl Sysctls,
    path: &'static str,
    value: u64,
) -> Option<Result<Change, KernelError>> {
    let current = match sysctls.read(path) {
        Ok(text) => text,
        Err(e) if path == HASHSIZE => return Some(Err(e)),
        Err(_) => String::new(),
    };
    if current.trim().parse::<u64>().is_ok_and(|now| now >= value) {
        return None;
    }
    let to = value.to_string();
    Some(sysctls.write(path, &to).map(|()| Change {
        path,
        from: current,
        to,
    }))
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
        assert_eq!(table_size(32768, 131072, 64), MAX_TABLE_SIZE, "capped");
        assert_eq!(
            table_size(32768, 4 << 20, 64),
            MAX_TABLE_SIZE,
            "the cap before the minimum"
        );
        assert_eq!(
            table_size(32768, 4 << 20, 2),
            4 << 20,
            "a minimum above the cap while the scaled value is under it"
        );
    }

    #[test]
    fn a_bigger_table_is_never_lowered_and_the_hash_table_still_grows() {
        let mut k = kernel();
        k.values.insert(MAX.to_owned(), "262144".to_owned());
        let mut module = SysctlsModel::new([(HASHSIZE, "16384")]);
        let changes: Vec<_> = ensure(&mut k, &mut module, &DEFAULTS)
            .into_iter()
            .map(|c| c.map(|c| (c.path, c.from, c.to)))
            .collect();
        assert_eq!(k.values[MAX], "262144", "left as the node has it");
        assert_eq!(
            changes[0],
            Ok((HASHSIZE, "16384".to_owned(), "32768".to_owned())),
            "a quarter of what was asked, not of what the node has"
        );
        assert_eq!(changes.len(), 3, "{changes:?}");
    }

    #[test]
    fn a_read_only_sys_with_a_big_enough_hash_table_writes_nothing_there() {
        let mut module = SysctlsModel::new([(HASHSIZE, "32768")]);
        module.read_only = true;
        let results = ensure(&mut kernel(), &mut module, &DEFAULTS);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert_eq!(module.writes, []);
    }

    #[test]
    fn a_read_only_sys_with_a_small_hash_table_is_reported_not_fatal() {
        let mut k = kernel();
        let mut module = SysctlsModel::new([(HASHSIZE, "1024")]);
        module.read_only = true;
        let results = ensure(&mut k, &mut module, &DEFAULTS);
        assert!(results[1].is_err(), "{results:?}");
        assert_eq!(k.values[TCP_TIMEOUT_CLOSE_WAIT], "3600", "the rest set");
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
