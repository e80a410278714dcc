//! `list`: the kernel's IPVS table as `ipvsadm -Ln` prints it, from the
//! proxy's image (which has no ipvsadm), each virtual server named by the
//! Service port and frontend it is for. The names come from the node's
//! state as the configuration's source gives it (`plan`'s); a virtual
//! server the proxy would not program is said to be so. Without the
//! source the table is still printed, unnamed, and a warning says why.

use std::{collections::HashMap, io::Write};

use serde::Serialize;

use super::{
    one_shot::{self, Asked},
    Failure, Source,
};
use crate::{
    config::{Config, ListArgs, OutputFormat},
    desired::{Plan, VirtualServerKey},
    kernel::ipvs::listing::{self, ListedService, Listing},
};

/// What a virtual server in the kernel is for, by the node's state.
type Names = HashMap<VirtualServerKey, String>;

/// What a virtual server the node's state has no Service for is noted as.
const NOT_PROGRAMMED: &str = "no Service: not one the proxy programs";

pub fn run(
    config: &Config,
    source: Source,
    args: &ListArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let listing = read_kernel()?;
    let asked = Asked {
        node: args.node.as_deref(),
        kubernetes_version: None,
        this_host: true,
    };
    let names = match one_shot::node_state(config, source, asked) {
        Ok(state) => Some(names(&state.desired().snapshot())),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "cannot read the proxy's source: the virtual servers are \
                 listed without their Services"
            );
            None
        }
    };
    let note = |listed: &ListedService| -> Option<String> {
        let names = names.as_ref()?;
        Some(match listed.key().and_then(|key| names.get(&key)) {
            Some(name) => name.clone(),
            None => NOT_PROGRAMMED.to_owned(),
        })
    };
    let written = match args.output {
        OutputFormat::Text => write!(out, "{}", listing.text(note)),
        OutputFormat::Json => {
            let json = serde_json::to_string_pretty(&json(&listing, note))
                .map_err(anyhow::Error::from)?;
            writeln!(out, "{json}")
        }
    };
    written.map_err(|e| anyhow::anyhow!("writing the table: {e}").into())
}

/// The table, on a runtime of its own.
fn read_kernel() -> Result<Listing, Failure> {
    one_shot::on_own_runtime("the kernel's IPVS table", async {
        Ok(listing::read().await?)
    })
}

/// `default/web:http clusterIP` for each virtual server of the plan.
fn names(plan: &Plan) -> Names {
    plan.virtual_servers
        .iter()
        .map(|vs| (vs.key(), format!("{} {}", vs.service, vs.kind.as_str())))
        .collect()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonListing {
    version: String,
    table_size: u32,
    virtual_servers: Vec<JsonVirtualServer>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonVirtualServer {
    /// `TCP`, `UDP` or `SCTP`; absent for a firewall mark's.
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    address: Option<std::net::IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
    /// The firewall mark of a service defined by one (never the proxy's).
    #[serde(skip_serializing_if = "Option::is_none")]
    fwmark: Option<u32>,
    scheduler: String,
    flags: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    persistent: Option<u32>,
    /// The Service port and frontend; absent when the source was not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<String>,
    real_servers: Vec<JsonRealServer>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonRealServer {
    address: std::net::IpAddr,
    port: u16,
    forward: String,
    weight: u32,
    active_conns: u32,
    inactive_conns: u32,
}

fn json(
    listing: &Listing,
    note: impl Fn(&ListedService) -> Option<String>,
) -> JsonListing {
    JsonListing {
        version: listing.version.clone(),
        table_size: listing.table_size,
        virtual_servers: (listing.services.iter())
            .map(|listed| JsonVirtualServer {
                protocol: listed.key().map(|k| k.protocol.as_str().to_owned()),
                address: listed.key().map(|k| k.address),
                port: listed.key().map(|k| k.port),
                fwmark: match listed.service.key {
                    ipvs_sys::ServiceKey::Fwmark { mark, .. } => Some(mark),
                    _ => None,
                },
                scheduler: listed.service.scheduler.clone(),
                flags: listed.scheduler_flags(),
                persistent: listed.persistence(),
                service: note(listed),
                real_servers: (listed.dests.iter())
                    .map(|dest| {
                        let conns = dest.conns.unwrap_or_default();
                        JsonRealServer {
                            address: dest.address,
                            port: dest.port,
                            forward: dest.fwd_method.to_string(),
                            weight: dest.weight,
                            active_conns: conns.active,
                            inactive_conns: conns.inactive,
                        }
                    })
                    .collect(),
            })
            .collect(),
    }
}
