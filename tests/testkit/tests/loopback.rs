//! The testpod server and the traffic clients, on loopback: no guest, no
//! root needed.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use testkit::{tcp_tally, udp_tally, Tally};

struct Server {
    child: Child,
    tcp: SocketAddr,
    udp: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(name: &str) -> Result<Server> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_testpod"))
        .args(["--name", name, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting testpod")?;
    let stdout = child.stdout.take().context("testpod has no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let (mut tcp, mut udp) = (None, None);
    let mut words = line.split_whitespace();
    if words.next() != Some("ready") {
        let _ = child.kill();
        bail!("testpod said {line:?}");
    }
    for word in words {
        match word.split_once('=') {
            Some(("tcp", addr)) => tcp = Some(addr.parse()?),
            Some(("udp", addr)) => udp = Some(addr.parse()?),
            _ => bail!("unexpected {word:?} in {line:?}"),
        }
    }
    Ok(Server {
        child,
        tcp: tcp.context("no tcp address")?,
        udp: udp.context("no udp address")?,
    })
}

const TIMEOUT: Duration = Duration::from_secs(5);

#[test]
fn every_tcp_connection_is_answered_with_the_name() -> Result<()> {
    let server = start("pod-a")?;
    let tally = tcp_tally(server.tcp, 5, TIMEOUT)?;
    assert_eq!(tally, Tally::from([("pod-a".to_string(), 5)]));
    Ok(())
}

#[test]
fn every_udp_datagram_is_answered_with_the_name() -> Result<()> {
    let server = start("pod-b")?;
    let tally = udp_tally(server.udp, 5, TIMEOUT)?;
    assert_eq!(tally, Tally::from([("pod-b".to_string(), 5)]));
    Ok(())
}

#[test]
fn tcp_echoes_after_the_greeting() -> Result<()> {
    use std::io::Write;
    let server = start("pod-c")?;
    let stream = std::net::TcpStream::connect(server.tcp)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    (&stream).write_all(b"hello\n")?;
    let mut lines = [String::new(), String::new()];
    for line in &mut lines {
        reader.read_line(line)?;
    }
    assert_eq!(lines, ["pod-c\n", "hello\n"]);
    Ok(())
}

#[test]
fn closed_port_is_an_error_naming_the_address() -> Result<()> {
    let addr = {
        // Bound, then released: nothing listens there any more.
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?
    };
    let err = tcp_tally(addr, 1, TIMEOUT).err().map(|e| e.to_string());
    let err = err.context("connecting to a closed port succeeded")?;
    assert!(
        err.starts_with(&format!("tcp connection 1/1 to {addr}: ")),
        "{err}"
    );
    Ok(())
}

#[test]
fn testpod_rejects_bad_arguments() -> Result<()> {
    let out = Command::new(env!("CARGO_BIN_EXE_testpod"))
        .args(["--name", "x"])
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("at least one --listen"), "{stderr}");
    Ok(())
}
