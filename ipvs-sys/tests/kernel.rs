//! Real-kernel tests: run as root in the QEMU guest (`make vm-test`), with
//! the ip_vs modules (rr, wrr, sh) loaded and `ipvsadm` on PATH.
//!
//! Every operation goes through ipvs-sys and is checked two ways: read
//! back through ipvs-sys, and against what `ipvsadm -Sn` /
//! `ipvsadm -Ln --exact --stats` print, so a bug shared by our encoder and
//! decoder cannot hide. Tests share the kernel's one IPVS table, so they
//! take a lock, start from `ipvsadm -C` and flush again when done (also on
//! panic).

use std::{
    net::{IpAddr, SocketAddr, TcpStream},
    process::Command,
    time::Duration,
};

use futures::TryStreamExt;
use ipvs_sys::{
    AddressFamily, Destination, ForwardMethod, Handle, Service, ServiceFlags,
    ServiceKey, SockoptSocket, Stats, Timeouts,
};
use tokio::sync::{Mutex, MutexGuard};

static KERNEL: Mutex<()> = Mutex::const_new(());

/// Generous: TCG guests are slow, and a hang must fail, not stall CI.
const TEST_TIMEOUT: Duration = Duration::from_secs(120);

fn ip(text: &str) -> IpAddr {
    text.parse().expect("fixture address")
}

/// Run ipvsadm, fail the test with its stderr if it fails.
fn ipvsadm(args: &[&str]) -> String {
    let out = Command::new("ipvsadm")
        .args(args)
        .output()
        .expect("ipvsadm must be on PATH in the guest");
    assert!(
        out.status.success(),
        "ipvsadm {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ipvsadm -Sn`, one token list per rule.
fn saved_rules() -> Vec<Vec<String>> {
    ipvsadm(&["-Sn"])
        .lines()
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .filter(|tokens: &Vec<String>| !tokens.is_empty())
        .collect()
}

/// Whether `rule` has every option, each followed by its value if given.
fn rule_has(rule: &[String], options: &[(&str, Option<&str>)]) -> bool {
    options.iter().all(|(flag, value)| {
        rule.iter().enumerate().any(|(i, token)| {
            token == flag
                && value.is_none_or(|v| {
                    rule.get(i + 1).map(String::as_str) == Some(v)
                })
        })
    })
}

fn assert_rule(options: &[(&str, Option<&str>)]) {
    let rules = saved_rules();
    assert!(
        rules.iter().any(|rule| rule_has(rule, options)),
        "no rule with {options:?} in ipvsadm -Sn:\n{rules:#?}"
    );
}

fn assert_no_rule(options: &[(&str, Option<&str>)]) {
    let rules = saved_rules();
    assert!(
        !rules.iter().any(|rule| rule_has(rule, options)),
        "unexpected rule with {options:?} in ipvsadm -Sn:\n{rules:#?}"
    );
}

/// Counters per line of `ipvsadm -Ln --exact --stats`, keyed by the
/// line's first columns (`TCP 198.18.0.10:80`, `-> 198.19.0.5:8080`).
fn ipvsadm_stats() -> Vec<(String, [u64; 5])> {
    ipvsadm(&["-Ln", "--exact", "--stats"])
        .lines()
        .filter_map(|line| {
            let tokens: Vec<&str> = line.split_whitespace().collect();
            let numbers: Vec<u64> = tokens
                .iter()
                .rev()
                .take(5)
                .rev()
                .filter_map(|t| t.parse().ok())
                .collect();
            let counts: [u64; 5] = numbers.try_into().ok()?;
            let label = tokens.get(..tokens.len().saturating_sub(5))?.join(" ");
            Some((label, counts))
        })
        .collect()
}

fn stats_columns(stats: Stats) -> [u64; 5] {
    [
        stats.conns,
        stats.in_packets,
        stats.out_packets,
        stats.in_bytes,
        stats.out_bytes,
    ]
}

/// Exclusive use of the kernel's IPVS table for one test.
struct Guest {
    handle: Handle,
    _lock: MutexGuard<'static, ()>,
}

impl Guest {
    async fn start() -> Self {
        let lock = KERNEL.lock().await;
        ipvsadm(&["-C"]);
        let (conn, handle, _) =
            ipvs_sys::new_connection().expect("generic netlink socket");
        tokio::spawn(conn);
        Self {
            handle,
            _lock: lock,
        }
    }

    /// Adds a service through ipvs-sys; the test fails if it cannot.
    async fn add_service(&self, svc: &Service) {
        self.handle
            .service()
            .add(svc)
            .execute()
            .await
            .unwrap_or_else(|e| panic!("add {}: {e}", svc.key));
    }

    async fn services(&self) -> Vec<Service> {
        self.handle
            .service()
            .list()
            .execute()
            .try_collect()
            .await
            .expect("dump services")
    }

    async fn dests(&self, svc: &Service) -> Vec<Destination> {
        self.handle
            .dest(svc)
            .list()
            .execute()
            .try_collect()
            .await
            .expect("dump destinations")
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        // Leave nothing behind for the next test, even after a panic.
        let _ = Command::new("ipvsadm").arg("-C").status();
    }
}

macro_rules! kernel_test {
    ($name:ident, $body:expr) => {
        #[tokio::test]
        #[cfg_attr(
            not(feature = "kernel-tests"),
            ignore = "needs the real-kernel guest: run `make vm-test`"
        )]
        async fn $name() {
            tokio::time::timeout(TEST_TIMEOUT, $body)
                .await
                .expect("test timed out");
        }
    };
}

/// What a service should read back as: the kernel adds HASHED and the
/// counters.
fn same_settings(actual: &Service, expected: &Service) {
    assert_eq!(actual.key, expected.key);
    assert_eq!(actual.scheduler, expected.scheduler, "{}", expected.key);
    assert_eq!(
        actual.flags.without_hashed(),
        expected.flags.without_hashed(),
        "{}",
        expected.key
    );
    assert!(actual.flags.contains(ServiceFlags::HASHED));
    assert_eq!(actual.timeout, expected.timeout, "{}", expected.key);
    assert_eq!(actual.netmask, expected.netmask, "{}", expected.key);
    assert!(actual.counters().is_some(), "kernel sends counters");
}

fn same_dest(actual: &Destination, expected: &Destination) {
    assert_eq!(actual.address, expected.address);
    assert_eq!(actual.port, expected.port);
    assert_eq!(actual.fwd_method, expected.fwd_method, "{expected}");
    assert_eq!(actual.weight, expected.weight, "{expected}");
    assert_eq!(actual.upper_threshold, expected.upper_threshold);
    assert_eq!(actual.lower_threshold, expected.lower_threshold);
    assert!(actual.conns.is_some(), "kernel sends connection counts");
}

kernel_test!(info_matches_ipvsadm_banner, async {
    let guest = Guest::start().await;
    let info = guest.handle.info().execute().await.expect("info");
    let banner = ipvsadm(&["-Ln"]);
    let expected = format!(
        "IP Virtual Server version {} (size={})",
        info.version, info.conn_table_size
    );
    assert!(banner.contains(&expected), "{expected:?} not in {banner}");
});

kernel_test!(tcp_service_add_get_set_del, async {
    let guest = Guest::start().await;
    let key = ServiceKey::tcp(ip("198.18.0.10"), 80);
    let svc = Service::new(key).with_scheduler("rr");
    guest.add_service(&svc).await;

    let got = guest
        .handle
        .service()
        .get(key)
        .execute()
        .await
        .expect("get");
    same_settings(&got, &svc);
    assert_rule(&[
        ("-A", None),
        ("-t", Some("198.18.0.10:80")),
        ("-s", Some("rr")),
    ]);

    let edited = svc.clone().with_scheduler("wrr");
    guest
        .handle
        .service()
        .set(&edited)
        .execute()
        .await
        .expect("set");
    same_settings(
        &guest
            .handle
            .service()
            .get(key)
            .execute()
            .await
            .expect("get"),
        &edited,
    );
    assert_rule(&[("-t", Some("198.18.0.10:80")), ("-s", Some("wrr"))]);

    guest
        .handle
        .service()
        .del(key)
        .execute()
        .await
        .expect("del");
    let err = guest.handle.service().get(key).execute().await.unwrap_err();
    assert!(err.is_not_found(), "get after del: {err}");
    assert!(saved_rules().is_empty(), "{:?}", saved_rules());
});

kernel_test!(destinations_add_list_set_del, async {
    let guest = Guest::start().await;
    let svc = Service::new(ServiceKey::tcp(ip("198.18.0.10"), 80))
        .with_scheduler("wrr");
    guest.add_service(&svc).await;
    let dests: Vec<Destination> = (1..=3)
        .map(|i| {
            Destination::new(ip(&format!("198.19.0.{i}")), 8080)
                .with_weight(i)
                .with_thresholds(100 * i, 10 * i)
        })
        .collect();
    for dest in &dests {
        guest
            .handle
            .dest(&svc)
            .add(dest)
            .execute()
            .await
            .expect("add dest");
    }

    let mut listed = guest.dests(&svc).await;
    listed.sort_by_key(|d| d.address);
    assert_eq!(listed.len(), 3);
    for (got, want) in listed.iter().zip(&dests) {
        same_dest(got, want);
    }
    assert_rule(&[
        ("-a", None),
        ("-t", Some("198.18.0.10:80")),
        ("-r", Some("198.19.0.2:8080")),
        ("-m", None),
        ("-w", Some("2")),
    ]);

    let heavier = dests[1].clone().with_weight(50);
    guest
        .handle
        .dest(&svc)
        .set(&heavier)
        .execute()
        .await
        .expect("set");
    assert_rule(&[("-r", Some("198.19.0.2:8080")), ("-w", Some("50"))]);

    guest
        .handle
        .dest(&svc)
        .del(&dests[0])
        .execute()
        .await
        .expect("del");
    assert_no_rule(&[("-r", Some("198.19.0.1:8080"))]);
    assert_eq!(guest.dests(&svc).await.len(), 2);
});

// The socket option's read against the dump, field by field, on real
// servers that differ in every field the option carries; more of them
// than its first read has room for, so the read that doubles its room
// is the one that answers.
kernel_test!(sockopt_reads_what_the_dump_reads, async {
    let guest = Guest::start().await;
    let sockopt = SockoptSocket::open().expect("raw socket");
    let svc = Service::new(ServiceKey::tcp(ip("198.18.0.11"), 443))
        .with_scheduler("wrr");
    guest.add_service(&svc).await;
    assert!(
        sockopt.dests(&svc.key).expect("empty service").is_empty(),
        "a service without real servers has none"
    );
    let methods = [
        ForwardMethod::Masquerade,
        ForwardMethod::DirectRoute,
        ForwardMethod::Tunnel,
    ];
    let dests: Vec<Destination> = (0..150u32)
        .map(|i| {
            let address = ip(&format!("198.19.{}.{}", i / 200, 1 + i % 200));
            Destination::new(address, 1000 + i as u16)
                .with_weight(i % 7)
                .with_thresholds(1000 + i, i)
                .with_fwd_method(methods[i as usize % methods.len()])
        })
        .collect();
    let mut batch = guest.handle.batch();
    for dest in &dests {
        batch.add_dest(&svc, dest);
    }
    for result in batch.execute().await.expect("batch") {
        result.expect("add dest");
    }

    let mut dumped = guest.dests(&svc).await;
    let mut read = sockopt.dests(&svc.key).expect("sockopt read");
    assert_eq!(
        read.len(),
        dests.len(),
        "every real server, past the first room"
    );
    dumped.sort_by_key(|d| (d.address, d.port));
    read.sort_by_key(|d| (d.address, d.port));
    for (got, want) in read.iter().zip(&dumped) {
        same_dest(got, want);
        assert_eq!(got.conns, want.conns, "{want}");
        assert_eq!(
            got.counters().map(stats_columns),
            want.counters().map(stats_columns),
            "{want}"
        );
    }

    // The socket keeps its buffer: a smaller service read after the
    // larger one gets its own real servers, none of the larger's left
    // behind.
    let small = Service::new(ServiceKey::tcp(ip("198.18.0.13"), 443));
    guest.add_service(&small).await;
    let mut batch = guest.handle.batch();
    for dest in &dests[..2] {
        batch.add_dest(&small, dest);
    }
    for result in batch.execute().await.expect("batch") {
        result.expect("add dest");
    }
    let mut read = sockopt.dests(&small.key).expect("sockopt read");
    read.sort_by_key(|d| (d.address, d.port));
    let addresses: Vec<_> = read.iter().map(|d| (d.address, d.port)).collect();
    let wanted: Vec<_> =
        dests[..2].iter().map(|d| (d.address, d.port)).collect();
    assert_eq!(addresses, wanted, "the small service's own real servers");

    let missing = ServiceKey::tcp(ip("198.18.0.12"), 443);
    assert!(
        sockopt.dests(&missing).expect("missing service").is_empty(),
        "a missing service has none, as its dump"
    );
    let v6 = ServiceKey::tcp(ip("2001:db8::1"), 443);
    let err = sockopt.dests(&v6).expect_err("IPv6 is refused");
    assert!(err.to_string().contains("IPv4 services only"), "{err}");
});

// The socket options' writes against generic netlink's: the same
// changes to two virtual servers, one by each, must leave the same
// virtual and real servers, read back by dump and in `ipvsadm -Sn`; and
// the kernel's refusals come back as the same errors.
kernel_test!(sockopt_writes_what_netlink_writes, async {
    let guest = Guest::start().await;
    let sockopt = SockoptSocket::open().expect("raw socket");
    let by_netlink = ServiceKey::tcp(ip("198.18.0.21"), 80);
    let by_sockopt = ServiceKey::tcp(ip("198.18.0.22"), 80);
    let settings = |key| {
        Service::new(key)
            .with_scheduler("sh")
            .with_flags(ServiceFlags::SH_FALLBACK | ServiceFlags::SH_PORT)
            .persistent(600)
            .with_netmask(24)
    };
    let methods = [
        ForwardMethod::Masquerade,
        ForwardMethod::DirectRoute,
        ForwardMethod::Tunnel,
    ];
    let dests: Vec<Destination> = (0..12u32)
        .map(|i| {
            Destination::new(
                ip(&format!("198.19.1.{}", i + 1)),
                8000 + i as u16,
            )
            .with_weight(i % 4)
            .with_thresholds(100 + i, i)
            .with_fwd_method(methods[i as usize % methods.len()])
        })
        .collect();
    guest.add_service(&settings(by_netlink)).await;
    sockopt
        .add_service(&settings(by_sockopt))
        .expect("add service");
    let mut batch = guest.handle.batch();
    for dest in &dests {
        batch.add_dest(by_netlink, dest);
        sockopt.add_dest(&by_sockopt, dest).expect("add dest");
    }
    for result in batch.execute().await.expect("batch") {
        result.expect("add dest");
    }
    let same_kernel_state = |step: &str, guest_services: Vec<Service>| {
        let find = |key| {
            guest_services
                .iter()
                .find(|s| s.key == key)
                .unwrap_or_else(|| panic!("{step}: {key} missing"))
                .clone()
        };
        let (netlink, sockopt) = (find(by_netlink), find(by_sockopt));
        same_settings(
            &sockopt,
            &Service {
                key: by_sockopt,
                ..netlink
            },
        );
        // ipvsadm's view: the same rules, but for the address.
        let rules = |vip: &str| {
            let mut rules: Vec<String> = saved_rules()
                .into_iter()
                .filter(|rule| rule.iter().any(|t| t.starts_with(vip)))
                .map(|rule| rule.join(" ").replace(vip, "VIP"))
                .collect();
            rules.sort();
            rules
        };
        let netlink_rules = rules("198.18.0.21:80");
        assert!(netlink_rules.len() > 1, "{step}: {netlink_rules:?}");
        assert_eq!(rules("198.18.0.22:80"), netlink_rules, "{step}");
    };
    same_kernel_state("added", guest.services().await);
    let read = |key| {
        let svc = Service::new(key);
        let guest = &guest;
        async move {
            let mut dests = guest.dests(&svc).await;
            dests.sort_by_key(|d| (d.address, d.port));
            dests
        }
    };
    let netlink_dests = read(by_netlink).await;
    let sockopt_dests = read(by_sockopt).await;
    assert_eq!(sockopt_dests.len(), dests.len());
    for (got, want) in sockopt_dests.iter().zip(&netlink_dests) {
        same_dest(got, want);
    }

    // Edits: another scheduler without persistence, a real server drained.
    let edited = |key| Service::new(key).with_scheduler("rr");
    let drained = dests[1].clone().with_weight(0).with_thresholds(0, 0);
    guest
        .handle
        .service()
        .set(&edited(by_netlink))
        .execute()
        .await
        .expect("set service");
    sockopt
        .set_service(&edited(by_sockopt))
        .expect("set service");
    guest
        .handle
        .dest(by_netlink)
        .set(&drained)
        .execute()
        .await
        .expect("set dest");
    sockopt.set_dest(&by_sockopt, &drained).expect("set dest");
    guest
        .handle
        .dest(by_netlink)
        .del(&dests[2])
        .execute()
        .await
        .expect("del dest");
    sockopt.del_dest(&by_sockopt, &dests[2]).expect("del dest");
    same_kernel_state("edited", guest.services().await);
    assert_eq!(read(by_sockopt).await.len(), dests.len() - 1);

    // The kernel's refusals: the errno netlink gets for the same, and an
    // error that names the object.
    let netlink_dest = guest.handle.dest(by_netlink);
    let err = sockopt
        .add_service(&edited(by_sockopt))
        .expect_err("added twice");
    assert!(err.is_exists(), "{err}");
    let err = sockopt.add_dest(&by_sockopt, &dests[0]).expect_err("twice");
    let netlink_err = netlink_dest
        .add(&dests[0])
        .execute()
        .await
        .expect_err("twice");
    assert_eq!(err.errno(), netlink_err.errno(), "{err}");
    assert!(err.is_exists(), "{err}");
    assert!(
        err.to_string()
            .contains("198.19.1.1:8000 in TCP 198.18.0.22:80"),
        "{err}"
    );
    let err = sockopt.del_dest(&by_sockopt, &dests[2]).expect_err("gone");
    let netlink_err = netlink_dest
        .del(&dests[2])
        .execute()
        .await
        .expect_err("gone");
    assert_eq!(err.errno(), netlink_err.errno(), "{err}");
    assert!(err.is_not_found(), "{err}");
    let missing = ServiceKey::tcp(ip("198.18.0.23"), 80);
    let err = sockopt
        .add_dest(&missing, &dests[0])
        .expect_err("no service");
    let netlink_err = guest
        .handle
        .dest(missing)
        .add(&dests[0])
        .execute()
        .await
        .expect_err("no service");
    assert_eq!(err.errno(), netlink_err.errno(), "{err}");
    assert_eq!(err.metric_label(), "not_found");

    // What the records cannot carry is refused before the kernel is asked.
    let v6 = Service::new(ServiceKey::tcp(ip("2001:db8::1"), 80));
    let err = sockopt.add_service(&v6).expect_err("IPv6 service");
    assert!(
        err.errno().is_none() && err.to_string().contains("IPv4"),
        "{err}"
    );
    let v6_dest = Destination::new(ip("2001:db8::2"), 80);
    let err = sockopt
        .add_dest(&by_sockopt, &v6_dest)
        .expect_err("IPv6 dest");
    assert!(err.errno().is_none(), "{err}");
    let long = Service::new(missing).with_scheduler("a-scheduler-name");
    assert!(sockopt.add_service(&long).is_err());

    sockopt.del_service(&by_sockopt).expect("del service");
    let left: Vec<ServiceKey> =
        guest.services().await.iter().map(|s| s.key).collect();
    assert_eq!(left, vec![by_netlink]);
    let err = sockopt.del_service(&by_sockopt).expect_err("gone");
    assert!(err.is_not_found(), "{err}");
});

kernel_test!(ipv6_service_and_destinations, async {
    let guest = Guest::start().await;
    let svc = Service::new(ServiceKey::udp(ip("2001:db8::10"), 53))
        .with_scheduler("rr");
    guest.add_service(&svc).await;
    let dest = Destination::new(ip("2001:db8::5"), 5353).with_weight(3);
    guest
        .handle
        .dest(&svc)
        .add(&dest)
        .execute()
        .await
        .expect("add dest");

    let services = guest.services().await;
    assert_eq!(services.len(), 1);
    same_settings(&services[0], &svc);
    assert_eq!(services[0].family(), AddressFamily::Inet6);
    let dests = guest.dests(&svc).await;
    assert_eq!(dests.len(), 1);
    same_dest(&dests[0], &dest);
    assert_rule(&[("-A", None), ("-u", Some("[2001:db8::10]:53"))]);
    assert_rule(&[
        ("-a", None),
        ("-u", Some("[2001:db8::10]:53")),
        ("-r", Some("[2001:db8::5]:5353")),
        ("-w", Some("3")),
    ]);
});

kernel_test!(fwmark_services_v4_and_v6, async {
    let guest = Guest::start().await;
    let v4 = Service::new(ServiceKey::fwmark(AddressFamily::Inet, 7))
        .with_scheduler("rr");
    let v6 = Service::new(ServiceKey::fwmark(AddressFamily::Inet6, 8))
        .with_scheduler("rr");
    for svc in [&v4, &v6] {
        guest
            .handle
            .service()
            .add(svc)
            .execute()
            .await
            .expect("add");
    }
    let dest = Destination::new(ip("198.19.0.5"), 8080);
    guest
        .handle
        .dest(&v4)
        .add(&dest)
        .execute()
        .await
        .expect("add dest");

    let mut services = guest.services().await;
    services.sort_by_key(|s| s.key);
    assert_eq!(services.len(), 2);
    same_settings(&services[0], &v4);
    same_settings(&services[1], &v6);
    assert_rule(&[("-A", None), ("-f", Some("7"))]);
    assert_rule(&[("-A", None), ("-f", Some("8")), ("-6", None)]);
    assert_rule(&[
        ("-a", None),
        ("-f", Some("7")),
        ("-r", Some("198.19.0.5:8080")),
    ]);
    same_dest(&guest.dests(&v4).await[0], &dest);
});

kernel_test!(persistent_service_with_timeout_and_netmask, async {
    let guest = Guest::start().await;
    let svc = Service::new(ServiceKey::tcp(ip("198.18.0.10"), 443))
        .with_scheduler("rr")
        .persistent(600)
        .with_netmask(24);
    guest.add_service(&svc).await;
    same_settings(
        &guest
            .handle
            .service()
            .get(&svc)
            .execute()
            .await
            .expect("get"),
        &svc,
    );
    assert_rule(&[
        ("-t", Some("198.18.0.10:443")),
        ("-p", Some("600")),
        ("-M", Some("255.255.255.0")),
    ]);

    let v6 = Service::new(ServiceKey::tcp(ip("2001:db8::10"), 443))
        .with_scheduler("rr")
        .persistent(10800)
        .with_netmask(64);
    guest.add_service(&v6).await;
    same_settings(
        &guest
            .handle
            .service()
            .get(&v6)
            .execute()
            .await
            .expect("get v6"),
        &v6,
    );
    assert_rule(&[
        ("-t", Some("[2001:db8::10]:443")),
        ("-p", Some("10800")),
        ("-M", Some("64")),
    ]);

    // Persistence off again.
    let plain = Service::new(svc.key).with_scheduler("rr");
    guest
        .handle
        .service()
        .set(&plain)
        .execute()
        .await
        .expect("set");
    assert_no_rule(&[("-t", Some("198.18.0.10:443")), ("-p", None)]);
});

kernel_test!(scheduler_flags_round_trip, async {
    let guest = Guest::start().await;
    let svc = Service::new(ServiceKey::tcp(ip("198.18.0.12"), 80))
        .with_scheduler("sh")
        .with_flags(ServiceFlags::SH_PORT | ServiceFlags::SH_FALLBACK);
    guest.add_service(&svc).await;
    same_settings(
        &guest
            .handle
            .service()
            .get(&svc)
            .execute()
            .await
            .expect("get"),
        &svc,
    );
    let rules = ipvsadm(&["-Sn"]);
    assert!(
        rules.contains("sh-port") || rules.contains("flag-2"),
        "sh-port missing from ipvsadm -Sn:\n{rules}"
    );
});

kernel_test!(errors_are_typed_and_name_the_object, async {
    let guest = Guest::start().await;
    let svc = Service::new(ServiceKey::tcp(ip("198.18.0.10"), 80))
        .with_scheduler("rr");
    let missing = Service::new(ServiceKey::tcp(ip("198.18.0.99"), 80));
    let dest = Destination::new(ip("198.19.0.5"), 8080);
    let services = guest.handle.service();
    services.add(&svc).execute().await.expect("first add");

    let err = services.add(&svc).execute().await.unwrap_err();
    assert!(err.is_exists(), "add twice: {err}");
    assert!(err.to_string().contains("TCP 198.18.0.10:80"), "{err}");

    let err = services.del(&missing).execute().await.unwrap_err();
    assert!(err.is_not_found(), "delete missing service: {err}");
    assert!(err.to_string().contains("TCP 198.18.0.99:80"), "{err}");

    let err = services.set(&missing).execute().await.unwrap_err();
    assert!(err.is_not_found(), "edit missing service: {err}");

    // The kernel answers a destination dump of a missing service with an
    // empty dump, not an error.
    let none = guest
        .handle
        .dest(&missing)
        .list()
        .execute()
        .try_collect::<Vec<_>>()
        .await
        .expect("empty dump");
    assert!(none.is_empty(), "{none:?}");

    let err = guest
        .handle
        .dest(&missing)
        .add(&dest)
        .execute()
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "dest of missing service: {err}");

    let err = guest
        .handle
        .dest(&svc)
        .del(&dest)
        .execute()
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "delete missing dest: {err}");
    assert!(
        err.to_string()
            .contains("198.19.0.5:8080 in TCP 198.18.0.10:80"),
        "{err}"
    );

    guest
        .handle
        .dest(&svc)
        .add(&dest)
        .execute()
        .await
        .expect("add dest");
    let err = guest
        .handle
        .dest(&svc)
        .add(&dest)
        .execute()
        .await
        .unwrap_err();
    assert!(err.is_exists(), "add dest twice: {err}");

    let unknown = Service::new(ServiceKey::tcp(ip("198.18.0.11"), 80))
        .with_scheduler("nosuchsched");
    let err = services.add(&unknown).execute().await.unwrap_err();
    assert!(err.is_not_found(), "unknown scheduler: {err}");
});

kernel_test!(timeouts_get_and_set, async {
    let guest = Guest::start().await;
    let before = guest.handle.timeouts().get().execute().await.expect("get");
    let wanted = Timeouts {
        tcp: Some(901),
        tcp_fin: Some(121),
        udp: Some(301),
    };
    guest
        .handle
        .timeouts()
        .set(&wanted)
        .execute()
        .await
        .expect("set");
    let after = guest.handle.timeouts().get().execute().await.expect("get");
    // Restore first so a failed assertion leaves the guest as it was.
    guest
        .handle
        .timeouts()
        .set(&before)
        .execute()
        .await
        .expect("restore");
    assert_eq!(after, wanted);
    let listed = ipvsadm(&["-L", "--timeout"]);
    let shown = format!(
        "{} {} {}",
        before.tcp.unwrap_or(0),
        before.tcp_fin.unwrap_or(0),
        before.udp.unwrap_or(0)
    );
    assert!(listed.contains(&shown), "{shown:?} not in {listed}");
});

kernel_test!(flush_removes_every_service, async {
    let guest = Guest::start().await;
    for port in 1..=5 {
        let svc = Service::new(ServiceKey::tcp(ip("198.18.0.10"), port));
        guest
            .handle
            .service()
            .add(&svc)
            .execute()
            .await
            .expect("add");
    }
    assert_eq!(saved_rules().len(), 5);
    guest.handle.flush().execute().await.expect("flush");
    assert!(guest.services().await.is_empty());
    assert!(saved_rules().is_empty());
});

kernel_test!(services_made_by_ipvsadm_decode, async {
    let guest = Guest::start().await;
    ipvsadm(&["-A", "-t", "198.18.0.20:80", "-s", "wrr", "-p", "300"]);
    ipvsadm(&[
        "-a",
        "-t",
        "198.18.0.20:80",
        "-r",
        "198.19.0.7:80",
        "-m",
        "-w",
        "4",
    ]);
    ipvsadm(&["-A", "-u", "[2001:db8::20]:53", "-s", "rr"]);
    let mut services = guest.services().await;
    services.sort_by_key(|s| s.key);
    assert_eq!(services.len(), 2);
    same_settings(
        &services[0],
        &Service::new(ServiceKey::tcp(ip("198.18.0.20"), 80))
            .with_scheduler("wrr")
            .persistent(300),
    );
    same_settings(
        &services[1],
        &Service::new(ServiceKey::udp(ip("2001:db8::20"), 53))
            .with_scheduler("rr"),
    );
    let dests = guest.dests(&services[0]).await;
    same_dest(
        &dests[0],
        &Destination::new(ip("198.19.0.7"), 80).with_weight(4),
    );
});

kernel_test!(batch_adds_many_and_reports_each_failure, async {
    let guest = Guest::start().await;
    let services: Vec<Service> = (0..200u16)
        .map(|i| {
            Service::new(ServiceKey::tcp(
                ip(&format!("198.18.{}.{}", i / 250, i % 250 + 1)),
                80,
            ))
            .with_scheduler("rr")
        })
        .collect();
    let mut batch = guest.handle.batch().window(16);
    for svc in &services {
        batch.add_service(svc);
        for d in 1..=3u8 {
            batch.add_dest(
                svc,
                &Destination::new(ip(&format!("198.19.0.{d}")), 8080),
            );
        }
    }
    // One failure in the middle: adding a service again.
    batch.add_service(&services[100]);
    batch.add_dest(&services[199], &Destination::new(ip("198.19.0.9"), 8080));
    let expected_ops = 200 * 4 + 2;
    assert_eq!(batch.len(), expected_ops);
    let results = batch.execute().await.expect("batch runs");
    assert_eq!(results.len(), expected_ops);
    let failures: Vec<usize> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_err())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(failures, vec![800], "only the duplicate fails");
    let err = results[800].as_ref().unwrap_err();
    assert!(err.is_exists(), "{err}");
    assert!(err.to_string().contains("TCP 198.18.0.101:80"), "{err}");

    assert_eq!(guest.services().await.len(), 200);
    // 200 services, 600 + 1 destinations.
    assert_eq!(saved_rules().len(), 801);
});

kernel_test!(counters_match_ipvsadm_stats, async {
    let guest = Guest::start().await;
    // A local VIP so that a connect() from here goes through IPVS; the
    // destination need not answer: the SYN alone is counted.
    let vip = "198.18.0.30";
    let added = Command::new("ip")
        .args(["addr", "add", &format!("{vip}/32"), "dev", "lo"])
        .status()
        .expect("ip must be on PATH in the guest");
    assert!(added.success(), "cannot add {vip} to lo");
    let svc = Service::new(ServiceKey::tcp(ip(vip), 80)).with_scheduler("rr");
    guest.add_service(&svc).await;
    let dest = Destination::new(ip("198.19.0.5"), 8080);
    guest
        .handle
        .dest(&svc)
        .add(&dest)
        .execute()
        .await
        .expect("add dest");

    let target = SocketAddr::new(ip(vip), 80);
    let _ = tokio::task::spawn_blocking(move || {
        TcpStream::connect_timeout(&target, Duration::from_millis(300))
    })
    .await;

    // The kernel folds per-CPU counters into what it reports every two
    // seconds (the rate estimator), so poll until the connection shows,
    // and compare only when our reads before and after ipvsadm's agree.
    let service_label = format!("TCP {vip}:80");
    let dest_label = "-> 198.19.0.5:8080";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let compared = loop {
        let before = read_counters(&guest, &svc).await;
        let theirs = ipvsadm_stats();
        let after = read_counters(&guest, &svc).await;
        let find = |label: &str| {
            theirs.iter().find(|(l, _)| l == label).map(|(_, c)| *c)
        };
        let settled = before == after && before.0[0] >= 1;
        if settled {
            break Some((before, find(&service_label), find(dest_label)));
        }
        if tokio::time::Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let _ = Command::new("ip")
        .args(["addr", "del", &format!("{vip}/32"), "dev", "lo"])
        .status();

    // The socket option's record puts the connection counts where the
    // dump's attributes do: the SYN left one inactive connection.
    let through_sockopt = SockoptSocket::open()
        .expect("raw socket")
        .dests(&svc.key)
        .expect("sockopt read");
    let dumped = guest.dests(&svc).await;
    assert_eq!(through_sockopt.len(), 1);
    assert_eq!(through_sockopt[0].conns, dumped[0].conns);
    let conns = dumped[0].conns.expect("the kernel sends counts");
    assert!(conns.active + conns.inactive >= 1, "{conns:?}");

    let ((service, dest), theirs_service, theirs_dest) =
        compared.expect("the connection never showed in the counters");
    assert_eq!(theirs_service, Some(service), "service counters differ");
    assert_eq!(theirs_dest, Some(dest), "destination counters differ");
});

/// Counters of the service and its one destination, through ipvs-sys.
async fn read_counters(guest: &Guest, svc: &Service) -> ([u64; 5], [u64; 5]) {
    let service = guest
        .handle
        .service()
        .get(svc)
        .execute()
        .await
        .expect("get service");
    let dests = guest.dests(svc).await;
    let dest = dests.first().expect("one destination");
    (
        stats_columns(service.counters().expect("service counters")),
        stats_columns(dest.counters().expect("destination counters")),
    )
}

/// Send one request on a raw socket and return the generic netlink part of
/// every IPVS message the kernel answers with, byte for byte.
fn raw_replies(
    family: u16,
    message: ipvs_sys::IpvsMessage,
    flags: u16,
) -> Vec<Vec<u8>> {
    use netlink_packet_core::{NetlinkMessage, NLMSG_DONE, NLMSG_ERROR};
    use netlink_packet_generic::GenlMessage;
    use netlink_sys::{protocols::NETLINK_GENERIC, Socket, SocketAddr};

    let mut socket = Socket::new(NETLINK_GENERIC).expect("raw socket");
    socket.bind_auto().expect("bind");
    socket.connect(&SocketAddr::new(0, 0)).expect("connect");
    let mut genl = GenlMessage::from_payload(message);
    genl.set_resolved_family_id(family);
    let mut request = NetlinkMessage::from(genl);
    request.header.flags = flags;
    request.header.sequence_number = 1;
    request.finalize();
    let mut bytes = vec![0; request.buffer_len()];
    request.serialize(&mut bytes);
    socket.send(&bytes, 0).expect("send");

    let mut replies = Vec::new();
    loop {
        let (buffer, _) = socket.recv_from_full().expect("receive");
        let mut rest = buffer.as_slice();
        while rest.len() >= 16 {
            let len =
                u32::from_ne_bytes(rest[0..4].try_into().unwrap()) as usize;
            let kind = u16::from_ne_bytes(rest[4..6].try_into().unwrap());
            let message = &rest[..len];
            match kind {
                NLMSG_DONE => return replies,
                NLMSG_ERROR => {
                    let code =
                        i32::from_ne_bytes(message[16..20].try_into().unwrap());
                    assert_eq!(code, 0, "the kernel refused the request");
                    return replies;
                }
                kind if kind == family => replies.push(message[16..].to_vec()),
                other => panic!("unexpected message type {other}"),
            }
            rest = &rest[(len + 3) & !3..];
        }
    }
}

kernel_test!(kernel_replies_reencode_byte_for_byte, async {
    use netlink_packet_core::ParseableParametrized;
    use netlink_packet_core::{Emitable, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
    use netlink_packet_generic::{GenlHeader, GenlMessage};

    let guest = Guest::start().await;
    let tcp = Service::new(ServiceKey::tcp(ip("198.18.0.10"), 80))
        .with_scheduler("rr")
        .persistent(600)
        .with_netmask(24);
    let udp6 = Service::new(ServiceKey::udp(ip("2001:db8::10"), 53))
        .with_scheduler("sh")
        .with_flags(ServiceFlags::SH_PORT);
    let fwm = Service::new(ServiceKey::fwmark(AddressFamily::Inet6, 9))
        .with_scheduler("wrr");
    let mut batch = guest.handle.batch();
    for svc in [&tcp, &udp6, &fwm] {
        batch.add_service(svc);
    }
    batch.add_dest(
        &tcp,
        &Destination::new(ip("198.19.0.5"), 8080).with_weight(3),
    );
    batch.add_dest(
        &tcp,
        &Destination::new(ip("198.19.0.6"), 8080)
            .with_fwd_method(ipvs_sys::ForwardMethod::Tunnel)
            .with_tunnel(ipvs_sys::Tunnel {
                kind: ipvs_sys::TunnelType::Gue,
                port: 6080,
                flags: ipvs_sys::TunnelFlags::CSUM,
            }),
    );
    batch.add_dest(&udp6, &Destination::new(ip("2001:db8::5"), 5353));
    for result in batch.execute().await.expect("batch") {
        result.expect("setup operation");
    }
    let family = guest.handle.family_id().await.expect("family");

    let requests = [
        (
            ipvs_sys::IpvsMessage::dump_services(),
            NLM_F_REQUEST | NLM_F_DUMP,
            3,
        ),
        (
            ipvs_sys::IpvsMessage::dump_dests(&tcp.key),
            NLM_F_REQUEST | NLM_F_DUMP,
            2,
        ),
        (
            ipvs_sys::IpvsMessage::dump_dests(&udp6.key),
            NLM_F_REQUEST | NLM_F_DUMP,
            1,
        ),
        (
            ipvs_sys::IpvsMessage::get_service(&fwm.key),
            NLM_F_REQUEST | NLM_F_ACK,
            1,
        ),
        (
            ipvs_sys::IpvsMessage::get_info(),
            NLM_F_REQUEST | NLM_F_ACK,
            1,
        ),
        (
            ipvs_sys::IpvsMessage::get_config(),
            NLM_F_REQUEST | NLM_F_ACK,
            1,
        ),
    ];
    for (request, flags, expected) in requests {
        let what = format!("{:?}", request.cmd);
        let replies = tokio::task::spawn_blocking(move || {
            raw_replies(family, request, flags)
        })
        .await
        .expect("raw exchange");
        assert_eq!(replies.len(), expected, "{what}: reply count");
        for reply in replies {
            let header = GenlHeader::parse(&reply).expect("genl header");
            let payload = reply.get(4..).expect("payload");
            let decoded =
                ipvs_sys::IpvsMessage::parse_with_param(payload, header)
                    .unwrap_or_else(|err| panic!("{what}: {err}"));
            let mut again = GenlMessage::from_payload(decoded);
            again.header.cmd = header.cmd;
            let mut bytes = vec![0; again.buffer_len()];
            again.emit(&mut bytes);
            assert_eq!(bytes, reply, "{what}: re-encoded bytes differ");
        }
    }
});

/// Multi-threaded, so the connection task runs beside the requests: this
/// is how concurrent dumps collided (EBUSY) before the handle queued them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "kernel-tests"),
    ignore = "needs the real-kernel guest: run `make vm-test`"
)]
async fn concurrent_and_abandoned_dumps_take_turns() {
    tokio::time::timeout(TEST_TIMEOUT, concurrent_dumps())
        .await
        .expect("test timed out");
}

async fn concurrent_dumps() {
    use futures::StreamExt;

    const SERVICES: u16 = 200;
    const DESTS: u8 = 10;
    let guest = Guest::start().await;
    let services: Vec<Service> = (0..SERVICES)
        .map(|i| {
            let [a, b] = i.to_be_bytes();
            Service::new(ServiceKey::tcp(ip(&format!("198.18.{a}.{b}")), 80))
                .with_scheduler("rr")
        })
        .collect();
    let mut batch = guest.handle.batch();
    for svc in &services {
        batch.add_service(svc);
        for d in 1..=DESTS {
            let dest = Destination::new(ip(&format!("198.19.0.{d}")), 8080);
            batch.add_dest(svc, &dest);
        }
    }
    for result in batch.execute().await.expect("batch") {
        result.expect("setup operation");
    }

    // One socket runs one dump at a time; the handle must queue them
    // rather than let the kernel answer EBUSY.
    let counts: Vec<_> = futures::stream::iter(&services)
        .map(|svc| {
            let handle = guest.handle.clone();
            async move {
                handle
                    .dest(svc)
                    .list()
                    .execute()
                    .try_collect::<Vec<_>>()
                    .await
                    .map(|dests| dests.len())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let failures: Vec<String> = counts
        .iter()
        .filter_map(|c| c.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(
        failures.is_empty(),
        "{} dumps failed: {:?}",
        failures.len(),
        failures.first()
    );
    assert!(counts
        .iter()
        .all(|c| matches!(c, Ok(n) if *n == usize::from(DESTS))));

    // A dump abandoned after one entry must not break the next one.
    for _ in 0..3 {
        let mut abandoned = guest.handle.service().list().execute();
        abandoned.next().await.expect("one entry").expect("decodes");
        drop(abandoned);
        assert_eq!(guest.services().await.len(), usize::from(SERVICES));
    }
}
