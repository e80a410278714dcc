//! ipvs-sys against ipvsadm on the same rules, in one run (`make
//! bench-ipvs` runs it in the real-kernel guest).
//!
//! Loads SERVICES virtual services × DESTS destinations twice, each time
//! into a fresh network namespace's empty table: once with
//! `ipvsadm -R` then dumped with `ipvsadm -Sn`, once as one ipvs-sys batch
//! then dumped through ipvs-sys (services, then each one's destinations,
//! on one connection and on several). Prints a table of the times and
//! their ratios. Run as root with `ipvsadm` on PATH; the root namespace's
//! IPVS table is not touched.
//!
//! Why a network namespace per side: the kernel keeps deleted
//! destinations on a per-namespace "trash" list, and every destination
//! add walks that list first (to revive a match). A flush puts every
//! destination there and does not arm the timer that empties it, so the
//! side that loads after a flush pays ~10^10 comparisons at 10,000 × 10,
//! several times the load itself. A fresh
//! namespace has a fresh table and an empty trash; the first side's
//! namespace is flushed and left before the second starts.
//!
//! Settings (environment): `BENCH_SERVICES` (10000), `BENCH_DESTS` (10),
//! `BENCH_DUMP_CONNECTIONS` (4), `BENCH_SETTLE_MS` (5000: the pause after
//! leaving the first side's namespace while the kernel tears it down),
//! `BENCH_WINDOW` (ipvs-sys's default), `BENCH_READS` (2000: reads of
//! one service's destinations, by dump and by `getsockopt`, and as many
//! single writes, by generic netlink and by `setsockopt`).
//!
//! A third namespace takes the same load once more, one `setsockopt` per
//! rule, as the proxy's cold sync now does for IPv4.

use std::{
    error::Error,
    fmt::Write as _,
    io::Write as _,
    net::Ipv4Addr,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use futures::{future, TryStreamExt};
use ipvs_sys::{Destination, Handle, Service, ServiceKey, SockoptSocket};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

fn setting(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .map_err(|e| format!("{name}={value:?}: {e}").into()),
        Err(_) => Ok(default),
    }
}

struct Rules {
    services: Vec<Service>,
    dests: Vec<Destination>,
}

impl Rules {
    fn new(services: usize, dests: usize) -> Result<Self> {
        if services > 65_536 || dests > 62_500 {
            return Err("at most 65536 services and 62500 destinations".into());
        }
        let services = (0..services)
            .map(|i| {
                let [_, _, a, b] = (i as u32).to_be_bytes();
                let vip = Ipv4Addr::new(198, 18, a, b);
                Service::new(ServiceKey::tcp(vip.into(), 80))
                    .with_scheduler("rr")
            })
            .collect();
        let dests = (0..dests)
            .map(|d| {
                let rip = Ipv4Addr::new(
                    198,
                    19,
                    (d / 250) as u8,
                    (d % 250 + 1) as u8,
                );
                Destination::new(rip.into(), 8080)
            })
            .collect();
        Ok(Self { services, dests })
    }

    fn operations(&self) -> usize {
        self.services.len() * (1 + self.dests.len())
    }

    /// The same rules as `ipvsadm -R` input.
    fn ipvsadm_input(&self) -> String {
        let mut text = String::with_capacity(self.operations() * 48);
        for svc in &self.services {
            let ServiceKey::Inet { address, port, .. } = svc.key else {
                continue;
            };
            let _ = writeln!(text, "-A -t {address}:{port} -s rr");
            for dest in &self.dests {
                let _ = writeln!(
                    text,
                    "-a -t {address}:{port} -r {}:{} -m -w 1",
                    dest.address, dest.port
                );
            }
        }
        text
    }
}

/// Moves this thread (the runtime's only one) into a new network
/// namespace: a fresh IPVS table with an empty destination trash.
/// Sockets opened and processes started afterwards belong to it.
fn fresh_netns() -> Result<()> {
    // SAFETY: unshare has no memory-safety preconditions; it changes the
    // calling thread's namespace only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let err = std::io::Error::last_os_error();
        return Err(format!("unshare(CLONE_NEWNET): {err}").into());
    }
    // The kernel refuses destinations whose address type it cannot tell
    // (no local routing table yet): bring up lo, which creates it.
    let status = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()?;
    if !status.success() {
        return Err(format!("ip link set lo up: {status}").into());
    }
    Ok(())
}

fn ipvsadm_restore(input: &str) -> Result<Duration> {
    let start = Instant::now();
    let mut child = Command::new("ipvsadm")
        .arg("-R")
        .stdin(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("no stdin for ipvsadm")?
        .write_all(input.as_bytes())?;
    let status = child.wait()?;
    let took = start.elapsed();
    if !status.success() {
        return Err(format!("ipvsadm -R failed: {status}").into());
    }
    Ok(took)
}

/// `ipvsadm -Sn`: its time and the number of rules it printed.
fn ipvsadm_save() -> Result<(Duration, usize)> {
    let start = Instant::now();
    let out = Command::new("ipvsadm").arg("-Sn").output()?;
    let took = start.elapsed();
    if !out.status.success() {
        return Err(format!("ipvsadm -Sn failed: {}", out.status).into());
    }
    let rules = out.stdout.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    Ok((took, rules.count()))
}

/// One batch of every add; fails if any operation failed.
async fn ipvs_sys_add(
    handle: &Handle,
    rules: &Rules,
    window: usize,
) -> Result<Duration> {
    let mut batch = handle.batch().window(window);
    for svc in &rules.services {
        batch.add_service(svc);
        for dest in &rules.dests {
            batch.add_dest(svc, dest);
        }
    }
    let start = Instant::now();
    let results = batch.execute().await?;
    let took = start.elapsed();
    let failed: Vec<_> =
        results.iter().filter_map(|r| r.as_ref().err()).collect();
    if let Some(first) = failed.first() {
        return Err(
            format!("{} adds failed; first: {first}", failed.len()).into()
        );
    }
    Ok(took)
}

/// Services, then each one's destinations, the services shared out over
/// `handles` (one dump at a time per connection): the time and the rules
/// read.
async fn ipvs_sys_dump(handles: &[Handle]) -> Result<(Duration, usize)> {
    let first = handles.first().ok_or("no connection")?;
    let start = Instant::now();
    let services: Vec<Service> =
        first.service().list().execute().try_collect().await?;
    let lanes = handles.iter().enumerate().map(|(lane, handle)| {
        let mine: Vec<&Service> =
            services.iter().skip(lane).step_by(handles.len()).collect();
        async move {
            let mut count = 0;
            for svc in mine {
                let dests: Vec<Destination> =
                    handle.dest(svc).list().execute().try_collect().await?;
                count += dests.len();
            }
            Ok::<_, ipvs_sys::Error>(count)
        }
    });
    let mut dests = 0;
    for lane in future::join_all(lanes).await {
        dests += lane?;
    }
    Ok((start.elapsed(), services.len() + dests))
}

/// `reads` reads of one service's destinations each, walking the
/// services in turn: one generic netlink dump each, then one
/// `getsockopt` each (what graceful termination does before deleting a
/// real server). The time of each way.
async fn one_service_reads(
    handle: &Handle,
    rules: &Rules,
    reads: usize,
) -> Result<(Duration, Duration)> {
    let services = rules.services.iter().cycle().take(reads);
    let start = Instant::now();
    for svc in services.clone() {
        let dests: Vec<Destination> =
            handle.dest(svc).list().execute().try_collect().await?;
        check("dump of one service", dests.len(), rules.dests.len())?;
    }
    let dump = start.elapsed();
    let socket = SockoptSocket::open()?;
    let start = Instant::now();
    for svc in services {
        let dests = socket.dests(&svc.key)?;
        check(
            "sockopt read of one service",
            dests.len(),
            rules.dests.len(),
        )?;
    }
    Ok((dump, start.elapsed()))
}

/// The same load, one `setsockopt` per rule, in order.
fn sockopt_add(socket: &SockoptSocket, rules: &Rules) -> Result<Duration> {
    let start = Instant::now();
    for svc in &rules.services {
        socket.add_service(svc)?;
        for dest in &rules.dests {
            socket.add_dest(&svc.key, dest)?;
        }
    }
    Ok(start.elapsed())
}

/// `writes` single writes each way, walking the services in turn: a
/// destination's weight set to 0 and back, as graceful termination and a
/// readiness flip do, by generic netlink (a batch of one, acknowledged
/// before the next, as a sync of one change sends it), then by
/// `setsockopt`. Leaves every weight as it was. The time of each way.
async fn single_writes(
    handle: &Handle,
    socket: &SockoptSocket,
    rules: &Rules,
    writes: usize,
) -> Result<(Duration, Duration)> {
    let first = rules.dests.first().ok_or("no destinations")?;
    let weights = [first.clone().with_weight(0), first.clone()];
    let edits = rules
        .services
        .iter()
        .cycle()
        .zip(weights.iter().cycle())
        .take(writes.next_multiple_of(2));
    let start = Instant::now();
    for (svc, dest) in edits.clone() {
        let mut batch = handle.batch();
        batch.set_dest(svc, dest);
        for result in batch.execute().await? {
            result?;
        }
    }
    let netlink = start.elapsed();
    let start = Instant::now();
    for (svc, dest) in edits {
        socket.set_dest(&svc.key, dest)?;
    }
    Ok((netlink, start.elapsed()))
}

fn connect() -> Result<Handle> {
    let (conn, handle, _) = ipvs_sys::new_connection()?;
    tokio::spawn(conn);
    Ok(handle)
}

fn seconds(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

fn check(what: &str, got: usize, expected: usize) -> Result<()> {
    if got != expected {
        return Err(format!("{what}: {got} rules, expected {expected}").into());
    }
    Ok(())
}

// One thread: under TCG emulation cross-thread wake-ups dominate, and
// fresh_netns() moves only the calling thread.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let services = setting("BENCH_SERVICES", 10_000)?;
    let dests = setting("BENCH_DESTS", 10)?;
    let lanes = setting("BENCH_DUMP_CONNECTIONS", 4)?.max(1);
    let settle =
        Duration::from_millis(setting("BENCH_SETTLE_MS", 5000)? as u64);
    let window = setting("BENCH_WINDOW", ipvs_sys::DEFAULT_WINDOW)?;
    let reads = setting("BENCH_READS", 2000)?.max(1);
    let rules = Rules::new(services, dests)?;
    let ops = rules.operations();
    let input = rules.ipvsadm_input();

    eprintln!("ipvsadm -R: {ops} rules, in a fresh network namespace");
    fresh_netns()?;
    let restore = ipvsadm_restore(&input)?;
    let (save, saved) = ipvsadm_save()?;
    check("ipvsadm -Sn", saved, ops)?;
    {
        let handle = connect()?;
        handle.flush().execute().await?;
    }

    eprintln!("ipvs-sys: {ops} operations in one batch, in another");
    fresh_netns()?;
    tokio::time::sleep(settle).await;
    let handle = connect()?;
    let mut handles = vec![handle.clone()];
    for _ in 1..lanes {
        handles.push(connect()?);
    }
    let add = ipvs_sys_add(&handle, &rules, window).await?;
    let (dump, dumped) = ipvs_sys_dump(&handles[..1]).await?;
    check("ipvs-sys dump", dumped, ops)?;
    let (dump_n, dumped_n) = ipvs_sys_dump(&handles).await?;
    check("ipvs-sys dump", dumped_n, ops)?;
    let (read_dump, read_sockopt) =
        one_service_reads(&handle, &rules, reads).await?;
    let socket = SockoptSocket::open()?;
    let (write_netlink, write_sockopt) =
        single_writes(&handle, &socket, &rules, reads).await?;
    handle.flush().execute().await?;

    eprintln!("setsockopt: {ops} operations one by one, in a third");
    fresh_netns()?;
    tokio::time::sleep(settle).await;
    // Opened in the namespace it writes to: a socket's options act on the
    // namespace it was created in.
    let socket = SockoptSocket::open()?;
    let add_sockopt = sockopt_add(&socket, &rules)?;
    let (_, loaded) = ipvs_sys_dump(&[connect()?]).await?;
    check("setsockopt load", loaded, ops)?;
    connect()?.flush().execute().await?;

    let ratio = |ours: Duration, theirs: Duration| {
        format!("{:.2}", ours.as_secs_f64() / theirs.as_secs_f64())
    };
    println!(
        "IPVS, {services} services x {dests} destinations ({ops} rules), \
         batch window {window}; each side in a fresh network namespace"
    );
    println!("| step | ipvsadm | ipvs-sys | ipvs-sys / ipvsadm |");
    println!("|---|---|---|---|");
    println!(
        "| load (`ipvsadm -R` / one batch) | {} | {} | {} |",
        seconds(restore),
        seconds(add),
        ratio(add, restore)
    );
    println!(
        "| load (`ipvsadm -R` / one `setsockopt` each) | {} | {} | {} |",
        seconds(restore),
        seconds(add_sockopt),
        ratio(add_sockopt, restore)
    );
    println!(
        "| dump (`ipvsadm -Sn` / 1 connection) | {} | {} | {} |",
        seconds(save),
        seconds(dump),
        ratio(dump, save)
    );
    println!(
        "| dump (`ipvsadm -Sn` / {lanes} connections) | {} | {} | {} |",
        seconds(save),
        seconds(dump_n),
        ratio(dump_n, save)
    );
    println!(
        "| load + dump | {} | {} | {} |",
        seconds(restore + save),
        seconds(add + dump),
        ratio(add + dump, restore + save)
    );
    println!(
        "Load by `setsockopt` / by one batch: {}",
        ratio(add_sockopt, add)
    );
    let per_read =
        |d: Duration| format!("{:.0} µs", d.as_secs_f64() * 1e6 / reads as f64);
    println!();
    println!(
        "One service's {dests} destinations, {reads} reads (the services in \
         turn), per read:"
    );
    println!("| generic netlink dump | `getsockopt` | sockopt / dump |");
    println!("|---|---|---|");
    println!(
        "| {} | {} | {} |",
        per_read(read_dump),
        per_read(read_sockopt),
        ratio(read_sockopt, read_dump)
    );
    let writes = reads.next_multiple_of(2);
    let per_write = |d: Duration| {
        format!("{:.0} µs", d.as_secs_f64() * 1e6 / writes as f64)
    };
    println!();
    println!(
        "One write ({writes} weight changes, the services in turn, each \
         acknowledged before the next), per write:"
    );
    println!("| generic netlink, a batch of one | `setsockopt` | sockopt / netlink |");
    println!("|---|---|---|");
    println!(
        "| {} | {} | {} |",
        per_write(write_netlink),
        per_write(write_sockopt),
        ratio(write_sockopt, write_netlink)
    );
    Ok(())
}
