//! The kernel's own tools (`ip`, `ipset`, `ipvsadm`, `iptables-*`) as the
//! benches run them: a process each, its input on stdin, a failure with
//! the first lines it printed.

use std::{
    io::Write as _,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context};

/// Runs `program args` with `input` on stdin; fails on a non-zero exit.
pub fn run(program: &str, args: &[&str], input: &str) -> anyhow::Result<()> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .with_context(|| format!("{program}'s stdin"))?;
    }
    checked(program, args, child.wait_with_output()?).map(drop)
}

/// [`run`], timed from the start of the process to its exit.
pub fn timed(
    program: &str,
    args: &[&str],
    input: &str,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    run(program, args, input)?;
    Ok(start.elapsed())
}

/// What `program args` printed on stdout; fails on a non-zero exit.
pub fn output(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("starting {program}"))?;
    let out = checked(program, args, out)?;
    String::from_utf8(out.stdout).with_context(|| format!("{program}'s output"))
}

fn checked(
    program: &str,
    args: &[&str],
    out: Output,
) -> anyhow::Result<Output> {
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().take(5).collect::<Vec<_>>().join("; ");
        bail!("{program} {}: {}: {first}", args.join(" "), out.status);
    }
    Ok(out)
}
