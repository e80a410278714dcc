//! kube-ipvs-proxy: parse the command line, load the configuration, run
//! one of the modes in `app`. A configuration that cannot be used exits
//! with status 64 (EX_USAGE) and one line naming the field or flag; a
//! kernel that cannot run IPVS mode exits with 69 (EX_UNAVAILABLE) and
//! one line naming what is missing.

// Input from the API and the kernel must never panic the proxy: no
// unwrap, expect or panic! outside tests.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::{path::Path, process::ExitCode};

use clap::Parser;
use kube_ipvs_proxy::{
    app::{self, api_side, node, Failure, Source},
    config::{
        self, Cli, Command, Config, ConfigArgs, ConfigWarning, Resolved,
        RunArgs, EXIT_BAD_CONFIG,
    },
    logging::{self, LogSettings},
    signals,
    version::{VersionFlag, BUILD},
};
use tokio::runtime::{Builder, Runtime};

/// Where the kubelet reads a container's termination message: the one
/// line a DaemonSet's Pod shows as the reason it crashed.
const TERMINATION_LOG: &str = "/dev/termination-log";

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and are not failures.
            let code = if e.use_stderr() { EXIT_BAD_CONFIG } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Some(value) = cli.run.version.as_deref() {
        match VersionFlag::parse(value) {
            Ok(VersionFlag::Off) => {}
            Ok(flag) => {
                print!("{}", BUILD.render(flag));
                return ExitCode::SUCCESS;
            }
            Err(e) => return exit(&Failure::bad_config(e)),
        }
    }
    // The long-running modes: before any thread starts.
    if !matches!(
        cli.command,
        Some(Command::Plan(_) | Command::List(_) | Command::Explain(_))
    ) {
        if let Err(e) = signals::stop_on_signal() {
            return exit(&Failure::Failed(anyhow::anyhow!(
                "cannot wait for SIGTERM: {e}"
            )));
        }
    }
    let ran = match cli.command {
        Some(Command::Plan(args)) => plan(&args),
        Some(Command::List(args)) => list(&args),
        Some(Command::Explain(args)) => {
            return match explain(&args) {
                Ok(verdict) => ExitCode::from(verdict.exit_status()),
                Err(failure) => exit(&failure),
            }
        }
        Some(Command::ApiServer(args)) => api_server(&args),
        None => run(&cli.run),
    };
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => exit(&failure),
    }
}

fn run(args: &RunArgs) -> Result<(), Failure> {
    let mut config = load(&args.config)?;
    config.flags = config::flagz(&args.config);
    if let Some(path) = &args.write_config_to {
        return app::write_config(&config, path);
    }
    // One thread for the sync loop: under churn a second worker cost more
    // CPU in wake-ups and stealing than it saved. What would compete with
    // the loop has a runtime on a thread of its own (runtime_thread.rs):
    // a repair's whole-kernel reads, and the watches' reading and decoding.
    let runtime = runtime(&mut Builder::new_current_thread())?;
    if args.cleanup() {
        return runtime.block_on(app::cleanup::run(&config));
    }
    let source = Source::of(&config)?;
    let mode = match args.init_only() {
        true => node::Mode::InitOnly,
        false => node::Mode::Run,
    };
    runtime.block_on(node::run(config, source, mode))
}

fn plan(args: &config::PlanArgs) -> Result<(), Failure> {
    let config = load(&args.config)?;
    let source = Source::of(&config)?;
    app::plan::run(&config, source, args, &mut std::io::stdout().lock())
}

fn list(args: &config::ListArgs) -> Result<(), Failure> {
    let config = load(&args.config)?;
    let source = Source::of(&config)?;
    app::list::run(&config, source, args, &mut std::io::stdout().lock())
}

fn explain(
    args: &config::ExplainArgs,
) -> Result<app::explain::Verdict, Failure> {
    let config = load(&args.config)?;
    let source = Source::of(&config)?;
    app::explain::run(&config, source, args, &mut std::io::stdout().lock())
}

fn api_server(args: &config::ApiServerArgs) -> Result<(), Failure> {
    let settings = api_side::Settings::from_args(args)?;
    let config = load(&settings.config)?;
    runtime(&mut Builder::new_multi_thread())?
        .block_on(api_side::run(config, settings))
}

/// Resolves flags and file, then starts logging as the configuration
/// says (stderr, so that `plan` output on stdout stays parseable) and
/// logs each warning once.
fn load(args: &ConfigArgs) -> Result<Config, Failure> {
    let text = match args.config.as_deref() {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
            Failure::bad_config(format!("--config {}: {e}", path.display()))
        })?),
        None => None,
    };
    let Resolved { config, warnings } = config::resolve(args, text.as_deref())
        .map_err(|e| Failure::BadConfig(e.into()))?;
    if let Some(problem) =
        logging::init(LogSettings::for_stderr(&config.logging))
    {
        tracing::warn!("{problem}");
    }
    for ConfigWarning { field, message } in &warnings {
        tracing::warn!(field = %field, "{message}");
    }
    Ok(config)
}

fn runtime(builder: &mut Builder) -> Result<Runtime, Failure> {
    builder.enable_all().build().map_err(|e| {
        Failure::Failed(anyhow::anyhow!("cannot start the runtime: {e}"))
    })
}

/// Says why, where the operator will look, and exits with the failure's
/// status: a configuration refused on stderr (logging may not have
/// started); anything else as the last log line and, in a Pod, the
/// container's termination message.
fn exit(failure: &Failure) -> ExitCode {
    match failure {
        Failure::BadConfig(_) => {
            eprintln!("kube-ipvs-proxy: invalid configuration: {failure}");
        }
        Failure::Unsupported(_)
        | Failure::Forbidden(_)
        | Failure::Failed(_) => {
            let line = failure.to_string();
            tracing::error!("{line}");
            let path = Path::new(TERMINATION_LOG);
            // Only inside a container, where the kubelet mounted the
            // file: never created on a host.
            if path.is_file() {
                let _ = std::fs::write(path, format!("{line}\n"));
            }
        }
    }
    ExitCode::from(failure.exit_status())
}
