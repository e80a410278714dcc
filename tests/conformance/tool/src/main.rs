//! The host's helper for tests/conformance/run.sh.
//!
//! ```text
//! conformance split SCENARIO.yaml BASE.yaml DIR
//!     the scenario's parts for the runner, in DIR (scenario.rs)
//! conformance walk SEED [--steps N] [--kill-within MS]
//!     the seeded random walk, as a scenario, on stdout (walk.rs)
//! conformance settled OBJECTS.json NODES.json
//!     exit 0 once the EndpointSlice controller has caught up with the
//!     namespace's Pods and Services, else 1 and what it has not (settle.rs)
//! conformance marker STEP
//!     the marker's objects for STEP, for kubectl (marker.rs)
//! conformance snapshot
//!     in the guest: the kernel state a proxy owns, normalised (snapshot.rs)
//! conformance wait STEP OUT [--pid PID] [--fresh] [--still N] [--timeout S]
//!     in the guest: until the proxy has synced STEP and the snapshot
//!     holds still, then the snapshot into OUT (marker.rs)
//! conformance check SNAPSHOT --services N [--families N]
//!     exit 0 if a synced proxy's snapshot has what the step's Services
//!     and the marker make it program, else 1 and what it lacks
//!     (snapshot.rs)
//! ```

mod marker;
mod marker_addresses;
mod scenario;
mod settle;
mod snapshot;
mod walk;

use std::{fs, path::Path, process::ExitCode};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

const USAGE: &str = "usage: conformance split SCENARIO BASE DIR | \
                     conformance walk SEED [--steps N] [--kill-within MS] | \
                     conformance settled OBJECTS.json NODES.json | \
                     conformance marker STEP | conformance snapshot | \
                     conformance wait STEP OUT [--pid PID] [--fresh] \
                     [--still N] [--timeout SECONDS] [--families N] | \
                     conformance check SNAPSHOT --services N [--families N]";

fn read_json(path: &str) -> Result<Value> {
    let text =
        fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    serde_json::from_str(&text).with_context(|| format!("{path} is not JSON"))
}

fn number<T: std::str::FromStr>(
    text: Option<&String>,
    what: &str,
) -> Result<T> {
    text.ok_or_else(|| anyhow!("{what} needs a value"))?
        .parse()
        .map_err(|_| anyhow!("{what} must be a number"))
}

fn run(args: &[String]) -> Result<bool> {
    match args.first().map(String::as_str) {
        Some("split") => {
            let [_, file, base, dir] = args else {
                bail!(USAGE)
            };
            let text = fs::read_to_string(file)
                .with_context(|| format!("reading {file}"))?;
            let parsed =
                scenario::parse(&text).with_context(|| file.clone())?;
            let base: Value = serde_saphyr::from_str(
                &fs::read_to_string(base)
                    .with_context(|| format!("reading {base}"))?,
            )
            .map_err(|e| anyhow!("{base}: {e}"))?;
            scenario::split(&parsed, &base, Path::new(dir))?;
            println!("steps={}", parsed.steps.len());
            Ok(true)
        }
        Some("walk") => {
            let seed = number(args.get(1), "SEED")?;
            let mut options = walk::Options {
                steps: 30,
                kill_within_ms: None,
            };
            let mut rest = args[2..].iter();
            while let Some(flag) = rest.next() {
                match flag.as_str() {
                    "--steps" => {
                        options.steps = number(rest.next(), "--steps")?
                    }
                    "--kill-within" => {
                        options.kill_within_ms =
                            Some(number(rest.next(), "--kill-within")?)
                    }
                    other => bail!("unknown option {other}; {USAGE}"),
                }
            }
            print!("{}", walk::walk_yaml(seed, &options)?);
            Ok(true)
        }
        Some("settled") => {
            let [_, objects, nodes] = args else {
                bail!(USAGE)
            };
            let problems =
                settle::unsettled(&read_json(objects)?, &read_json(nodes)?);
            for problem in &problems {
                println!("{problem}");
            }
            Ok(problems.is_empty())
        }
        Some("marker") => {
            println!("{}", marker::objects(number(args.get(1), "STEP")?));
            Ok(true)
        }
        Some("snapshot") => {
            print!("{}", snapshot::take()?);
            Ok(true)
        }
        Some("check") => {
            let file = args.get(1).ok_or_else(|| anyhow!(USAGE))?;
            let text = fs::read_to_string(file)
                .with_context(|| format!("reading {file}"))?;
            let mut services = None;
            let mut families = 2;
            let mut rest = args[2..].iter();
            while let Some(flag) = rest.next() {
                match flag.as_str() {
                    "--services" => {
                        services = Some(number(rest.next(), "--services")?)
                    }
                    "--families" => {
                        families = number(rest.next(), "--families")?
                    }
                    other => bail!("unknown option {other}; {USAGE}"),
                }
            }
            let services =
                services.ok_or_else(|| anyhow!("--services is required"))?;
            let lacks = snapshot::lacking(&text, services, families);
            println!("{}", lacks.join("; "));
            Ok(lacks.is_empty())
        }
        Some("wait") => {
            let step = number(args.get(1), "STEP")?;
            let out = Path::new(args.get(2).ok_or_else(|| anyhow!(USAGE))?);
            let mut w = marker::Wait {
                step,
                out,
                pid: None,
                fresh: false,
                families: 2,
                timeout: std::time::Duration::from_secs(60),
                still: 1,
            };
            let mut rest = args[3..].iter();
            while let Some(flag) = rest.next() {
                match flag.as_str() {
                    "--pid" => w.pid = Some(number(rest.next(), "--pid")?),
                    "--fresh" => w.fresh = true,
                    "--still" => w.still = number(rest.next(), "--still")?,
                    "--families" => {
                        w.families = number(rest.next(), "--families")?
                    }
                    "--timeout" => {
                        w.timeout = std::time::Duration::from_secs(number(
                            rest.next(),
                            "--timeout",
                        )?)
                    }
                    other => bail!("unknown option {other}; {USAGE}"),
                }
            }
            match marker::wait(&w) {
                Ok(()) => Ok(true),
                Err(e) => {
                    println!("{e:#}");
                    Ok(false)
                }
            }
        }
        _ => bail!(USAGE),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("conformance: {e:#}");
            ExitCode::from(2)
        }
    }
}
