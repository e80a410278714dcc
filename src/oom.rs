//! `oomScoreAdj`: the proxy programs every Service on the node, so the
//! kernel's OOM killer should pick almost anything else first. Upstream
//! writes -999 to its own `oom_score_adj` at start-up unless told
//! otherwise, and goes on if it cannot.

use std::{fs, io, path::Path};

const SELF_OOM_SCORE_ADJ: &str = "/proc/self/oom_score_adj";

/// Writes `value` to this process' `oom_score_adj`. Lowering it needs
/// CAP_SYS_RESOURCE; a container without it gets the error.
pub fn apply_score_adj(value: i32) -> io::Result<()> {
    write_score_adj(Path::new(SELF_OOM_SCORE_ADJ), value)
}

/// Reads this process' `oom_score_adj`.
#[cfg(test)]
fn score_adj() -> io::Result<i32> {
    let text = fs::read_to_string(SELF_OOM_SCORE_ADJ)?;
    text.trim()
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn write_score_adj(path: &Path, value: i32) -> io::Result<()> {
    fs::write(path, value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_back_the_own_score() {
        // Only a score that moves shows the write happened, so it goes
        // one step away from wherever the test runner left it: up, which
        // needs no privilege, unless it is at the top already; lowering
        // needs CAP_SYS_RESOURCE (CI runs as root).
        let before = score_adj().expect("readable");
        let wanted = if before < 1000 {
            before + 1
        } else {
            before - 1
        };
        apply_score_adj(wanted).expect("written");
        assert_eq!(score_adj().expect("readable"), wanted);
    }
}
