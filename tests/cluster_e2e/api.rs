//! What both clusters do the same way through the API server: one test's
//! namespace, its Services, and creating and deleting its Pods.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use crate::scenarios::SETTLE;

/// One test's namespace on a cluster, and the runtime its calls block on
/// (the scenarios are plain threads: traffic and `ipvsadm` are commands).
pub struct Namespaced {
    pub rt: tokio::runtime::Runtime,
    pub client: Client,
    pub ns: String,
}

impl Namespaced {
    /// Connects with `config` and gives `ns` a fresh start: a leftover
    /// from an aborted run is deleted first, so a test never sees another
    /// run's Pods.
    pub fn new(
        rt: tokio::runtime::Runtime,
        config: kube::Config,
        ns: &str,
    ) -> Result<Self> {
        // The client spawns its buffer task on the current runtime.
        let client = {
            let _inside = rt.enter();
            Client::try_from(config)?
        };
        let this = Self {
            rt,
            client,
            ns: ns.to_string(),
        };
        this.reset()?;
        Ok(this)
    }

    pub fn runtime() -> Result<tokio::runtime::Runtime> {
        Ok(tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Deletes every Pod of the namespace at once: no kubelet confirms a
    /// graceful deletion of the guest's fake Pods, and the real ones need
    /// no grace in a test.
    pub fn release_pods(&self) -> Result<()> {
        let api = self.pods();
        self.rt.block_on(async {
            for pod in api.list(&ListParams::default()).await? {
                let Some(name) = pod.metadata.name.as_deref() else {
                    continue;
                };
                let _ = api.delete(name, &now()).await;
            }
            anyhow::Ok(())
        })
    }

    fn reset(&self) -> Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        if self.rt.block_on(namespaces.get_opt(&self.ns))?.is_some() {
            self.release_pods()?;
            let _ = self.rt.block_on(
                namespaces.delete(&self.ns, &DeleteParams::default()),
            );
            self.poll(&format!("namespace {} to go away", self.ns), || {
                Ok(self.rt.block_on(namespaces.get_opt(&self.ns))?.is_none())
            })?;
        }
        let body = json!({"metadata": {"name": self.ns}});
        self.rt.block_on(
            namespaces
                .create(&PostParams::default(), &serde_json::from_value(body)?),
        )?;
        // Pods cannot be admitted before the namespace's default
        // ServiceAccount exists.
        let accounts: Api<ServiceAccount> =
            Api::namespaced(self.client.clone(), &self.ns);
        self.poll(
            &format!("the default ServiceAccount in {}", self.ns),
            || Ok(self.rt.block_on(accounts.get_opt("default"))?.is_some()),
        )
    }

    fn poll(
        &self,
        what: &str,
        mut done: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        let start = Instant::now();
        while !done()? {
            if start.elapsed() > SETTLE {
                bail!("timed out waiting for {what}");
            }
            thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// Creates a Service selecting `app=<name>` and returns its cluster
    /// IP.
    pub fn service(&self, name: &str, ports: Value) -> Result<String> {
        let body = json!({
            "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": ports},
        });
        let created = self.rt.block_on(
            self.services()
                .create(&PostParams::default(), &serde_json::from_value(body)?),
        )?;
        created
            .spec
            .and_then(|s| s.cluster_ip)
            .context("the Service got no cluster IP")
    }

    pub fn delete_service(&self, name: &str) -> Result<()> {
        self.rt
            .block_on(self.services().delete(name, &DeleteParams::default()))?;
        Ok(())
    }

    pub fn create_pod(&self, body: Value) -> Result<Pod> {
        Ok(self.rt.block_on(
            self.pods()
                .create(&PostParams::default(), &serde_json::from_value(body)?),
        )?)
    }

    pub fn delete_pod(&self, name: &str) -> Result<()> {
        self.rt.block_on(self.pods().delete(name, &now()))?;
        Ok(())
    }
}

impl Drop for Namespaced {
    fn drop(&mut self) {
        let _ = self.release_pods();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = self
            .rt
            .block_on(namespaces.delete(&self.ns, &DeleteParams::default()));
    }
}

fn now() -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    }
}

/// `containerPort`s named as the scenario names them.
pub fn container_ports(ports: &[(&str, u16)]) -> Vec<Value> {
    ports
        .iter()
        .map(|(n, p)| json!({"name": n, "containerPort": p}))
        .collect()
}
