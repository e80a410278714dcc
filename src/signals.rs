//! SIGTERM and SIGINT stop the process at once with status 0 and leave
//! the kernel as it is, as kube-proxy does. In a container the proxy is
//! PID 1, and the kernel drops a signal that PID 1 has no handler for: the
//! kubelet's SIGTERM did nothing, every Pod deletion waited out its grace
//! period, and during a rollback kube-proxy's new Pod and this proxy
//! programmed the node at once for those 30 seconds.

use std::io;

/// Blocks SIGTERM and SIGINT in this thread, and so in every thread it
/// starts afterwards, and waits for them on a thread of its own. Call it
/// before any other thread starts, or one of those could take the signal.
/// (Child processes start with an empty mask: the standard library resets
/// it.)
pub fn stop_on_signal() -> io::Result<()> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before
    // any other use, and the calls only write through the pointers given.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    };
    // SAFETY: `set` is initialised; a null old set is allowed.
    let rc = unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    std::thread::Builder::new()
        .name("signals".to_owned())
        .spawn(move || loop {
            let mut signal = 0;
            // SAFETY: `set` is initialised and `signal` a valid out pointer.
            if unsafe { libc::sigwait(&set, &mut signal) } == 0 {
                let name = if signal == libc::SIGTERM {
                    "SIGTERM"
                } else {
                    "SIGINT"
                };
                tracing::info!(
                    signal = name,
                    "stopping; the kernel's state is left as it is"
                );
                std::process::exit(0);
            }
        })?;
    Ok(())
}
