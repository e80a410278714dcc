//! kube-ipvs-proxy: parse the command line, resolve the configuration,
//! run. A configuration that cannot be used exits with status 64
//! (EX_USAGE) and one line naming the field or flag.

use std::{path::Path, process::ExitCode};

use anyhow::Context;
use clap::Parser;
use kube_ipvs_proxy::config::{
    self, Cli, Command, Config, ConfigArgs, PlanArgs, Resolved, RunArgs,
};
use tracing_subscriber::EnvFilter;

/// sysexits' EX_USAGE, as linkerd2-proxy uses for a bad configuration.
const EXIT_BAD_CONFIG: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and are not failures.
            let code = if e.use_stderr() { EXIT_BAD_CONFIG } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_tracing();
    match cli.command {
        Some(Command::Plan(args)) => plan(&args),
        None => run(&cli.run),
    }
}

/// Logs go to stderr so that `plan` output on stdout stays parseable.
fn init_tracing() {
    let (filter, bad_filter) = match EnvFilter::try_from_default_env() {
        Ok(filter) => (filter, None),
        Err(e) if std::env::var_os("RUST_LOG").is_some() => {
            (EnvFilter::new("info"), Some(e))
        }
        Err(_) => (EnvFilter::new("info"), None),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if let Some(e) = bad_filter {
        tracing::warn!("RUST_LOG ignored: {e}; logging at info");
    }
}

/// Reads `--config` if given and resolves flags and file into a
/// [`Config`]; warnings are logged once each.
fn load(args: &ConfigArgs) -> anyhow::Result<Config> {
    let text = args.config.as_deref().map(read_config).transpose()?;
    let Resolved { config, warnings } = config::resolve(args, text.as_deref())?;
    for warning in &warnings {
        tracing::warn!(field = %warning.field, "{}", warning.message);
    }
    Ok(config)
}

fn read_config(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path)
        .with_context(|| format!("--config {}", path.display()))
}

fn bad_config(error: &anyhow::Error) -> ExitCode {
    // `{:#}` keeps the whole context chain on one line.
    eprintln!("kube-ipvs-proxy: invalid configuration: {error:#}");
    ExitCode::from(EXIT_BAD_CONFIG)
}

fn run(args: &RunArgs) -> ExitCode {
    let config = match load(&args.config) {
        Ok(config) => config,
        Err(e) => return bad_config(&e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("kube-ipvs-proxy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run_proxy(config, args.cleanup())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Sources, trackers and the sync loop get wired in here.
async fn run_proxy(config: Config, cleanup: bool) -> anyhow::Result<()> {
    tracing::info!(?config, cleanup, "effective configuration");
    tracing::info!("sources and sync loop are not wired yet; exiting");
    Ok(())
}

fn plan(args: &PlanArgs) -> ExitCode {
    let config = match load(&args.config) {
        Ok(config) => config,
        Err(e) => return bad_config(&e),
    };
    tracing::debug!(?config, node = ?args.node, output = ?args.output, "plan");
    eprintln!("kube-ipvs-proxy plan: not yet wired");
    ExitCode::FAILURE
}
