//! Steady TCP traffic through a virtual server while something changes
//! under it (a proxy handing over to another), counting every failed
//! request.
//!
//! ```text
//! traffic --connect IP:PORT --pod NAME=IP:PORT [--pod ...] --stop-file PATH
//!         [--ready-file PATH] [--start-file PATH] [--done-file PATH]
//!         [--timeout-ms 2000] [--pause-ms 20]
//! ```
//!
//! Starts the pods (testkit's network namespaces with the `testpod`
//! server; TESTKIT_TESTPOD names its binary), writes the ready file once
//! they listen, waits for the start file if one is named, then opens one
//! connection after another to the virtual server, each reading the
//! answering pod's greeting, until the stop file exists. Prints `sent N
//! ok N failed N` and the answers per pod, then each failure with its time
//! since the start; with a done file, keeps the pods until it exists.
//! Exits 0 either way (the caller judges), 2 if the pods could not start.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use testkit::{start_pods, tcp_tally, PodSpec, Tally};

struct Args {
    connect: SocketAddr,
    pods: Vec<(String, Ipv4Addr, u16)>,
    stop_file: PathBuf,
    ready_file: Option<PathBuf>,
    start_file: Option<PathBuf>,
    done_file: Option<PathBuf>,
    timeout: Duration,
    pause: Duration,
}

const USAGE: &str = "usage: traffic --connect IP:PORT --pod NAME=IP:PORT... \
                     --stop-file PATH [--ready-file PATH] [--start-file PATH] \
                     [--done-file PATH] [--timeout-ms N] [--pause-ms N]";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut connect = None;
    let mut pods = Vec::new();
    let mut stop_file = None;
    let mut ready_file = None;
    let mut start_file = None;
    let mut done_file = None;
    let mut timeout = Duration::from_secs(2);
    let mut pause = Duration::from_millis(20);
    let millis = |v: Option<String>, flag: &str| -> Result<Duration, String> {
        v.and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .ok_or_else(|| format!("{flag} needs a number of milliseconds"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--connect" => {
                let v = args.next().ok_or("--connect needs IP:PORT")?;
                connect =
                    Some(v.parse().map_err(|e| format!("--connect {v}: {e}"))?);
            }
            "--pod" => {
                let v = args.next().ok_or("--pod needs NAME=IP:PORT")?;
                let (name, addr) = v
                    .split_once('=')
                    .ok_or(format!("--pod {v}: not NAME=IP:PORT"))?;
                let addr: SocketAddr =
                    addr.parse().map_err(|e| format!("--pod {v}: {e}"))?;
                let SocketAddr::V4(addr) = addr else {
                    return Err(format!("--pod {v}: pods are IPv4"));
                };
                pods.push((name.to_owned(), *addr.ip(), addr.port()));
            }
            "--stop-file" => {
                stop_file = Some(PathBuf::from(
                    args.next().ok_or("--stop-file needs a path")?,
                ))
            }
            "--ready-file" => {
                ready_file = Some(PathBuf::from(
                    args.next().ok_or("--ready-file needs a path")?,
                ))
            }
            "--done-file" => {
                done_file = Some(PathBuf::from(
                    args.next().ok_or("--done-file needs a path")?,
                ))
            }
            "--start-file" => {
                start_file = Some(PathBuf::from(
                    args.next().ok_or("--start-file needs a path")?,
                ))
            }
            "--timeout-ms" => timeout = millis(args.next(), "--timeout-ms")?,
            "--pause-ms" => pause = millis(args.next(), "--pause-ms")?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args {
        connect: connect.ok_or("--connect is required")?,
        pods,
        stop_file: stop_file.ok_or("--stop-file is required")?,
        ready_file,
        start_file,
        done_file,
        timeout,
        pause,
    })
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("traffic: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let specs: Vec<PodSpec> = args
        .pods
        .iter()
        .map(|(name, ip, port)| PodSpec::new(name.clone()).ip(*ip).port(*port))
        .collect();
    // Kept until the end: dropping them tears the pods down.
    let _pods = match start_pods(&specs) {
        Ok(pods) => pods,
        Err(e) => {
            eprintln!("traffic: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(ready) = &args.ready_file {
        if let Err(e) = std::fs::write(ready, "ready\n") {
            eprintln!("traffic: writing {}: {e}", ready.display());
            return ExitCode::from(2);
        }
    }
    if let Some(go) = &args.start_file {
        while !go.exists() && !args.stop_file.exists() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let start = Instant::now();
    let (mut sent, mut tally, mut failures) =
        (0usize, Tally::new(), Vec::new());
    while !args.stop_file.exists() {
        sent += 1;
        match tcp_tally(args.connect, 1, args.timeout) {
            Ok(answer) => {
                for (pod, n) in answer {
                    *tally.entry(pod).or_default() += n;
                }
            }
            Err(e) => failures
                .push(format!("{:.3}s {e}", start.elapsed().as_secs_f64())),
        }
        std::thread::sleep(args.pause);
    }
    let ok: usize = tally.values().sum();
    println!(
        "sent {sent} ok {ok} failed {} in {:.1}s",
        failures.len(),
        start.elapsed().as_secs_f64()
    );
    for (pod, n) in &tally {
        println!("answered {pod} {n}");
    }
    for failure in &failures {
        println!("failure {failure}");
    }
    // The pods outlive the traffic until the caller is done with them
    // (their links are local addresses the proxies serve NodePorts on).
    if let Some(done) = &args.done_file {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        while !done.exists() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    ExitCode::SUCCESS
}
