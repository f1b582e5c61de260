//! Pod volumes on the node: emptyDir, configMap, secret, hostPath, downwardAPI and projected
//! (configMap, secret, downwardAPI, serviceAccountToken sources), set up as directories under
//! `<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>` and bind-mounted into containers.
//!
//! Follows "Volumes" (<https://kubernetes.io/docs/concepts/storage/volumes/>) and "Projected
//! Volumes" (<https://kubernetes.io/docs/concepts/storage/projected-volumes/>). Differences:
//! secret and `medium: Memory` volumes live on disk (no tmpfs), and configMap/secret contents
//! are written when containers start rather than refreshed periodically. Projected
//! service-account tokens are refreshed ([`refresh_service_account_tokens`]) as the kubelet's
//! token manager does: when older than 80 % of their lifetime or 24 hours.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod, Volume};

use crate::envvars::{self, ConfigError, NodeFacts};
use crate::host::PodHost;

/// The per-pod directory `<root>/pods/<uid>`.
pub fn pod_dir(root: &Path, pod_uid: &str) -> PathBuf {
    root.join("pods").join(pod_uid)
}

fn volume_dir(root: &Path, pod_uid: &str, plugin: &str, name: &str) -> PathBuf {
    pod_dir(root, pod_uid).join("volumes").join(format!("kubernetes.io~{plugin}")).join(name)
}

/// Rejects absolute paths and `..` components in file names taken from the pod spec.
fn relative_path(p: &str) -> Result<&Path, ConfigError> {
    let path = Path::new(p);
    if p.is_empty() || path.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(ConfigError(format!("invalid volume file path {p:?}")));
    }
    Ok(path)
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> ConfigError {
    ConfigError(format!("{what} {}: {e}", path.display()))
}

fn write_file(dir: &Path, rel: &str, data: &[u8], mode: i32) -> Result<(), ConfigError> {
    let path = dir.join(relative_path(rel)?);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_err("creating", parent, e))?;
    }
    let tmp = path.with_extension("skiff-tmp");
    std::fs::write(&tmp, data).map_err(|e| io_err("writing", &tmp, e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode((mode & 0o777) as u32))
        .map_err(|e| io_err("chmod", &tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io_err("renaming", &path, e))
}

/// Files of a ConfigMap or Secret: every key, or only `items` (key → path, mode).
fn project_keys(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: i32,
    source: &str,
    optional: bool,
) -> Result<Vec<(String, Vec<u8>, i32)>, ConfigError> {
    match items {
        None => Ok(data.iter().map(|(k, v)| (k.clone(), v.clone(), default_mode)).collect()),
        Some(items) => {
            let mut out = Vec::new();
            for item in items {
                match data.get(&item.key) {
                    Some(v) => out.push((item.path.clone(), v.clone(), item.mode.unwrap_or(default_mode))),
                    None if optional => {}
                    None => return Err(ConfigError(format!("couldn't find key {} in {source}", item.key))),
                }
            }
            Ok(out)
        }
    }
}

async fn config_map_files(
    host: &dyn PodHost,
    ns: &str,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    default_mode: i32,
    optional: bool,
) -> Result<Vec<(String, Vec<u8>, i32)>, ConfigError> {
    match host.config_map(ns, name).await.map_err(|e| ConfigError(e.to_string()))? {
        Some(cm) => {
            let mut data: BTreeMap<String, Vec<u8>> =
                cm.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
            data.extend(cm.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)));
            project_keys(&data, items, default_mode, &format!("ConfigMap {ns}/{name}"), optional)
        }
        None if optional => Ok(Vec::new()),
        None => Err(ConfigError(format!("configmap {name:?} not found"))),
    }
}

async fn secret_files(
    host: &dyn PodHost,
    ns: &str,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    default_mode: i32,
    optional: bool,
) -> Result<Vec<(String, Vec<u8>, i32)>, ConfigError> {
    match host.secret(ns, name).await.map_err(|e| ConfigError(e.to_string()))? {
        Some(s) => {
            let data: BTreeMap<String, Vec<u8>> =
                s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
            project_keys(&data, items, default_mode, &format!("Secret {ns}/{name}"), optional)
        }
        None if optional => Ok(Vec::new()),
        None => Err(ConfigError(format!("secret {name:?} not found"))),
    }
}

fn downward_files(
    pod: &Pod,
    items: &[k8s_openapi::api::core::v1::DownwardAPIVolumeFile],
    default_mode: i32,
    facts: &NodeFacts,
) -> Result<Vec<(String, Vec<u8>, i32)>, ConfigError> {
    let mut out = Vec::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            envvars::field_value(pod, &f.field_path, facts)?
        } else if let Some(r) = &item.resource_field_ref {
            let name = r.container_name.clone().unwrap_or_default();
            let c = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.iter().find(|c| c.name == name))
                .cloned()
                .ok_or_else(|| ConfigError(format!("container {name:?} not found in pod")))?;
            envvars::resource_field_value(&c, r, facts)?
        } else {
            continue;
        };
        out.push((item.path.clone(), value.into_bytes(), item.mode.unwrap_or(default_mode)));
    }
    Ok(out)
}

/// Prepares every volume of `pod` under `root` and returns the host path of each by volume
/// name.
///
/// # Errors
/// [`ConfigError`] when a referenced ConfigMap/Secret/key is missing and not optional, a
/// hostPath of a checked type does not exist, or files cannot be written.
pub async fn setup_volumes(
    host: &dyn PodHost,
    root: &Path,
    pod: &Pod,
    facts: &NodeFacts,
) -> Result<HashMap<String, PathBuf>, ConfigError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut paths = HashMap::new();
    let volumes: Vec<Volume> = pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
    for v in volumes {
        let mkdir = |dir: &Path| std::fs::create_dir_all(dir).map_err(|e| io_err("creating", dir, e));
        let path = if v.empty_dir.is_some() {
            let dir = volume_dir(root, &uid, "empty-dir", &v.name);
            mkdir(&dir)?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| io_err("chmod", &dir, e))?;
            dir
        } else if let Some(hp) = &v.host_path {
            let path = PathBuf::from(&hp.path);
            match hp.type_.as_deref().unwrap_or("") {
                "" => {}
                "DirectoryOrCreate" => mkdir(&path)?,
                "FileOrCreate" if !path.exists() => {
                    if let Some(parent) = path.parent() {
                        mkdir(parent)?;
                    }
                    std::fs::write(&path, b"").map_err(|e| io_err("creating", &path, e))?;
                }
                "Directory" if !path.is_dir() => {
                    return Err(ConfigError(format!("hostPath type check failed: {} is not a directory", hp.path)));
                }
                "File" if !path.is_file() => {
                    return Err(ConfigError(format!("hostPath type check failed: {} is not a file", hp.path)));
                }
                "Socket" | "CharDevice" | "BlockDevice" if !path.exists() => {
                    return Err(ConfigError(format!("hostPath type check failed: {} does not exist", hp.path)));
                }
                _ => {}
            }
            path
        } else if let Some(cm) = &v.config_map {
            let dir = volume_dir(root, &uid, "configmap", &v.name);
            mkdir(&dir)?;
            let files = config_map_files(
                host,
                &ns,
                &cm.name,
                cm.items.as_ref(),
                cm.default_mode.unwrap_or(0o644),
                cm.optional.unwrap_or(false),
            )
            .await?;
            write_all(&dir, files)?;
            dir
        } else if let Some(s) = &v.secret {
            let dir = volume_dir(root, &uid, "secret", &v.name);
            mkdir(&dir)?;
            let name = s.secret_name.clone().unwrap_or_default();
            let files = secret_files(
                host,
                &ns,
                &name,
                s.items.as_ref(),
                s.default_mode.unwrap_or(0o644),
                s.optional.unwrap_or(false),
            )
            .await?;
            write_all(&dir, files)?;
            dir
        } else if let Some(d) = &v.downward_api {
            let dir = volume_dir(root, &uid, "downward-api", &v.name);
            mkdir(&dir)?;
            let files =
                downward_files(pod, d.items.as_deref().unwrap_or_default(), d.default_mode.unwrap_or(0o644), facts)?;
            write_all(&dir, files)?;
            dir
        } else if let Some(p) = &v.projected {
            let dir = volume_dir(root, &uid, "projected", &v.name);
            mkdir(&dir)?;
            let mode = p.default_mode.unwrap_or(0o644);
            let mut files = Vec::new();
            for src in p.sources.iter().flatten() {
                if let Some(cm) = &src.config_map {
                    files.extend(
                        config_map_files(host, &ns, &cm.name, cm.items.as_ref(), mode, cm.optional.unwrap_or(false))
                            .await?,
                    );
                }
                if let Some(s) = &src.secret {
                    files.extend(
                        secret_files(host, &ns, &s.name, s.items.as_ref(), mode, s.optional.unwrap_or(false)).await?,
                    );
                }
                if let Some(d) = &src.downward_api {
                    files.extend(downward_files(pod, d.items.as_deref().unwrap_or_default(), mode, facts)?);
                }
                if let Some(t) = &src.service_account_token {
                    let expiration = t
                        .expiration_seconds
                        .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS)
                        .max(MIN_TOKEN_EXPIRATION_SECONDS);
                    let token = host
                        .service_account_token(pod, t.audience.clone(), expiration)
                        .await
                        .map_err(|e| ConfigError(format!("requesting a service account token: {e}")))?;
                    if token.is_none() {
                        tracing::warn!(pod = %uid, "the API server offers no TokenRequest; writing an empty token");
                    }
                    files.push((t.path.clone(), token.unwrap_or_default().into_bytes(), mode));
                }
            }
            write_all(&dir, files)?;
            dir
        } else {
            tracing::warn!(volume = %v.name, "unsupported volume type; mounting an empty directory");
            let dir = volume_dir(root, &uid, "unsupported", &v.name);
            mkdir(&dir)?;
            dir
        };
        paths.insert(v.name.clone(), path);
    }
    Ok(paths)
}

/// The default `expirationSeconds` of a projected service-account token (1 h + 7 s, as the API
/// server's ServiceAccount admission sets it).
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3607;

/// The shortest `expirationSeconds` a projected token may ask for (Kubernetes' validation).
pub const MIN_TOKEN_EXPIRATION_SECONDS: i64 = 600;

/// A token older than this is refreshed whatever its lifetime (the kubelet token manager's
/// `maxTTL`).
pub const MAX_TOKEN_AGE: Duration = Duration::from_secs(24 * 3600);

/// When a token issued at `issued_at` and expiring at `expires_at` must be replaced: after
/// 80 % of its lifetime, or after [`MAX_TOKEN_AGE`], whichever comes first
/// (`pkg/kubelet/token/token_manager.go`, `requiresRefresh`, without its jitter).
pub fn token_refresh_due(issued_at: SystemTime, expires_at: SystemTime) -> SystemTime {
    let ttl = expires_at.duration_since(issued_at).unwrap_or_default();
    (issued_at + ttl.mul_f64(0.8)).min(issued_at + MAX_TOKEN_AGE)
}

/// `iat` and `exp` of a JWT, read without verifying it (the kubelet only schedules refreshes
/// with them; the API server verifies tokens). `None` when the token is not a JWT with both.
pub fn jwt_issued_and_expiry(token: &str) -> Option<(SystemTime, SystemTime)> {
    use base64::Engine as _;
    let payload = token.trim().split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let at = |k: &str| claims.get(k).and_then(|v| v.as_u64()).map(|s| UNIX_EPOCH + Duration::from_secs(s));
    Some((at("iat")?, at("exp")?))
}

/// Rewrites the projected service-account tokens of `pod` that are due ([`token_refresh_due`])
/// at `now`, with new tokens from the TokenRequest API, atomically (the containers see the new
/// file through their bind mount of the volume directory). Volumes not set up yet are skipped.
/// A token file that is not a JWT (no TokenRequest API) is treated as issued at its
/// modification time with the requested lifetime.
///
/// Returns how many files were rewritten and the earliest time one is due next (`None`
/// without projected tokens).
///
/// # Errors
/// [`ConfigError`] when a token cannot be requested or written; the other tokens are still
/// tried first.
pub async fn refresh_service_account_tokens(
    host: &dyn PodHost,
    root: &Path,
    pod: &Pod,
    now: SystemTime,
) -> Result<(usize, Option<SystemTime>), ConfigError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let mut refreshed = 0;
    let mut next_due: Option<SystemTime> = None;
    let mut first_error = None;
    for v in pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
        let Some(p) = &v.projected else { continue };
        let dir = volume_dir(root, &uid, "projected", &v.name);
        let mode = p.default_mode.unwrap_or(0o644);
        for t in p.sources.iter().flatten().filter_map(|s| s.service_account_token.as_ref()) {
            let Ok(rel) = relative_path(&t.path) else { continue };
            let file = dir.join(rel);
            let Ok(current) = std::fs::read_to_string(&file) else { continue };
            let expiration =
                t.expiration_seconds.unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS).max(MIN_TOKEN_EXPIRATION_SECONDS);
            let (issued, expires) = jwt_issued_and_expiry(&current).unwrap_or_else(|| {
                let written = std::fs::metadata(&file).and_then(|m| m.modified()).unwrap_or(now);
                (written, written + Duration::from_secs(expiration as u64))
            });
            let mut due = token_refresh_due(issued, expires);
            if now >= due {
                let token = host.service_account_token(pod, t.audience.clone(), expiration).await;
                match token {
                    Ok(Some(token)) => match write_file(&dir, &t.path, token.as_bytes(), mode) {
                        Ok(()) => {
                            refreshed += 1;
                            tracing::debug!(pod = %uid, file = %file.display(), "service account token refreshed");
                            let (i, e) = jwt_issued_and_expiry(&token)
                                .unwrap_or((now, now + Duration::from_secs(expiration as u64)));
                            due = token_refresh_due(i, e);
                        }
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    },
                    // No TokenRequest API: nothing better to write.
                    Ok(None) => due = now + Duration::from_secs(expiration as u64),
                    Err(e) => {
                        first_error.get_or_insert(ConfigError(format!("requesting a service account token: {e}")));
                    }
                }
            }
            next_due = Some(next_due.map_or(due, |n| n.min(due)));
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok((refreshed, next_due)),
    }
}

fn write_all(dir: &Path, files: Vec<(String, Vec<u8>, i32)>) -> Result<(), ConfigError> {
    for (rel, data, mode) in files {
        write_file(dir, &rel, &data, mode)?;
    }
    Ok(())
}

/// A bind mount for a container (CRI `Mount`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    /// Path inside the container.
    pub container_path: String,
    /// Path on the host.
    pub host_path: PathBuf,
    /// Read-only mount.
    pub readonly: bool,
}

/// The mounts of `container`: its volumeMounts resolved against `volumes` (with subPath and
/// subPathExpr), plus the pod's managed /etc/hosts when `etc_hosts` is given and the container
/// does not mount /etc/hosts itself.
///
/// # Errors
/// [`ConfigError`] for a mount of an unknown volume or an invalid subPath.
pub fn container_mounts(
    container: &Container,
    volumes: &HashMap<String, PathBuf>,
    env: &HashMap<String, String>,
    etc_hosts: Option<&Path>,
) -> Result<Vec<MountSpec>, ConfigError> {
    let mut mounts = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let base = volumes
            .get(&m.name)
            .ok_or_else(|| ConfigError(format!("volume mount {:?} refers to an unknown volume", m.name)))?;
        let sub = match (&m.sub_path, &m.sub_path_expr) {
            (Some(s), _) if !s.is_empty() => Some(s.clone()),
            (_, Some(e)) if !e.is_empty() => Some(envvars::expand(e, env)),
            _ => None,
        };
        let host_path = match sub {
            Some(sub) => {
                let p = base.join(relative_path(&sub)?);
                if !p.exists() {
                    std::fs::create_dir_all(&p).map_err(|e| io_err("creating", &p, e))?;
                }
                p
            }
            None => base.clone(),
        };
        mounts.push(MountSpec {
            container_path: m.mount_path.clone(),
            host_path,
            readonly: m.read_only.unwrap_or(false),
        });
    }
    if let Some(hosts) = etc_hosts
        && !mounts.iter().any(|m| m.container_path == "/etc/hosts")
    {
        mounts.push(MountSpec { container_path: "/etc/hosts".into(), host_path: hosts.to_path_buf(), readonly: false });
    }
    Ok(mounts)
}

/// Contents of the kubelet-managed /etc/hosts for a pod (localhost entries, the pod IP with its
/// hostname, and `hostAliases`).
pub fn etc_hosts_content(pod: &Pod, pod_ip: &str, hostname: &str, fqdn: Option<&str>) -> String {
    let mut s = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    if !pod_ip.is_empty() {
        match fqdn {
            Some(f) => s.push_str(&format!("{pod_ip}\t{f}\t{hostname}\n")),
            None => s.push_str(&format!("{pod_ip}\t{hostname}\n")),
        }
    }
    let aliases = pod.spec.as_ref().and_then(|s| s.host_aliases.clone()).unwrap_or_default();
    if !aliases.is_empty() {
        s.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            s.push_str(&format!("{}\t{}\n", a.ip, a.hostnames.unwrap_or_default().join("\t")));
        }
    }
    s
}

/// Writes the pod's /etc/hosts file and returns its path.
///
/// # Errors
/// [`ConfigError`] when the file cannot be written.
pub fn write_etc_hosts(root: &Path, pod: &Pod, pod_ip: &str, hostname: &str) -> Result<PathBuf, ConfigError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let dir = pod_dir(root, &uid);
    std::fs::create_dir_all(&dir).map_err(|e| io_err("creating", &dir, e))?;
    let path = dir.join("etc-hosts");
    std::fs::write(&path, etc_hosts_content(pod, pod_ip, hostname, None)).map_err(|e| io_err("writing", &path, e))?;
    Ok(path)
}

/// Removes the pod's directory (volumes, /etc/hosts). hostPath volumes are outside it and
/// untouched.
pub fn cleanup_pod_dir(root: &Path, pod_uid: &str) {
    let dir = pod_dir(root, pod_uid);
    if dir.exists()
        && let Err(e) = std::fs::remove_dir_all(&dir)
    {
        tracing::warn!(dir = %dir.display(), error = %e, "removing the pod directory failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{HostAlias, PodSpec, VolumeMount};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn file_paths_may_not_escape_the_volume() {
        assert!(relative_path("a/b.txt").is_ok());
        assert!(relative_path("../etc/passwd").is_err());
        assert!(relative_path("/etc/passwd").is_err());
        assert!(relative_path("").is_err());
    }

    #[test]
    fn items_select_and_rename_keys() {
        let data = BTreeMap::from([("a".to_string(), b"1".to_vec()), ("b".to_string(), b"2".to_vec())]);
        let items = vec![KeyToPath { key: "b".into(), path: "dir/bee".into(), mode: Some(0o600) }];
        let files = project_keys(&data, Some(&items), 0o644, "ConfigMap x", false).unwrap_or_default();
        assert_eq!(files, vec![("dir/bee".to_string(), b"2".to_vec(), 0o600)]);
        let all = project_keys(&data, None, 0o644, "ConfigMap x", false).unwrap_or_default();
        assert_eq!(all.len(), 2);
        let missing = vec![KeyToPath { key: "zz".into(), path: "z".into(), mode: None }];
        assert!(project_keys(&data, Some(&missing), 0o644, "ConfigMap x", false).is_err());
        assert_eq!(project_keys(&data, Some(&missing), 0o644, "ConfigMap x", true), Ok(vec![]));
    }

    #[test]
    fn mounts_resolve_volumes_subpaths_and_add_etc_hosts() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let volumes = HashMap::from([("data".to_string(), dir.path().to_path_buf())]);
        let env = HashMap::from([("POD".to_string(), "p1".to_string())]);
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "data".into(),
                    mount_path: "/data".into(),
                    read_only: Some(true),
                    ..Default::default()
                },
                VolumeMount {
                    name: "data".into(),
                    mount_path: "/logs".into(),
                    sub_path_expr: Some("logs/$(POD)".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let mounts = container_mounts(&c, &volumes, &env, Some(Path::new("/tmp/hosts"))).unwrap_or_default();
        assert_eq!(mounts.len(), 3);
        assert!(mounts[0].readonly);
        assert_eq!(mounts[1].host_path, dir.path().join("logs/p1"));
        assert!(dir.path().join("logs/p1").is_dir());
        assert_eq!(mounts[2].container_path, "/etc/hosts");
        let unknown = Container {
            name: "c".into(),
            volume_mounts: Some(vec![VolumeMount {
                name: "nope".into(),
                mount_path: "/x".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(container_mounts(&unknown, &volumes, &env, None).is_err());
    }

    #[test]
    fn etc_hosts_lists_the_pod_and_host_aliases() {
        let pod = Pod {
            metadata: ObjectMeta::default(),
            spec: Some(PodSpec {
                host_aliases: Some(vec![HostAlias {
                    ip: "10.1.2.3".into(),
                    hostnames: Some(vec!["foo".into(), "bar".into()]),
                }]),
                ..Default::default()
            }),
            status: None,
        };
        let text = etc_hosts_content(&pod, "10.42.0.7", "web-0", None);
        assert!(text.contains("127.0.0.1\tlocalhost"));
        assert!(text.contains("10.42.0.7\tweb-0"));
        assert!(text.contains("10.1.2.3\tfoo\tbar"));
    }
}

#[cfg(test)]
mod token_refresh_tests {
    use std::sync::Mutex;

    use base64::Engine as _;
    use k8s_openapi::api::core::v1::{
        ConfigMap, PodSpec, PodStatus, ProjectedVolumeSource, Secret, ServiceAccountTokenProjection, VolumeProjection,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::Error;
    use crate::host::PodEvent;

    /// Issues JWT-shaped tokens (`iat` = the injected clock, `exp` = iat + expirationSeconds).
    struct TokenHost {
        clock: Mutex<SystemTime>,
        issued: Mutex<Vec<i64>>,
    }

    fn jwt(iat: SystemTime, ttl_secs: u64, serial: usize) -> String {
        let iat = iat.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let claims = serde_json::json!({ "iat": iat, "exp": iat + ttl_secs, "jti": serial.to_string() });
        let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!("{}.{}.sig", enc.encode(br#"{"alg":"ES256"}"#), enc.encode(claims.to_string()))
    }

    #[async_trait::async_trait]
    impl PodHost for TokenHost {
        async fn config_map(&self, _: &str, _: &str) -> Result<Option<ConfigMap>, Error> {
            Ok(None)
        }
        async fn secret(&self, _: &str, _: &str) -> Result<Option<Secret>, Error> {
            Ok(None)
        }
        async fn service_account_token(&self, _: &Pod, _: Option<String>, exp: i64) -> Result<Option<String>, Error> {
            let mut issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
            issued.push(exp);
            let now = *self.clock.lock().unwrap_or_else(|e| e.into_inner());
            Ok(Some(jwt(now, exp as u64, issued.len())))
        }
        async fn update_pod_status(&self, _: &Pod, _: &PodStatus) -> Result<(), Error> {
            Ok(())
        }
        async fn delete_pod(&self, _: &Pod) -> Result<(), Error> {
            Ok(())
        }
        fn record_event(&self, _: &Pod, _: PodEvent) {}
    }

    fn token_pod(expiration_seconds: i64) -> Pod {
        let source = VolumeProjection {
            service_account_token: Some(ServiceAccountTokenProjection {
                path: "token".into(),
                expiration_seconds: Some(expiration_seconds),
                audience: None,
            }),
            ..Default::default()
        };
        Pod {
            metadata: ObjectMeta { uid: Some("uid-1".into()), name: Some("p".into()), ..Default::default() },
            spec: Some(PodSpec {
                volumes: Some(vec![Volume {
                    name: "kube-api-access".into(),
                    projected: Some(ProjectedVolumeSource { sources: Some(vec![source]), default_mode: Some(0o644) }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn facts() -> NodeFacts {
        NodeFacts {
            host_ip: "10.0.0.1".into(),
            pod_ip: "10.42.0.5".into(),
            allocatable_cpu_millis: 1000,
            allocatable_memory: 1 << 30,
            allocatable_ephemeral_storage: 1 << 30,
        }
    }

    #[test]
    fn a_token_is_due_at_80_percent_of_its_lifetime_or_after_a_day() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(token_refresh_due(t0, t0 + Duration::from_secs(600)), t0 + Duration::from_secs(480));
        assert_eq!(token_refresh_due(t0, t0 + Duration::from_secs(3607)), t0 + Duration::from_millis(2_885_600));
        assert_eq!(token_refresh_due(t0, t0 + Duration::from_secs(7 * 24 * 3600)), t0 + MAX_TOKEN_AGE);
        assert_eq!(jwt_issued_and_expiry(&jwt(t0, 600, 1)), Some((t0, t0 + Duration::from_secs(600))));
        assert_eq!(jwt_issued_and_expiry("not-a-jwt"), None);
    }

    #[tokio::test]
    async fn the_projected_token_is_rewritten_only_once_due() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let t0 = UNIX_EPOCH + Duration::from_secs(2_000_000);
        let host = TokenHost { clock: Mutex::new(t0), issued: Mutex::new(Vec::new()) };
        let pod = token_pod(600);
        let paths = setup_volumes(&host, dir.path(), &pod, &facts()).await.unwrap_or_else(|e| panic!("{e}"));
        let file = paths["kube-api-access"].join("token");
        let first = std::fs::read_to_string(&file).unwrap_or_default();
        assert_eq!(jwt_issued_and_expiry(&first), Some((t0, t0 + Duration::from_secs(600))));

        // 79 % of 600 s: not yet; the next due time is reported.
        let at = |s: u64| t0 + Duration::from_secs(s);
        let r = refresh_service_account_tokens(&host, dir.path(), &pod, at(474)).await;
        assert_eq!(r.ok(), Some((0, Some(at(480)))));
        assert_eq!(std::fs::read_to_string(&file).unwrap_or_default(), first);

        // Past 80 %: a new token (asked with the same expirationSeconds) replaces the file.
        *host.clock.lock().unwrap_or_else(|e| e.into_inner()) = at(486);
        let r = refresh_service_account_tokens(&host, dir.path(), &pod, at(486)).await;
        assert_eq!(r.ok(), Some((1, Some(at(486 + 480)))));
        let second = std::fs::read_to_string(&file).unwrap_or_default();
        assert_ne!(second, first);
        assert_eq!(jwt_issued_and_expiry(&second), Some((at(486), at(486 + 600))));
        assert_eq!(*host.issued.lock().unwrap_or_else(|e| e.into_inner()), vec![600, 600]);
    }

    #[tokio::test]
    async fn long_lived_tokens_are_refreshed_after_a_day_and_unset_volumes_are_skipped() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let t0 = UNIX_EPOCH + Duration::from_secs(3_000_000);
        let host = TokenHost { clock: Mutex::new(t0), issued: Mutex::new(Vec::new()) };
        let pod = token_pod(7 * 24 * 3600);
        // Not set up yet: nothing to refresh.
        let r = refresh_service_account_tokens(&host, dir.path(), &pod, t0).await;
        assert_eq!(r.ok(), Some((0, None)));
        setup_volumes(&host, dir.path(), &pod, &facts()).await.unwrap_or_else(|e| panic!("{e}"));
        let day = t0 + MAX_TOKEN_AGE;
        let r = refresh_service_account_tokens(&host, dir.path(), &pod, day - Duration::from_secs(1)).await;
        assert_eq!(r.ok().map(|r| r.0), Some(0));
        let r = refresh_service_account_tokens(&host, dir.path(), &pod, day).await;
        assert_eq!(r.ok().map(|r| r.0), Some(1));
    }
}
