//! `DATA_DIR/skiff.pid`: the process id of the `skiff server` that uses a data directory, so
//! that it can be stopped or killed without touching other servers on the host
//! (`kill $(cat DATA_DIR/skiff.pid)`), and so that a second server on the same data directory
//! is refused instead of corrupting the first one's node.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The PID file of a data directory.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("skiff.pid")
}

/// Whether process `pid` is alive and is a skiff process (its `/proc/PID/cmdline` starts with
/// a program named `skiff`), so that a PID reused by an unrelated process after a `kill -9`
/// does not block a restart.
fn is_live_skiff(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let program = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    Path::new(std::str::from_utf8(program).unwrap_or_default()).file_name().is_some_and(|n| n == "skiff")
}

/// Writes this process's id into `data_dir`'s PID file, unless another live skiff process is
/// named there.
///
/// # Errors
/// Another skiff process runs with this data directory (its PID is in the message), or the
/// file cannot be written.
pub fn claim(data_dir: &Path) -> Result<PathBuf> {
    let file = path(data_dir);
    let own = std::process::id();
    if let Ok(text) = std::fs::read_to_string(&file)
        && let Ok(pid) = text.trim().parse::<u32>()
        && pid != own
        && is_live_skiff(pid)
    {
        bail!(
            "another skiff server (pid {pid}) uses the data directory {}; stop it first (kill {pid}) or choose another --data-dir",
            data_dir.display()
        );
    }
    std::fs::write(&file, format!("{own}\n")).with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// Removes the PID file if it still names this process (a clean shutdown).
pub fn release(file: &Path) {
    let own = std::process::id().to_string();
    if std::fs::read_to_string(file).is_ok_and(|t| t.trim() == own) {
        let _ = std::fs::remove_file(file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_file_naming_a_dead_or_foreign_process_is_taken_over_and_released_on_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        // PID 1 is alive but not skiff; a huge PID is not alive.
        for stale in ["1", "4194303", "garbage"] {
            std::fs::write(path(dir.path()), stale).unwrap();
            let file = claim(dir.path()).unwrap();
            assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), std::process::id().to_string());
            release(&file);
            assert!(!file.exists());
        }
    }

    #[test]
    fn a_live_skiff_process_keeps_its_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("skiff");
        std::fs::copy("/bin/sleep", &bin).unwrap();
        let mut child = std::process::Command::new(&bin).arg("60").spawn().unwrap();
        // spawn may return before the child's exec is visible in /proc: wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !is_live_skiff(child.id()) {
            let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.id()));
            assert!(std::time::Instant::now() < deadline, "the child never showed as skiff: {cmdline:?}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::fs::write(path(dir.path()), format!("{}\n", child.id())).unwrap();
        let err = claim(dir.path()).unwrap_err().to_string();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(err.contains(&format!("pid {}", child.id())), "{err}");
        assert!(claim(dir.path()).is_ok(), "once it is gone the directory is free again");
    }
}
