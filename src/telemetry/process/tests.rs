use super::*;

const STAT: &str = "4242 (kube ipvs) proxy) S 1 4242 4242 0 -1 4194560 \
    2000 0 0 0 250 150 0 0 20 0 9 0 123456 512000000 25000 \
    18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0";
const BOOT: &str = "cpu  1 2 3\nbtime 1700000000\nprocesses 99\n";
const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units\n\
    Max open files            1048576              1048576              files\n\
    Max address space         unlimited            unlimited            bytes\n";

#[test]
fn proc_figures_become_the_go_clients_units() {
    let stats = parse(STAT, BOOT, LIMITS, 100.0, 4096.0).expect("parses");
    // utime 250 + stime 150 ticks at 100 Hz.
    assert_eq!(stats.cpu_seconds, 4.0);
    assert_eq!(stats.virtual_memory_bytes, 512_000_000);
    assert_eq!(stats.resident_memory_bytes, 25_000 * 4096);
    // Boot time plus 123456 ticks.
    assert_eq!(stats.start_time_seconds, 1_700_000_000.0 + 1234.56);
    assert_eq!(stats.max_fds, Some(1_048_576.0));
    assert_eq!(stats.virtual_memory_max_bytes, Some(u64::MAX as f64));
}

#[test]
fn network_bytes_sum_every_interface() {
    let dev = "Inter-|   Receive                                                |  Transmit\n \
        face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
        lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n  \
        eth0:    2500      20    0    0    0     0          0         0      700      7    0    0    0     0       0          0\n";
    assert_eq!(network_bytes(dev), Some((3500, 1700)));
}

#[test]
fn this_process_reads_and_renders() {
    let stats = ProcessStats::read().expect("/proc is there");
    assert!(stats.open_fds >= 3, "{stats:?}");
    assert!(stats.resident_memory_bytes > 0, "{stats:?}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    assert!(
        stats.start_time_seconds <= now + 1.0
            && stats.start_time_seconds > now - 3600.0,
        "started within the hour: {stats:?}"
    );
    let mut text = String::new();
    render(&stats, &mut text);
    for name in [
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_max_fds",
        "process_virtual_memory_bytes",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
    ] {
        let sample = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"));
        let value: f64 = sample[name.len() + 1..].parse().expect("a number");
        assert!(value >= 0.0, "{sample}");
    }
}
