//! Nodes that authenticate to the API side with their ServiceAccount
//! token, against the real API server's TokenReview: `api-server`
//! serves over TLS, a token bound to a Pod on node-a gets node-a's view
//! (what `plan --state` prints for node-a) and nothing else, and a token
//! made for another audience gets nothing.
//!
//! Runs on the host with `--features e2e-tests` and KUBECONFIG naming the
//! loopback control plane's admin (tests/e2e/control-plane.sh, which
//! makes node-a and the kube-ipvs-proxy ServiceAccount); `make e2e` does
//! both.

use std::{
    fs,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use k8s_openapi::api::{
    authentication::v1::{
        BoundObjectReference, TokenRequest, TokenRequestSpec,
    },
    core::v1::{Pod, ServiceAccount},
};
use kube::{
    api::{DeleteParams, PostParams},
    Api, Client,
};
use serde_json::json;

const PROXY: &str = env!("CARGO_BIN_EXE_kube-ipvs-proxy");
const STATE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/plan/topology-hints.yaml"
);
const NAMESPACE: &str = "kube-system";
const ACCOUNT: &str = "kube-ipvs-proxy";
const AUDIENCE: &str = "kube-ipvs-proxy";
const POD: &str = "api-split-token-node-a";

/// A scratch folder, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The API side's certificate for 127.0.0.1 and its CA, in `dir/server`
/// (`tls.crt`, `tls.key`, `ca.crt`) and the CA alone in `dir/node`.
fn certificates(dir: &Path) -> Result<()> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "api-split test CA");
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut server = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
    server
        .distinguished_name
        .push(DnType::CommonName, "api-side");
    let cert = server.signed_by(&key, &issuer)?;
    for (sub, files) in [
        (
            "server",
            vec![
                ("tls.crt", cert.pem()),
                ("tls.key", key.serialize_pem()),
                ("ca.crt", ca_pem.clone()),
            ],
        ),
        ("node", vec![("ca.crt", ca_pem.clone())]),
    ] {
        fs::create_dir_all(dir.join(sub))?;
        for (name, text) in files {
            fs::write(dir.join(sub).join(name), text)?;
        }
    }
    Ok(())
}

/// A token of the proxies' ServiceAccount for `audience`, bound to the
/// Pod on node-a when `bound`.
async fn token(client: &Client, audience: &str, bound: bool) -> Result<String> {
    let accounts: Api<ServiceAccount> =
        Api::namespaced(client.clone(), NAMESPACE);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(vec![audience.to_owned()]),
            bound_object_ref: bound.then(|| BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: Some(POD.to_owned()),
                uid: None,
            }),
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let made = accounts
        .create_token_request(ACCOUNT, &PostParams::default(), &request)
        .await
        .context("TokenRequest")?;
    made.status.and_then(|s| s.token).context("no token")
}

/// A free port on loopback (free when asked).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

struct ApiSide(Child);

impl Drop for ApiSide {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn plan(args: &[&str]) -> std::process::Output {
    Command::new(PROXY)
        .arg("plan")
        .args(args)
        .args(["--output", "json"])
        .output()
        .expect("plan runs")
}

#[tokio::test]
#[cfg_attr(
    not(feature = "e2e-tests"),
    ignore = "needs the loopback control plane: run `make e2e`"
)]
async fn a_node_s_token_gets_its_own_view_and_no_other() -> Result<()> {
    let client = Client::try_default()
        .await
        .context("KUBECONFIG must name the e2e control plane's admin")?;
    let kubeconfig =
        std::env::var("KUBECONFIG").context("KUBECONFIG names the admin")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let _ = pods
        .delete(POD, &DeleteParams::default().grace_period(0))
        .await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": POD, "namespace": NAMESPACE},
        "spec": {"nodeName": "node-a", "serviceAccountName": ACCOUNT,
                 "containers": [{"name": "c", "image": "e2e.invalid/none"}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;

    let scratch = Scratch(
        std::env::temp_dir()
            .join(format!("kip-split-tokens-{}", std::process::id())),
    );
    certificates(&scratch.0)?;
    let write = |name: &str, text: String| -> Result<PathBuf> {
        let path = scratch.0.join(name);
        fs::write(&path, text)?;
        Ok(path)
    };
    let own = write("own", token(&client, AUDIENCE, true).await?)?;
    let other =
        write("other", token(&client, "another-audience", true).await?)?;

    let port = free_port()?;
    let endpoint = format!("https://127.0.0.1:{port}");
    let _api = ApiSide(
        Command::new(PROXY)
            .args(["api-server", "--state", STATE, "--listen", &endpoint])
            .args(["--kubeconfig", &kubeconfig, "--token-audience", AUDIENCE])
            .arg("--tls-dir")
            .arg(scratch.0.join("server"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let node_dir = scratch.0.join("node");
    let fed = |node: &str, token: &Path| {
        plan(&[
            "--api-endpoint",
            &endpoint,
            "--api-tls-dir",
            node_dir.to_str().unwrap(),
            "--api-token-file",
            token.to_str().unwrap(),
            "--node",
            node,
        ])
    };
    // The API side lists its file and starts listening.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mine = loop {
        let out = fed("node-a", &own);
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        thread::sleep(Duration::from_millis(300));
    };
    let stderr = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(mine.status.success(), "{}", stderr(&mine));
    let direct = plan(&["--state", STATE, "--node", "node-a"]);
    assert_eq!(
        String::from_utf8_lossy(&mine.stdout),
        String::from_utf8_lossy(&direct.stdout)
    );

    let another_node = fed("node-b", &own);
    assert!(!another_node.status.success());
    assert!(
        stderr(&another_node)
            .contains("node-a may not watch the view of node-b"),
        "{}",
        stderr(&another_node)
    );
    let another_audience = fed("node-a", &other);
    assert!(!another_audience.status.success());
    assert!(
        stderr(&another_audience).contains("not authenticated"),
        "{}",
        stderr(&another_audience)
    );
    let _ = pods
        .delete(POD, &DeleteParams::default().grace_period(0))
        .await;
    Ok(())
}
