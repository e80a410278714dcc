//! Traffic towards a service, tallied by the name of the pod that answered
//! (the `testpod` server's first line).
//!
//! All connections and sockets of one call stay open until every answer is
//! in, so each uses its own source port: IPVS keeps a connection entry per
//! client address and port, and a reused port would be sent to the same pod
//! again instead of being scheduled.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use crate::error::Error;

/// How many answers came from each pod, by name.
pub type Tally = BTreeMap<String, usize>;

/// Opens `n` TCP connections to `addr` and reads each one's greeting.
pub fn tcp_tally(
    addr: SocketAddr,
    n: usize,
    timeout: Duration,
) -> Result<Tally, Error> {
    let what = |i: usize| format!("tcp connection {}/{n} to", i + 1);
    let mut streams = Vec::with_capacity(n);
    let mut tally = Tally::new();
    for i in 0..n {
        let traffic = |source| Error::Traffic {
            what: what(i),
            addr,
            source,
        };
        let stream =
            TcpStream::connect_timeout(&addr, timeout).map_err(traffic)?;
        stream.set_read_timeout(Some(timeout)).map_err(traffic)?;
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).map_err(traffic)?;
        let name = pod_name(&line).ok_or_else(|| Error::BadAnswer {
            what: what(i),
            addr,
            answer: line.clone(),
        })?;
        *tally.entry(name.to_string()).or_default() += 1;
        streams.push(reader);
    }
    Ok(tally)
}

/// One `GET path` on `addr`: the status code and the body. Enough for the
/// proxy's own servers (`/metrics`, `/healthz`) without an HTTP client
/// library in the tests. HTTP/1.0, so the answer is never chunked and ends
/// when the server closes.
pub fn http_get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String), Error> {
    http_request("GET", addr, path, timeout)
}

/// One HTTP/1.0 request without a body (a `POST` that only names what to
/// do, as testpod's readiness switch); the status and the body.
pub fn http_request(
    method: &str,
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String), Error> {
    let what = || format!("{method} {path} from");
    let traffic = |source| Error::Traffic {
        what: what(),
        addr,
        source,
    };
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(traffic)?;
    stream.set_read_timeout(Some(timeout)).map_err(traffic)?;
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .map_err(traffic)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(traffic)?;
    let text = String::from_utf8_lossy(&raw);
    let bad = || Error::BadAnswer {
        what: what(),
        addr,
        answer: text.chars().take(200).collect(),
    };
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(bad)?;
    Ok((status, body.to_string()))
}

/// Sends one datagram to `addr` from each of `n` sockets and reads the
/// answers.
pub fn udp_tally(
    addr: SocketAddr,
    n: usize,
    timeout: Duration,
) -> Result<Tally, Error> {
    let what = |i: usize| format!("udp datagram {}/{n} to", i + 1);
    let local: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let mut sockets = Vec::with_capacity(n);
    let mut tally = Tally::new();
    let mut buf = [0u8; 2048];
    for i in 0..n {
        let traffic = |source| Error::Traffic {
            what: what(i),
            addr,
            source,
        };
        let socket = UdpSocket::bind(local).map_err(traffic)?;
        socket.connect(addr).map_err(traffic)?;
        socket.set_read_timeout(Some(timeout)).map_err(traffic)?;
        socket
            .send(format!("ping {i}\n").as_bytes())
            .map_err(traffic)?;
        let len = socket.recv(&mut buf).map_err(traffic)?;
        let answer =
            String::from_utf8_lossy(buf.get(..len).unwrap_or_default())
                .into_owned();
        let name = pod_name(&answer).ok_or_else(|| Error::BadAnswer {
            what: what(i),
            addr,
            answer: answer.clone(),
        })?;
        *tally.entry(name.to_string()).or_default() += 1;
        sockets.push(socket);
    }
    Ok(tally)
}

/// The pod's name: the first line of its answer, if it has one.
fn pod_name(answer: &str) -> Option<&str> {
    let (name, _) = answer.split_once('\n')?;
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests;

/// The sum of a metric's samples over all its label sets in a Prometheus
/// text exposition (`/metrics`); 0 for a metric it does not show.
pub fn metric_sum(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
