//! `skiff killall`: stops everything a node agent left running on the host for one data
//! directory, like k3s's `k3s-killall.sh`: the managed containerd and its shims, the containers
//! in the pods' network namespaces, and the mounts under the data directory (overlay root
//! filesystems and the `nsfs` bind mounts that keep pod network namespaces alive).
//!
//! Why it matters: a pod network namespace stays alive as long as its bind mount under
//! containerd's state dir exists, even when no process runs in it, and it keeps answering ARP
//! for its pod IP. A later node reusing the same bridge and pod CIDR would then hand out the
//! same addresses twice. Normal pod deletion (StopPodSandbox, RemovePodSandbox) cleans all of
//! this; killall is for the cases where the agent was killed or its data dir is thrown away.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What [`killall`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KillallReport {
    /// Process ids sent SIGKILL.
    pub killed: Vec<i32>,
    /// Mount points detached (deepest first).
    pub unmounted: Vec<PathBuf>,
    /// Network links deleted (the node's pod bridge).
    pub deleted_links: Vec<String>,
    /// nftables tables deleted (the node proxy's `ip skiff-proxy`, NetworkPolicy's `ip skiff-netpol`).
    pub deleted_tables: Vec<String>,
}

/// One line of `/proc/self/mountinfo`: mount point and filesystem type.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MountEntry {
    mount_point: PathBuf,
    fs_type: String,
}

/// Parses `/proc/self/mountinfo` text (proc(5)): field 5 is the mount point (octal escapes
/// such as `\040` for a space), the field after the ` - ` separator is the filesystem type.
fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = unescape_octal(left.split(' ').nth(4)?);
            let fs_type = right.split(' ').next()?.to_string();
            Some(MountEntry { mount_point: PathBuf::from(mount_point), fs_type })
        })
        .collect()
}

/// Decodes the `\ooo` escapes the kernel writes for spaces, tabs, newlines and backslashes.
fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b))
            && let Ok(byte) =
                u8::try_from(bytes[i + 1..i + 4].iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0')))
        {
            out.push(byte);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mounts at or below `dir`, deepest first (the order they must be detached in).
fn mounts_under(entries: &[MountEntry], dir: &Path) -> Vec<MountEntry> {
    let mut found: Vec<MountEntry> = entries.iter().filter(|m| m.mount_point.starts_with(dir)).cloned().collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.mount_point.components().count()));
    found.dedup_by(|a, b| a.mount_point == b.mount_point);
    found
}

/// Every process id in /proc.
fn all_pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok()).collect()
}

/// The inode of the network namespace of `pid` (from the `net:[INODE]` link), if readable.
fn net_namespace_of(pid: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    let s = link.to_str()?;
    s.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// Whether one argument of `pid`'s command line is `dir` or a path below it (so that
/// `/tmp/a` does not match a process of `/tmp/ab`).
fn cmdline_mentions(pid: i32, dir: &str) -> bool {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let below = format!("{dir}/");
    raw.split(|b| *b == 0).any(|arg| {
        let arg = String::from_utf8_lossy(arg);
        arg == dir || arg.contains(&below)
    })
}

/// Stops what a node agent with data directory `data_dir` left on this host: SIGKILL to every
/// process whose command line names the directory (containerd, its shims) or that lives in a
/// network namespace bind-mounted under it (the pods' containers), then detaches every mount
/// under it, deepest first, and removes the pod network's masquerade rule, the node proxy's
/// and NetworkPolicy's nftables tables and the node's bridge (when it still has this node's gateway address and no
/// other). The calling process
/// is never killed. Needs root; errors are skipped (what could not be done is simply missing
/// from the report).
pub fn killall(data_dir: &Path) -> KillallReport {
    let mut report = KillallReport::default();
    let paths = crate::containerd::ContainerdPaths::new(data_dir.join("agent").join("containerd"));
    if let Some(cidr) = crate::containerd::written_pod_cidr(&paths) {
        crate::containerd::remove_pod_masquerade(&cidr);
        // The node proxy's table is the host's, removed with the node that ran here.
        let nft = skiff_proxy::NftCommand::default();
        if nft.is_available() && skiff_proxy::cleanup(&nft).is_ok() {
            report.deleted_tables.push(format!("ip {}", skiff_proxy::rules::TABLE));
        }
        if nft.is_available() && skiff_netpol::cleanup(&nft).is_ok() {
            report.deleted_tables.push(format!("ip {}", skiff_netpol::rules::TABLE));
        }
    }
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let needle = dir.to_string_lossy().into_owned();
    let mounts =
        mounts_under(&parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()), &dir);
    // An nsfs mount's inode number is the namespace's inode.
    let namespaces: HashSet<u64> = mounts
        .iter()
        .filter(|m| m.fs_type == "nsfs")
        .filter_map(|m| std::fs::metadata(&m.mount_point).ok().map(|md| md.ino()))
        .collect();
    let own = std::process::id() as i32;
    for pid in all_pids() {
        if pid == own || pid <= 1 {
            continue;
        }
        let in_pod_netns = net_namespace_of(pid).is_some_and(|ino| namespaces.contains(&ino));
        if (in_pod_netns || cmdline_mentions(pid, &needle))
            && let Some(p) = rustix::process::Pid::from_raw(pid)
            && rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok()
        {
            report.killed.push(pid);
        }
    }
    // Wait (bounded) for the killed processes to be gone so their mounts are not busy.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && report.killed.iter().any(|p| Path::new(&format!("/proc/{p}")).exists()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for m in mounts {
        if rustix::mount::unmount(&m.mount_point, rustix::mount::UnmountFlags::DETACH).is_ok() {
            report.unmounted.push(m.mount_point);
        }
    }
    // Last: the pods' veth ends are gone with their namespaces, so the bridge is unused.
    if let (Some(bridge), Some(cidr)) =
        (crate::containerd::written_bridge(&paths), crate::containerd::written_pod_cidr(&paths))
        && crate::containerd::remove_node_bridge(&bridge, &cidr)
    {
        report.deleted_links.push(bridge);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
101 22 0:4 net:[4026532300] /tmp/d/agent/containerd/state/io.containerd.grpc.v1.cri/netns/cni-1 rw shared:50 - nsfs nsfs rw
102 22 0:50 / /tmp/d/agent/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc/rootfs rw - overlay overlay rw
103 22 0:51 / /tmp/d\\040x/data rw - tmpfs tmpfs rw
104 22 0:4 net:[4026532301] /tmp/other/netns/cni-2 rw - nsfs nsfs rw
";

    #[test]
    fn mountinfo_lines_give_mount_points_and_filesystem_types() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m.len(), 5);
        assert_eq!(m[1].fs_type, "nsfs");
        assert_eq!(m[3].mount_point, PathBuf::from("/tmp/d x/data"), "octal escapes are decoded");
    }

    #[test]
    fn only_mounts_below_the_data_dir_are_chosen_deepest_first() {
        let m = mounts_under(&parse_mountinfo(MOUNTINFO), Path::new("/tmp/d"));
        let points: Vec<_> = m.iter().map(|e| e.mount_point.to_string_lossy().into_owned()).collect();
        assert_eq!(
            points,
            [
                "/tmp/d/agent/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc/rootfs",
                "/tmp/d/agent/containerd/state/io.containerd.grpc.v1.cri/netns/cni-1",
            ]
        );
    }

    #[test]
    fn a_directory_with_nothing_mounted_kills_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let report = killall(dir.path());
        assert_eq!(report, KillallReport::default());
    }
}
