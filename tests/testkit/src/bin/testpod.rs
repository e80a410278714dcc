//! A test "pod": answers every TCP connection and UDP datagram with its name,
//! so a test can see which backend a load balancer picked.
//!
//! ```text
//! testpod --name pod-a --listen 198.19.1.1:8080 [--listen ...] [--tcp] [--udp]
//!         [--http ADDR:PORT]
//! ```
//!
//! TCP: on accept it writes `NAME\n`, then echoes what it receives until the
//! peer closes. UDP: each datagram is answered with `NAME\n` followed by the
//! datagram. Neither `--tcp` nor `--udp` means both. Once every socket is
//! bound it prints `ready tcp=ADDR udp=ADDR ...` on stdout (the bound
//! addresses, useful with port 0), so a fixture can wait for that line
//! instead of polling. Std only: it must start in milliseconds under TCG.
//!
//! `--http` adds a readiness endpoint for a real kubelet's probe (the
//! real-node e2e, tests/node-e2e/): `GET /ready` answers 200 while the pod
//! is ready and 503 after `POST /unready`, until `POST /ready`. A test
//! makes the probe fail that way, and the pod stays the same.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

struct Args {
    name: String,
    listen: Vec<SocketAddr>,
    tcp: bool,
    udp: bool,
    http: Option<SocketAddr>,
}

const USAGE: &str = "usage: testpod --name NAME --listen ADDR:PORT \
                     [--listen ADDR:PORT]... [--tcp] [--udp] [--http ADDR:PORT]";

/// What `GET /ready` reports.
static READY: AtomicBool = AtomicBool::new(true);

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut name = None;
    let mut listen = Vec::new();
    let (mut tcp, mut udp) = (false, false);
    let mut http = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--name" => {
                name = Some(args.next().ok_or("--name needs a value")?);
            }
            "--listen" => {
                let value = args.next().ok_or("--listen needs ADDR:PORT")?;
                let addr = value
                    .parse()
                    .map_err(|e| format!("--listen {value}: {e}"))?;
                listen.push(addr);
            }
            "--http" => {
                let value = args.next().ok_or("--http needs ADDR:PORT")?;
                let addr = value
                    .parse()
                    .map_err(|e| format!("--http {value}: {e}"))?;
                http = Some(addr);
            }
            "--tcp" => tcp = true,
            "--udp" => udp = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let name = name.ok_or("--name is required")?;
    if listen.is_empty() {
        return Err("at least one --listen is required".into());
    }
    if !tcp && !udp {
        (tcp, udp) = (true, true);
    }
    Ok(Args {
        name,
        listen,
        tcp,
        udp,
        http,
    })
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("testpod: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("testpod: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: Args) -> io::Result<()> {
    let greeting: &'static [u8] =
        format!("{}\n", args.name).into_bytes().leak();
    let mut workers = Vec::new();
    let mut bound = Vec::new();
    // Bind everything before reporting ready, so a bind error is an exit
    // status the fixture sees rather than a half-started pod.
    for addr in &args.listen {
        if args.tcp {
            let listener = TcpListener::bind(addr).map_err(|e| {
                io::Error::new(e.kind(), format!("bind tcp {addr}: {e}"))
            })?;
            bound.push(format!("tcp={}", listener.local_addr()?));
            workers
                .push(thread::spawn(move || accept_loop(listener, greeting)));
        }
        if args.udp {
            let socket = UdpSocket::bind(addr).map_err(|e| {
                io::Error::new(e.kind(), format!("bind udp {addr}: {e}"))
            })?;
            bound.push(format!("udp={}", socket.local_addr()?));
            workers.push(thread::spawn(move || udp_loop(socket, greeting)));
        }
    }
    if let Some(addr) = args.http {
        let listener = TcpListener::bind(addr).map_err(|e| {
            io::Error::new(e.kind(), format!("bind http {addr}: {e}"))
        })?;
        bound.push(format!("http={}", listener.local_addr()?));
        workers.push(thread::spawn(move || http_loop(listener)));
    }
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "ready {}", bound.join(" "))?;
    stdout.flush()?;
    drop(stdout);
    for worker in workers {
        let _ = worker.join();
    }
    Ok(())
}

fn accept_loop(listener: TcpListener, greeting: &'static [u8]) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                thread::spawn(move || {
                    if let Err(e) = answer_tcp(stream, greeting) {
                        eprintln!("testpod: tcp connection: {e}");
                    }
                });
            }
            Err(e) => eprintln!("testpod: accept: {e}"),
        }
    }
}

fn answer_tcp(mut stream: TcpStream, greeting: &[u8]) -> io::Result<()> {
    stream.write_all(greeting)?;
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(buf.get(..n).unwrap_or_default())?;
    }
}

fn http_loop(listener: TcpListener) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                if let Err(e) = answer_http(stream) {
                    eprintln!("testpod: http request: {e}");
                }
            }
            Err(e) => eprintln!("testpod: accept: {e}"),
        }
    }
}

/// One request per connection; only the request line matters.
fn answer_http(mut stream: TcpStream) -> io::Result<()> {
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(buf.get(..n).unwrap_or_default());
    }
    let head = String::from_utf8_lossy(&head);
    let line = head.lines().next().unwrap_or_default();
    let (status, body) = readiness(line);
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The answer to a request line, after its effect on [`READY`].
fn readiness(request_line: &str) -> (&'static str, &'static str) {
    let mut words = request_line.split_whitespace();
    match (words.next(), words.next()) {
        (Some("GET"), Some("/ready")) => {
            if READY.load(Ordering::SeqCst) {
                ("200 OK", "ready\n")
            } else {
                ("503 Service Unavailable", "not ready\n")
            }
        }
        (Some("POST"), Some("/ready")) => {
            READY.store(true, Ordering::SeqCst);
            ("200 OK", "ready\n")
        }
        (Some("POST"), Some("/unready")) => {
            READY.store(false, Ordering::SeqCst);
            ("200 OK", "not ready\n")
        }
        _ => ("404 Not Found", "GET /ready, POST /ready, POST /unready\n"),
    }
}

fn udp_loop(socket: UdpSocket, greeting: &[u8]) {
    let mut buf = [0u8; 65536];
    let mut reply = Vec::with_capacity(greeting.len() + buf.len());
    loop {
        match socket.recv_from(&mut buf) {
            Ok((n, peer)) => {
                reply.clear();
                reply.extend_from_slice(greeting);
                reply.extend_from_slice(buf.get(..n).unwrap_or_default());
                if let Err(e) = socket.send_to(&reply, peer) {
                    eprintln!("testpod: udp reply to {peer}: {e}");
                }
            }
            Err(e) => eprintln!("testpod: udp receive: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_args, readiness};

    /// Name, number of listen addresses, tcp, udp.
    type Parsed<S> = (S, usize, bool, bool);
    type Case = (
        &'static [&'static str],
        Result<Parsed<&'static str>, &'static str>,
    );

    fn parse(args: &[&str]) -> Result<Parsed<String>, String> {
        parse_args(args.iter().map(|s| s.to_string()))
            .map(|a| (a.name, a.listen.len(), a.tcp, a.udp))
    }

    #[test]
    fn arguments() {
        let cases: &[Case] = &[
            (
                &["--name", "pod-a", "--listen", "198.19.1.1:80"],
                Ok(("pod-a", 1, true, true)),
            ),
            (
                &[
                    "--name",
                    "p",
                    "--listen",
                    "198.19.1.1:80",
                    "--listen",
                    "198.19.1.1:81",
                    "--udp",
                ],
                Ok(("p", 2, false, true)),
            ),
            (
                &["--name", "p", "--listen", "198.19.1.1:80", "--tcp"],
                Ok(("p", 1, true, false)),
            ),
            (&["--listen", "198.19.1.1:80"], Err("--name is required")),
            (&["--name", "p"], Err("at least one --listen is required")),
            (
                &["--name", "p", "--listen", "198.19.1.1"],
                Err("--listen 198.19.1.1: invalid socket address syntax"),
            ),
            (&["--name"], Err("--name needs a value")),
            (&["--bogus"], Err("unknown argument --bogus")),
            (&["--http"], Err("--http needs ADDR:PORT")),
        ];
        for (args, want) in cases {
            let want = want
                .map(|(n, l, t, u)| (n.to_string(), l, t, u))
                .map_err(str::to_string);
            assert_eq!(parse(args), want, "args {args:?}");
        }
    }

    /// The probe's answers follow the last POST; anything else is a 404 and
    /// changes nothing.
    #[test]
    fn readiness_follows_the_posts() {
        let get = "GET /ready HTTP/1.1";
        assert_eq!(readiness(get).0, "200 OK");
        assert_eq!(readiness("POST /unready HTTP/1.1").0, "200 OK");
        assert_eq!(readiness(get).0, "503 Service Unavailable");
        assert_eq!(readiness("GET /other HTTP/1.1").0, "404 Not Found");
        assert_eq!(readiness(get).0, "503 Service Unavailable");
        assert_eq!(readiness("POST /ready HTTP/1.1").0, "200 OK");
        assert_eq!(readiness(get).0, "200 OK");
    }
}
