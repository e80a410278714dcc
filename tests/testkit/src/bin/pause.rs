//! The pod sandbox's process for the real-node e2e (tests/node-e2e/): what
//! Kubernetes' pause image does, for an image built here without a
//! registry. It holds the pod's namespaces by living, reaps the zombies
//! that end up with it as the namespace's init, and exits on SIGINT or
//! SIGTERM (as PID 1 of its PID namespace, a signal without a handler
//! would be ignored). Built static (tests/node-e2e/images.sh) so the image
//! holds this one file.

use std::process::ExitCode;

extern "C" fn stop(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(0) }
}

extern "C" fn reap(_: libc::c_int) {
    // SAFETY: waitpid is async-signal-safe; a null status is allowed.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0
    {
    }
}

fn handle(signal: libc::c_int, handler: extern "C" fn(libc::c_int)) -> bool {
    // SAFETY: both handlers only call async-signal-safe functions.
    let previous =
        unsafe { libc::signal(signal, handler as libc::sighandler_t) };
    previous != libc::SIG_ERR
}

fn main() -> ExitCode {
    if std::process::id() != 1 {
        eprintln!("pause: warning: not PID 1 of a PID namespace");
    }
    if !(handle(libc::SIGINT, stop)
        && handle(libc::SIGTERM, stop)
        && handle(libc::SIGCHLD, reap))
    {
        eprintln!("pause: cannot install the signal handlers");
        return ExitCode::FAILURE;
    }
    loop {
        // SAFETY: pause has no preconditions; it returns after a handler.
        unsafe { libc::pause() };
    }
}
