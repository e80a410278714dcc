//! `docs/configuration.md`, generated from the code: the flags from clap's
//! own definition, the file's fields from the table below, their defaults
//! from what `--write-config-to` writes, and each refusal's message from
//! the validation itself. The table is held to the code's behaviour: every
//! field the file type has is in it, an applied field has an effect, an
//! ignored one is warned about, a refused value is refused naming the
//! field. `UPDATE_DOCS=1 cargo test --lib config::reference` rewrites the
//! page.

use std::{collections::BTreeSet, fmt::Write as _};

use clap::{CommandFactory, Parser};
use serde_json::Value;

use super::{
    flags::IgnoredFlags, kubeproxy, resolve, validate::FLAG_NAMES,
    write::to_kube_proxy_configuration, Cli, Config, ConfigArgs, ConfigError,
    Resolved, EXIT_BAD_CONFIG, EXIT_FORBIDDEN, EXIT_KERNEL_UNSUPPORTED,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handling {
    /// Used as kube-proxy uses it.
    Applied,
    /// Accepted so that kube-proxy's files load; a value other than the
    /// zero value logs a warning and does nothing.
    Ignored,
    /// Must be present with its one value.
    Required,
}

struct Field {
    /// The path in the file, as warnings and errors name it.
    path: &'static str,
    handling: Handling,
    /// A value (YAML) the field takes; with `context`, it must be
    /// accepted.
    sample: &'static str,
    /// A value refused with an error naming the field (exit status 64).
    refused: Option<&'static str>,
    /// Other lines of the file the sample needs (YAML, top level).
    context: &'static str,
    note: &'static str,
}

const fn applied(path: &'static str, sample: &'static str) -> Field {
    Field {
        path,
        handling: Handling::Applied,
        sample,
        refused: None,
        context: "",
        note: "",
    }
}

const fn ignored(path: &'static str, sample: &'static str) -> Field {
    Field {
        handling: Handling::Ignored,
        ..applied(path, sample)
    }
}

impl Field {
    const fn refused(mut self, value: &'static str) -> Self {
        self.refused = Some(value);
        self
    }

    const fn context(mut self, context: &'static str) -> Self {
        self.context = context;
        self
    }

    const fn note(mut self, note: &'static str) -> Self {
        self.note = note;
        self
    }
}

/// Every field of `KubeProxyConfiguration` (v1alpha1), in the file's
/// order of sections.
const FIELDS: &[Field] = &[
    Field {
        handling: Handling::Required,
        ..applied("apiVersion", "kubeproxy.config.k8s.io/v1alpha1")
    }
    .refused("kubeproxy.config.k8s.io/v1beta1"),
    Field {
        handling: Handling::Required,
        ..applied("kind", "KubeProxyConfiguration")
    }
    .refused("KubeletConfiguration"),
    applied("mode", "ipvs").refused("nftables").note(
        "Empty (kubeadm's default) runs IPVS mode with a warning, since \
         kube-proxy would run iptables mode.",
    ),
    applied("featureGates", "{AllowServiceExternalIPs: false}").note(
        "`AllowServiceExternalIPs: false` serves no Service's external IPs; \
         `KubeProxyIPVS` is accepted with either value (it only switches \
         kube-proxy's own IPVS mode); `ComponentFlagz: false` and \
         `ComponentStatusz: false` take `/flagz` and `/statusz` off the \
         metrics server. Any other gate is named in a warning of its own; \
         kube-proxy would refuse one it does not know.",
    ),
    applied("clientConnection.kubeconfig", "/etc/kube-proxy/kubeconfig")
        .note("Empty: the Pod's in-cluster configuration."),
    applied("clientConnection.acceptContentTypes", "application/json").note(
        "The watches' `Accept` header; empty: `contentType`, then \
             anything, as client-go.",
    ),
    applied("clientConnection.contentType", "application/json").note(
        "Empty: `application/vnd.kubernetes.protobuf`, as kube-proxy. A \
         response in JSON is read as JSON, whatever was asked.",
    ),
    ignored("clientConnection.qps", "10"),
    ignored("clientConnection.burst", "20"),
    applied("logging.format", "json").refused("xml"),
    applied("logging.verbosity", "4")
        .refused("-1")
        .note("0 and 1 log at info, 2 to 4 at debug, 5 and more at trace."),
    ignored("logging.flushFrequency", "10s"),
    ignored("logging.vmodule", "[{filePattern: proxier, verbosity: 4}]"),
    ignored("logging.options", "{json: {infoBufferSize: \"1Mi\"}}"),
    applied("hostnameOverride", "node-a")
        .refused("\" \"")
        .note("Lowercased, as upstream's."),
    applied("bindAddress", "198.18.0.7")
        .refused("198.18.0")
        .note(
            "The node's primary IP; an unspecified address (kubeadm's \
         `0.0.0.0`) leaves it to the Node object.",
        ),
    applied("healthzBindAddress", "0.0.0.0:20256")
        .refused("198.18.0.7:0")
        .note("A bare IP gets port 10256."),
    applied("metricsBindAddress", "127.0.0.1:20249")
        .refused("localhost")
        .note("A bare IP gets port 10249."),
    applied("bindAddressHardFail", "true").note(
        "Exit (status 1) when the health check or metrics server cannot \
         bind its port; otherwise each retries every 5 seconds.",
    ),
    ignored("enableProfiling", "true"),
    ignored("showHiddenMetricsForVersion", "\"1.33\""),
    applied("iptables.masqueradeBit", "15").refused("32"),
    applied("iptables.masqueradeAll", "true"),
    ignored("iptables.localhostNodePorts", "true")
        .note("IPVS mode never serves NodePorts on loopback."),
    ignored("iptables.snatNodeInternalIP", "true"),
    ignored("iptables.syncPeriod", "10s")
        .note("IPVS mode syncs on `ipvs.syncPeriod`."),
    ignored("iptables.minSyncPeriod", "1s"),
    applied("ipvs.syncPeriod", "10s")
        .refused("-1s")
        .note("The longest time between two syncs."),
    applied("ipvs.minSyncPeriod", "1s")
        .refused("-1s")
        .note("0 syncs on every change."),
    applied("ipvs.scheduler", "wrr").note(
        "Any name the kernel has (`ip_vs_NAME`); one it lacks stops the \
         proxy at start-up (exit 69).",
    ),
    applied("ipvs.excludeCIDRs", "[198.18.10.0/24]").refused("[198.18.10.0]"),
    applied("ipvs.strictARP", "true")
        .note("Sets `arp_ignore=1` and `arp_announce=2`, as MetalLB asks."),
    applied("ipvs.tcpTimeout", "15m")
        .refused("-1s")
        .note("0 leaves the kernel's value."),
    applied("ipvs.tcpFinTimeout", "30s")
        .refused("-1s")
        .note("0 leaves the kernel's value."),
    applied("ipvs.udpTimeout", "10s")
        .refused("-1s")
        .note("0 leaves the kernel's value."),
    ignored("nftables.masqueradeBit", "15"),
    ignored("nftables.masqueradeAll", "true"),
    ignored("nftables.syncPeriod", "10s"),
    ignored("nftables.minSyncPeriod", "1s"),
    ignored("winkernel.networkName", "cbr0"),
    ignored("winkernel.sourceVip", "198.18.0.9"),
    ignored("winkernel.enableDSR", "true"),
    ignored("winkernel.rootHnsEndpointName", "cbr0"),
    ignored("winkernel.forwardHealthCheckVip", "true"),
    applied("detectLocalMode", "NodeCIDR")
        .refused("Interface")
        .note("Empty means ClusterCIDR."),
    applied("detectLocal.bridgeInterface", "cbr0")
        .refused("\"\"")
        .context("detectLocalMode: BridgeInterface"),
    applied("detectLocal.interfaceNamePrefix", "veth")
        .refused("\"\"")
        .context("detectLocalMode: InterfaceNamePrefix"),
    applied("clusterCIDR", "198.19.0.0/16,2001:db8:1::/64")
        .refused("198.19.0.0/16,198.20.0.0/16")
        .note("At most one CIDR per family."),
    applied("nodePortAddresses", "[primary, 198.18.0.0/16]")
        .refused("[198.18.0.0/33]")
        .note(
            "Unset: every local address. `all` is every address; \
             `localhost` matches loopback, where IPVS mode never serves \
             NodePorts (warned about: alone, it serves them nowhere). A \
             keyword given twice is refused.",
        ),
    applied("oomScoreAdj", "-500").refused("1001"),
    applied("conntrack.maxPerCore", "65536").refused("-1"),
    applied("conntrack.min", "262144").refused("-1"),
    applied("conntrack.tcpEstablishedTimeout", "1h")
        .refused("-1s")
        .note("0 leaves the kernel's value."),
    applied("conntrack.tcpCloseWaitTimeout", "30m")
        .refused("-1s")
        .note("0 leaves the kernel's value."),
    applied("conntrack.tcpBeLiberal", "true"),
    applied("conntrack.udpTimeout", "1m")
        .refused("-1s")
        .note("0 leaves the kernel's value."),
    applied("conntrack.udpStreamTimeout", "3m")
        .refused("-1s")
        .note("0 leaves the kernel's value."),
    ignored("configSyncPeriod", "1h").refused("-1s").note(
        "Validated; a value other than the default is warned about: the \
         watches do not resync (upstream's resync only re-delivers \
         unchanged objects).",
    ),
    ignored("portRange", "30000-30100")
        .note("Unused by kube-proxy too since its userspace mode went."),
    ignored("windowsRunAsService", "true"),
    ignored("udpIdleTimeout", "250ms")
        .note("Removed upstream in 1.25; still in ConfigMaps of old kubeadm."),
];

/// Flags that apply over the file when `--config` is given; every other
/// flag that sets a field of the file is then ignored with a warning.
pub(super) const OVER_THE_FILE: &[(&str, &str)] = &[
    ("--hostname-override", "node-b"),
    ("-v", "5"),
    ("--logging-format", "json"),
];

const HEAD: &str =
    "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

/// The YAML lines that set a dotted path to a value.
fn nested(path: &str, value: &str) -> String {
    let parts: Vec<&str> = path.split('.').collect();
    let mut out = String::new();
    for (depth, part) in parts.iter().enumerate() {
        let indent = "  ".repeat(depth);
        if depth + 1 == parts.len() {
            let _ = writeln!(out, "{indent}{part}: {value}");
        } else {
            let _ = writeln!(out, "{indent}{part}:");
        }
    }
    out
}

impl Field {
    /// A whole file with this field at `value`, `apiVersion` and `kind`
    /// included unless the field is one of them.
    fn file(&self, value: Option<&str>) -> String {
        let mut text = String::new();
        for line in HEAD.lines() {
            if !line.starts_with(&format!("{}:", self.path)) {
                text.push_str(line);
                text.push('\n');
            }
        }
        if !self.context.is_empty() {
            text.push_str(self.context);
            text.push('\n');
        }
        if let Some(value) = value {
            text.push_str(&nested(self.path, value));
        }
        text
    }

    fn resolved(&self, value: Option<&str>) -> Result<Resolved, ConfigError> {
        resolve(&ConfigArgs::default(), Some(&self.file(value)))
    }

    /// The error a refused value gets, as the operator reads it.
    fn refusal(&self) -> Option<String> {
        let value = self.refused?;
        Some(match self.resolved(Some(value)) {
            Err(e) => e
                .fields()
                .into_iter()
                .find(|f| names(&f.field, self.path))
                .map_or_else(|| e.to_string(), |f| f.reason),
            Ok(_) => format!("{value} was accepted"),
        })
    }

    fn handling(&self) -> &'static str {
        match self.handling {
            Handling::Applied => "applied",
            Handling::Ignored => "ignored, with a warning when set",
            Handling::Required => "required",
        }
    }
}

/// Whether an error's field is this path, or an item of its list.
fn names(field: &str, path: &str) -> bool {
    field == path || field.starts_with(&format!("{path}["))
}

fn warned(resolved: &Resolved, path: &str) -> bool {
    resolved
        .warnings
        .iter()
        .any(|w| w.field == path || w.field.starts_with(&format!("{path}.")))
}

/// The paths of a JSON value's leaves, an empty object being one.
fn leaves(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, value) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaves(value, &path, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned());
        }
    }
}

/// Every field the file type has: each section present and empty, so
/// that its fields show as null leaves (a section added later shows as a
/// leaf of its own).
fn type_fields() -> BTreeSet<String> {
    let kpc = kubeproxy::KubeProxyConfiguration {
        feature_gates: Some(Default::default()),
        client_connection: Some(Default::default()),
        logging: Some(Default::default()),
        iptables: Some(Default::default()),
        ipvs: Some(Default::default()),
        nftables: Some(Default::default()),
        winkernel: Some(Default::default()),
        detect_local: Some(Default::default()),
        conntrack: Some(Default::default()),
        ..Default::default()
    };
    let mut out = BTreeSet::new();
    leaves(&serde_json::to_value(kpc).unwrap(), "", &mut out);
    out
}

/// What `--write-config-to` writes for a field when nothing is set.
fn default_of(path: &str) -> String {
    let written =
        serde_json::to_value(to_kube_proxy_configuration(&Config::default()))
            .unwrap();
    let value = path
        .split('.')
        .try_fold(&written, |v, key| v.get(key))
        .unwrap_or(&Value::Null);
    match value {
        Value::Null => "unset".to_owned(),
        Value::String(s) if s.is_empty() => "`\"\"`".to_owned(),
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    }
}

/// Help text on one line, safe in a table cell.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// How a flag is written: `--name=VALUE`, `--name[=true|false]` for a
/// boolean, `--name=a|b` for a choice, `-v=LEVEL` for the one flag with
/// a short name.
fn spelling(arg: &clap::Arg) -> String {
    let name = flag_name(arg);
    let boolean =
        arg.get_value_parser().type_id() == std::any::TypeId::of::<bool>();
    let choices: Vec<String> = arg
        .get_possible_values()
        .iter()
        .map(|v| v.get_name().to_owned())
        .collect();
    let value = if boolean {
        "true|false".to_owned()
    } else if !choices.is_empty() {
        choices.join("|")
    } else {
        arg.get_value_names()
            .and_then(|names| names.first())
            .map(ToString::to_string)
            .unwrap_or_default()
    };
    // Every flag whose value may be left out takes it after `=` only.
    let spelled = if arg.is_positional() {
        value
    } else if !arg.get_action().takes_values() {
        name
    } else if arg.is_require_equals_set() {
        format!("{name}[={value}]")
    } else {
        format!("{name}={value}")
    };
    spelled.replace('|', "\\|")
}

fn flag_field(flag: &str) -> Option<&'static str> {
    FLAG_NAMES
        .iter()
        .find(|(_, f)| *f == flag)
        .map(|(path, _)| *path)
}

fn flag_name(arg: &clap::Arg) -> String {
    match arg.get_long() {
        Some("v") => "-v".to_owned(),
        Some(long) => format!("--{long}"),
        None => arg.get_id().to_string(),
    }
}

/// A flag's help on one line.
fn help_of(arg: &clap::Arg) -> String {
    cell(
        &arg.get_long_help()
            .or(arg.get_help())
            .map(ToString::to_string)
            .unwrap_or_default(),
    )
}

/// The flags of `command`; for a subcommand, only those the proxy's
/// own command lacks or means otherwise.
fn flags_table(
    out: &mut String,
    command: &clap::Command,
    run: Option<&clap::Command>,
) {
    if run.is_none() {
        out.push_str(
            "| flag | sets | with `--config` | default | what it does |\n\
             |---|---|---|---|---|\n",
        );
    } else {
        out.push_str("| flag | default | what it does |\n|---|---|---|\n");
    }
    for arg in command.get_arguments() {
        if arg.is_hide_set() || arg.get_id() == "help" {
            continue;
        }
        let help = help_of(arg);
        if let Some(run) = run {
            let same = run
                .get_arguments()
                .any(|r| r.get_id() == arg.get_id() && help_of(r) == help);
            if same {
                continue;
            }
        }
        let name = flag_name(arg);
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect();
        let default = if defaults.is_empty() {
            String::new()
        } else {
            defaults.join(", ")
        };
        let spelled = spelling(arg);
        if run.is_none() {
            let (sets, with_config) = match flag_field(&name) {
                Some(path) if OVER_THE_FILE.iter().any(|(f, _)| *f == name) => {
                    (format!("`{path}`"), "applies over the file")
                }
                Some(path) => (format!("`{path}`"), "ignored, with a warning"),
                None => (String::new(), "applies"),
            };
            let _ = writeln!(
                out,
                "| `{spelled}` | {sets} | {with_config} | {default} | {help} |"
            );
        } else {
            let _ = writeln!(out, "| `{spelled}` | {default} | {help} |");
        }
    }
}

fn markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "# Configuration\n\n\
         <!-- Generated from src/config/ by the test in reference.rs: run\n\
         `UPDATE_DOCS=1 cargo test --lib config::reference` after a change. -->\n\n\
         kube-ipvs-proxy takes kube-proxy's flags and its\n\
         `KubeProxyConfiguration` file (`kubeproxy.config.k8s.io/v1alpha1`,\n\
         the `config.conf` of kubeadm's `kube-system/kube-proxy` ConfigMap).\n\
         As with kube-proxy, the flags alone configure the proxy when no\n\
         `--config` is given; with `--config` the file is the whole\n\
         configuration, and a flag that sets one of its fields is ignored\n\
         with a warning, except the three that apply over it\n\
         (`--hostname-override`, `-v`, `--logging-format`). Every problem\n\
         is reported at once, each naming its field or flag, and the\n\
         process exits with status 64. `--write-config-to=FILE` writes the\n\
         effective configuration, defaults included.\n\n\
         ## Exit status\n\n\
         | status | when |\n|---|---|\n\
         | 0 | stopped by SIGTERM or SIGINT; `--cleanup`, `--init-only`, `--write-config-to`, `--version` or `--help` done |\n\
         | 1 | a step that retrying would not mend failed: the kubeconfig cannot be loaded, the kernel's facilities cannot be opened (`--cleanup` too: a removal that fails is logged, and the rest still removed), `--write-config-to` cannot write, or, with `bindAddressHardFail`, the health or metrics address cannot be bound (without it, each server retries every 5 seconds); the reason is the last log line and, in a Pod, its termination message |\n",
    );
    let _ = writeln!(
        out,
        "| {EXIT_BAD_CONFIG} | the configuration is refused: a flag clap does not \
         take, a file that does not decode, or a value refused below |\n\
         | {EXIT_KERNEL_UNSUPPORTED} | the kernel lacks what IPVS mode needs (IPVS, the \
         configured scheduler, dummy links, ipset or one of its set types); \
         one line names the modules to load |\n\
         | {EXIT_FORBIDDEN} | the kernel refused this process: it lacks \
         `CAP_NET_ADMIN` or `CAP_NET_RAW` (an unprivileged container without \
         them); one line names the capabilities to add |\n"
    );

    out.push_str("## Flags\n\n### Running the proxy\n\n");
    let cli = Cli::command();
    flags_table(&mut out, &cli, None);
    for sub in cli.get_subcommands() {
        let about =
            cell(&sub.get_about().map(ToString::to_string).unwrap_or_default());
        let _ = writeln!(
            out,
            "\n### `{}`\n\n{}. It takes the configuration flags above, and:\n",
            sub.get_name(),
            about.trim_end_matches('.')
        );
        flags_table(&mut out, sub, Some(&cli));
    }
    out.push_str(
        "\n### kube-proxy's flags accepted and ignored\n\n\
         Accepted so that kube-proxy's manifests keep working; each one\n\
         given logs a warning and changes nothing. A flag that would change\n\
         what the process does is never among them: it would run where\n\
         kube-proxy exits.\n\n",
    );
    let hidden: Vec<String> = cli
        .get_arguments()
        .filter(|a| a.is_hide_set())
        .map(|a| format!("`{}`", flag_name(a)))
        .collect();
    let _ = writeln!(out, "{}\n", hidden.join(", "));

    out.push_str(
        "## The file's fields\n\n\
         Zero values (`0`, `\"\"`, `0s`, `false`, `null`) mean the default,\n\
         as upstream's defaulting; a field no version of the type has is\n\
         warned about and ignored, as kube-proxy's lenient decoding does.\n\
         The default is what `--write-config-to` writes when nothing is\n\
         set; \"refused\" shows one refused value and the message it gets.\n\n\
         | field | handling | default | refused, for example | flag | notes |\n\
         |---|---|---|---|---|---|\n",
    );
    for field in FIELDS {
        let refused = match (field.refused, field.refusal()) {
            (Some(value), Some(reason)) => {
                format!("`{}`: {}", value.replace('|', "\\|"), cell(&reason))
            }
            _ => String::new(),
        };
        let flag = FLAG_NAMES
            .iter()
            .find(|(p, _)| *p == field.path)
            .map(|(_, f)| format!("`{f}`"))
            .unwrap_or_default();
        let default = match field.handling {
            Handling::Applied => default_of(field.path),
            Handling::Ignored | Handling::Required => String::new(),
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} |",
            field.path,
            field.handling(),
            default,
            refused,
            flag,
            cell(field.note)
        );
    }

    out.push_str(
        "\n## Service annotations\n\n\
         Ours, read on every Service. A bad value, or a scheduler the node\n\
         will not run (not in `--ipvs-service-schedulers`, or not in the\n\
         kernel, which is asked once per name), is logged with the\n\
         Service's namespace and name, counted in\n\
         `kube_ipvs_proxy_invalid_objects_total` (reasons\n\
         `invalid_scheduling_annotation`, `scheduler_not_allowed`,\n\
         `scheduler_not_in_kernel`), recorded as a `Warning` Event\n\
         `IPVSSchedulingNotUsed` on the Service, and the node's default\n\
         used instead. Session affinity stays ClientIP's persistence,\n\
         beside the scheduler and its flags.\n\n\
         | annotation | what it does |\n|---|---|\n",
    );
    for (annotation, what) in crate::model::SERVICE_ANNOTATIONS {
        let _ = writeln!(out, "| `{annotation}` | {} |", cell(what));
    }
    out
}

/// docs/configuration.md is what the code defines. `UPDATE_DOCS=1`
/// rewrites it.
#[test]
fn the_configuration_page_is_the_code() {
    crate::docs_page::assert_page_is(
        "docs/configuration.md",
        &markdown(),
        "config::reference",
    );
}

#[test]
fn every_field_of_the_file_is_in_the_table_once() {
    let listed: Vec<&str> = FIELDS.iter().map(|f| f.path).collect();
    let unique: BTreeSet<&str> = listed.iter().copied().collect();
    assert_eq!(unique.len(), listed.len(), "a field listed twice");
    let have: BTreeSet<String> = type_fields();
    let listed: BTreeSet<String> =
        unique.iter().map(|p| (*p).to_owned()).collect();
    assert_eq!(
        have.difference(&listed).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "fields of the type the table does not list"
    );
    assert_eq!(
        listed.difference(&have).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "listed fields the type does not have"
    );
}

/// Each row says what the code does with the field.
#[test]
fn every_field_is_handled_as_the_table_says() {
    let base = resolve(&ConfigArgs::default(), Some(HEAD)).unwrap();
    for field in FIELDS {
        let path = field.path;
        let resolved = field.resolved(Some(field.sample)).unwrap_or_else(|e| {
            panic!("{path}: {} refused: {e}", field.sample)
        });
        let refuses = if let Some(value) = field.refused {
            let error = field.resolved(Some(value)).err();
            assert!(
                error
                    .as_ref()
                    .is_some_and(|e| e.fields().iter().any(|f| names(&f.field, path))),
                "{path}: {value} must be refused naming the field, got {error:?}"
            );
            true
        } else {
            false
        };
        match field.handling {
            Handling::Applied => {
                assert!(
                    !warned(&resolved, path),
                    "{path}: {:?}",
                    resolved.warnings
                );
                // An effect: the configuration changes, or without the
                // field the file says something else, or a value is
                // refused.
                let effect = match field.resolved(None) {
                    Err(_) => true,
                    Ok(without) => {
                        without.config != resolved.config
                            || without.warnings != resolved.warnings
                    }
                } || resolved.config != base.config;
                assert!(
                    effect || refuses,
                    "{path}: {} changes nothing and nothing is refused",
                    field.sample
                );
            }
            Handling::Ignored => {
                assert!(warned(&resolved, path), "{path}: no warning");
            }
            Handling::Required => {
                let error = field.resolved(None).err();
                assert!(
                    error.as_ref().is_some_and(|e| e
                        .fields()
                        .iter()
                        .any(|f| f.field == path)),
                    "{path}: a file without it must be refused, got {error:?}"
                );
            }
        }
    }
}

/// The flags the page says apply over the file do; the others that set
/// a field are ignored with a warning naming them.
#[test]
fn flags_over_the_file_apply_and_the_others_warn() {
    for (flag, value) in OVER_THE_FILE {
        let path = flag_field(flag).expect("a flag of the file");
        let field = FIELDS.iter().find(|f| f.path == path).unwrap();
        let given = format!("{flag}={value}");
        let argv = ["kube-ipvs-proxy", "--config=k.yaml", given.as_str()];
        let args = Cli::try_parse_from(argv).unwrap().run.config;
        let with = resolve(&args, Some(&field.file(None))).unwrap();
        let without =
            resolve(&ConfigArgs::default(), Some(&field.file(None))).unwrap();
        assert!(!warned(&with, flag), "{flag}: {:?}", with.warnings);
        assert_ne!(with.config, without.config, "{flag} changed nothing");
    }
    // Every other flag of the file is named by the warning (the test in
    // tests.rs gives each a value); here, that the list of exceptions is
    // the code's: a flag of the file outside it is among those named.
    let args = Cli::try_parse_from([
        "kube-ipvs-proxy",
        "--config=k.yaml",
        "--masquerade-all",
    ])
    .unwrap()
    .run
    .config;
    let names = args.given_config_flags();
    assert_eq!(names, ["--masquerade-all"]);
    for (flag, _) in OVER_THE_FILE {
        assert!(!names.iter().any(|n| n == flag));
    }
}

/// The page lists the hidden flags clap has; each of them, given, is
/// warned about by name.
#[test]
fn every_ignored_flag_is_named_in_a_warning() {
    let cli = Cli::command();
    let hidden: Vec<String> = cli
        .get_arguments()
        .filter(|a| a.is_hide_set())
        .map(flag_name)
        .collect();
    assert!(!hidden.is_empty());
    for flag in &hidden {
        let given = format!("{flag}=x");
        let argv = ["kube-ipvs-proxy", given.as_str()];
        let cli =
            Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{flag}: {e}"));
        let given: Vec<&str> = cli
            .run
            .config
            .ignored
            .given()
            .iter()
            .map(|(f, _)| *f)
            .collect();
        assert_eq!(given, [flag.as_str()], "{flag}");
        assert_ne!(cli.run.config.ignored, IgnoredFlags::default());
    }
}
