//! The API side under misbehaving clients: what each attack costs it and
//! whether an honest node notices. One API side serves node views over
//! TLS on loopback, as `api-server --listen` does; one honest node
//! measures, before and during each attack, how long a fresh connection
//! takes to its first full view and how long a change takes to reach its
//! open watch. The baseline is the same node with no attack, in the same
//! process. The attackers run in a child process (this program again,
//! `BENCH_ATTACK_CHILD` naming the attack), each from a loopback address
//! of its own, so the heap, RSS and CPU measured here are the API side's
//! (and the honest node's, on a thread of its own: the API side's CPU is
//! counted on its threads, `api-side`).
//!
//! `cargo bench --bench api_side_attack` (BENCH_ATTACK_SERVICES, default
//! 10000 services × 10 endpoints; BENCH_ATTACK_ROUNDS, default 10
//! measurements of each kind per attack; BENCH_ATTACK_RATE, default 320
//! attempts a second for the paced attacks).
//!
//! The flood of bogus tokens is not here: it needs an API server to
//! review them, and its bound (TokenReviews per second) is a count the
//! unit tests hold.

use std::{
    collections::HashMap,
    future::Future,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant, SystemTime},
};

use bench_support::{
    cluster::{env, listing, slice, ENDPOINTS},
    counting::{cpu_of, mib, process_cpu, threads_cpu, Counting, LIVE, PEAK},
    result_line::ResultLine,
};
use kube::runtime::watcher::Event;
use kube_ipvs_proxy::{
    apiside::{
        cluster::{Cluster, NO_NODE},
        limits::MAX_CONNECTIONS_PER_PEER,
        serve_tls,
        server::{Access, Shared, ViewService},
    },
    nodeview::endpoint::{ApiEndpoint, TlsFiles},
    source::{nodeview, store::Stores, SourceEvent},
};
use nodeview_protocol::v1::{self, node_view_client::NodeViewClient};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tonic::{
    transport::{Certificate, ClientTlsConfig, Endpoint, Identity},
    Streaming,
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NODES: usize = 20;
/// The thread name of the API side's runtime.
const API_SIDE: &str = "api-side";
/// Loopback addresses the attackers come from, each its own peer.
const ATTACKERS: u8 = 32;

/// A CA and certificates signed by it (or not).
struct Pki {
    ca_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    fn new(name: &str) -> Self {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair,
        };
        let key = KeyPair::generate().expect("a key");
        let mut params =
            CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let ca_pem = params.self_signed(&key).expect("a CA").pem();
        Pki {
            ca_pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// `common_name`'s certificate, valid for localhost, as `change`
    /// leaves its parameters.
    fn files(
        &self,
        common_name: &str,
        change: impl FnOnce(&mut rcgen::CertificateParams),
    ) -> TlsFiles {
        use rcgen::{CertificateParams, DnType, KeyPair};
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        change(&mut params);
        let cert = params.signed_by(&key, &self.issuer).expect("a certificate");
        TlsFiles {
            ca: self.ca_pem.clone().into_bytes(),
            identity: Some((
                cert.pem().into_bytes(),
                key.serialize_pem().into_bytes(),
            )),
        }
    }
}

/// VmHWM and VmRSS of the process, in MiB.
fn rss() -> (f64, f64) {
    let status =
        std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| {
                v.trim().trim_end_matches("kB").trim().parse::<f64>().ok()
            })
            .unwrap_or(0.0)
    };
    (kib("VmHWM:") / 1024.0, kib("VmRSS:") / 1024.0)
}

/// Starts a new peak for VmHWM.
fn reset_hwm() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The honest node's side of the bench.
struct Honest {
    endpoint: ApiEndpoint,
    files: TlsFiles,
}

impl Honest {
    /// A fresh connection's time to its whole first view.
    async fn first_view(&self) -> Duration {
        let started = Instant::now();
        let mut client = nodeview::connect(&self.endpoint, Some(&self.files))
            .await
            .expect("the honest node connects");
        let mut stream = watch(&mut client, "node-0").await;
        let first =
            tokio::time::timeout(Duration::from_secs(60), stream.message())
                .await
                .expect("a first message within a minute")
                .expect("no error")
                .expect("a message");
        assert!(
            first.full,
            "the first message of a new watch is a full state"
        );
        // A large view comes in parts; the last says so.
        if !first.synced {
            until_synced(&mut stream).await;
        }
        started.elapsed()
    }
}

async fn watch(
    client: &mut NodeViewClient<tonic::transport::Channel>,
    node: &str,
) -> Streaming<v1::ViewUpdate> {
    client
        .watch(v1::WatchRequest {
            node_name: node.to_owned(),
            ..Default::default()
        })
        .await
        .expect("the watch is accepted")
        .into_inner()
}

/// Reads a watch until what it holds is consistent (the last part of an
/// update).
async fn until_synced(stream: &mut Streaming<v1::ViewUpdate>) {
    loop {
        let message =
            tokio::time::timeout(Duration::from_secs(60), stream.message())
                .await
                .expect("a change within a minute")
                .expect("no error")
                .expect("the watch goes on");
        if message.synced {
            return;
        }
    }
}

/// A running attack: its tasks end when it is dropped.
struct Running(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Running {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

fn attacker_address(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1 + i))
}

async fn connect_from(
    from: IpAddr,
    to: SocketAddr,
) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

/// A channel to the API side from the loopback address `from`, as
/// `files`: each attacker is a peer of its own, so the honest node's
/// share of connections (127.0.0.1's) is its own.
fn channel_from(
    setup: &Setup,
    files: &TlsFiles,
    from: IpAddr,
) -> Option<Endpoint> {
    let (cert, key) = files.identity.clone()?;
    let tls = ClientTlsConfig::new()
        .domain_name("localhost")
        .ca_certificate(Certificate::from_pem(&files.ca))
        .identity(Identity::from_pem(cert, key));
    Some(
        Endpoint::from_shared(format!(
            "https://127.0.0.1:{}",
            setup.server.port()
        ))
        .ok()?
        .tls_config(tls)
        .ok()?
        .local_address(Some(from)),
    )
}

type Attack = fn(Arc<Setup>) -> Pin<Box<dyn Future<Output = Running> + Send>>;

/// What every attack may use.
struct Setup {
    server: SocketAddr,
    /// Each paced attacker's time between attempts.
    period: Duration,
    /// Credentials by name (see [`credentials`]).
    files: HashMap<String, TlsFiles>,
}

impl Setup {
    fn files(&self, name: &str) -> Option<&TlsFiles> {
        self.files.get(name)
    }
}

/// The attackers' credentials, by name: `foreign` (node-0's name from
/// another CA), `expired` (node-0's, expired), and each node's own.
fn credentials(pki: &Pki) -> HashMap<String, TlsFiles> {
    let mut files = HashMap::new();
    files.insert(
        "foreign".to_owned(),
        Pki::new("another CA").files("node-0", |_| {}),
    );
    files.insert(
        "expired".to_owned(),
        pki.files("node-0", |p| {
            p.not_before = rcgen::date_time_ymd(2000, 1, 1);
            p.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }),
    );
    for i in 1..NODES {
        let node = format!("node-{i}");
        files.insert(node.clone(), pki.files(&node, |_| {}));
    }
    files
}

/// Writes credentials where the child reads them.
fn write_credentials(
    dir: &std::path::Path,
    files: &HashMap<String, TlsFiles>,
) -> std::io::Result<()> {
    for (name, tls) in files {
        std::fs::write(dir.join(format!("{name}.ca")), &tls.ca)?;
        if let Some((cert, key)) = &tls.identity {
            std::fs::write(dir.join(format!("{name}.crt")), cert)?;
            std::fs::write(dir.join(format!("{name}.key")), key)?;
        }
    }
    Ok(())
}

fn read_credentials(
    dir: &std::path::Path,
) -> std::io::Result<HashMap<String, TlsFiles>> {
    let mut files = HashMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "ca") {
            continue;
        }
        let read = |ext: &str| std::fs::read(path.with_extension(ext));
        let name = path
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        files.insert(
            name,
            TlsFiles {
                ca: read("ca")?,
                identity: Some((read("crt")?, read("key")?)),
            },
        );
    }
    Ok(files)
}

/// Attempts the attackers made, refusals they got, and answers a refused
/// client must never get, over one measurement.
static ATTEMPTS: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static SERVED: AtomicU64 = AtomicU64::new(0);

/// Connections that never speak, twice each address's share, from
/// every attacker address: those past the share must be closed at once.
fn silent_connections(
    setup: Arc<Setup>,
) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    Box::pin(async move {
        let mut held = Vec::new();
        for i in 0..ATTACKERS {
            for _ in 0..2 * MAX_CONNECTIONS_PER_PEER {
                ATTEMPTS.fetch_add(1, Ordering::Relaxed);
                if let Ok(stream) =
                    connect_from(attacker_address(i), setup.server).await
                {
                    held.push(stream);
                }
            }
        }
        // A connection the API side closed reads as its end at once.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut open = Vec::new();
        for mut stream in held {
            let mut byte = [0u8; 1];
            match tokio::time::timeout(
                Duration::from_millis(1),
                stream.read(&mut byte),
            )
            .await
            {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    REFUSED.fetch_add(1, Ordering::Relaxed);
                }
                _ => open.push(stream),
            }
        }
        Running(vec![tokio::spawn(async move {
            let _open = open;
            std::future::pending::<()>().await
        })])
    })
}

/// Connections that start a TLS handshake and stall in it, each
/// address's share: a record header that promises a ClientHello and
/// never delivers it. The API side ends them after its handshake
/// timeout.
fn stalled_handshakes(
    setup: Arc<Setup>,
) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    Box::pin(async move {
        let mut held = Vec::new();
        for i in 0..ATTACKERS {
            for _ in 0..MAX_CONNECTIONS_PER_PEER {
                ATTEMPTS.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut stream) =
                    connect_from(attacker_address(i), setup.server).await
                {
                    let _ = stream
                        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
                        .await;
                    held.push(stream);
                }
            }
        }
        Running(vec![tokio::spawn(async move {
            let _held = held;
            std::future::pending::<()>().await
        })])
    })
}

/// One attacker's loop: `attempt` once per `period`, counted.
fn paced<F, Fut>(
    period: Duration,
    mut attempt: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Outcome> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            ATTEMPTS.fetch_add(1, Ordering::Relaxed);
            match attempt().await {
                Outcome::Refused => REFUSED.fetch_add(1, Ordering::Relaxed),
                Outcome::Served => SERVED.fetch_add(1, Ordering::Relaxed),
            };
        }
    })
}

enum Outcome {
    Refused,
    Served,
}

/// Clients that keep trying with certificates that must be refused: one
/// from another CA, one expired, one for another node asking for
/// node-0's view. Each attacker address runs one such loop, a new
/// connection (a full handshake) each time.
fn refused_clients(
    setup: Arc<Setup>,
) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    Box::pin(async move {
        let kinds = ["foreign", "expired", "node-1"];
        let tasks = (0..ATTACKERS)
            .filter_map(|i| {
                let files = setup.files(kinds[usize::from(i) % kinds.len()])?;
                let endpoint =
                    channel_from(&setup, files, attacker_address(i))?;
                Some(paced(setup.period, move || {
                    let endpoint = endpoint.clone();
                    async move {
                        let Ok(channel) = endpoint.connect().await else {
                            return Outcome::Refused;
                        };
                        let answer = NodeViewClient::new(channel)
                            .watch(v1::WatchRequest {
                                node_name: "node-0".to_owned(),
                                ..Default::default()
                            })
                            .await;
                        match answer {
                            Err(_) => Outcome::Refused,
                            Ok(_) => Outcome::Served,
                        }
                    }
                }))
            })
            .collect();
        Running(tasks)
    })
}

/// Watch requests of 1 MiB, 256 times the limit, over and over, on one
/// connection per attacker address.
fn oversized_requests(
    setup: Arc<Setup>,
) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    Box::pin(async move {
        let mut tasks = Vec::new();
        for i in 0..ATTACKERS {
            let Some(endpoint) = setup.files("node-1").and_then(|files| {
                channel_from(&setup, files, attacker_address(i))
            }) else {
                continue;
            };
            let Ok(channel) = endpoint.connect().await else {
                continue;
            };
            let client = NodeViewClient::new(channel);
            let request = v1::WatchRequest {
                node_name: "node-1".to_owned(),
                instance: "x".repeat(1 << 20),
                revision: 0,
            };
            tasks.push(paced(setup.period, move || {
                let mut client = client.clone();
                let request = request.clone();
                async move {
                    match client.watch(request).await {
                        Err(_) => Outcome::Refused,
                        Ok(_) => Outcome::Served,
                    }
                }
            }));
        }
        Running(tasks)
    })
}

/// Nodes with valid certificates that watch their views and read them:
/// the baseline for `stalled_readers`, which has as many nodes watching.
fn reading_nodes(
    setup: Arc<Setup>,
) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    other_nodes(setup, true)
}

/// Nodes with valid certificates that watch their views and never read:
/// each holds what its stream's buffers take until the API side gives
/// up on it, and must not delay the others.
fn stalled_readers(
    setup: Arc<Setup>,
) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    other_nodes(setup, false)
}

/// Every node but node-0 watching its view, reading it or not.
fn other_nodes(
    setup: Arc<Setup>,
    read: bool,
) -> Pin<Box<dyn Future<Output = Running> + Send>> {
    Box::pin(async move {
        let mut tasks = Vec::new();
        for i in 1..NODES {
            let node = format!("node-{i}");
            // Each node from an address of its own, as nodes are.
            let from = attacker_address(u8::try_from(i).unwrap_or(0));
            let Some(endpoint) = setup
                .files(&node)
                .and_then(|files| channel_from(&setup, files, from))
            else {
                continue;
            };
            let Ok(channel) = endpoint
                .initial_stream_window_size(Some(64 * 1024))
                .initial_connection_window_size(Some(64 * 1024))
                .connect()
                .await
            else {
                continue;
            };
            ATTEMPTS.fetch_add(1, Ordering::Relaxed);
            let mut client = NodeViewClient::new(channel);
            let mut stream = watch(&mut client, &node).await;
            tasks.push(tokio::spawn(async move {
                let _client = client;
                if read {
                    while let Ok(Some(_)) = stream.message().await {}
                } else {
                    let _stream = stream;
                    std::future::pending::<()>().await
                }
            }));
        }
        Running(tasks)
    })
}

/// The attacks by name; `none` is the baseline.
const ATTACKS: [(&str, Option<Attack>); 7] = [
    ("none", None),
    ("silent_connections", Some(silent_connections)),
    ("stalled_handshakes", Some(stalled_handshakes)),
    ("refused_certificates", Some(refused_clients)),
    ("oversized_requests", Some(oversized_requests)),
    ("reading_nodes", Some(reading_nodes)),
    ("stalled_readers", Some(stalled_readers)),
];

/// The child's side: runs one attack until told to stop, and answers
/// each line on stdin (`mark`, `stop`) with its counts.
fn child(name: &str) {
    use std::io::BufRead;
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let setup = Setup {
        server: var("BENCH_ATTACK_SERVER")
            .parse()
            .expect("the API side's address"),
        period: Duration::from_micros(
            var("BENCH_ATTACK_PERIOD_US").parse().unwrap_or(100_000),
        ),
        files: read_credentials(std::path::Path::new(&var("BENCH_ATTACK_DIR")))
            .expect("the credentials"),
    };
    let Some((_, Some(attack))) = ATTACKS.iter().find(|(n, _)| *n == name)
    else {
        eprintln!("api_side_attack: no attack {name}");
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("attackers")
        .enable_all()
        .build()
        .expect("the attackers' runtime");
    let running = runtime.block_on(attack(Arc::new(setup)));
    println!("ready");
    let counts = || {
        let [a, r, s] = [&ATTEMPTS, &REFUSED, &SERVED]
            .map(|counter| counter.load(Ordering::Relaxed));
        println!("counts {a} {r} {s}");
    };
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        counts();
        if line == "stop" {
            break;
        }
    }
    drop(running);
}

/// An attack running in a child process.
struct Attacker {
    process: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Attacker {
    fn start(
        name: &str,
        server: SocketAddr,
        period: Duration,
        dir: &std::path::Path,
    ) -> Self {
        use std::{io::BufRead, process::Stdio};
        let mut process = std::process::Command::new(
            std::env::current_exe().expect("this program"),
        )
        .env("BENCH_ATTACK_CHILD", name)
        .env("BENCH_ATTACK_SERVER", server.to_string())
        .env("BENCH_ATTACK_PERIOD_US", period.as_micros().to_string())
        .env("BENCH_ATTACK_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the attacker starts");
        let stdin = process.stdin.take().expect("its stdin");
        let mut stdout =
            std::io::BufReader::new(process.stdout.take().expect("its stdout"))
                .lines();
        let ready = stdout.next();
        assert!(
            matches!(&ready, Some(Ok(line)) if line == "ready"),
            "the attacker {name} did not start: {ready:?}"
        );
        Attacker {
            process,
            stdin,
            stdout,
        }
    }

    /// Attempts, refusals and wrongly served requests so far.
    fn ask(&mut self, word: &str) -> [u64; 3] {
        use std::io::Write;
        let _ = writeln!(self.stdin, "{word}");
        let line = self.stdout.next().and_then(Result::ok).unwrap_or_default();
        let mut counts = [0; 3];
        for (count, value) in
            counts.iter_mut().zip(line.split_whitespace().skip(1))
        {
            *count = value.parse().unwrap_or(0);
        }
        counts
    }

    /// The child's CPU time so far.
    fn cpu(&self) -> Duration {
        cpu_of(self.process.id())
    }

    fn stop(mut self) -> [u64; 3] {
        let counts = self.ask("stop");
        let _ = self.process.kill();
        let _ = self.process.wait();
        counts
    }
}

struct Measured {
    /// The measurement's wall time.
    took: Duration,
    /// Since the attack began: connections or requests tried, refused,
    /// and served although they must not be.
    attempts: u64,
    refused: u64,
    served: u64,
    /// Attempts within the measurement (paced attacks only).
    attempts_measured: u64,
    first_view: Vec<Duration>,
    change: Vec<Duration>,
    api_side_cpu: Duration,
    /// This process's CPU beside the API side's: the honest node's.
    honest_cpu: Duration,
    attackers_cpu: Duration,
    heap_peak_mib: f64,
    rss_peak_mib: f64,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    if let Ok(name) = std::env::var("BENCH_ATTACK_CHILD") {
        child(&name);
        return;
    }
    let services = env("BENCH_ATTACK_SERVICES", 10_000);
    let rounds = env("BENCH_ATTACK_ROUNDS", 10);
    let rate = env("BENCH_ATTACK_RATE", 320).max(1);
    let period = Duration::from_secs_f64(f64::from(ATTACKERS) / rate as f64);
    println!("api_side_attack: {services} services × {ENDPOINTS} endpoints, {NODES} nodes, {rounds} rounds per measure, paced attacks at {rate} a second");

    // The API side's runtime, on threads of its own.
    let api_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(API_SIDE)
        .enable_all()
        .build()
        .expect("the API side's runtime");
    // The honest node on this thread, as on a node of its own.
    let honest_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the honest node's runtime");

    let shared = Shared::new(Cluster::new(SystemTime::now()));
    let mut stores = Stores::new(NO_NODE);
    for event in listing(services, NODES) {
        shared
            .apply(stores.apply(event))
            .expect("the cluster's thread");
    }
    api_runtime
        .block_on(shared.sync())
        .expect("the cluster's thread");

    let pki = Pki::new("kube-ipvs-proxy bench CA");
    let server_files = pki.files("api-side", |p| {
        p.subject_alt_names
            .push(rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    });
    let dir = std::env::temp_dir()
        .join(format!("api-side-attack-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for the credentials");
    write_credentials(&dir, &credentials(&pki))
        .expect("the credentials written");
    let listener = api_runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a loopback port");
    let server = listener.local_addr().expect("its address");
    let service = ViewService::new(shared.clone(), Access::ClientCertificates);
    api_runtime.spawn(async move {
        if let Err(e) =
            serve_tls(listener, &server_files, service, std::future::pending())
                .await
        {
            eprintln!("the API side stopped: {e}");
        }
    });
    let honest = Honest {
        endpoint: ApiEndpoint::Tls {
            host: "localhost".into(),
            port: server.port(),
        },
        files: pki.files("node-0", |_| {}),
    };

    let mut version = 0;
    let mut results: Vec<(&str, Measured)> = Vec::new();
    for (name, attack) in ATTACKS {
        let mut attacker =
            attack.map(|_| Attacker::start(name, server, period, &dir));
        // Let it reach its steady state (connections held, loops going).
        std::thread::sleep(Duration::from_secs(1));
        reset_hwm();
        PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
        let started = Instant::now();
        let marked =
            attacker.as_mut().map(|a| a.ask("mark")).unwrap_or_default();
        let attackers_cpu =
            attacker.as_ref().map(Attacker::cpu).unwrap_or_default();
        let cpu = threads_cpu(API_SIDE);
        let all_cpu = process_cpu();

        let mut first_view: Vec<Duration> = (0..rounds)
            .map(|_| honest_runtime.block_on(honest.first_view()))
            .collect();
        let mut change = Vec::new();
        honest_runtime.block_on(async {
            let mut client =
                nodeview::connect(&honest.endpoint, Some(&honest.files))
                    .await
                    .expect("connects");
            let mut stream = watch(&mut client, "node-0").await;
            until_synced(&mut stream).await;
            for _ in 0..rounds {
                version += 1;
                // A slice of a service with an endpoint on node-0.
                let i = version % (services / NODES).max(1) * NODES;
                let started = Instant::now();
                shared
                    .apply(stores.apply(SourceEvent::EndpointSlice(
                        Event::Apply(slice(i, NODES, version)),
                    )))
                    .expect("the cluster's thread");
                shared.sync().await.expect("the cluster's thread");
                until_synced(&mut stream).await;
                change.push(started.elapsed());
            }
        });
        let api_side_cpu = threads_cpu(API_SIDE).saturating_sub(cpu);
        let attackers_cpu = attacker
            .as_ref()
            .map(Attacker::cpu)
            .unwrap_or_default()
            .saturating_sub(attackers_cpu);
        let took = started.elapsed();
        let [attempts, refused, served] =
            attacker.map(Attacker::stop).unwrap_or_default();
        let measured = Measured {
            took,
            attempts,
            refused,
            served,
            attempts_measured: attempts.saturating_sub(marked[0]),
            api_side_cpu,
            honest_cpu: (process_cpu() - all_cpu).saturating_sub(api_side_cpu),
            attackers_cpu,
            heap_peak_mib: mib(PEAK.load(Ordering::Relaxed)),
            rss_peak_mib: rss().0,
            first_view: {
                first_view.sort();
                first_view
            },
            change: {
                change.sort();
                change
            },
        };
        results.push((name, measured));
    }
    let _ = std::fs::remove_dir_all(&dir);

    let Some((_, base)) = results.first() else {
        return;
    };
    let base_first = percentile(&base.first_view, 0.5);
    let base_change = percentile(&base.change, 0.5);
    println!();
    println!(
        "{:<22} {:>7} {:>7} {:>17} {:>17} {:>9} {:>12} {:>10} {:>9}",
        "attack",
        "tried",
        "refused",
        "first view p50 ms",
        "change p50 ms",
        "API CPU %",
        "API µs/try",
        "heap peak",
        "RSS peak"
    );
    for (name, m) in &results {
        let first = percentile(&m.first_view, 0.5);
        let change = percentile(&m.change, 0.5);
        println!(
            "{:<22} {:>7} {:>7} {:>9.1} ×{:<6.2} {:>9.1} ×{:<6.2} {:>9.1} {:>12} {:>10.1} {:>9.1}",
            name,
            m.attempts,
            m.refused,
            ms(first),
            ms(first) / ms(base_first).max(f64::MIN_POSITIVE),
            ms(change),
            ms(change) / ms(base_change).max(f64::MIN_POSITIVE),
            m.cpu_percent(),
            m.cpu_per_attempt_us(base)
                .map_or_else(|| "-".to_owned(), |us| format!("{us:.0}")),
            m.heap_peak_mib,
            m.rss_peak_mib,
        );
    }
    let mut served = 0;
    for (name, m) in &results {
        for (what, count) in [
            ("tried", m.attempts),
            ("refused", m.refused),
            ("served", m.served),
        ] {
            // Counts: exact in an f64 far beyond any attack's.
            ResultLine::new("attack", name, what, count as f64, 0).print();
        }
        for (what, value) in [
            ("first_view_p50_ms", ms(percentile(&m.first_view, 0.5))),
            ("first_view_max_ms", ms(percentile(&m.first_view, 1.0))),
            ("change_p50_ms", ms(percentile(&m.change, 0.5))),
            ("change_max_ms", ms(percentile(&m.change, 1.0))),
            ("api_side_cpu_percent", m.cpu_percent()),
            ("honest_cpu_percent", m.percent(m.honest_cpu)),
            ("attackers_cpu_percent", m.percent(m.attackers_cpu)),
            ("heap_peak_mib", m.heap_peak_mib),
            ("rss_peak_mib", m.rss_peak_mib),
        ] {
            ResultLine::new("attack", name, what, value, 1).print();
        }
        if let Some(us) = m.cpu_per_attempt_us(base) {
            ResultLine::new("attack", name, "api_side_cpu_us_per_try", us, 0)
                .print();
        }
        served += m.served;
    }
    if served > 0 {
        eprintln!("api_side_attack: {served} requests that must be refused were served");
        std::process::exit(1);
    }
}

impl Measured {
    /// The API side's CPU over the measurement, in % of one core.
    fn cpu_percent(&self) -> f64 {
        100.0 * self.api_side_cpu.as_secs_f64()
            / self.took.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    fn percent(&self, cpu: Duration) -> f64 {
        100.0 * cpu.as_secs_f64()
            / self.took.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// The API side's CPU per attempt, for paced attacks: what it spent
    /// beyond the baseline's rate (the honest node's own work).
    fn cpu_per_attempt_us(&self, base: &Measured) -> Option<f64> {
        let base_rate = base.api_side_cpu.as_secs_f64()
            / base.took.as_secs_f64().max(f64::MIN_POSITIVE);
        let extra = self.api_side_cpu.as_secs_f64()
            - base_rate * self.took.as_secs_f64();
        (self.attempts_measured > 0)
            .then(|| extra.max(0.0) * 1e6 / self.attempts_measured as f64)
    }
}
