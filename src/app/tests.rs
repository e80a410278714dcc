//! Each mode wired in-process: the node proxy on a backend that reports
//! what it was asked to program, fed by a state file and by the API side
//! (served by `api_side` from the same file); `plan` from both; the
//! configuration's refusals and their exit statuses.

use std::{path::Path, sync::Arc, time::Duration};

use clap::Parser as _;
use futures::StreamExt as _;
use tokio::sync::watch;

use crate::model::fixtures::TempDir;

use super::{api_side, node, plan, Failure, Source, STATE_FILE_POLL};
use crate::{
    backend::{Backend, BackendError, Observation, RepairStep, SyncBatch},
    config::{Cli, Command, Config, PlanArgs, EXIT_BAD_CONFIG},
    nodeview::endpoint::{ApiEndpoint, Credentials},
    source::{
        file,
        kube::{Admission, Release},
    },
    sync::{self, NodeSettings},
};

/// A cluster of two Nodes and `services` ClusterIP Services of one port
/// each, every one with an endpoint on node-a.
fn cluster(services: usize) -> String {
    let mut yaml = String::new();
    for node in ["node-a", "node-b"] {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\n---\n"
        ));
    }
    for i in 0..services {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: Service\n\
             metadata: {{name: svc-{i}, namespace: default}}\n\
             spec:\n  clusterIP: 198.18.1.{i}\n  clusterIPs: [198.18.1.{i}]\n  \
             ports:\n  - {{name: http, port: 80, targetPort: 8080, protocol: TCP}}\n\
             ---\n\
             apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
             metadata:\n  name: svc-{i}-1\n  namespace: default\n  \
             labels: {{kubernetes.io/service-name: svc-{i}}}\n\
             addressType: IPv4\n\
             endpoints:\n- addresses: [198.19.0.{i}]\n  nodeName: node-a\n  \
             conditions: {{ready: true}}\n\
             ports:\n- {{name: http, port: 8080, protocol: TCP}}\n---\n"
        ));
    }
    yaml
}

/// Replaces the state file in one step, as an operator's tooling would.
fn write_state(path: &Path, yaml: &str) {
    let new = path.with_extension("new");
    std::fs::write(&new, yaml).unwrap();
    std::fs::rename(&new, path).unwrap();
}

/// A configuration without servers (the test binds nothing but the API
/// side's socket) and with short sync periods.
fn quiet_config() -> Config {
    let mut config = Config {
        healthz_bind_address: None,
        metrics_bind_address: None,
        ..Config::default()
    };
    config.ipvs.min_sync_period = Duration::ZERO;
    config
}

/// Reports the number of service ports each sync hands over.
struct Reporting(watch::Sender<usize>);

struct NothingRead;

impl Observation for NothingRead {
    fn local_addresses(&self) -> Option<&[std::net::IpAddr]> {
        None
    }
}

impl Backend for Reporting {
    type Observed = NothingRead;

    async fn apply(
        &mut self,
        batch: SyncBatch<'_>,
    ) -> Result<(), BackendError> {
        self.0.send_replace(batch.state.service_map().len());
        Ok(())
    }

    fn begin_repair(
        &mut self,
    ) -> impl std::future::Future<Output = NothingRead> + Send + 'static + use<>
    {
        std::future::ready(NothingRead)
    }

    async fn repair_step(&mut self, _: &mut NothingRead) -> RepairStep {
        RepairStep::Done
    }
}

/// Waits until the backend has been handed `want` service ports.
async fn programmed(seen: &mut watch::Receiver<usize>, want: usize) {
    let waited = tokio::time::timeout(
        Duration::from_secs(20),
        seen.wait_for(|n| *n == want),
    )
    .await
    .is_ok();
    assert!(
        waited,
        "the backend was never handed {want} service ports (last: {})",
        *seen.borrow()
    );
}

#[tokio::test]
async fn a_node_fed_by_a_state_file_programs_it_and_its_edits() {
    let scratch = TempDir::new();
    let state = scratch.0.join("cluster.yaml");
    write_state(&state, &cluster(3));
    let (report, mut seen) = watch::channel(0);
    let proxy = tokio::spawn(async move {
        node::serve(
            &quiet_config(),
            Source::StateFile(state.clone()),
            "node-a".to_owned(),
            Reporting(report),
        )
        .await
    });
    programmed(&mut seen, 3).await;
    write_state(&scratch.0.join("cluster.yaml"), &cluster(5));
    programmed(&mut seen, 5).await;
    assert!(!proxy.is_finished(), "the proxy stopped: {:?}", proxy.await);
    proxy.abort();
}

/// The API side as `api-server --state FILE --listen unix://...` wires
/// it, and a node proxy as `--api-endpoint unix://...` wires it: the node
/// is handed what the file holds, and then its edits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_fed_by_the_api_side_programs_what_the_file_holds() {
    let scratch = TempDir::new();
    let state = scratch.0.join("cluster.yaml");
    let socket = scratch.0.join("views.sock");
    write_state(&state, &cluster(2));
    let api_side = serve_file(&state, &socket);
    let (report, mut seen) = watch::channel(0);
    let proxy = tokio::spawn(async move {
        node::serve(
            &quiet_config(),
            Source::ApiSide {
                endpoint: ApiEndpoint::Unix(socket),
                credentials: Credentials::default(),
            },
            "node-a".to_owned(),
            Reporting(report),
        )
        .await
    });
    programmed(&mut seen, 2).await;
    write_state(&state, &cluster(4));
    programmed(&mut seen, 4).await;
    assert!(!api_side.is_finished(), "{:?}", api_side.await);
    assert!(!proxy.is_finished(), "{:?}", proxy.await);
    proxy.abort();
    api_side.abort();
}

/// The API side as `api-server --state STATE --listen unix://SOCKET`
/// wires it, on a task of its own.
fn serve_file(
    state: &Path,
    socket: &Path,
) -> tokio::task::JoinHandle<Result<(), Failure>> {
    let settings = api_side_settings(&format!("unix://{}", socket.display()));
    let source = file::watch(
        state.to_owned(),
        STATE_FILE_POLL,
        Admission::new(None, Release::NEWEST),
    )
    .boxed();
    tokio::spawn(async move {
        api_side::serve(&quiet_config(), &settings, source, Arc::default())
            .await
    })
}

fn api_side_settings(listen: &str) -> api_side::Settings {
    let cli = Cli::try_parse_from([
        "kube-ipvs-proxy",
        "api-server",
        "--listen",
        listen,
        "--metrics-bind-address=",
    ])
    .unwrap();
    let Some(Command::ApiServer(args)) = cli.command else {
        panic!("not api-server: {cli:?}");
    };
    match api_side::Settings::from_args(&args) {
        Ok(settings) => settings,
        Err(e) => panic!("{e}"),
    }
}

/// Its server cannot listen (no such folder): the API side stops at
/// once and says why, though its source is quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_side_stops_when_its_server_does_on_a_quiet_cluster() {
    let settings = api_side_settings("unix:///nonexistent-folder/views.sock");
    let quiet = futures::stream::pending().boxed();
    let ended = tokio::time::timeout(
        Duration::from_secs(10),
        api_side::serve(&quiet_config(), &settings, quiet, Arc::default()),
    )
    .await;
    match ended {
        Ok(Err(Failure::Failed(e))) => {
            let said = format!("{e:#}");
            assert!(said.contains("/nonexistent-folder/views.sock"), "{said}");
        }
        Ok(other) => panic!("stopped otherwise: {other:?}"),
        Err(_) => panic!("still running 10 s after its server stopped"),
    }
}

fn plan_args(args: &[&str]) -> PlanArgs {
    let cli = Cli::try_parse_from(
        ["kube-ipvs-proxy", "plan"].iter().chain(args.iter()),
    )
    .unwrap();
    let Some(Command::Plan(args)) = cli.command else {
        panic!("not plan: {cli:?}");
    };
    args
}

#[test]
fn plan_prints_the_plan_of_the_named_node_and_asks_for_one_when_unnamed() {
    let scratch = TempDir::new();
    let state = scratch.0.join("cluster.yaml");
    write_state(&state, &cluster(2));
    let config = quiet_config();
    let source = Source::StateFile(state.clone());

    let args = plan_args(&["--state", "x", "--node", "node-a"]);
    let mut printed = Vec::new();
    plan::run(&config, source.clone(), &args, &mut printed).unwrap();
    let snapshot = file::load(&state).unwrap();
    let want =
        sync::plan(&snapshot, "node-a", &NodeSettings::from_config(&config));
    assert_eq!(String::from_utf8(printed).unwrap(), want.to_string());
    assert!(want.to_string().contains("198.18.1.1"), "{want}");

    // Two Nodes in the file and none named.
    let args = plan_args(&["--state", "x"]);
    let refused = plan::run(&config, source, &args, &mut Vec::new());
    match refused {
        Err(failure @ Failure::BadConfig(_)) => {
            assert_eq!(failure.exit_status(), EXIT_BAD_CONFIG);
            assert!(failure.to_string().contains("--node"), "{failure}");
        }
        other => panic!("{other:?}"),
    }
}

/// `plan --state` reads the file as a proxy of the newest release is given
/// it by the API server, or of the release it is told.
#[test]
fn plan_reads_the_state_file_through_a_releases_selectors() {
    let scratch = TempDir::new();
    let state = scratch.0.join("cluster.yaml");
    // svc-0 labelled headless (with a cluster IP), svc-1's slice labelled.
    let yaml = cluster(2)
        .replacen(
            "metadata: {name: svc-0, namespace: default}",
            "metadata: {name: svc-0, namespace: default, \
             labels: {service.kubernetes.io/headless: ''}}",
            1,
        )
        .replacen(
            "labels: {kubernetes.io/service-name: svc-1}",
            "labels: {kubernetes.io/service-name: svc-1, \
             service.kubernetes.io/headless: ''}",
            1,
        );
    write_state(&state, &yaml);
    let plan_of = |args: &[&str]| {
        let mut printed = Vec::new();
        let args = plan_args(args);
        plan::run(
            &quiet_config(),
            Source::StateFile(state.clone()),
            &args,
            &mut printed,
        )
        .unwrap();
        String::from_utf8(printed).unwrap()
    };
    let newest = plan_of(&["--state", "x", "--node", "node-a"]);
    assert!(newest.contains("198.18.1.0:80"), "{newest}");
    assert!(newest.contains("198.19.0.0:8080"), "{newest}");
    assert!(newest.contains("198.18.1.1:80"), "{newest}");
    assert!(!newest.contains("198.19.0.1:8080"), "{newest}");
    let told = ["--state", "x", "--node", "node-a", "--kubernetes-version"];
    assert_eq!(plan_of(&[&told[..], &["v1.37.2"]].concat()), newest);
    let old = plan_of(&[&told[..], &["1.35"]].concat());
    assert!(!old.contains("198.18.1.0:80"), "{old}");
    assert!(old.contains("198.18.1.1:80"), "{old}");
    assert!(!old.contains("198.19.0.1:8080"), "{old}");
    for bad in ["1", "v1.x", "1.35.4.1", "one.two"] {
        let refused = Cli::try_parse_from([
            "kube-ipvs-proxy",
            "plan",
            "--kubernetes-version",
            bad,
        ]);
        assert!(refused.is_err(), "{bad} accepted");
    }
}

/// `plan --api-endpoint` prints what the node would be handed: the same
/// plan as from the file the API side serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_from_the_api_side_is_the_plan_from_its_file() {
    let scratch = TempDir::new();
    let state = scratch.0.join("cluster.yaml");
    let socket = scratch.0.join("views.sock");
    write_state(&state, &cluster(3));
    let api_side = serve_file(&state, &socket);
    // plan asks once and says why it has no view: the API side must be
    // listening first.
    let listening = tokio::time::timeout(Duration::from_secs(20), async {
        while !socket.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(listening.is_ok(), "the API side never listened");
    let config = quiet_config();
    let from_file = {
        let mut printed = Vec::new();
        let args = plan_args(&["--state", "x", "--node", "node-a"]);
        plan::run(&config, Source::StateFile(state), &args, &mut printed)
            .unwrap();
        String::from_utf8(printed).unwrap()
    };
    let source = Source::ApiSide {
        endpoint: ApiEndpoint::Unix(socket.clone()),
        credentials: Credentials::default(),
    };
    let args = plan_args(&[
        "--api-endpoint",
        &format!("unix://{}", socket.display()),
        "--node",
        "node-a",
    ]);
    // Its own runtime, off this one's workers.
    let from_api_side = tokio::task::spawn_blocking(move || {
        let mut printed = Vec::new();
        plan::run(&config, source, &args, &mut printed).map(|()| printed)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(String::from_utf8(from_api_side).unwrap(), from_file);
    api_side.abort();
}

#[test]
fn sources_are_typed_once_and_refusals_carry_their_status() {
    let mut config = Config::default();
    assert!(matches!(
        Source::of(&config),
        Ok(Source::ApiServer {
            kubeconfig: None,
            master: None
        })
    ));
    config.state_file = Some("/run/cluster.yaml".into());
    assert!(matches!(Source::of(&config), Ok(Source::StateFile(_))));

    config.state_file = None;
    config.api_endpoint = Some("198.18.0.1:9100".into());
    let refused = Source::of(&config).unwrap_err();
    assert_eq!(refused.exit_status(), EXIT_BAD_CONFIG);
    assert!(refused.to_string().contains("--api-endpoint"), "{refused}");

    // Unreadable credentials are not the configuration's fault.
    config.api_endpoint = Some("https://api-side.invalid:9443".into());
    config.api_tls_dir = Some("/nonexistent-folder".into());
    let failed = Source::of(&config).unwrap_err();
    assert!(matches!(failed, Failure::Failed(_)), "{failed:?}");
    assert_eq!(failed.exit_status(), 1);
    assert!(failed.to_string().contains("--api-tls-dir"), "{failed}");

    config.api_tls_dir = None;
    assert!(matches!(
        Source::of(&config),
        Ok(Source::ApiSide {
            endpoint: ApiEndpoint::Tls { port: 9443, .. },
            ..
        })
    ));
}

/// `api-server` takes objects, not another API side's views.
#[tokio::test]
async fn the_api_side_refuses_an_api_endpoint() {
    let settings = api_side_settings("unix:///run/views.sock");
    let mut config = quiet_config();
    config.api_endpoint = Some("unix:///run/other.sock".into());
    match api_side::run(config, settings).await {
        Err(failure @ Failure::BadConfig(_)) => {
            assert!(failure.to_string().contains("--api-endpoint"), "{failure}")
        }
        other => panic!("{other:?}"),
    }
}

/// `--cleanup` on a node a proxy programmed, the kernel's facilities
/// being their models: its virtual servers, sets and chains go, and what
/// is not ours stays.
#[tokio::test]
async fn cleanup_removes_what_a_proxy_programmed_and_nothing_else() {
    use crate::{
        app::cleanup,
        kernel::{
            addresses::AddressesModel,
            ipsets::IpsetsModel,
            iptables::{model::IptablesModel, IpFamily, Iptables},
            ipvs::{Ipvs, IpvsModel, IpvsOp},
        },
        proxier::{plan::ledger::spec_of, Proxier, ProxierConfig},
        sync::SyncState,
    };
    let scratch = TempDir::new();
    let state_file = scratch.0.join("cluster.yaml");
    write_state(&state_file, &cluster(2));
    let mut state = SyncState::new(
        "node-a",
        NodeSettings::default(),
        None,
        std::time::SystemTime::now(),
    );
    state.apply_snapshot(&file::load(&state_file).unwrap());
    state.sync();
    let mut proxier = Proxier::new(
        IpvsModel::new(),
        AddressesModel::new(),
        IpsetsModel::new(),
        ProxierConfig::default(),
    );
    proxier.start().await;
    assert_eq!(proxier.full_reconcile(state.desired()).await.failures(), 0);
    let foreign = crate::kernel::ipvs::VirtualServerKey {
        address: "198.18.200.1".parse().unwrap(),
        port: 80,
        protocol: crate::model::Protocol::Tcp,
    };
    let (ipvs, _, sets) = proxier.handles();
    let added = ipvs
        .apply(&[IpvsOp::AddService(spec_of(foreign, "rr", None))])
        .await;
    assert!(added.iter().all(Result::is_ok), "{added:?}");
    assert_eq!(ipvs.table().services.len(), 3);
    assert!(!sets.sets().is_empty());

    cleanup::kernel(&mut proxier).await;
    let (ipvs, _, sets) = proxier.handles();
    let left: Vec<_> = ipvs.table().services.keys().copied().collect();
    assert_eq!(left, [foreign]);
    assert!(sets.sets().is_empty(), "{:?}", sets.sets().keys());

    let mut tables = IptablesModel::new();
    tables
        .restore(
            IpFamily::V4,
            "*nat\n:KUBE-SERVICES - [0:0]\n:FOREIGN - [0:0]\n\
             -A KUBE-SERVICES -j RETURN\n-A PREROUTING -j FOREIGN\n\
             COMMIT\n",
        )
        .await
        .unwrap();
    cleanup::rules(&mut tables).await;
    let nat = tables.save(IpFamily::V4, "nat").await.unwrap();
    assert!(!nat.contains("KUBE-SERVICES"), "{nat}");
    assert!(nat.contains("-A PREROUTING -j FOREIGN"), "{nat}");
}

/// `--master` as client-go reads a server: a scheme kept, none made
/// https with a kubeconfig's TLS settings and http without; alone, the
/// address with no credentials.
#[tokio::test]
async fn master_overrides_the_server_as_client_go_does() {
    use super::clients::{kube_config, master_url};

    let url = |m: &str, tls: bool| master_url(m, tls).map(|u| u.to_string());
    assert_eq!(
        url("https://198.18.0.1:6443", false).unwrap(),
        "https://198.18.0.1:6443/"
    );
    assert_eq!(
        url("198.18.0.1:6443", true).unwrap(),
        "https://198.18.0.1:6443/"
    );
    assert_eq!(
        url("198.18.0.1:8080", false).unwrap(),
        "http://198.18.0.1:8080/"
    );
    assert!(url("", false).is_err());

    let alone = kube_config(None, Some("198.18.0.1:8080")).await.unwrap();
    assert_eq!(alone.cluster_url.to_string(), "http://198.18.0.1:8080/");
    assert!(alone.auth_info.token.is_none());
}
