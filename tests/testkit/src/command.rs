//! Runs a command and returns its stdout, or an error that carries the
//! command line, the exit status and stderr: a failed setup step in a test
//! should say which step and why.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::error::Error;

/// Runs `cmd` to completion; its stdout on success.
pub fn run(cmd: &mut Command) -> Result<String, Error> {
    run_inner(cmd, None)
}

/// Runs `cmd` with `input` on its stdin (e.g. `ip -batch -`,
/// `ipvsadm -R`); its stdout on success.
pub fn run_with_input(cmd: &mut Command, input: &str) -> Result<String, Error> {
    run_inner(cmd, Some(input))
}

fn run_inner(cmd: &mut Command, input: Option<&str>) -> Result<String, Error> {
    let command = describe(cmd);
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| Error::Spawn {
        command: command.clone(),
        source,
    })?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        // A write error means the child exited early; its status and
        // stderr below say why.
        let _ = stdin.write_all(input.as_bytes());
    }
    let output = child.wait_with_output().map_err(|source| Error::Spawn {
        command: command.clone(),
        source,
    })?;
    if !output.status.success() {
        return Err(Error::Failed {
            command,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The command line as a user would type it, for error messages.
pub(crate) fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_stdout() {
        let out = run(Command::new("sh").args(["-c", "echo hello"]));
        assert_eq!(out.ok().as_deref(), Some("hello\n"));
    }

    #[test]
    fn passes_input() {
        let out = run_with_input(&mut Command::new("cat"), "a\nb\n");
        assert_eq!(out.ok().as_deref(), Some("a\nb\n"));
    }

    #[test]
    fn failure_names_the_command_and_its_stderr() {
        let err =
            run(Command::new("sh").args(["-c", "echo broken >&2; exit 3"]))
                .err()
                .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("`sh -c echo broken >&2; exit 3` failed (exit status: 3): broken")
        );
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let err = run(&mut Command::new("/nonexistent/testkit-no-such-tool"));
        assert!(
            matches!(err, Err(Error::Spawn { ref command, .. })
                if command == "/nonexistent/testkit-no-such-tool"),
            "{err:?}"
        );
    }
}
