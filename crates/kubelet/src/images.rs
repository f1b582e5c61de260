//! Images: the pull policy (`imagePullPolicy`), pulling with back-off (ErrImagePull,
//! ImagePullBackOff), and importing image tarballs into containerd for air-gapped nodes.
//!
//! Follows "Images" (<https://kubernetes.io/docs/concepts/containers/images/>): `IfNotPresent`
//! asks `ImageStatus` first, because CRI `PullImage` always contacts the registry.

use std::path::{Path, PathBuf};
use std::time::Instant;

use k8s_openapi::api::core::v1::Container;

use crate::backoff::Backoff;
use crate::cri::{CriClient, ImageService};

/// Image pull policy (`imagePullPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Always pull (default for `:latest` or untagged images).
    Always,
    /// Pull only when the image is not on the node (default otherwise).
    IfNotPresent,
    /// Never pull; fail when the image is missing.
    Never,
}

/// The tag of an image reference ("busybox:1.35" → Some("1.35"); digests and untagged → None).
fn image_tag(image: &str) -> Option<&str> {
    if image.contains('@') {
        return None;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split_once(':').map(|(_, t)| t)
}

/// The effective pull policy of a container (API defaulting: `Always` for `:latest` and
/// untagged images, `IfNotPresent` otherwise).
pub fn pull_policy(container: &Container) -> PullPolicy {
    match container.image_pull_policy.as_deref() {
        Some("Always") => PullPolicy::Always,
        Some("Never") => PullPolicy::Never,
        Some("IfNotPresent") => PullPolicy::IfNotPresent,
        _ => {
            let image = container.image.as_deref().unwrap_or_default();
            if image.contains('@') {
                PullPolicy::IfNotPresent
            } else {
                match image_tag(image) {
                    None | Some("latest") => PullPolicy::Always,
                    Some(_) => PullPolicy::IfNotPresent,
                }
            }
        }
    }
}

/// Why an image could not be made available; becomes the container's waiting reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageError {
    /// `ErrImagePull`, `ImagePullBackOff`, `ErrImageNeverPull` or `InvalidImageName`.
    pub reason: &'static str,
    /// The message for the container status and event.
    pub message: String,
}

/// What [`ensure_image`] did, for events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageOutcome {
    /// The image was already present (`Pulled`: "Container image ... already present on machine").
    Present {
        /// The image id to create the container from.
        image_ref: String,
    },
    /// The image was pulled.
    Pulled {
        /// The image id to create the container from.
        image_ref: String,
        /// How long the pull took.
        took: std::time::Duration,
    },
}

impl ImageOutcome {
    /// The image id.
    pub fn image_ref(&self) -> &str {
        match self {
            ImageOutcome::Present { image_ref } | ImageOutcome::Pulled { image_ref, .. } => image_ref,
        }
    }
}

/// Makes the container's image available per its pull policy, with per-image back-off of
/// failed pulls (key `backoff_key`). `on_pull` is called before a pull starts (the `Pulling`
/// event).
///
/// # Errors
/// [`ImageError`] with the Kubernetes reason and a message that, for images missing offline,
/// says how to import them.
pub async fn ensure_image(
    cri: &dyn ImageService,
    container: &Container,
    backoff: &parking_lot::Mutex<Backoff>,
    backoff_key: &str,
    on_pull: impl FnOnce(),
) -> Result<ImageOutcome, ImageError> {
    let image = container.image.clone().unwrap_or_default();
    if image.is_empty() {
        return Err(ImageError { reason: "InvalidImageName", message: "container has no image".into() });
    }
    let policy = pull_policy(container);
    let present = if policy == PullPolicy::Always {
        None
    } else {
        match cri.image_status(&image).await {
            Ok(img) => img,
            Err(e) => {
                return Err(ImageError { reason: "ErrImagePull", message: format!("checking image {image:?}: {e}") });
            }
        }
    };
    if let Some(img) = present {
        return Ok(ImageOutcome::Present { image_ref: img.id });
    }
    if policy == PullPolicy::Never {
        return Err(ImageError {
            reason: "ErrImageNeverPull",
            message: format!("Container image {image:?} is not present with pull policy of Never"),
        });
    }
    // The message stays the same for the whole back-off, as the kubelet's ("Back-off pulling
    // image %q"): a countdown in it would make every sync a new Event and a new status write.
    if backoff.lock().in_backoff_since_update(backoff_key, Instant::now()).is_some() {
        return Err(ImageError { reason: "ImagePullBackOff", message: format!("Back-off pulling image {image:?}") });
    }
    on_pull();
    let started = Instant::now();
    match cri.pull_image(&image, None).await {
        Ok(image_ref) => {
            backoff.lock().reset(backoff_key);
            Ok(ImageOutcome::Pulled { image_ref, took: started.elapsed() })
        }
        Err(e) => {
            backoff.lock().next(backoff_key, Instant::now());
            let local = cri.image_status(&image).await.ok().flatten().is_some();
            let hint = if local {
                " The image is present on the node: set imagePullPolicy: IfNotPresent to use it without a registry."
            } else {
                " No registry may be reachable from this node: import the image with `skiff images import FILE.tar` \
                 (or place the tarball in the agent's images/ directory) and use a tag other than :latest."
            };
            Err(ImageError { reason: "ErrImagePull", message: format!("Failed to pull image {image:?}: {e}.{hint}") })
        }
    }
}

/// The containerd namespace CRI uses.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// Imports one image tarball (docker-archive or OCI layout) into the containerd at `socket`,
/// using `ctr -n k8s.io images import`.
///
/// # Errors
/// [`crate::Error::Io`] when `ctr` cannot run; [`crate::Error::Config`] when it fails (the
/// message carries its output).
pub async fn import_image_tarball(socket: &Path, tarball: &Path) -> Result<String, crate::Error> {
    let out = tokio::process::Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["-n", CRI_NAMESPACE, "images", "import", "--all-platforms"])
        .arg(tarball)
        .output()
        .await
        .map_err(|e| crate::Error::io("running ctr (install containerd)", e))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(crate::Error::Config(format!(
            "importing {} failed: {}{}",
            tarball.display(),
            stdout,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(stdout)
}

/// The image tarballs (`*.tar`, `*.tar.gz`, `*.tgz`) in `dir`, sorted; empty when the
/// directory does not exist.
pub fn tarballs_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            p.is_file() && (name.ends_with(".tar") || name.ends_with(".tar.gz") || name.ends_with(".tgz"))
        })
        .collect();
    files.sort();
    files
}

/// Imports every tarball of `dir` (the agent's `images/` directory); failures are logged and
/// skipped. Returns the number imported.
pub async fn import_dir(socket: &Path, dir: &Path) -> usize {
    let mut imported = 0;
    for file in tarballs_in(dir) {
        match import_image_tarball(socket, &file).await {
            Ok(_) => {
                tracing::info!(file = %file.display(), "imported image tarball");
                imported += 1;
            }
            Err(e) => tracing::warn!(file = %file.display(), error = %e, "importing image tarball failed"),
        }
    }
    imported
}

/// What [`import_images`] did with the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportMode {
    /// Imported into the node's running containerd.
    Imported,
    /// The node's containerd is not running: copied into `<data-dir>/images/`, to be imported
    /// at the next agent start.
    Queued(PathBuf),
}

/// `skiff images import [--data-dir DIR] FILE.tar…`: loads image tarballs (docker-archive or
/// OCI layout) into the containerd of the node whose data directory is `data_dir`, showing a
/// progress bar on stderr when `progress` is set. When that containerd is not running the files
/// are copied into `<data_dir>/images/` instead (imported when the agent starts).
///
/// # Errors
/// [`crate::Error::Config`] for missing files or failed imports (the message carries ctr's
/// output); [`crate::Error::Io`] when copying fails.
pub async fn import_images(data_dir: &Path, files: &[PathBuf], progress: bool) -> Result<ImportMode, crate::Error> {
    for f in files {
        if !f.is_file() {
            return Err(crate::Error::Config(format!("{} is not a file", f.display())));
        }
    }
    let total: u64 = files.iter().map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
    let bar = if progress {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {bytes}/{total_bytes} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let socket = crate::agent::containerd_socket(data_dir);
    let live = socket.exists()
        && match CriClient::connect(&socket).await {
            Ok(c) => c.version().await.is_ok(),
            Err(_) => false,
        };
    let mode = if live {
        for f in files {
            bar.set_message(format!("importing {}", f.display()));
            let out = import_image_tarball(&socket, f).await?;
            for line in out.lines().filter(|l| !l.trim().is_empty()) {
                bar.println(line.trim());
            }
            bar.inc(std::fs::metadata(f).map(|m| m.len()).unwrap_or(0));
        }
        ImportMode::Imported
    } else {
        let dir = crate::agent::images_dir(data_dir);
        std::fs::create_dir_all(&dir).map_err(|e| crate::Error::io(format!("creating {}", dir.display()), e))?;
        for f in files {
            bar.set_message(format!("copying {}", f.display()));
            let name = f.file_name().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("image.tar"));
            let dest = dir.join(name);
            std::fs::copy(f, &dest).map_err(|e| crate::Error::io(format!("copying to {}", dest.display()), e))?;
            bar.inc(std::fs::metadata(f).map(|m| m.len()).unwrap_or(0));
        }
        ImportMode::Queued(dir)
    };
    bar.finish_and_clear();
    Ok(mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(image: &str, policy: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(str::to_string),
            ..Default::default()
        }
    }

    /// Has no image and fails every pull, as a node without a registry does.
    struct Unreachable;

    #[async_trait::async_trait]
    impl ImageService for Unreachable {
        async fn image_status(&self, _image: &str) -> Result<Option<k8s_cri::v1::Image>, crate::cri::CriError> {
            Ok(None)
        }
        async fn pull_image(
            &self,
            _image: &str,
            _sandbox: Option<k8s_cri::v1::PodSandboxConfig>,
        ) -> Result<String, crate::cri::CriError> {
            Err(crate::cri::CriError::Status {
                op: "PullImage",
                code: tonic::Code::Unavailable,
                message: "no route".into(),
            })
        }
        async fn list_images(&self) -> Result<Vec<k8s_cri::v1::Image>, crate::cri::CriError> {
            Ok(Vec::new())
        }
    }

    #[tokio::test]
    async fn a_pull_in_back_off_reports_the_same_message_on_every_sync() {
        let backoff = parking_lot::Mutex::new(Backoff::new(
            std::time::Duration::from_secs(60),
            std::time::Duration::from_secs(300),
        ));
        let container = c("registry.example/app:1", None);
        let first = ensure_image(&Unreachable, &container, &backoff, "k", || {}).await.unwrap_err();
        assert_eq!(first.reason, "ErrImagePull");
        let second = ensure_image(&Unreachable, &container, &backoff, "k", || {}).await.unwrap_err();
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        let third = ensure_image(&Unreachable, &container, &backoff, "k", || {}).await.unwrap_err();
        assert_eq!(second.reason, "ImagePullBackOff");
        assert_eq!(second, third, "one message for the whole back-off, so Events aggregate");
        assert_eq!(second.message, "Back-off pulling image \"registry.example/app:1\"");
    }

    #[test]
    fn default_pull_policy_follows_the_tag() {
        assert_eq!(pull_policy(&c("busybox", None)), PullPolicy::Always);
        assert_eq!(pull_policy(&c("busybox:latest", None)), PullPolicy::Always);
        assert_eq!(pull_policy(&c("skiff.local/busybox:1.35", None)), PullPolicy::IfNotPresent);
        assert_eq!(pull_policy(&c("localhost:5000/busybox", None)), PullPolicy::Always);
        assert_eq!(pull_policy(&c("busybox@sha256:abc", None)), PullPolicy::IfNotPresent);
        assert_eq!(pull_policy(&c("busybox", Some("Never"))), PullPolicy::Never);
        assert_eq!(pull_policy(&c("busybox:1", Some("Always"))), PullPolicy::Always);
    }

    #[tokio::test]
    async fn import_without_a_running_node_queues_files_in_the_images_dir() {
        let data = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let src = data.path().join("x.tar");
        std::fs::write(&src, b"tar").unwrap_or_else(|e| panic!("write: {e}"));
        let mode = import_images(data.path(), &[src], false).await.unwrap_or_else(|e| panic!("import: {e}"));
        assert_eq!(mode, ImportMode::Queued(data.path().join("images")));
        assert!(data.path().join("images/x.tar").is_file());
        let missing = import_images(data.path(), &[data.path().join("nope.tar")], false).await;
        assert!(matches!(missing, Err(crate::Error::Config(_))));
    }

    #[test]
    fn tarballs_are_listed_sorted_and_filtered() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        for name in ["b.tar", "a.tar.gz", "notes.txt"] {
            std::fs::write(dir.path().join(name), b"").unwrap_or_else(|e| panic!("write: {e}"));
        }
        let names: Vec<String> = tarballs_in(dir.path())
            .iter()
            .map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
            .collect();
        assert_eq!(names, vec!["a.tar.gz", "b.tar"]);
        assert!(tarballs_in(Path::new("/nonexistent/skiff")).is_empty());
    }
}
