//! `plan`: what the proxy would program on a node, from a state file or
//! from the API side, printed instead of programmed.

use std::{io::Write, time::Duration};

use super::{Failure, Source};
use crate::{
    config::{Config, OutputFormat, PlanArgs},
    desired::Plan,
    nodeview::endpoint::{ApiEndpoint, Credentials},
    source::{
        self,
        kube::{Admission, Release},
    },
    sync::{self, NodeSettings},
};

/// How long `plan --api-endpoint` waits for the node's view.
const VIEW_TIMEOUT: Duration = Duration::from_secs(30);

/// Computes the plan and writes it to `out`. Needs no runtime of the
/// caller's: the view from an API side is taken on one of its own.
pub fn run(
    config: &Config,
    source: Source,
    args: &PlanArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let settings = NodeSettings::from_config(config);
    let plan = match source {
        Source::StateFile(path) => {
            let release = args
                .kubernetes_version
                .map_or(Release::NEWEST, |(major, minor)| {
                    Release::new(major, minor)
                });
            let admission =
                Admission::new(config.service_proxy_name.as_deref(), release);
            let snapshot = source::file::load(&path)
                .map_err(anyhow::Error::from)?
                .admitted(&admission);
            let Some(node) =
                sync::plan_node_name(&snapshot, args.node.as_deref())
            else {
                return Err(Failure::bad_config(format!(
                    "{} has {} Node objects; name one with --node",
                    path.display(),
                    snapshot.nodes.len()
                )));
            };
            sync::plan(&snapshot, &node, &settings)
        }
        Source::ApiSide {
            endpoint,
            credentials,
        } => {
            let Some(node) = args.node.as_deref() else {
                return Err(Failure::bad_config(
                    "plan --api-endpoint needs --node NAME",
                ));
            };
            let update = first_view(&endpoint, &credentials, node)?;
            sync::plan_from_view(update, node, &settings)
        }
        Source::ApiServer { .. } => {
            return Err(Failure::bad_config("plan needs --state FILE"));
        }
    };
    print(&plan, args.output, out)
}

/// The node's first view from the API side, on a runtime of its own.
fn first_view(
    endpoint: &ApiEndpoint,
    credentials: &Credentials,
    node: &str,
) -> Result<crate::nodeview::Update, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the runtime: {e}"))?;
    let first = runtime.block_on(async {
        let view = source::nodeview::first_view(endpoint, credentials, node);
        tokio::time::timeout(VIEW_TIMEOUT, view).await
    });
    match first {
        Ok(Ok(update)) => Ok(update),
        Ok(Err(e)) => {
            Err(anyhow::anyhow!("no view of {node} from {endpoint}: {e}")
                .into())
        }
        Err(_) => Err(anyhow::anyhow!(
            "no view of {node} from {endpoint} within {VIEW_TIMEOUT:?}"
        )
        .into()),
    }
}

fn print(
    plan: &Plan,
    output: OutputFormat,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let written = match output {
        OutputFormat::Text => write!(out, "{plan}"),
        OutputFormat::Json => {
            let json = serde_json::to_string_pretty(plan)
                .map_err(anyhow::Error::from)?;
            writeln!(out, "{json}")
        }
    };
    written.map_err(|e| anyhow::anyhow!("writing the plan: {e}").into())
}
