use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread;
use std::time::Duration;

use super::{http_get, pod_name};
use crate::error::Error;

#[test]
fn pod_name_is_the_first_line() {
    let cases = [
        ("pod-a\n", Some("pod-a")),
        ("pod-a\nping 3\n", Some("pod-a")),
        ("pod-a", None),
        ("\nping", None),
        ("", None),
    ];
    for (answer, want) in cases {
        assert_eq!(pod_name(answer), want, "answer {answer:?}");
    }
}

/// Serves one connection on loopback with `answer`, returning the request
/// line the client sent.
fn serve_once(
    answer: &'static str,
) -> (SocketAddr, thread::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    let server = thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        let mut reader = BufReader::new(stream);
        let mut request = String::new();
        reader.read_line(&mut request).expect("request line");
        let mut line = String::new();
        while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
            line.clear();
        }
        reader
            .get_mut()
            .write_all(answer.as_bytes())
            .expect("answer");
        request
    });
    (addr, server)
}

#[test]
fn http_get_returns_the_status_and_the_body() {
    let (addr, server) =
        serve_once("HTTP/1.0 503 Service Unavailable\r\nA: b\r\n\r\nnot yet\n");
    let got =
        http_get(addr, "/healthz", Duration::from_secs(5)).expect("an answer");
    assert_eq!(got, (503, "not yet\n".to_string()));
    assert_eq!(server.join().expect("server"), "GET /healthz HTTP/1.0\r\n");
}

#[test]
fn http_get_rejects_what_is_not_http() {
    let (addr, server) = serve_once("pod-a\n");
    let err = http_get(addr, "/metrics", Duration::from_secs(5))
        .expect_err("not HTTP");
    assert!(matches!(err, Error::BadAnswer { .. }), "{err}");
    server.join().expect("server");
}

#[test]
fn metric_sum_adds_a_metrics_label_sets_and_nothing_else() {
    let exposition = "\
# TYPE m_total counter
m_total{ip_family=\"IPv4\"} 2
m_total{ip_family=\"IPv6\"} 3
m_total_other 100
m 7
";
    assert_eq!(super::metric_sum(exposition, "m_total"), 5.0);
    assert_eq!(super::metric_sum(exposition, "m"), 7.0);
    assert_eq!(super::metric_sum(exposition, "absent"), 0.0);
}
