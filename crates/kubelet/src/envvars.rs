//! Container environment: `env` (literal values, `valueFrom` fieldRef / resourceFieldRef /
//! configMapKeyRef / secretKeyRef), `envFrom`, and `$(VAR)` expansion of env values, command
//! and args.
//!
//! Follows "Define Environment Variables for a Container"
//! (<https://kubernetes.io/docs/tasks/inject-data-application/define-environment-variable-container/>)
//! and the downward API field list
//! (<https://kubernetes.io/docs/concepts/workloads/pods/downward-api/>).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector, Service};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use skiff_apimachinery::quantity;

use crate::host::PodHost;

/// Why a container's configuration could not be built; reported as the container's waiting
/// reason `CreateContainerConfigError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Pod facts known only on the node, for downward API values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The node's IP (`status.hostIP`).
    pub host_ip: String,
    /// The pod's IP (`status.podIP`), empty before the sandbox has one.
    pub pod_ip: String,
    /// Node allocatable cpu in millicores (the default for unset `limits.cpu`).
    pub allocatable_cpu_millis: i64,
    /// Node allocatable memory in bytes (the default for unset `limits.memory`).
    pub allocatable_memory: i64,
    /// Node allocatable ephemeral storage in bytes.
    pub allocatable_ephemeral_storage: i64,
}

/// Extracts `metadata.labels['key']`-style subscripts.
fn subscript<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?.strip_prefix("['")?;
    rest.strip_suffix("']")
}

fn format_map(map: &BTreeMap<String, String>) -> String {
    map.iter().map(|(k, v)| format!("{k}={v:?}")).collect::<Vec<_>>().join("\n")
}

/// The value of a downward API `fieldRef` path for `pod`.
///
/// # Errors
/// [`ConfigError`] for unsupported paths.
pub fn field_value(pod: &Pod, path: &str, facts: &NodeFacts) -> Result<String, ConfigError> {
    let meta = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    if let Some(k) = subscript(path, "metadata.labels") {
        return Ok(meta.labels.as_ref().and_then(|m| m.get(k)).cloned().unwrap_or_default());
    }
    if let Some(k) = subscript(path, "metadata.annotations") {
        return Ok(meta.annotations.as_ref().and_then(|m| m.get(k)).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(&meta.labels.clone().unwrap_or_default()),
        "metadata.annotations" => format_map(&meta.annotations.clone().unwrap_or_default()),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
        "status.podIP" | "status.podIPs" => facts.pod_ip.clone(),
        other => return Err(ConfigError(format!("unsupported fieldRef path {other:?}"))),
    })
}

/// The value of a `resourceFieldRef` for `container`, divided by the divisor and rounded up;
/// unset limits default to the node's allocatable.
///
/// # Errors
/// [`ConfigError`] for unknown resources or unparseable divisors.
pub fn resource_field_value(
    container: &Container,
    sel: &ResourceFieldSelector,
    facts: &NodeFacts,
) -> Result<String, ConfigError> {
    let (kind, name) = sel
        .resource
        .split_once('.')
        .ok_or_else(|| ConfigError(format!("unsupported resourceFieldRef {:?}", sel.resource)))?;
    let res = container.resources.clone().unwrap_or_default();
    let map = match kind {
        "limits" => res.limits.clone(),
        "requests" => res.requests.clone().or(res.limits.clone()),
        _ => None,
    }
    .unwrap_or_default();
    let is_cpu = name == "cpu";
    let scale = if is_cpu { 3 } else { 0 };
    let value = match map.get(name) {
        Some(q) => quantity::parse_scaled(&q.0, scale).map_err(|e| ConfigError(e.to_string()))?,
        None if kind == "limits" => match name {
            "cpu" => facts.allocatable_cpu_millis,
            "memory" => facts.allocatable_memory,
            "ephemeral-storage" => facts.allocatable_ephemeral_storage,
            other => return Err(ConfigError(format!("unsupported resourceFieldRef resource {other:?}"))),
        },
        None => 0,
    };
    let divisor = sel.divisor.clone().unwrap_or_else(|| Quantity("1".into()));
    let divisor = quantity::parse_scaled(&divisor.0, scale).map_err(|e| ConfigError(e.to_string()))?;
    if divisor <= 0 {
        return Err(ConfigError(format!("invalid divisor {:?}", sel.divisor)));
    }
    Ok(((value + divisor - 1) / divisor).to_string())
}

/// Expands `$(NAME)` references using `vars`; unknown references are left as they are and
/// `$$` escapes a `$` (Kubernetes' `expansion.Expand`).
pub fn expand(input: &str, vars: &HashMap<String, String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut literal_start = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push_str(&input[literal_start..i]);
                    out.push('$');
                    i += 2;
                    literal_start = i;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        out.push_str(&input[literal_start..i]);
                        match vars.get(name) {
                            Some(v) => out.push_str(v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        literal_start = i;
                        continue;
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push_str(&input[literal_start..]);
    out
}

/// Docker-links-style environment variables for Services (kubelet `envvars.FromServices`):
/// `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT[_<PORT NAME>]`, `<NAME>_PORT`,
/// `<NAME>_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR]`. Headless and ExternalName services are
/// skipped.
pub fn service_env(services: &[Service]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for svc in services {
        let spec = svc.spec.clone().unwrap_or_default();
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        if ip.is_empty() || ip == "None" || spec.type_.as_deref() == Some("ExternalName") {
            continue;
        }
        let name = svc.metadata.name.clone().unwrap_or_default().to_uppercase().replace('-', "_");
        let ports = spec.ports.clone().unwrap_or_default();
        let Some(first) = ports.first() else { continue };
        out.push((format!("{name}_SERVICE_HOST"), ip.clone()));
        out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
        for p in &ports {
            if let Some(pn) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((format!("{name}_SERVICE_PORT_{}", pn.to_uppercase().replace('-', "_")), p.port.to_string()));
            }
        }
        let proto = |p: &k8s_openapi::api::core::v1::ServicePort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
        out.push((format!("{name}_PORT"), format!("{}://{ip}:{}", proto(first).to_lowercase(), first.port)));
        for p in &ports {
            let pr = proto(p);
            let prefix = format!("{name}_PORT_{}_{}", p.port, pr.to_uppercase());
            out.push((prefix.clone(), format!("{}://{ip}:{}", pr.to_lowercase(), p.port)));
            out.push((format!("{prefix}_PROTO"), pr.to_lowercase()));
            out.push((format!("{prefix}_PORT"), p.port.to_string()));
            out.push((format!("{prefix}_ADDR"), ip.clone()));
        }
    }
    out
}

fn secret_string(v: &k8s_openapi::ByteString) -> String {
    String::from_utf8_lossy(&v.0).into_owned()
}

/// Builds the container's environment in order: `envFrom` sources, then `env` entries (later
/// names override earlier ones), with `$(VAR)` references expanded against earlier variables.
///
/// # Errors
/// [`ConfigError`] when a referenced ConfigMap, Secret or key is missing and not optional, or
/// the API cannot be read.
pub async fn make_environment(
    host: &dyn PodHost,
    pod: &Pod,
    container: &Container,
    facts: &NodeFacts,
) -> Result<Vec<(String, String)>, ConfigError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut order: Vec<String> = Vec::new();
    let mut vars: HashMap<String, String> = HashMap::new();
    let set = |order: &mut Vec<String>, vars: &mut HashMap<String, String>, k: String, v: String| {
        if !vars.contains_key(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    let api_err = |e: crate::Error| ConfigError(e.to_string());
    // Service links: the pod namespace's services (unless enableServiceLinks is false) and
    // always the API server's `kubernetes` service; a failed list is not fatal.
    let mut services = Vec::new();
    if pod.spec.as_ref().and_then(|s| s.enable_service_links).unwrap_or(true) {
        services.extend(host.services(&ns).await.unwrap_or_default());
    }
    if ns != "default" || services.is_empty() {
        let default = host.services("default").await.unwrap_or_default();
        services.extend(default.into_iter().filter(|s| s.metadata.name.as_deref() == Some("kubernetes")));
    }
    services.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    services.dedup_by(|a, b| a.metadata.name == b.metadata.name && a.metadata.namespace == b.metadata.namespace);
    for (k, v) in service_env(&services) {
        set(&mut order, &mut vars, k, v);
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match host.config_map(&ns, &r.name).await.map_err(api_err)? {
                Some(cm) => {
                    for (k, v) in cm.data.unwrap_or_default() {
                        set(&mut order, &mut vars, format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional.unwrap_or(false) => {}
                None => return Err(ConfigError(format!("configmap {:?} not found", r.name))),
            }
        }
        if let Some(r) = &from.secret_ref {
            match host.secret(&ns, &r.name).await.map_err(api_err)? {
                Some(s) => {
                    for (k, v) in s.data.unwrap_or_default() {
                        set(&mut order, &mut vars, format!("{prefix}{k}"), secret_string(&v));
                    }
                }
                None if r.optional.unwrap_or(false) => {}
                None => return Err(ConfigError(format!("secret {:?} not found", r.name))),
            }
        }
    }
    for env in container.env.iter().flatten() {
        let value = if let Some(from) = &env.value_from {
            if let Some(f) = &from.field_ref {
                Some(field_value(pod, &f.field_path, facts)?)
            } else if let Some(r) = &from.resource_field_ref {
                let target = match r.container_name.as_deref() {
                    Some(name) if !name.is_empty() => pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers.iter().find(|c| c.name == name))
                        .cloned()
                        .ok_or_else(|| ConfigError(format!("container {name:?} not found in pod")))?,
                    _ => container.clone(),
                };
                Some(resource_field_value(&target, r, facts)?)
            } else if let Some(r) = &from.config_map_key_ref {
                let optional = r.optional.unwrap_or(false);
                match host.config_map(&ns, &r.name).await.map_err(api_err)? {
                    Some(cm) => match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => Some(v.clone()),
                        None if optional => None,
                        None => {
                            return Err(ConfigError(format!(
                                "couldn't find key {} in ConfigMap {}/{}",
                                r.key, ns, r.name
                            )));
                        }
                    },
                    None if optional => None,
                    None => return Err(ConfigError(format!("configmap {:?} not found", r.name))),
                }
            } else if let Some(r) = &from.secret_key_ref {
                let optional = r.optional.unwrap_or(false);
                match host.secret(&ns, &r.name).await.map_err(api_err)? {
                    Some(s) => match s.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => Some(secret_string(v)),
                        None if optional => None,
                        None => {
                            return Err(ConfigError(format!(
                                "couldn't find key {} in Secret {}/{}",
                                r.key, ns, r.name
                            )));
                        }
                    },
                    None if optional => None,
                    None => return Err(ConfigError(format!("secret {:?} not found", r.name))),
                }
            } else {
                None
            }
        } else {
            Some(expand(env.value.as_deref().unwrap_or_default(), &vars))
        };
        if let Some(v) = value {
            set(&mut order, &mut vars, env.name.clone(), v);
        }
    }
    Ok(order
        .into_iter()
        .map(|k| {
            let v = vars.get(&k).cloned().unwrap_or_default();
            (k, v)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn vars(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn expansion_replaces_known_references_and_keeps_unknown_ones() {
        let v = vars(&[("A", "1"), ("B", "two")]);
        assert_eq!(expand("x-$(A)-$(B)", &v), "x-1-two");
        assert_eq!(expand("$(MISSING)/$(A)", &v), "$(MISSING)/1");
        assert_eq!(expand("$$(A) costs $$5", &v), "$(A) costs $5");
        assert_eq!(expand("unterminated $(A", &v), "unterminated $(A");
        assert_eq!(expand("ünïcode $(A)", &v), "ünïcode 1");
    }

    #[test]
    fn services_become_docker_link_variables() {
        use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
        let svc = |name: &str, ip: &str| Service {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                ports: Some(vec![ServicePort { name: Some("https".into()), port: 443, ..Default::default() }]),
                ..Default::default()
            }),
            status: None,
        };
        let env: HashMap<String, String> =
            service_env(&[svc("kubernetes", "10.43.0.1"), svc("headless", "None")]).into_iter().collect();
        assert_eq!(env.get("KUBERNETES_SERVICE_HOST").map(String::as_str), Some("10.43.0.1"));
        assert_eq!(env.get("KUBERNETES_SERVICE_PORT").map(String::as_str), Some("443"));
        assert_eq!(env.get("KUBERNETES_SERVICE_PORT_HTTPS").map(String::as_str), Some("443"));
        assert_eq!(env.get("KUBERNETES_PORT").map(String::as_str), Some("tcp://10.43.0.1:443"));
        assert_eq!(env.get("KUBERNETES_PORT_443_TCP_ADDR").map(String::as_str), Some("10.43.0.1"));
        assert!(!env.keys().any(|k| k.starts_with("HEADLESS")));
    }

    #[test]
    fn field_refs_read_metadata_spec_and_node_facts() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: Some("n1".into()), ..Default::default() }),
            status: None,
        };
        let facts = NodeFacts { host_ip: "192.0.2.1".into(), pod_ip: "10.42.0.5".into(), ..Default::default() };
        assert_eq!(field_value(&pod, "metadata.name", &facts), Ok("p".into()));
        assert_eq!(field_value(&pod, "metadata.labels['app']", &facts), Ok("web".into()));
        assert_eq!(field_value(&pod, "metadata.labels", &facts), Ok("app=\"web\"".into()));
        assert_eq!(field_value(&pod, "spec.nodeName", &facts), Ok("n1".into()));
        assert_eq!(field_value(&pod, "status.podIP", &facts), Ok("10.42.0.5".into()));
        assert!(field_value(&pod, "spec.nope", &facts).is_err());
    }

    #[test]
    fn resource_field_refs_divide_and_default_to_allocatable() {
        let c = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: Some(BTreeMap::from([("memory".to_string(), Quantity("64Mi".into()))])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let facts = NodeFacts { allocatable_cpu_millis: 2000, ..Default::default() };
        let sel = |r: &str, d: Option<&str>| ResourceFieldSelector {
            resource: r.into(),
            divisor: d.map(|d| Quantity(d.into())),
            container_name: None,
        };
        assert_eq!(resource_field_value(&c, &sel("limits.memory", Some("1Mi")), &facts), Ok("64".into()));
        assert_eq!(resource_field_value(&c, &sel("limits.cpu", None), &facts), Ok("2".into()));
        assert_eq!(resource_field_value(&c, &sel("limits.cpu", Some("1m")), &facts), Ok("2000".into()));
    }
}
