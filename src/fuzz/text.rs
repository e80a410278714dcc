//! What an operator writes: the state file, the `KubeProxyConfiguration`
//! file, the command line.

use clap::{CommandFactory as _, Parser as _};

use super::{input::Input, objects::Proxy};
use crate::{
    config::{self, Cli, ConfigArgs},
    source::file::{self, derive_endpoint_slices},
    sync::NodeSettings,
};

/// One or more versions of a state file, separated by form feeds, as
/// the file source reads them: each version that parses prints as JSON
/// and reads back the same, and the proxy that took each version in
/// turn programs what a fresh start from the last one programs.
pub fn state_file(data: &[u8]) {
    let mut proxy: Option<Proxy> = None;
    let mut previous = Vec::new();
    let mut last = None;
    for version in data.split(|b| *b == 0x0c).take(4) {
        let Ok(text) = std::str::from_utf8(version) else {
            continue;
        };
        let Ok(mut snapshot) = file::parse(text) else {
            continue;
        };
        let printed = printed_as_json(&snapshot);
        assert_eq!(
            file::parse(&printed).as_ref().ok(),
            Some(&snapshot),
            "the file's objects do not read back the same:\n{printed}"
        );
        derive_endpoint_slices(&mut snapshot, &previous);
        previous = snapshot.endpoint_slices.clone();
        let proxy =
            proxy.get_or_insert_with(|| Proxy::new(NodeSettings::default()));
        for event in snapshot.relist() {
            if proxy.event(event, &snapshot) {
                break;
            }
        }
        proxy.sync();
        last = Some(snapshot);
    }
    if let (Some(proxy), Some(last)) = (proxy.as_mut(), last.as_ref()) {
        proxy.assert_as_fresh(last);
    }
}

/// A snapshot's objects as one JSON array.
fn printed_as_json(snapshot: &file::Snapshot) -> String {
    let mut items: Vec<serde_json::Value> = Vec::new();
    let mut add = |value: Result<serde_json::Value, serde_json::Error>| {
        items.extend(value.ok());
    };
    snapshot
        .services
        .iter()
        .for_each(|o| add(serde_json::to_value(o)));
    snapshot
        .endpoint_slices
        .iter()
        .for_each(|o| add(serde_json::to_value(o)));
    snapshot
        .nodes
        .iter()
        .for_each(|o| add(serde_json::to_value(o)));
    items.extend(snapshot.others.iter().cloned());
    serde_json::Value::Array(items).to_string()
}

/// A `KubeProxyConfiguration` file: a configuration it gives, written as
/// `--write-config-to` writes it, reads back the same without a warning.
pub fn kube_proxy_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let args = ConfigArgs::default();
    let Ok(resolved) = config::resolve(&args, Some(text)) else {
        return;
    };
    assert_reads_back(&resolved.config, &args);
}

/// `config` written as a file reads back the same with `args` beside
/// it, and without a warning when no flag is given.
fn assert_reads_back(config: &config::Config, args: &ConfigArgs) {
    let written = config::to_yaml(config);
    assert!(written.is_ok(), "{written:?}");
    let written = written.unwrap_or_default();
    let again = match config::resolve(args, Some(&written)) {
        Ok(again) => again,
        Err(e) => panic!("what we write is refused: {e}\n{written}"),
    };
    assert_eq!(&again.config, config, "read back differently:\n{written}");
    if *args == ConfigArgs::default() {
        assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    }
}

/// Values the flags take, valid and not.
const VALUES: &[&str] = &[
    "",
    "0",
    "1",
    "true",
    "false",
    "raw",
    "198.18.0.1",
    "198.18.0.0/15",
    "198.18.0.0/15,2001:db8::/64",
    "0.0.0.0:10256",
    "[::]:10249",
    ":10249",
    "30s",
    "-1s",
    "1h30m",
    "0s",
    "rr",
    "wrr",
    "sh",
    "ipvs",
    "iptables",
    "nftables",
    "ClusterCIDR",
    "NodeCIDR",
    "BridgeInterface",
    "InterfaceNamePrefix",
    "primary",
    "eth0",
    "veth",
    "65536",
    "-5",
    "1.5",
    "2",
    "json",
    "text",
    "node-a",
    "unix:///run/views.sock",
    "https://api-side:9443",
    "/nonexistent",
    "a=b",
    "=",
];

/// A command line: when it is a run's and gives a configuration, that
/// configuration written as a file reads back the same beside the same
/// flags, which then apply only where they have no file field (`--state`
/// and the other flags of our own). Servers turned off with an empty
/// address, which a file cannot say, aside.
pub fn flags(data: &[u8]) {
    let mut input = Input::new(data);
    let command = Cli::command();
    let names: Vec<String> = command
        .get_arguments()
        .filter_map(|a| a.get_long().map(|long| format!("--{long}")))
        .chain(["plan", "api-server", "--", "-v", "--bogus"].map(str::to_owned))
        .collect();
    let mut argv = vec!["kube-ipvs-proxy".to_owned()];
    for _ in 0..input.below(8) {
        let flag = input.pick(&names);
        let value = match input.one_in(4) {
            true => input.text(12),
            false => input.pick_str(VALUES),
        };
        match input.below(3) {
            0 => argv.push(format!("{flag}={value}")),
            1 => argv.extend([flag, value]),
            _ => argv.push(flag),
        }
    }
    let Ok(cli) = Cli::try_parse_from(&argv) else {
        return;
    };
    if cli.command.is_some() || cli.run.config.config.is_some() {
        return;
    }
    let Ok(resolved) = config::resolve(&cli.run.config, None) else {
        return;
    };
    let mut expected = resolved.config;
    let defaults = config::Config::default();
    if expected.healthz_bind_address.is_none() {
        expected.healthz_bind_address = defaults.healthz_bind_address;
    }
    if expected.metrics_bind_address.is_none() {
        expected.metrics_bind_address = defaults.metrics_bind_address;
    }
    let mut beside = cli.run.config.clone();
    beside.config = Some("written.yaml".into());
    assert_reads_back(&expected, &beside);
}
