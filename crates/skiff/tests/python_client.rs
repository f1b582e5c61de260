//! The official Kubernetes Python client (`pip install kubernetes` in a venv made here) against
//! the real `skiff server`: list, watch from the list's resourceVersion, 410 from a compacted
//! revision. See `tests/python/client_test.py`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Server;

/// A venv with the `kubernetes` package, shared by runs (under cargo's test tmpdir). Panics
/// when it cannot be made: the README's test command needs PyPI to install the client, and a
/// skipped client test would pass without checking anything.
fn venv() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skiff-python-venv");
    let python = dir.join("bin/python");
    let has_client =
        |p: &Path| Command::new(p).args(["-c", "import kubernetes"]).status().map(|s| s.success()).unwrap_or(false);
    if python.exists() && has_client(&python) {
        return python;
    }
    let made = Command::new("python3").arg("-m").arg("venv").arg(&dir).status().expect("running python3 -m venv");
    assert!(made.success(), "python3 -m venv failed");
    let pip = Command::new(dir.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "kubernetes"])
        .status()
        .expect("running pip");
    assert!(
        pip.success(),
        "`pip install kubernetes` failed: the Python client test needs PyPI (see README, running the tests)"
    );
    assert!(has_client(&python), "pip installed kubernetes but it does not import");
    python
}

#[test]
fn python_client_lists_watches_and_gets_410_for_compacted_revisions() {
    let python = venv();
    let s = Server::start_with(&["--etcd-compaction-interval", "1s"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/client_test.py");
    let out = Command::new(python).arg(script).arg(s.kubeconfig()).output().expect("running the python client test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "python client test failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.log()
    );
    assert!(stdout.contains("python client: all checks passed"), "{stdout}");
}
