//! The sandbox ("pause") image that every node carries in the binary.
//!
//! Each pod's sandbox is a container running the pause program, which holds the pod's
//! namespaces open ("Pod Sandbox" in the CRI, <https://kubernetes.io/docs/concepts/windows/pause/>
//! for what the image does). Kubernetes pulls `registry.k8s.io/pause`; a skiff node must run pods
//! with no registry and nothing imported, so `build.rs` compiles `pause/pause.c` statically, and
//! at start the agent packs it into a one-layer docker-archive image and imports it into
//! containerd under [`SANDBOX_IMAGE`] unless containerd already has that reference.

use std::path::Path;

use ring::digest::{SHA256, digest};

use crate::cri::ImageService;

/// The reference the node's containerd is configured with as its sandbox image
/// (`sandbox_image` in its CRI config), and that [`ensure_sandbox_image`] provides.
pub const SANDBOX_IMAGE: &str = "skiff.local/pause:3.10";

/// The static pause executable compiled by `build.rs` from `pause/pause.c`.
pub const PAUSE_PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pause"));

/// The image's platform architecture in OCI/Go spelling (`amd64`, `arm64`, …) for the machine
/// this binary was built for, since the embedded program is native code.
fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    digest(&SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Appends one regular file to a tar archive with a fixed owner and mtime, so that the same
/// content always gives the same bytes (and so the same image ID).
fn append_file(tar: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, data: &[u8]) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(mode);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut header, path, data)
}

/// The sandbox image as a docker-archive tarball (`docker save`'s layout: `manifest.json`, the
/// image config named by its digest, one `layer.tar`) tagged `reference`, with `/pause` as its
/// entrypoint. Deterministic: the same program gives the same bytes.
///
/// # Errors
/// Only the tar writer's I/O errors, which writing to memory does not produce in practice.
pub fn docker_archive(reference: &str) -> std::io::Result<Vec<u8>> {
    let mut layer = tar::Builder::new(Vec::new());
    append_file(&mut layer, "pause", 0o755, PAUSE_PROGRAM)?;
    let layer = layer.into_inner()?;
    let diff_id = sha256_hex(&layer);
    let config = serde_json::json!({
        "architecture": oci_architecture(),
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Entrypoint": ["/pause"],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "skiff kubelet sandbox image"}],
    });
    let config = serde_json::to_vec(&config).map_err(std::io::Error::other)?;
    let config_name = format!("{}.json", sha256_hex(&config));
    let layer_name = format!("{diff_id}/layer.tar");
    let manifest = serde_json::json!([{"Config": config_name, "RepoTags": [reference], "Layers": [layer_name]}]);
    let manifest = serde_json::to_vec(&manifest).map_err(std::io::Error::other)?;

    let mut archive = tar::Builder::new(Vec::new());
    append_file(&mut archive, &layer_name, 0o644, &layer)?;
    append_file(&mut archive, &config_name, 0o644, &config)?;
    append_file(&mut archive, "manifest.json", 0o644, &manifest)?;
    archive.into_inner()
}

/// Makes sure the node's containerd has the sandbox image `reference`: when it is
/// [`SANDBOX_IMAGE`] and containerd does not have it yet, writes [`docker_archive`] to
/// `scratch_dir` and imports it (`ctr images import`). Returns whether it imported.
/// Any other reference is left to containerd (pulled on first use, or imported by the user).
///
/// # Errors
/// [`crate::Error::Config`] when CRI `ImageStatus` or the import fails; [`crate::Error::Io`]
/// when the tarball can't be written or `ctr` can't run.
pub async fn ensure_sandbox_image(
    cri: &dyn ImageService,
    socket: &Path,
    reference: &str,
    scratch_dir: &Path,
) -> Result<bool, crate::Error> {
    if reference != SANDBOX_IMAGE {
        return Ok(false);
    }
    let present = cri
        .image_status(reference)
        .await
        .map_err(|e| crate::Error::Config(format!("asking containerd for the sandbox image {reference}: {e}")))?;
    if present.is_some() {
        return Ok(false);
    }
    let archive = docker_archive(reference).map_err(|e| crate::Error::io("packing the sandbox image", e))?;
    std::fs::create_dir_all(scratch_dir)
        .map_err(|e| crate::Error::io(format!("creating {}", scratch_dir.display()), e))?;
    let file = scratch_dir.join("sandbox-image.tar");
    std::fs::write(&file, &archive).map_err(|e| crate::Error::io(format!("writing {}", file.display()), e))?;
    let imported = crate::images::import_image_tarball(socket, &file).await;
    let _ = std::fs::remove_file(&file);
    imported.map(|_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(archive: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut reader = tar::Archive::new(archive);
        for entry in reader.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mode = entry.header().mode().unwrap();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
            out.push((path, mode, data));
        }
        out
    }

    #[test]
    fn the_embedded_pause_program_is_a_static_executable() {
        assert_eq!(&PAUSE_PROGRAM[..4], b"\x7fELF");
        // A dynamically linked program would name its interpreter (PT_INTERP) in the file.
        let needle = b"/lib64/ld-linux";
        assert!(!PAUSE_PROGRAM.windows(needle.len()).any(|w| w == needle), "pause must need no loader");
    }

    #[test]
    fn the_archive_is_a_docker_save_layout_tagged_with_the_reference() {
        let archive = docker_archive(SANDBOX_IMAGE).unwrap();
        let files = entries(&archive);
        let manifest = files.iter().find(|(p, ..)| p == "manifest.json").expect("manifest.json");
        let manifest: serde_json::Value = serde_json::from_slice(&manifest.2).unwrap();
        assert_eq!(manifest[0]["RepoTags"][0], SANDBOX_IMAGE);
        let config_name = manifest[0]["Config"].as_str().unwrap();
        let layer_name = manifest[0]["Layers"][0].as_str().unwrap();
        let config = files.iter().find(|(p, ..)| p == config_name).expect("config");
        assert_eq!(config_name, format!("{}.json", sha256_hex(&config.2)), "config is named by its digest");
        let config: serde_json::Value = serde_json::from_slice(&config.2).unwrap();
        assert_eq!(config["config"]["Entrypoint"][0], "/pause");
        assert_eq!(config["os"], "linux");
        let layer = files.iter().find(|(p, ..)| p == layer_name).expect("layer");
        assert_eq!(config["rootfs"]["diff_ids"][0], format!("sha256:{}", sha256_hex(&layer.2)));
        let layer_files = entries(&layer.2);
        assert_eq!(layer_files.len(), 1);
        assert_eq!(layer_files[0].0, "pause");
        assert_eq!(layer_files[0].1 & 0o777, 0o755);
        assert_eq!(layer_files[0].2, PAUSE_PROGRAM);
    }

    #[test]
    fn packing_twice_gives_the_same_bytes() {
        assert_eq!(docker_archive(SANDBOX_IMAGE).unwrap(), docker_archive(SANDBOX_IMAGE).unwrap());
    }

    fn catches_sigterm(pid: u32) -> bool {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let mask = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).map(str::trim).unwrap_or("0");
        // SIGTERM is signal 15: bit 14 of the mask.
        u64::from_str_radix(mask, 16).is_ok_and(|m| m & (1 << 14) != 0)
    }

    #[test]
    fn the_pause_program_exits_on_sigterm_instead_of_waiting_for_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pause");
        std::fs::write(&path, PAUSE_PROGRAM).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let mut child = std::process::Command::new(&path).spawn().unwrap();
        // Signal only once the handler is installed (SIGTERM's bit in /proc's SigCgt mask): a
        // SIGTERM that arrived before `sigaction` would kill it by the default action instead.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !catches_sigterm(child.id()) {
            assert!(std::time::Instant::now() < deadline, "pause never installed its SIGTERM handler");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "pause exits 0 on SIGTERM (not killed by the signal): {status:?}");
    }
}
