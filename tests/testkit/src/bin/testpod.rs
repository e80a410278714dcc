//! A test "pod": answers every TCP connection and UDP datagram with its name,
//! so a test can see which backend a load balancer picked.
//!
//! ```text
//! testpod --name pod-a --listen 198.19.1.1:8080 [--listen ...] [--tcp] [--udp]
//! ```
//!
//! TCP: on accept it writes `NAME\n`, then echoes what it receives until the
//! peer closes. UDP: each datagram is answered with `NAME\n` followed by the
//! datagram. Neither `--tcp` nor `--udp` means both. Once every socket is
//! bound it prints `ready tcp=ADDR udp=ADDR ...` on stdout (the bound
//! addresses, useful with port 0), so a fixture can wait for that line
//! instead of polling. Std only: it must start in milliseconds under TCG.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::thread;

struct Args {
    name: String,
    listen: Vec<SocketAddr>,
    tcp: bool,
    udp: bool,
}

const USAGE: &str = "usage: testpod --name NAME --listen ADDR:PORT \
                     [--listen ADDR:PORT]... [--tcp] [--udp]";

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut name = None;
    let mut listen = Vec::new();
    let (mut tcp, mut udp) = (false, false);
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
    use super::parse_args;

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
        ];
        for (args, want) in cases {
            let want = want
                .map(|(n, l, t, u)| (n.to_string(), l, t, u))
                .map_err(str::to_string);
            assert_eq!(parse(args), want, "args {args:?}");
        }
    }
}
