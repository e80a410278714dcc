//! `explain NAMESPACE/NAME`: what the node's proxy does with one Service
//! and why, from the configuration's source (the explanation module),
//! then what the kernel holds for each frontend, where it can be read.
//! Exit 0 when the Service is found and the kernel agrees (or was not
//! read), 1 when it is not found, 2 when the kernel differs.

use std::{fmt::Write as _, io::Write, net::SocketAddr};

use serde::Serialize;

use super::{
    one_shot::{self, Asked},
    Failure, Source,
};
use crate::{
    config::{Config, ExplainArgs, OutputFormat},
    explanation::{explain, Explanation, Frontend},
    kernel::ipvs::listing::{self, Listing},
    model::NamespacedName,
};

/// How `explain` ended, as its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Agrees,
    NotFound,
    KernelDiffers,
}

impl Verdict {
    pub fn exit_status(self) -> u8 {
        match self {
            Verdict::Agrees => 0,
            Verdict::NotFound => 1,
            Verdict::KernelDiffers => 2,
        }
    }
}

/// What the kernel holds for one frontend, against the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KernelCheck {
    /// `TCP 198.18.0.10:80`.
    pub virtual_server: String,
    /// Each difference, in words; empty when the kernel agrees.
    pub differences: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    #[serde(flatten)]
    explanation: &'a Explanation,
    /// Why the kernel was not compared, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_not_read: Option<String>,
    kernel: Vec<KernelCheck>,
}

pub fn run(
    config: &Config,
    source: Source,
    args: &ExplainArgs,
    out: &mut dyn Write,
) -> Result<Verdict, Failure> {
    let Some((namespace, name)) = args.service.split_once('/') else {
        return Err(Failure::bad_config(format!(
            "{:?} is not NAMESPACE/NAME",
            args.service
        )));
    };
    let service = NamespacedName::new(namespace, name);
    let asked = Asked {
        node: args.node.as_deref(),
        kubernetes_version: None,
        // As plan: this host's addresses for this host's node.
        this_host: false,
    };
    let state = one_shot::node_state(config, source, asked)?;
    let Some(explanation) = explain(&state, &service) else {
        let written = match args.output {
            OutputFormat::Text => writeln!(
                out,
                "{service}: no such Service in node {}'s state (none, \
                 headless, or another proxy's)",
                state.node_name()
            ),
            OutputFormat::Json => writeln!(
                out,
                "{}",
                serde_json::json!({
                    "service": service.to_string(),
                    "node": state.node_name(),
                    "found": false,
                })
            ),
        };
        written.map_err(|e| anyhow::anyhow!("writing the answer: {e}"))?;
        return Ok(Verdict::NotFound);
    };
    let (kernel, not_read) = match read_kernel() {
        Ok(listing) => (compare(&explanation, &listing), None),
        Err(reason) => (Vec::new(), Some(reason)),
    };
    let verdict = if kernel.iter().any(|k| !k.differences.is_empty()) {
        Verdict::KernelDiffers
    } else {
        Verdict::Agrees
    };
    let report = Report {
        explanation: &explanation,
        kernel_not_read: not_read,
        kernel,
    };
    let written = match args.output {
        OutputFormat::Text => write!(out, "{}", text(&report)),
        OutputFormat::Json => {
            let json = serde_json::to_string_pretty(&report)
                .map_err(anyhow::Error::from)?;
            writeln!(out, "{json}")
        }
    };
    written.map_err(|e| anyhow::anyhow!("writing the answer: {e}"))?;
    Ok(verdict)
}

fn read_kernel() -> Result<Listing, String> {
    one_shot::on_own_runtime("the kernel's IPVS table", async {
        Ok(listing::read().await?)
    })
    .map_err(|e| e.to_string())
}

/// Each frontend's virtual server in the kernel against the plan.
fn compare(explanation: &Explanation, listing: &Listing) -> Vec<KernelCheck> {
    let mut checks = Vec::new();
    for port in &explanation.ports {
        for frontend in &port.frontends {
            checks.push(check(&port.protocol, frontend, listing));
        }
    }
    checks
}

fn check(
    protocol: &str,
    frontend: &Frontend,
    listing: &Listing,
) -> KernelCheck {
    let socket = SocketAddr::new(frontend.address, frontend.port);
    let name = format!("{protocol} {socket}");
    let found = listing.services.iter().find(|listed| {
        listed.key().is_some_and(|key| {
            key.protocol.as_str() == protocol
                && key.address == frontend.address
                && key.port == frontend.port
        })
    });
    let mut differences = Vec::new();
    let Some(listed) = found else {
        differences.push("missing from the kernel".to_owned());
        return KernelCheck {
            virtual_server: name,
            differences,
        };
    };
    if listed.service.scheduler != frontend.scheduler {
        differences.push(format!(
            "scheduler {} in the kernel, {} planned",
            listed.service.scheduler, frontend.scheduler
        ));
    }
    let flags = listed.scheduler_flags();
    if flags != frontend.flags {
        differences.push(format!(
            "flags {flags:?} in the kernel, {:?} planned",
            frontend.flags
        ));
    }
    if listed.persistence() != frontend.persistent {
        differences.push(format!(
            "persistence {:?} in the kernel, {:?} planned",
            listed.persistence(),
            frontend.persistent
        ));
    }
    let planned: Vec<(SocketAddr, u32)> = (frontend.endpoints.iter())
        .filter_map(|ep| {
            Some((SocketAddr::new(ep.address, ep.port), ep.weight?))
        })
        .collect();
    for (socket, weight) in &planned {
        match listed
            .dests
            .iter()
            .find(|d| SocketAddr::new(d.address, d.port) == *socket)
        {
            None => differences.push(format!("real server {socket} missing")),
            Some(dest) if dest.weight != *weight => differences.push(format!(
                "real server {socket} at weight {} in the kernel, {weight} planned",
                dest.weight
            )),
            Some(_) => {}
        }
    }
    // Weight 0 is a real server draining its connections, which the
    // proxy removes once they are gone.
    for dest in listed.dests.iter().filter(|d| d.weight > 0) {
        let socket = SocketAddr::new(dest.address, dest.port);
        if !planned.iter().any(|(s, _)| *s == socket) {
            differences.push(format!(
                "real server {socket} (weight {}) not planned",
                dest.weight
            ));
        }
    }
    KernelCheck {
        virtual_server: name,
        differences,
    }
}

fn text(report: &Report<'_>) -> String {
    let e = report.explanation;
    let mut out = String::new();
    let zone = if e.zone.is_empty() {
        "no zone"
    } else {
        &e.zone
    };
    let _ = writeln!(out, "Service {} on node {} ({zone})", e.service, e.node);
    if !e.all_endpoints_known {
        let _ = writeln!(
            out,
            "  (fed by the API side: only the endpoints of this node's \
             view are known here)"
        );
    }
    for port in &e.ports {
        let name = if port.name.is_empty() {
            "(unnamed)"
        } else {
            &port.name
        };
        let _ = writeln!(out, "port {name} {}/{}", port.port, port.protocol);
        if port.frontends.is_empty() {
            let _ = writeln!(out, "  no virtual server");
        }
        for f in &port.frontends {
            let socket = SocketAddr::new(f.address, f.port);
            let mut scheduling = f.scheduler.clone();
            if !f.flags.is_empty() {
                let _ = write!(scheduling, " ({})", f.flags.join(","));
            }
            if let Some(timeout) = f.persistent {
                let _ = write!(scheduling, " persistent {timeout}");
            }
            let _ = writeln!(
                out,
                "  {} {} {socket}: {scheduling}, {} policy",
                f.kind, f.family, f.policy
            );
            for ep in &f.endpoints {
                let socket = SocketAddr::new(ep.address, ep.port);
                let node = ep.node.as_deref().unwrap_or("no node");
                let verdict = match ep.reason {
                    None => "used".to_owned(),
                    Some(reason) => format!("not used: {}", reason.as_str()),
                };
                let _ = writeln!(
                    out,
                    "    {socket:<28} {node:<16} ready={} serving={} \
                     terminating={}  {verdict}",
                    ep.ready, ep.serving, ep.terminating
                );
            }
        }
    }
    match &report.kernel_not_read {
        Some(reason) => {
            let _ = writeln!(out, "kernel: not read ({reason})");
        }
        None => {
            for check in &report.kernel {
                if check.differences.is_empty() {
                    let _ = writeln!(
                        out,
                        "kernel: {} agrees",
                        check.virtual_server
                    );
                }
                for d in &check.differences {
                    let _ =
                        writeln!(out, "kernel: {}: {d}", check.virtual_server);
                }
            }
        }
    }
    out
}
