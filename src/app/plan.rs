//! `plan`: what the proxy would program on a node, from a state file,
//! the API side or the API server, printed instead of programmed.

use std::io::Write;

use super::{
    one_shot::{self, Asked},
    Failure, Source,
};
use crate::{
    config::{Config, OutputFormat, PlanArgs},
    desired::Plan,
};

/// Computes the plan and writes it to `out`. Needs no runtime of the
/// caller's: the sources are read on one of their own.
pub fn run(
    config: &Config,
    source: Source,
    args: &PlanArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let asked = Asked {
        node: args.node.as_deref(),
        kubernetes_version: args.kubernetes_version,
        this_host: false,
    };
    let state = one_shot::node_state(config, source, asked)?;
    print(&state.desired().snapshot(), args.output, out)
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
