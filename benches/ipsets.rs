//! 10,000 hash:ip,port entries added through our netlink implementation
//! against `ipset restore` of the same entries, in the same run, inside a
//! network namespace of its own (needs root; the host kernel is fine:
//! ipset is native there). Prints both times and the ratio, and the same
//! for reading the sets back (our dump against `ipset save`).
//!
//! `make bench-ipsets` (or `cargo bench --bench ipsets`). `IPSETS_BENCH_N`
//! changes the number of entries. Figures: docs/benchmarks.md.

use std::{
    io::Write,
    net::IpAddr,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use kube_ipvs_proxy::{
    kernel::ipsets::{IpsetOp, Ipsets, NetlinkIpsets, SetEntry, SetSpec},
    model::Protocol,
};

const ROUNDS: usize = 3;

fn entries(n: usize) -> Vec<SetEntry> {
    (0..n)
        .map(|i| {
            let addr = IpAddr::from([198, 18, (i / 256 % 256) as u8, i as u8]);
            let proto = [Protocol::Tcp, Protocol::Udp][i / 65536 % 2];
            SetEntry::IpPort(addr, proto, 80 + (i % 1000) as u16)
        })
        .collect()
}

fn ipset(args: &[&str], input: &str) -> Result<String, String> {
    let mut child = Command::new("ipset")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("ipset: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| format!("ipset stdin: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Round {
    netlink_add: Duration,
    restore: Duration,
    netlink_dump: Duration,
    save: Duration,
}

async fn round(
    k: &mut NetlinkIpsets,
    entries: &[SetEntry],
) -> Result<Round, String> {
    let spec = SetSpec {
        name: "KUBE-BENCH-NETLINK".into(),
        set_type: kube_ipvs_proxy::desired::SetType::HashIpPort,
        ipv6: false,
    };
    let mut ops = vec![IpsetOp::Create(spec.clone())];
    ops.extend(
        entries
            .iter()
            .map(|e| IpsetOp::Add(spec.name.clone(), e.clone())),
    );
    let start = Instant::now();
    let results = k.apply(&ops).await;
    let netlink_add = start.elapsed();
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        return Err(format!("netlink apply: {e}"));
    }

    let mut script = String::from(
        "create KUBE-BENCH-RESTORE hash:ip,port family inet hashsize 1024 \
         maxelem 65536\n",
    );
    for e in entries {
        script.push_str(&format!("add KUBE-BENCH-RESTORE {e}\n"));
    }
    let start = Instant::now();
    ipset(&["restore"], &script)?;
    let restore = start.elapsed();

    let start = Instant::now();
    let sets = k.dump("KUBE-BENCH-").await.map_err(|e| e.to_string())?;
    let netlink_dump = start.elapsed();
    for (name, set) in &sets {
        if set.entries.len() != entries.len() {
            return Err(format!(
                "{name} lists {} entries, not {}",
                set.entries.len(),
                entries.len()
            ));
        }
    }
    let start = Instant::now();
    ipset(&["save"], "")?;
    let save = start.elapsed();

    let destroys = [
        IpsetOp::Destroy("KUBE-BENCH-NETLINK".into()),
        IpsetOp::Destroy("KUBE-BENCH-RESTORE".into()),
    ];
    for r in k.apply(&destroys).await {
        r.map_err(|e| e.to_string())?;
    }
    Ok(Round {
        netlink_add,
        restore,
        netlink_dump,
        save,
    })
}

fn main() -> Result<(), String> {
    // Cargo passes `--bench`; nothing here takes arguments.
    let n: usize = std::env::var("IPSETS_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    // SAFETY: unshare on this single-threaded process; children inherit.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "unshare(CLONE_NEWNET) failed (run as root): {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut k = NetlinkIpsets::new().map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    let entries = entries(n);
    let mut best: Option<Round> = None;
    for _ in 0..ROUNDS {
        let r = runtime.block_on(round(&mut k, &entries))?;
        best = Some(match best {
            None => r,
            Some(b) => Round {
                netlink_add: b.netlink_add.min(r.netlink_add),
                restore: b.restore.min(r.restore),
                netlink_dump: b.netlink_dump.min(r.netlink_dump),
                save: b.save.min(r.save),
            },
        });
    }
    let Some(b) = best else {
        return Err("no rounds".into());
    };
    println!("ipsets: {n} hash:ip,port entries, best of {ROUNDS}, fresh netns");
    println!(
        "  add:  netlink {:8.2} ms   ipset restore {:8.2} ms   ratio {:.2}",
        ms(b.netlink_add),
        ms(b.restore),
        b.netlink_add.as_secs_f64() / b.restore.as_secs_f64()
    );
    println!(
        "  read: netlink {:8.2} ms   ipset save    {:8.2} ms   ratio {:.2}",
        ms(b.netlink_dump),
        ms(b.save),
        b.netlink_dump.as_secs_f64() / b.save.as_secs_f64()
    );
    Ok(())
}
