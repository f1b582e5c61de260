//! Removal of pod cgroups left behind by the runtime (cgroupfs driver, cgroup v1 controllers
//! and the v2 hierarchy alike): runc creates `<cgroup parent>` directories in every hierarchy
//! but never removes the pod-level parent, so the kubelet does, as its pod cgroup manager does.

use std::path::{Path, PathBuf};

use crate::qos::{self, QosClass};

/// The cgroup filesystem root.
const CGROUP_FS: &str = "/sys/fs/cgroup";

/// Every hierarchy mounted under /sys/fs/cgroup (v1 controllers, `unified`, or the v2 root).
fn hierarchies() -> Vec<PathBuf> {
    let root = Path::new(CGROUP_FS);
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    entries.flatten().map(|e| e.path()).filter(|p| p.is_dir() && !p.is_symlink()).collect()
}

/// Removes a cgroup directory and its (empty) children, deepest first. cgroup directories can
/// only be removed with `rmdir`, and only once no process is left in them; failures are
/// ignored (the next housekeeping pass retries).
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                remove_tree(&p);
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Removes the pod's cgroup (`<root>/[burstable|besteffort/]pod<uid>`) in every hierarchy,
/// trying all QoS classes (the class may be unknown for orphans).
pub fn remove_pod_cgroups(cgroup_root: &str, pod_uid: &str) {
    for h in hierarchies() {
        for q in [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort] {
            let parent = qos::cgroup_parent(cgroup_root, q, pod_uid);
            let dir = h.join(parent.trim_start_matches('/'));
            if dir.exists() {
                remove_tree(&dir);
            }
        }
    }
}

/// Removes a whole cgroup root (e.g. a test's) in every hierarchy.
pub fn remove_cgroup_root(cgroup_root: &str) {
    for h in hierarchies() {
        let dir = h.join(cgroup_root.trim_start_matches('/'));
        if dir.exists() {
            remove_tree(&dir);
        }
    }
}
