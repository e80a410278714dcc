//! The view service end to end over a real Unix socket: a node watches,
//! gets its full state, then only what changed, and resumes after a
//! reconnect.

use std::{sync::Arc, time::Duration, time::SystemTime};

use kube::runtime::watcher::Event;
use nodeview_protocol::{
    prost::Message as _,
    v1::{self, node_view_client::NodeViewClient},
};
use pretty_assertions::assert_eq;
use tonic::{transport::Channel, Streaming};

use super::{
    cluster::{Cluster, NO_NODE},
    serve_unix,
    server::{Access, Shared, ViewService},
};
use crate::{
    model::fixtures::*,
    nodeview::{wire, Change, Received},
    source::{
        nodeview::{connect, connect_unix},
        store::Stores,
        SourceEvent,
    },
};

struct ApiSide {
    shared: Arc<Shared>,
    stores: Stores,
    socket: std::path::PathBuf,
    _dir: tempdir::Dir,
}

mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(pub std::path::PathBuf);

    impl Dir {
        pub fn new(name: &str) -> Self {
            let path = std::env::temp_dir()
                .join(format!("kube-ipvs-proxy-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl ApiSide {
    async fn start(name: &str) -> Self {
        Self::start_with(name, Shared::new(Cluster::new(SystemTime::now())))
            .await
    }

    /// An API side serving `shared` on a socket of its own.
    async fn start_with(name: &str, shared: Arc<Shared>) -> Self {
        let dir = tempdir::Dir::new(name);
        let socket = dir.0.join("views.sock");
        let service = ViewService::new(shared.clone(), Access::Socket);
        let path = socket.clone();
        tokio::spawn(async move {
            serve_unix(&path, service, std::future::pending()).await
        });
        for _ in 0..100 {
            if socket.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Self {
            shared,
            stores: Stores::new(NO_NODE),
            socket,
            _dir: dir,
        }
    }

    fn event(&mut self, event: SourceEvent) {
        let changes = self.stores.apply(event);
        self.shared.apply(changes).unwrap();
    }

    /// Lists the given objects as a starting watch would, then syncs.
    async fn list(
        &mut self,
        services: Vec<k8s_openapi::api::core::v1::Service>,
    ) {
        self.event(SourceEvent::Node(Event::Init));
        self.event(SourceEvent::Node(Event::InitApply(node("node-a", |n| {
            n.metadata.labels = Some(
                [(
                    "topology.kubernetes.io/zone".to_owned(),
                    "zone-a".to_owned(),
                )]
                .into(),
            );
        }))));
        self.event(SourceEvent::Node(Event::InitDone));
        self.event(SourceEvent::Service(Event::Init));
        for svc in services {
            self.event(SourceEvent::Service(Event::InitApply(svc)));
        }
        self.event(SourceEvent::Service(Event::InitDone));
        self.event(SourceEvent::EndpointSlice(Event::Init));
        self.event(SourceEvent::EndpointSlice(Event::InitApply(web_slice(&[
            ("198.19.0.1", "node-a"),
            ("198.19.0.2", "node-b"),
        ]))));
        self.event(SourceEvent::EndpointSlice(Event::InitDone));
        self.shared.sync().await.unwrap();
    }

    async fn client(&self) -> NodeViewClient<Channel> {
        connect_unix(self.socket.clone()).await.unwrap()
    }

    /// A client on a connection of its own that grants the server little
    /// to send ahead, so that a stalled node fills the server's own
    /// buffers within a test's changes.
    async fn stingy_client(&self) -> NodeViewClient<Channel> {
        let path = self.socket.clone();
        let channel =
            tonic::transport::Endpoint::from_static("http://api-side.invalid")
                .initial_stream_window_size(Some(64 * 1024))
                .initial_connection_window_size(Some(64 * 1024))
                .connect_with_connector(tower::service_fn(
                    move |_: http::Uri| {
                        let path = path.clone();
                        async move {
                            Ok::<_, std::io::Error>(
                                hyper_util::rt::TokioIo::new(
                                    tokio::net::UnixStream::connect(path)
                                        .await?,
                                ),
                            )
                        }
                    },
                ))
                .await
                .unwrap();
        NodeViewClient::new(channel)
    }
}

fn web() -> k8s_openapi::api::core::v1::Service {
    service("ns", "web", |s| add_port(s, "http", 80, "TCP"))
}

fn web_slice(
    endpoints: &[(&str, &str)],
) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    slice("ns", "web-1", "web", |s| {
        add_slice_port(s, "http", 8080, "TCP");
        s.endpoints = Some(
            endpoints
                .iter()
                .map(|(ip, node)| {
                    endpoint(ip, |e| e.node_name = Some((*node).to_owned()))
                })
                .collect(),
        );
    })
}

async fn watch(
    client: &mut NodeViewClient<Channel>,
    node: &str,
    instance: &str,
    revision: u64,
) -> Streaming<v1::ViewUpdate> {
    client
        .watch(v1::WatchRequest {
            node_name: node.to_owned(),
            instance: instance.to_owned(),
            revision,
        })
        .await
        .unwrap()
        .into_inner()
}

/// The next message, or a failure after a while.
async fn next(stream: &mut Streaming<v1::ViewUpdate>) -> v1::ViewUpdate {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a message within 10 s")
        .unwrap()
        .expect("the stream goes on")
}

#[tokio::test]
async fn a_node_gets_its_view_then_only_changes_and_resumes() {
    let mut api = ApiSide::start("views").await;
    let mut client = api.client().await;
    // Watching before the cluster is listed: nothing comes until it is.
    let mut stream = watch(&mut client, "node-a", "", 0).await;
    let early =
        tokio::time::timeout(Duration::from_millis(200), stream.message());
    assert!(early.await.is_err(), "no view before the cluster is listed");
    api.list(vec![web()]).await;

    let first = next(&mut stream).await;
    assert!(first.full && first.synced);
    let mut received = Received::default();
    received.apply(wire::decode(first.clone()).unwrap());
    assert_eq!(received.node.as_ref().unwrap().zone, "zone-a");
    let eps = received.endpoints.values().next().unwrap();
    let ips = |list: &[Arc<crate::model::EndpointInfo>]| -> Vec<String> {
        list.iter().map(|e| e.ip.to_string()).collect()
    };
    assert_eq!(ips(&eps.ipv4.cluster), ["198.19.0.1", "198.19.0.2"]);
    assert_eq!(ips(&eps.local), ["198.19.0.1"], "node-a's own");

    // A change: only that port's endpoints come, not a full state.
    api.event(SourceEvent::EndpointSlice(Event::Apply(web_slice(&[(
        "198.19.0.1",
        "node-a",
    )]))));
    api.shared.sync().await.unwrap();
    let second = next(&mut stream).await;
    assert!(!second.full && second.synced);
    let update = wire::decode(second.clone()).unwrap();
    assert!(
        matches!(update.changes.as_slice(), [Change::Endpoints(..)]),
        "{update:?}"
    );
    received.apply(update);
    let eps = received.endpoints.values().next().unwrap();
    assert_eq!(ips(&eps.ipv4.cluster), ["198.19.0.1"]);

    // Gone and back: the node resumes from its revision, and a change
    // made while it was away comes as that change alone.
    drop(stream);
    api.event(SourceEvent::Service(Event::Delete(web())));
    api.shared.sync().await.unwrap();
    let mut stream =
        watch(&mut client, "node-a", &second.instance, second.revision).await;
    let third = next(&mut stream).await;
    assert!(!third.full && third.synced);
    let update = wire::decode(third).unwrap();
    assert_eq!(update.changes.len(), 2, "service and endpoints deleted");
    received.apply(update);
    assert!(received.services.is_empty() && received.endpoints.is_empty());

    // From another server's revision: a full state.
    let mut stream = watch(&mut client, "node-a", "other", 1).await;
    let fourth = next(&mut stream).await;
    assert!(fourth.full && fourth.synced);
    assert_eq!(fourth.changes.len(), 1, "the node alone");
}

/// Each stream's first message names the release the API side behaves
/// as, once its source has read it; nothing else repeats it.
#[tokio::test]
async fn each_stream_starts_with_the_release_behaved_as() {
    let kubernetes = Arc::new(std::sync::OnceLock::new());
    let shared = Shared::with_kubernetes(
        Cluster::new(SystemTime::now()),
        Arc::clone(&kubernetes),
    );
    let mut api = ApiSide::start_with("release", shared).await;
    let mut client = api.client().await;
    let mut stream = watch(&mut client, "node-a", "", 0).await;
    // The source reads the release before its first list.
    let release = crate::version::Kubernetes {
        major: "1".into(),
        minor: "36".into(),
        git_version: "v1.36.3".into(),
    };
    kubernetes.set(release.clone()).unwrap();
    api.list(vec![web()]).await;
    let first = next(&mut stream).await;
    assert!(first.full);
    assert_eq!(
        first.kubernetes.clone().map(wire::decode_kubernetes),
        Some(Ok(release.clone()))
    );
    api.event(SourceEvent::Service(Event::Delete(web())));
    api.shared.sync().await.unwrap();
    let second = next(&mut stream).await;
    assert!(!second.full);
    assert_eq!(second.kubernetes, None, "once a stream");

    // A node that resumes hears it again, in its catch-up.
    let mut stream =
        watch(&mut client, "node-a", &second.instance, second.revision).await;
    let resumed = next(&mut stream).await;
    assert!(!resumed.full && resumed.changes.is_empty(), "{resumed:?}");
    assert_eq!(
        resumed.kubernetes.map(wire::decode_kubernetes),
        Some(Ok(release))
    );
}

#[tokio::test]
async fn a_watch_without_a_node_name_is_refused() {
    let mut api = ApiSide::start("refused").await;
    api.list(vec![]).await;
    let mut client = api.client().await;
    let status = client.watch(v1::WatchRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn an_oversized_watch_request_is_refused_and_honest_nodes_go_on() {
    let mut api = ApiSide::start("oversized").await;
    api.list(vec![]).await;
    let mut client = api.client().await;
    let status = client
        .watch(v1::WatchRequest {
            node_name: "n".repeat(super::server::MAX_REQUEST_BYTES),
            ..v1::WatchRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status}");
    // The same connection still serves a node its view.
    let mut stream = watch(&mut client, "node-a", "", 0).await;
    let first = next(&mut stream).await;
    assert!(first.full, "{first:?}");
}

/// Certificates for the TLS tests: a CA, the API side's certificate for
/// localhost, and client certificates naming nodes.
struct Pki {
    ca_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    fn new() -> Self {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair,
        };
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-ipvs-proxy test CA");
        let ca_pem = params.self_signed(&key).unwrap().pem();
        Pki {
            ca_pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate and key for `common_name`, valid for localhost.
    fn files(&self, common_name: &str) -> crate::nodeview::endpoint::TlsFiles {
        self.files_with(common_name, |_| {})
    }

    /// The same, its parameters changed by `change` before signing.
    fn files_with(
        &self,
        common_name: &str,
        change: impl FnOnce(&mut rcgen::CertificateParams),
    ) -> crate::nodeview::endpoint::TlsFiles {
        use rcgen::{CertificateParams, DnType, KeyPair};
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])
        .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        change(&mut params);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        crate::nodeview::endpoint::TlsFiles {
            ca: self.ca_pem.clone().into_bytes(),
            identity: Some((
                cert.pem().into_bytes(),
                key.serialize_pem().into_bytes(),
            )),
        }
    }
}

/// Over TCP every node shows a client certificate, and the one its
/// certificate names is the only view it may watch.
#[tokio::test]
async fn over_tls_a_node_watches_its_own_view_only() {
    use crate::{
        apiside::serve_tls, nodeview::endpoint::ApiEndpoint,
        source::nodeview::ConnectError,
    };
    let pki = Pki::new();
    let mut api = ApiSide::start("tls").await;
    api.list(vec![web()]).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server_files = pki.files("api-side");
    let service =
        ViewService::new(api.shared.clone(), Access::ClientCertificates);
    tokio::spawn(async move {
        serve_tls(listener, &server_files, service, std::future::pending())
            .await
    });
    let endpoint = ApiEndpoint::Tls {
        host: "localhost".into(),
        port,
    };
    let watch_as = |cn: &'static str, node: &'static str| {
        let endpoint = endpoint.clone();
        let files = pki.files(cn);
        async move {
            let mut client = connect(&endpoint, Some(&files)).await.unwrap();
            let request = v1::WatchRequest {
                node_name: node.to_owned(),
                ..Default::default()
            };
            match client.watch(request).await {
                Ok(response) => {
                    let mut stream = response.into_inner();
                    Ok(next(&mut stream).await)
                }
                Err(status) => Err(status),
            }
        }
    };

    let own = watch_as("node-a", "node-a").await.unwrap();
    assert!(own.full && own.synced);
    // A kubelet's client certificate names its node so.
    let kubelet = watch_as("system:node:node-b", "node-b").await.unwrap();
    assert!(kubelet.full);
    let other = watch_as("node-a", "node-b").await.unwrap_err();
    assert_eq!(other.code(), tonic::Code::PermissionDenied, "{other:?}");
    assert!(other
        .message()
        .contains("node-a may not watch the view of node-b"));

    // Without credentials the client refuses to try, and a certificate
    // from another CA is refused by the server.
    assert!(matches!(
        connect(&endpoint, None).await,
        Err(ConnectError::NoCredentials)
    ));
    let mut foreign = Pki::new().files("node-a");
    foreign.ca = pki.ca_pem.clone().into_bytes();
    let refused = match connect(&endpoint, Some(&foreign)).await {
        Err(_) => true,
        Ok(mut client) => client
            .watch(v1::WatchRequest {
                node_name: "node-a".to_owned(),
                ..Default::default()
            })
            .await
            .is_err(),
    };
    assert!(refused, "a client certificate from another CA is refused");
}

/// A TLS API side on loopback that accepts client certificates of `pki`.
async fn serve_tls_on_loopback(
    pki: &Pki,
    shared: Arc<Shared>,
) -> crate::nodeview::endpoint::ApiEndpoint {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server_files = pki.files("api-side");
    let service = ViewService::new(shared, Access::ClientCertificates);
    tokio::spawn(async move {
        super::serve_tls(
            listener,
            &server_files,
            service,
            std::future::pending(),
        )
        .await
    });
    crate::nodeview::endpoint::ApiEndpoint::Tls {
        host: "localhost".into(),
        port,
    }
}

/// The first message of `node`'s watch over `endpoint` as `files`.
async fn first_message(
    endpoint: &crate::nodeview::endpoint::ApiEndpoint,
    files: &crate::nodeview::endpoint::TlsFiles,
    node: &str,
) -> Result<v1::ViewUpdate, String> {
    let mut client = connect(endpoint, Some(files))
        .await
        .map_err(|e| e.to_string())?;
    let request = v1::WatchRequest {
        node_name: node.to_owned(),
        ..Default::default()
    };
    let mut stream = client
        .watch(request)
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    match tokio::time::timeout(Duration::from_secs(10), stream.message()).await
    {
        Ok(Ok(Some(message))) => Ok(message),
        other => Err(format!("{other:?}")),
    }
}

/// A certificate of the right CA, for the right node, but expired (or
/// not yet valid) is refused at the handshake.
#[tokio::test]
async fn an_expired_client_certificate_is_refused() {
    let pki = Pki::new();
    let mut api = ApiSide::start("expired").await;
    api.list(vec![web()]).await;
    let endpoint = serve_tls_on_loopback(&pki, api.shared.clone()).await;
    let valid = first_message(&endpoint, &pki.files("node-a"), "node-a").await;
    assert!(valid.is_ok_and(|m| m.full), "the node's own certificate");
    for (from, to) in
        [((2000, 1, 1), (2001, 1, 1)), ((2999, 1, 1), (3000, 1, 1))]
    {
        let files = pki.files_with("node-a", |params| {
            params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
            params.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
        });
        let refused = first_message(&endpoint, &files, "node-a").await;
        assert!(refused.is_err(), "valid {from:?} to {to:?}: {refused:?}");
    }
}

/// A client that opens connections and never speaks holds its share of
/// them, no more: the next one from its address is closed at once, and
/// a node elsewhere still gets its view as quickly as before.
#[tokio::test]
async fn a_flood_of_connections_from_one_address_is_cut_at_its_share() {
    use tokio::io::AsyncReadExt;

    use super::limits::MAX_CONNECTIONS_PER_PEER;

    let pki = Pki::new();
    let mut api = ApiSide::start("flood").await;
    api.list(vec![web()]).await;
    let endpoint = serve_tls_on_loopback(&pki, api.shared.clone()).await;
    let crate::nodeview::endpoint::ApiEndpoint::Tls { port, .. } = &endpoint
    else {
        unreachable!()
    };
    let honest = pki.files("node-a");
    let started = std::time::Instant::now();
    first_message(&endpoint, &honest, "node-a").await.unwrap();
    let before = started.elapsed();

    let connect_from_another_address = || async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        socket
            .connect(format!("127.0.0.1:{port}").parse().unwrap())
            .await
            .unwrap()
    };
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS_PER_PEER {
        held.push(connect_from_another_address().await);
    }
    let mut extra = connect_from_another_address().await;
    let mut byte = [0u8; 1];
    let closed =
        tokio::time::timeout(Duration::from_secs(5), extra.read(&mut byte))
            .await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "the connection past the share is closed: {closed:?}"
    );
    // Those within the share are still open (waiting for a handshake).
    let open = tokio::time::timeout(
        Duration::from_millis(300),
        held[0].read(&mut byte),
    )
    .await;
    assert!(open.is_err(), "a connection within the share was closed");

    let started = std::time::Instant::now();
    first_message(&endpoint, &honest, "node-a").await.unwrap();
    let during = started.elapsed();
    eprintln!(
        "honest node's first message: {before:?} before, {during:?} during"
    );
    drop(held);
    // Once the flood's connections are gone, its address may connect again.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = connect_from_another_address().await;
    let open =
        tokio::time::timeout(Duration::from_millis(300), again.read(&mut byte))
            .await;
    assert!(open.is_err(), "the address's share came back");
}

/// A client that starts a TLS handshake and never finishes it is let go
/// when the time to authenticate is up, not before (the clock is
/// paused: it moves on only when everything waits for a timer).
#[tokio::test(start_paused = true)]
async fn a_stalled_handshake_is_closed_when_its_time_is_up() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::limits::HANDSHAKE_TIMEOUT;

    let pki = Pki::new();
    let api = ApiSide::start("stalled-handshake").await;
    let endpoint = serve_tls_on_loopback(&pki, api.shared.clone()).await;
    let crate::nodeview::endpoint::ApiEndpoint::Tls { port, .. } = &endpoint
    else {
        unreachable!()
    };
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", *port))
        .await
        .unwrap();
    // A record header that promises a ClientHello that never comes.
    stream
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut byte = [0u8; 1];
    let closed =
        tokio::time::timeout(HANDSHAKE_TIMEOUT * 6, stream.read(&mut byte))
            .await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "the stalled handshake is closed: {closed:?}"
    );
    assert!(
        started.elapsed() >= HANDSHAKE_TIMEOUT,
        "closed after {:?}, before its time",
        started.elapsed()
    );
}

/// A connection gets a few streams at once: a further watch on it waits
/// for one of them to end.
#[tokio::test]
async fn a_connection_holds_a_bounded_number_of_streams() {
    use super::limits::MAX_STREAMS_PER_CONNECTION;

    let mut api = ApiSide::start("streams").await;
    api.list(vec![web()]).await;
    let mut client = api.client().await;
    let mut streams = Vec::new();
    for _ in 0..MAX_STREAMS_PER_CONNECTION {
        let mut stream = watch(&mut client, "node-a", "", 0).await;
        assert!(next(&mut stream).await.full);
        streams.push(stream);
    }
    let mut waiting = client.clone();
    let late = tokio::spawn(async move {
        let mut stream = watch(&mut waiting, "node-b", "", 0).await;
        next(&mut stream).await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!late.is_finished(), "a stream past the limit was served");
    drop(streams.pop());
    let first = tokio::time::timeout(Duration::from_secs(10), late)
        .await
        .expect("served once a stream ended")
        .unwrap();
    assert!(first.full);
}

/// Waits for the server to end every watch but `left` (the stalled
/// nodes', by its send timeouts).
async fn watches_end_but(shared: &Shared, left: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while shared.open_watches() > left {
        assert!(
            std::time::Instant::now() < deadline,
            "{} watches still open a minute on, {left} expected",
            shared.open_watches()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A node that stops reading keeps a couple of messages, then its watch
/// ends; the others get every change meanwhile, and the stalled node
/// resumes from its revision when it comes back.
#[tokio::test]
async fn a_node_that_never_reads_is_let_go_and_the_others_go_on() {
    let shared = Shared::with_send_timeouts(
        Cluster::new(SystemTime::now()),
        Duration::from_millis(300),
        Duration::from_millis(300),
    );
    let mut api = ApiSide::start_with("stalled", shared).await;
    api.list(vec![web()]).await;
    let mut honest_client = api.client().await;
    let mut honest = watch(&mut honest_client, "node-a", "", 0).await;
    let first = next(&mut honest).await;
    let mut stalled_client = api.stingy_client().await;
    let mut stalled = watch(&mut stalled_client, "node-b", "", 0).await;
    let stalled_first = next(&mut stalled).await;

    // Changes large enough to fill what the transport buffers for a
    // stream (HTTP/2's window, the server's send buffer, the socket's).
    let mut revision = first.revision;
    for i in 0..100u32 {
        let ips: Vec<String> = (0..500u32)
            .map(|j| {
                let n = i * 500 + j;
                format!("198.19.{}.{}", n / 250 % 250, n % 250 + 1)
            })
            .collect();
        let endpoints: Vec<(&str, &str)> =
            ips.iter().map(|ip| (ip.as_str(), "node-c")).collect();
        api.event(SourceEvent::EndpointSlice(Event::Apply(web_slice(
            &endpoints,
        ))));
        api.shared.sync().await.unwrap();
        let update = next(&mut honest).await;
        assert!(!update.full && update.revision > revision, "{update:?}");
        revision = update.revision;
    }
    // Reading before the server gave up on it would let it go on.
    watches_end_but(&api.shared, 1).await;
    // What the stalled node finds when it reads again: what was queued
    // for it, then the end of its watch.
    let mut queued = 0;
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stalled.message())
            .await
        {
            Ok(Ok(Some(_))) => queued += 1,
            Ok(Ok(None)) | Ok(Err(_)) => break,
            Err(_) => panic!("the stalled watch was not ended"),
        }
    }
    // Of the 100 changes, it holds what the buffers took before the
    // server gave up on it.
    assert!(
        queued < 50,
        "{queued} messages were kept for a node that did not read"
    );
    // Back, it resumes from what it holds: changes, not a full state.
    let mut back = watch(
        &mut stalled_client,
        "node-b",
        &stalled_first.instance,
        stalled_first.revision,
    )
    .await;
    let resumed = next(&mut back).await;
    assert!(!resumed.full, "{resumed:?}");
}

/// Nodes that stop reading in the middle of their first view (or one
/// client opening many streams and reading none) hold the few walk
/// permits only until the walk's shorter time is up: a node that comes
/// after them still gets its first view within moments, not after the
/// general send timeout, and each stalled watch held a few messages.
#[tokio::test]
async fn nodes_stalled_in_their_first_view_do_not_keep_others_from_theirs() {
    let shared = Shared::with_send_timeouts(
        Cluster::new(SystemTime::now()),
        Duration::from_secs(300),
        Duration::from_millis(500),
    );
    let mut api = ApiSide::start_with("stalled-walks", shared).await;
    // A view far larger than what the transport buffers for a stream:
    // some 2 MiB.
    let services = (0..2000).map(|k| {
        service("ns", &format!("s{k}"), |s| add_port(s, "http", 80, "TCP"))
    });
    api.list(services.collect()).await;
    for k in 0..2000u32 {
        let name = format!("s{k}");
        api.event(SourceEvent::EndpointSlice(Event::Apply(slice(
            "ns",
            &format!("{name}-1"),
            &name,
            |s| {
                add_slice_port(s, "http", 8080, "TCP");
                s.endpoints = Some(
                    (0..50u32)
                        .map(|j| {
                            let n = k * 50 + j;
                            let ip = format!(
                                "198.{}.{}.{}",
                                18 + n / 62_500,
                                n / 250 % 250,
                                n % 250 + 1
                            );
                            endpoint(&ip, |e| {
                                e.node_name = Some("node-z".into())
                            })
                        })
                        .collect(),
                );
            },
        ))));
    }
    api.shared.sync().await.unwrap();

    let stalled_count = super::server::MAX_WALKS + 4;
    let mut stalled = Vec::new();
    for i in 0..stalled_count {
        let mut client = api.stingy_client().await;
        let stream = watch(&mut client, &format!("node-s{i}"), "", 0).await;
        stalled.push((client, stream));
    }
    // Every permit is taken by now, and more nodes wait for one.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = std::time::Instant::now();
    let mut client = api.client().await;
    let mut honest = watch(&mut client, "node-a", "", 0).await;
    let mut received = Received::default();
    let mut view_bytes = 0;
    loop {
        let message = next(&mut honest).await;
        view_bytes += message.encoded_len();
        let synced = message.synced;
        received.apply(wire::decode(message).unwrap());
        if synced {
            break;
        }
    }
    assert_eq!(received.services.len(), 2000);
    // Without the walk's shorter time the permits would be held until the
    // general send timeout, 300 s; a busy machine takes seconds, not that.
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(100),
        "the first view took {waited:?} behind stalled nodes"
    );
    // The last of them took their permits only as the first gave theirs
    // up: reading one still in its walk would let it go on.
    watches_end_but(&api.shared, 1).await;
    // What each stalled node finds when it reads again: what was queued
    // for it (its window, the server's send buffer, the socket's, two
    // messages), then the end of its watch; not its whole view.
    for (_, mut stream) in stalled {
        let mut queued = 0;
        while let Ok(Ok(Some(message))) =
            tokio::time::timeout(Duration::from_secs(10), stream.message())
                .await
        {
            queued += message.encoded_len();
        }
        assert!(
            queued < view_bytes / 2,
            "{queued} bytes of a view of {view_bytes} kept for a stalled node"
        );
    }
}
