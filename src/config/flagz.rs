//! What `/flagz` lists: every flag of the command line with its value, as
//! kube-proxy lists its own since 1.36. Upstream's flags are bound to a
//! configuration built from the defaults and the flags alone; the file
//! given with `--config` replaces that configuration but not what the
//! flags read. So a flag's value here is the one the flags alone would
//! configure (given, or its default), whatever the file says.

use std::collections::BTreeMap;

use clap::CommandFactory;
use serde_json::Value;

use super::{
    resolve, validate::FLAG_NAMES, write::to_kube_proxy_configuration, Cli,
    ConfigArgs,
};

/// Each flag of the proxy's command line (its long name, no dashes) and
/// its value, as Go's flag package prints one.
pub fn flagz(args: &ConfigArgs) -> BTreeMap<String, String> {
    let alone = ConfigArgs {
        config: None,
        ..args.clone()
    };
    // Flags that the file made irrelevant may not make a configuration
    // of their own; the defaults then stand in for all of them.
    let configured = resolve(&alone, None)
        .or_else(|_| resolve(&ConfigArgs::default(), None))
        .map(|r| r.config)
        .unwrap_or_default();
    let file = serde_json::to_value(to_kube_proxy_configuration(&configured))
        .unwrap_or(Value::Null);
    Cli::command()
        .get_arguments()
        .filter_map(|arg| {
            let long = arg.get_long()?;
            (long != "help").then(|| {
                let value = value_of(long, args, &file).unwrap_or_default();
                (long.to_owned(), value)
            })
        })
        .collect()
}

/// The value of flag `long`, or `None` for a flag this module does not
/// know (a test holds every flag of the command to it).
pub(super) fn value_of(
    long: &str,
    args: &ConfigArgs,
    file: &Value,
) -> Option<String> {
    if long == "feature-gates" {
        // The configuration keeps only the gates it acts on.
        let mut gates: Vec<&str> = args
            .feature_gates
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .collect();
        gates.sort_unstable();
        return Some(gates.join(","));
    }
    let dashed = match long {
        "v" => "-v".to_owned(),
        other => format!("--{other}"),
    };
    if let Some((path, _)) = FLAG_NAMES.iter().find(|(_, f)| *f == dashed) {
        let value = path.split('.').fold(file, |v, key| &v[key]);
        return Some(match long {
            // A port flag is the port of its server's address.
            "healthz-port" | "metrics-port" => value
                .as_str()
                .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
                .map_or_else(|| "0".to_owned(), |a| a.port().to_string()),
            // A list flag prints its empty list so, set or not.
            "nodeport-addresses" | "ipvs-exclude-cidrs" if value.is_null() => {
                "[]".to_owned()
            }
            _ => go_flag(value),
        });
    }
    let path = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let text = |t: &Option<String>| t.clone().unwrap_or_default();
    let ignored = &args.ignored;
    Some(match long {
        "config" => path(&args.config),
        "state" => path(&args.state),
        "api-endpoint" => text(&args.api_endpoint),
        "api-tls-dir" => path(&args.api_tls_dir),
        "api-token-file" => path(&args.api_token_file),
        "service-proxy-name" => text(&args.service_proxy_name),
        "ipvs-scheduler-flags" => text(&args.ipvs_scheduler_flags),
        "ipvs-service-schedulers" => text(&args.ipvs_service_schedulers),
        "master" => text(&args.master),
        // A serving process was not given these, or only as false.
        "cleanup" | "version" | "init-only" => "false".to_owned(),
        "write-config-to" => String::new(),
        // Accepted and not applied: what was given, if anything.
        "iptables-sync-period" => text(&ignored.iptables_sync_period),
        "iptables-min-sync-period" => text(&ignored.iptables_min_sync_period),
        "iptables-localhost-nodeports" => {
            text(&ignored.iptables_localhost_nodeports)
        }
        "kube-api-qps" => text(&ignored.kube_api_qps),
        "kube-api-burst" => text(&ignored.kube_api_burst),
        "show-hidden-metrics-for-version" => {
            text(&ignored.show_hidden_metrics_for_version)
        }
        "proxy-port-range" => text(&ignored.proxy_port_range),
        "log-flush-frequency" => text(&ignored.log_flush_frequency),
        "vmodule" => text(&ignored.vmodule),
        "profiling" => text(&ignored.profiling),
        _ => return None,
    })
}

/// A configuration value as Go's flag package prints the flag bound to
/// it: a list as `[a,b]`, a map of gates as `A=true,B=false` (sorted),
/// nothing for no value.
fn go_flag(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_flag).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", go_flag(v)))
            .collect::<Vec<_>>()
            .join(","),
    }
}
