//! Builders for test objects: a minimal valid object, adjusted by a
//! closure, so each test states only what it is about.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    api::{
        core::v1::{Node, NodeSpec, Service, ServicePort, ServiceSpec},
        discovery::v1::{
            Endpoint, EndpointConditions, EndpointPort, EndpointSlice,
        },
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

use super::{convert::LABEL_SERVICE_NAME, EndpointInfo};

pub fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

/// A ClusterIP service with cluster IP 198.18.0.1 and no ports.
pub fn service(
    namespace: &str,
    name: &str,
    f: impl FnOnce(&mut Service),
) -> Service {
    let mut svc = Service {
        metadata: meta(namespace, name),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            cluster_ip: Some("198.18.0.1".to_owned()),
            cluster_ips: Some(vec!["198.18.0.1".to_owned()]),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    f(&mut svc);
    svc
}

/// The spec of a service built by [`service`].
pub fn spec(svc: &mut Service) -> &mut ServiceSpec {
    svc.spec.get_or_insert_with(ServiceSpec::default)
}

pub fn set_cluster_ips(svc: &mut Service, ips: &[&str]) {
    let spec = spec(svc);
    spec.cluster_ip = ips.first().map(|ip| (*ip).to_owned());
    spec.cluster_ips = Some(ips.iter().map(|ip| (*ip).to_owned()).collect());
}

pub fn add_port(svc: &mut Service, name: &str, port: i32, protocol: &str) {
    spec(svc)
        .ports
        .get_or_insert_with(Vec::new)
        .push(ServicePort {
            name: (!name.is_empty()).then(|| name.to_owned()),
            port,
            protocol: Some(protocol.to_owned()),
            ..ServicePort::default()
        });
}

/// An IPv4 slice of `service`, without endpoints or ports.
pub fn slice(
    namespace: &str,
    name: &str,
    service: &str,
    f: impl FnOnce(&mut EndpointSlice),
) -> EndpointSlice {
    let mut meta = meta(namespace, name);
    meta.labels = Some(BTreeMap::from([(
        LABEL_SERVICE_NAME.to_owned(),
        service.to_owned(),
    )]));
    let mut slice = EndpointSlice {
        metadata: meta,
        address_type: "IPv4".to_owned(),
        endpoints: Some(Vec::new()),
        ports: None,
    };
    f(&mut slice);
    slice
}

pub fn add_slice_port(
    slice: &mut EndpointSlice,
    name: &str,
    port: i32,
    protocol: &str,
) {
    slice.ports.get_or_insert_with(Vec::new).push(EndpointPort {
        name: Some(name.to_owned()),
        port: Some(port),
        protocol: Some(protocol.to_owned()),
        app_protocol: None,
    });
}

/// An endpoint with conditions left nil (ready, serving, not
/// terminating).
pub fn endpoint(address: &str, f: impl FnOnce(&mut Endpoint)) -> Endpoint {
    let mut endpoint = Endpoint {
        addresses: vec![address.to_owned()],
        ..Endpoint::default()
    };
    f(&mut endpoint);
    endpoint
}

pub fn conditions(
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
) -> Option<EndpointConditions> {
    Some(EndpointConditions {
        ready,
        serving,
        terminating,
    })
}

pub fn node(name: &str, f: impl FnOnce(&mut Node)) -> Node {
    let mut node = Node {
        metadata: meta("", name),
        spec: Some(NodeSpec::default()),
        status: None,
    };
    f(&mut node);
    node
}

/// A TCP port 80 service port with cluster IP 198.18.0.1 and nothing else.
pub fn port_info(
    f: impl FnOnce(&mut crate::model::ServicePortInfo),
) -> crate::model::ServicePortInfo {
    let mut info = crate::model::ServicePortInfo {
        cluster_ips: vec![std::net::Ipv4Addr::new(198, 18, 0, 1).into()],
        port: 80,
        protocol: crate::model::Protocol::Tcp,
        node_port: 0,
        session_affinity_timeout: None,
        external_ips: vec![],
        load_balancer_vips: vec![],
        load_balancer_source_ranges: vec![],
        external_policy_local: false,
        internal_policy_local: false,
        health_check_node_port: 0,
        is_load_balancer: false,
        scheduling: None,
    };
    f(&mut info);
    info
}

/// A ready, serving, remote endpoint.
pub fn ep(
    ip: &str,
    port: u16,
    f: impl FnOnce(&mut EndpointInfo),
) -> Arc<EndpointInfo> {
    let mut info = EndpointInfo {
        ip: ip.parse().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into()),
        port,
        is_local: false,
        node_name: None,
        ready: true,
        serving: true,
        terminating: false,
        zone_hints: Default::default(),
        node_hints: Default::default(),
    };
    f(&mut info);
    Arc::new(info)
}

/// A metrics recorder for tests: counters and gauges by rendered key
/// (`name{label=value,...}`), read back after the code under test ran
/// inside [`TestRecorder::run`].
#[derive(Default)]
pub struct TestRecorder {
    values:
        std::sync::Mutex<BTreeMap<String, Arc<std::sync::atomic::AtomicU64>>>,
}

impl TestRecorder {
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(self, f)
    }

    fn handle(&self, key: &metrics::Key) -> Arc<std::sync::atomic::AtomicU64> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let rendered = if labels.is_empty() {
            key.name().to_owned()
        } else {
            format!("{}{{{}}}", key.name(), labels.join(","))
        };
        let mut values = self
            .values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(values.entry(rendered).or_default())
    }

    /// A counter's value; 0 if never touched.
    pub fn counter(&self, rendered: &str) -> u64 {
        self.raw(rendered)
    }

    /// A gauge's value; 0.0 if never touched.
    pub fn gauge(&self, rendered: &str) -> f64 {
        f64::from_bits(self.raw(rendered))
    }

    fn raw(&self, rendered: &str) -> u64 {
        let values = self
            .values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        values
            .get(rendered)
            .map(|v| v.load(std::sync::atomic::Ordering::SeqCst))
            .unwrap_or(0)
    }
}

impl metrics::Recorder for TestRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Counter {
        metrics::Counter::from_arc(self.handle(key))
    }
    fn register_gauge(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Gauge {
        metrics::Gauge::from_arc(self.handle(key))
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// A fresh directory under the system's temporary one, removed on drop:
/// for tests that need files (state files, sockets).
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "kube-ipvs-proxy-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
