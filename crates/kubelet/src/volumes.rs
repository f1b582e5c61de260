//! Pod volumes on the node: emptyDir, configMap, secret, hostPath, downwardAPI and projected
//! (configMap, secret, downwardAPI, serviceAccountToken sources), set up as directories under
//! `<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>` and bind-mounted into containers.
//!
//! Follows "Volumes" (<https://kubernetes.io/docs/concepts/storage/volumes/>) and "Projected
//! Volumes" (<https://kubernetes.io/docs/concepts/storage/projected-volumes/>). Differences:
//! secret and `medium: Memory` volumes live on disk (no tmpfs), and configMap/secret contents
//! are written when containers start rather than refreshed periodically.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

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
                    let expiration = t.expiration_seconds.unwrap_or(3607).max(600);
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
