//! Defaulting: the values Kubernetes 1.33 fills in when a client leaves a field unset.
//!
//! Mirrors the `SetDefaults_*` functions of `pkg/apis/*/v1/defaults.go` (applied by the API server
//! on every decode), plus the create-time values the registries and default admission plugins
//! add that users see in `kubectl get -o yaml`: a Pod's `priority`/`preemptionPolicy`
//! (Priority admission), a Namespace's `spec.finalizers` and `status.phase`. Left out on
//! purpose: `serviceAccountName` and token volumes (ServiceAccount admission, security issue),
//! the `node.kubernetes.io/not-ready`/`unreachable` tolerations (the DefaultTolerationSeconds
//! admission plugin adds them, with `--default-*-toleration-seconds`, and not when disabled),
//! cluster IP allocation (the API server), a Pod's `status` (the API server's PrepareForCreate).
//!
//! [`apply_defaults`] is idempotent: it only fills absent fields.
//!
//! Deprecated alias fields are kept in step as Kubernetes' conversion keeps them
//! (`pkg/apis/core/v1/conversion.go`, the Service registry's `normalizeClusterIPs`): on the way
//! in, an alias a client set alone fills the field it stands for (`spec.serviceAccount` →
//! `serviceAccountName`, `status.podIP` → `podIPs`, `hostIP` → `hostIPs`, a Node's `podCIDR`
//! → `podCIDRs`, a Service's `clusterIP` → `clusterIPs`); on the way out
//! ([`mirror_deprecated_aliases`]) the alias repeats the field (`serviceAccount =
//! serviceAccountName`, `podIP = podIPs[0].ip`, `hostIP = hostIPs[0].ip`, `podCIDR =
//! podCIDRs[0]`). Where a client sent both and they differ, the new field wins for
//! `serviceAccountName` and the singular one for `podIP`/`hostIP`/`podCIDR`, as there.

use serde_json::{Map, Value, json};

/// Fills Kubernetes' defaults into `obj` (a whole object) for `(apiVersion, kind)`. Unknown kinds
/// are left alone.
pub fn apply_defaults(api_version: &str, kind: &str, obj: &mut Value) {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    match (group, kind) {
        ("", "Pod") => default_pod(obj),
        ("", "PodTemplate") => {
            if let Some(t) = obj.get_mut("template") {
                default_pod_template(t);
            }
        }
        ("", "ReplicationController") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                set(spec, "replicas", json!(1));
                if let Some(t) = spec.get_mut("template") {
                    default_pod_template(t);
                }
            }
        }
        ("apps", "Deployment") => default_deployment(obj),
        ("apps", "ReplicaSet") => default_replicas_and_template(obj),
        ("apps", "StatefulSet") => default_stateful_set(obj),
        ("apps", "DaemonSet") => default_daemon_set(obj),
        ("batch", "Job") => default_job(obj),
        ("batch", "CronJob") => default_cron_job(obj),
        ("", "Service") => default_service(obj),
        ("", "Endpoints") => default_endpoints(obj),
        ("", "Secret") => default_secret(obj),
        ("", "Namespace") => default_namespace(obj),
        ("", "Node") => default_node(obj),
        ("", "PersistentVolumeClaim") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                set(spec, "volumeMode", json!("Filesystem"));
            }
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => default_binding(obj),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => default_crd(obj),
        ("", "PersistentVolume") => {
            // SetDefaults_PersistentVolume: a volume made by hand is kept after its claim goes.
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                set_str(spec, "persistentVolumeReclaimPolicy", "Retain");
                set(spec, "volumeMode", json!("Filesystem"));
            }
        }
        ("storage.k8s.io", "StorageClass") => {
            // SetDefaults_StorageClass.
            if let Some(m) = obj.as_object_mut() {
                set_str(m, "reclaimPolicy", "Delete");
                set_str(m, "volumeBindingMode", "Immediate");
            }
        }
        ("storage.k8s.io", "CSIDriver") => {
            // SetDefaults_CSIDriverSpec (storage/v1, Kubernetes 1.33).
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                set(spec, "attachRequired", json!(true));
                set(spec, "podInfoOnMount", json!(false));
                set(spec, "storageCapacity", json!(false));
                set(spec, "requiresRepublish", json!(false));
                set_str(spec, "fsGroupPolicy", "ReadWriteOnceWithFSType");
                set(spec, "volumeLifecycleModes", json!(["Persistent"]));
            }
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            if let Some(m) = obj.as_object_mut() {
                set_str(m, "preemptionPolicy", "PreemptLowerPriority");
            }
        }
        ("autoscaling", "HorizontalPodAutoscaler") => default_hpa(api_version, obj),
        _ => {}
    }
    mirror_deprecated_aliases(api_version, kind, obj);
}

/// `SetDefaults_HorizontalPodAutoscaler` of autoscaling/v2 (Kubernetes 1.33): `minReplicas` 1,
/// a CPU utilization target of 80 % when no metric is named, and, when `behavior` is set, each
/// direction's rules filled from the defaults (scale up: no stabilization, max of 4 pods or
/// 100 % per 15 s; scale down: 100 % per 15 s, its window left unset for the controller's
/// `--horizontal-pod-autoscaler-downscale-stabilization`). autoscaling/v1 defaults only
/// `minReplicas` (its implied CPU target is added by conversion).
fn default_hpa(api_version: &str, obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    set(spec, "minReplicas", json!(1));
    if api_version != "autoscaling/v2" {
        return;
    }
    if spec.get("metrics").and_then(Value::as_array).is_none_or(Vec::is_empty) {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": crate::autoscaling::DEFAULT_CPU_UTILIZATION}}}]),
        );
    }
    let Some(behavior) = spec.get_mut("behavior").and_then(Value::as_object_mut) else { return };
    let up = json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]});
    let down = json!({"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]});
    for (key, defaults) in [("scaleUp", up), ("scaleDown", down)] {
        let rules = behavior.entry(key).or_insert(json!({}));
        if !rules.is_object() {
            *rules = json!({});
        }
        let Some(rules) = rules.as_object_mut() else { continue };
        for (k, v) in defaults.as_object().into_iter().flatten() {
            set(rules, k, v.clone());
        }
    }
}

/// The pod specs of an object of `(group, kind)`: a Pod's own, or its workload template's.
fn pod_specs<'a>(group: &str, kind: &str, obj: &'a mut Value) -> Option<&'a mut Map<String, Value>> {
    let pointer = match (group, kind) {
        ("", "Pod") => "/spec",
        ("", "PodTemplate") => "/template/spec",
        ("", "ReplicationController")
        | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job") => "/spec/template/spec",
        ("batch", "CronJob") => "/spec/jobTemplate/spec/template/spec",
        _ => return None,
    };
    obj.pointer_mut(pointer).and_then(Value::as_object_mut)
}

fn non_empty_str<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// `v1` → internal for a singular field and its plural (`podIP`/`podIPs` with `{"ip": …}`
/// items when `item_key` is set, `podCIDR`/`podCIDRs` with plain strings otherwise): a
/// singular value alone becomes the list; a singular that differs from the list's first item
/// is authoritative (an older client changed it).
fn singular_into_plural(m: &mut Map<String, Value>, singular: &str, plural: &str, item_key: Option<&str>) {
    let Some(one) = non_empty_str(m, singular).map(str::to_string) else { return };
    let first = m.get(plural).and_then(Value::as_array).and_then(|a| a.first()).map(|v| match item_key {
        Some(k) => v.get(k).and_then(Value::as_str).unwrap_or_default().to_string(),
        None => v.as_str().unwrap_or_default().to_string(),
    });
    if first.as_deref() != Some(one.as_str()) {
        let item = match item_key {
            Some(k) => json!({ k: one }),
            None => json!(one),
        };
        m.insert(plural.to_string(), json!([item]));
    }
}

/// Internal → `v1`: the singular field repeats the plural's first item.
fn plural_into_singular(m: &mut Map<String, Value>, singular: &str, plural: &str, item_key: Option<&str>) {
    let first = m.get(plural).and_then(Value::as_array).and_then(|a| a.first()).and_then(|v| match item_key {
        Some(k) => v.get(k).and_then(Value::as_str),
        None => v.as_str(),
    });
    if let Some(first) = first.filter(|s| !s.is_empty()).map(str::to_string) {
        m.insert(singular.to_string(), Value::String(first));
    }
}

/// Keeps deprecated alias fields in step with the fields they stand for (see the module docs):
/// the alias a client set alone fills the field, then the alias repeats the field. Called by
/// [`apply_defaults`] and again by the API server after mutating admission (which may set
/// `serviceAccountName`), as Kubernetes converts the stored object back to `v1`.
pub fn mirror_deprecated_aliases(api_version: &str, kind: &str, obj: &mut Value) {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    if let Some(spec) = pod_specs(group, kind, obj) {
        // `serviceAccount` is the deprecated alias of `serviceAccountName`; the latter wins.
        if non_empty_str(spec, "serviceAccountName").is_none()
            && let Some(sa) = non_empty_str(spec, "serviceAccount").map(str::to_string)
        {
            spec.insert("serviceAccountName".into(), Value::String(sa));
        }
        match non_empty_str(spec, "serviceAccountName").map(str::to_string) {
            Some(name) => {
                spec.insert("serviceAccount".into(), Value::String(name));
            }
            None => {
                spec.remove("serviceAccount");
            }
        }
    }
    match (group, kind) {
        ("", "Pod") => {
            if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
                for (one, many) in [("podIP", "podIPs"), ("hostIP", "hostIPs")] {
                    singular_into_plural(status, one, many, Some("ip"));
                    plural_into_singular(status, one, many, Some("ip"));
                }
            }
        }
        ("", "Node") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                singular_into_plural(spec, "podCIDR", "podCIDRs", None);
                plural_into_singular(spec, "podCIDR", "podCIDRs", None);
            }
        }
        ("", "Service") => {
            // `normalizeClusterIPs`: an older client sets only `clusterIP`.
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
                && let Some(ip) = non_empty_str(spec, "clusterIP").map(str::to_string)
                && spec.get("clusterIPs").and_then(Value::as_array).is_none_or(Vec::is_empty)
            {
                spec.insert("clusterIPs".into(), json!([ip]));
            }
        }
        _ => {}
    }
}

/// Sets `key` to `value` when absent or `null`.
fn set(m: &mut Map<String, Value>, key: &str, value: Value) {
    match m.get(key) {
        Some(v) if !v.is_null() => {}
        _ => {
            m.insert(key.to_string(), value);
        }
    }
}

/// Sets `key` to `value` when absent, `null` or `""`.
fn set_str(m: &mut Map<String, Value>, key: &str, value: &str) {
    match m.get(key) {
        Some(Value::String(s)) if !s.is_empty() => {}
        Some(v) if !v.is_null() && !v.is_string() => {}
        _ => {
            m.insert(key.to_string(), Value::String(value.to_string()));
        }
    }
}

fn object_mut<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    if !m.get(key).is_some_and(Value::is_object) {
        m.insert(key.to_string(), Value::Object(Map::new()));
    }
    match m.get_mut(key) {
        Some(Value::Object(o)) => o,
        _ => unreachable!("inserted an object above"),
    }
}

fn each_mut<'a>(m: &'a mut Map<String, Value>, key: &str) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    m.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten().filter_map(Value::as_object_mut)
}

// ---------------------------------------------------------------------------------------------
// Pods.

/// The tag of an image reference (`parsers.ParseImageName`): `latest` when neither tag nor digest
/// is given, `""` for digest-only references.
pub fn image_tag(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag.to_string(),
        None if digest => String::new(),
        None => "latest".to_string(),
    }
}

fn default_pod(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    // SetDefaults_Pod: requests default to limits.
    for list in ["containers", "initContainers"] {
        for c in each_mut(spec, list) {
            let Some(limits) = c.get("resources").and_then(|r| r.get("limits")).and_then(Value::as_object).cloned()
            else {
                continue;
            };
            let requests = object_mut(object_mut(c, "resources"), "requests");
            for (k, v) in limits {
                requests.entry(k).or_insert(v);
            }
        }
    }
    set(spec, "enableServiceLinks", json!(true));
    // Priority admission.
    set(spec, "priority", json!(0));
    set_str(spec, "preemptionPolicy", "PreemptLowerPriority");
    default_pod_spec(spec);
}

/// `PodTemplateSpec` defaults: the pod spec's.
fn default_pod_template(template: &mut Value) {
    if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
        default_pod_spec(spec);
    }
}

/// `SetDefaults_PodSpec` and the defaults of everything inside a pod spec.
fn default_pod_spec(spec: &mut Map<String, Value>) {
    set_str(spec, "dnsPolicy", "ClusterFirst");
    set_str(spec, "restartPolicy", "Always");
    set(spec, "securityContext", json!({}));
    set(spec, "terminationGracePeriodSeconds", json!(30));
    set_str(spec, "schedulerName", "default-scheduler");
    let host_network = spec.get("hostNetwork") == Some(&Value::Bool(true));
    for list in ["containers", "initContainers"] {
        for c in each_mut(spec, list) {
            default_container(c, host_network);
        }
    }
    for c in each_mut(spec, "ephemeralContainers") {
        default_container(c, false);
    }
    for v in each_mut(spec, "volumes") {
        default_volume(v);
    }
}

fn default_container(c: &mut Map<String, Value>, host_network: bool) {
    let tag = image_tag(c.get("image").and_then(Value::as_str).unwrap_or(""));
    set_str(c, "imagePullPolicy", if tag == "latest" { "Always" } else { "IfNotPresent" });
    set_str(c, "terminationMessagePath", "/dev/termination-log");
    set_str(c, "terminationMessagePolicy", "File");
    for p in each_mut(c, "ports") {
        set_str(p, "protocol", "TCP");
        if host_network && let Some(cp) = p.get("containerPort").cloned() {
            set(p, "hostPort", cp);
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            set(p, "timeoutSeconds", json!(1));
            set(p, "periodSeconds", json!(10));
            set(p, "successThreshold", json!(1));
            set(p, "failureThreshold", json!(3));
            default_handler(p);
        }
    }
    if let Some(lc) = c.get_mut("lifecycle").and_then(Value::as_object_mut) {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = lc.get_mut(hook).and_then(Value::as_object_mut) {
                default_handler(h);
            }
        }
    }
    for env in each_mut(c, "env") {
        if let Some(fr) = env.get_mut("valueFrom").and_then(|v| v.get_mut("fieldRef")).and_then(Value::as_object_mut) {
            set_str(fr, "apiVersion", "v1");
        }
    }
}

/// `SetDefaults_HTTPGetAction` inside probes and lifecycle handlers.
fn default_handler(h: &mut Map<String, Value>) {
    if let Some(g) = h.get_mut("httpGet").and_then(Value::as_object_mut) {
        set_str(g, "path", "/");
        set_str(g, "scheme", "HTTP");
    }
}

const DEFAULT_MODE: i64 = 0o644;

fn default_volume(v: &mut Map<String, Value>) {
    let has_source = v.iter().any(|(k, val)| k != "name" && !val.is_null());
    if !has_source {
        v.insert("emptyDir".into(), json!({}));
    }
    for src in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = v.get_mut(src).and_then(Value::as_object_mut) {
            set(s, "defaultMode", json!(DEFAULT_MODE));
            if src == "projected" {
                for source in each_mut(s, "sources") {
                    if let Some(t) = source.get_mut("serviceAccountToken").and_then(Value::as_object_mut) {
                        set(t, "expirationSeconds", json!(3600));
                    }
                }
            }
        }
    }
    if let Some(h) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
        set(h, "type", json!(""));
    }
}

// ---------------------------------------------------------------------------------------------
// Workloads.

fn default_replicas_and_template(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    set(spec, "replicas", json!(1));
    if let Some(t) = spec.get_mut("template") {
        default_pod_template(t);
    }
}

fn default_deployment(obj: &mut Value) {
    default_replicas_and_template(obj);
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let strategy = object_mut(spec, "strategy");
    set_str(strategy, "type", "RollingUpdate");
    if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        let ru = object_mut(strategy, "rollingUpdate");
        set(ru, "maxUnavailable", json!("25%"));
        set(ru, "maxSurge", json!("25%"));
    }
    set(spec, "revisionHistoryLimit", json!(10));
    set(spec, "progressDeadlineSeconds", json!(600));
}

fn default_stateful_set(obj: &mut Value) {
    default_replicas_and_template(obj);
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    set_str(spec, "podManagementPolicy", "OrderedReady");
    let us = object_mut(spec, "updateStrategy");
    set_str(us, "type", "RollingUpdate");
    if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        set(object_mut(us, "rollingUpdate"), "partition", json!(0));
    }
    set(spec, "revisionHistoryLimit", json!(10));
    let retention = object_mut(spec, "persistentVolumeClaimRetentionPolicy");
    set_str(retention, "whenDeleted", "Retain");
    set_str(retention, "whenScaled", "Retain");
    for pvc in each_mut(spec, "volumeClaimTemplates") {
        if let Some(s) = pvc.get_mut("spec").and_then(Value::as_object_mut) {
            set_str(s, "volumeMode", "Filesystem");
        }
    }
}

fn default_daemon_set(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    if let Some(t) = spec.get_mut("template") {
        default_pod_template(t);
    }
    let us = object_mut(spec, "updateStrategy");
    set_str(us, "type", "RollingUpdate");
    if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
        let ru = object_mut(us, "rollingUpdate");
        set(ru, "maxUnavailable", json!(1));
        set(ru, "maxSurge", json!(0));
    }
    set(spec, "revisionHistoryLimit", json!(10));
}

fn default_job_spec(spec: &mut Map<String, Value>) {
    let completions = spec.get("completions").filter(|v| !v.is_null()).cloned();
    let parallelism = spec.get("parallelism").filter(|v| !v.is_null()).cloned();
    match (completions, parallelism) {
        (None, None) => {
            spec.insert("completions".into(), json!(1));
            spec.insert("parallelism".into(), json!(1));
        }
        (None, Some(_)) => {}
        (Some(_), None) => {
            spec.insert("parallelism".into(), json!(1));
        }
        _ => {}
    }
    // With a per-index limit the global one stops mattering unless set (`SetDefaults_Job`).
    let per_index = spec.get("backoffLimitPerIndex").is_some_and(|v| !v.is_null());
    set(spec, "backoffLimit", json!(if per_index { i32::MAX } else { 6 }));
    set_str(spec, "completionMode", "NonIndexed");
    set(spec, "suspend", json!(false));
    match spec.get_mut("podFailurePolicy").filter(|v| !v.is_null()) {
        None => set_str(spec, "podReplacementPolicy", "TerminatingOrFailed"),
        Some(pfp) => {
            for rule in pfp.get_mut("rules").and_then(Value::as_array_mut).into_iter().flatten() {
                for pattern in rule.get_mut("onPodConditions").and_then(Value::as_array_mut).into_iter().flatten() {
                    if let Some(p) = pattern.as_object_mut() {
                        set_str(p, "status", "True");
                    }
                }
            }
            set_str(spec, "podReplacementPolicy", "Failed");
        }
    }
    if let Some(t) = spec.get_mut("template") {
        default_pod_template(t);
    }
}

fn default_job(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        default_job_spec(spec);
    }
}

fn default_cron_job(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    set_str(spec, "concurrencyPolicy", "Allow");
    set(spec, "suspend", json!(false));
    set(spec, "successfulJobsHistoryLimit", json!(3));
    set(spec, "failedJobsHistoryLimit", json!(1));
    if let Some(js) = spec.get_mut("jobTemplate").and_then(|t| t.get_mut("spec")).and_then(Value::as_object_mut) {
        default_job_spec(js);
    }
}

// ---------------------------------------------------------------------------------------------
// Services and endpoints.

fn default_service(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    set_str(spec, "sessionAffinity", "None");
    match spec.get("sessionAffinity").and_then(Value::as_str) {
        Some("None") => {
            spec.remove("sessionAffinityConfig");
        }
        Some("ClientIP") => {
            let has_timeout = spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.pointer("/clientIP/timeoutSeconds"))
                .is_some_and(|v| !v.is_null());
            if !has_timeout {
                spec.insert("sessionAffinityConfig".into(), json!({"clientIP": {"timeoutSeconds": 10800}}));
            }
        }
        _ => {}
    }
    set_str(spec, "type", "ClusterIP");
    let ty = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP").to_string();
    for p in each_mut(spec, "ports") {
        set_str(p, "protocol", "TCP");
        let unset = match p.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            Some(Value::String(s)) => s.is_empty(),
            _ => false,
        };
        if unset && let Some(port) = p.get("port").cloned() {
            p.insert("targetPort".into(), port);
        }
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        set_str(spec, "externalTrafficPolicy", "Cluster");
    }
    if ty == "NodePort" || ty == "LoadBalancer" || ty == "ClusterIP" {
        set_str(spec, "internalTrafficPolicy", "Cluster");
    }
    if ty == "LoadBalancer" {
        set(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if ty != "ExternalName" {
        let headless_without_selector = spec.get("clusterIP").and_then(Value::as_str) == Some("None")
            && spec.get("selector").and_then(Value::as_object).is_none_or(Map::is_empty);
        set_str(spec, "ipFamilyPolicy", if headless_without_selector { "RequireDualStack" } else { "SingleStack" });
        set(spec, "ipFamilies", json!(["IPv4"]));
    }
}

fn default_endpoints(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    for subset in each_mut(o, "subsets") {
        for p in each_mut(subset, "ports") {
            set_str(p, "protocol", "TCP");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Secrets.

/// Standard base64 with padding (what `data` values of a Secret hold).
pub fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `type: Opaque`, and `stringData` folded into `data` (base64), as Kubernetes' conversion does:
/// `stringData` is write-only and wins over `data` for the same key.
fn default_secret(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    set_str(o, "type", "Opaque");
    if let Some(Value::Object(string_data)) = o.remove("stringData") {
        let data = object_mut(o, "data");
        for (k, v) in string_data {
            let text = v.as_str().unwrap_or_default();
            data.insert(k, Value::String(base64_encode(text.as_bytes())));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Namespace, Node, RBAC, CRD.

/// `kubernetes.io/metadata.name` label, `status.phase: Active`, and `spec.finalizers:
/// [kubernetes]` when `spec.finalizers` is absent (create-time: a list emptied by the namespace
/// controller through `/finalize` stays empty).
fn default_namespace(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    let name = o.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("").to_string();
    if !name.is_empty() {
        let labels = object_mut(object_mut(o, "metadata"), "labels");
        labels.insert("kubernetes.io/metadata.name".into(), Value::String(name));
    }
    let spec = object_mut(o, "spec");
    if !spec.contains_key("finalizers") {
        spec.insert("finalizers".into(), json!(["kubernetes"]));
    }
    set_str(object_mut(o, "status"), "phase", "Active");
}

fn default_node(obj: &mut Value) {
    let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) else { return };
    if status.get("allocatable").is_none_or(Value::is_null)
        && let Some(cap) = status.get("capacity").filter(|c| !c.is_null()).cloned()
    {
        status.insert("allocatable".into(), cap);
    }
}

fn default_binding(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    if let Some(r) = o.get_mut("roleRef").and_then(Value::as_object_mut) {
        set_str(r, "apiGroup", "rbac.authorization.k8s.io");
    }
    for s in each_mut(o, "subjects") {
        let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind == "User" || kind == "Group" {
            set_str(s, "apiGroup", "rbac.authorization.k8s.io");
        }
    }
}

fn default_crd(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        if !kind.is_empty() {
            set_str(names, "singular", &kind.to_lowercase());
            set_str(names, "listKind", &format!("{kind}List"));
        }
    }
    set(spec, "conversion", json!({"strategy": "None"}));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Defaults `obj` and checks each `(JSON pointer, value)` pair.
    fn check(api_version: &str, kind: &str, mut obj: Value, want: &[(&str, Value)]) -> Value {
        apply_defaults(api_version, kind, &mut obj);
        for (pointer, value) in want {
            assert_eq!(obj.pointer(pointer), Some(value), "{pointer} in {obj}");
        }
        // Idempotent.
        let again = {
            let mut o = obj.clone();
            apply_defaults(api_version, kind, &mut o);
            o
        };
        assert_eq!(again, obj);
        obj
    }

    #[test]
    fn storage_classes_csi_drivers_and_persistent_volumes_get_kubernetes_defaults() {
        check(
            "storage.k8s.io/v1",
            "StorageClass",
            json!({"metadata": {"name": "fast"}, "provisioner": "example.com/disk"}),
            &[("/reclaimPolicy", json!("Delete")), ("/volumeBindingMode", json!("Immediate"))],
        );
        check(
            "storage.k8s.io/v1",
            "CSIDriver",
            json!({"metadata": {"name": "disk.example.com"}, "spec": {"attachRequired": false}}),
            &[
                ("/spec/attachRequired", json!(false)),
                ("/spec/podInfoOnMount", json!(false)),
                ("/spec/fsGroupPolicy", json!("ReadWriteOnceWithFSType")),
                ("/spec/volumeLifecycleModes", json!(["Persistent"])),
            ],
        );
        check(
            "v1",
            "PersistentVolume",
            json!({"metadata": {"name": "v"}, "spec": {"capacity": {"storage": "1Gi"}}}),
            &[("/spec/persistentVolumeReclaimPolicy", json!("Retain")), ("/spec/volumeMode", json!("Filesystem"))],
        );
    }

    #[test]
    fn pods_get_kubernetes_defaults() {
        let obj = check(
            "v1",
            "Pod",
            json!({"spec": {"containers": [
                {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
                 "livenessProbe": {"httpGet": {"port": 80}}, "resources": {"limits": {"cpu": "1"}}},
                {"name": "b", "image": "nginx:1.25"},
                {"name": "c", "image": "registry:5000/app"},
                {"name": "d", "image": "nginx@sha256:abc"}
            ], "volumes": [{"name": "v"}, {"name": "s", "secret": {"secretName": "x"}}]}}),
            &[
                ("/spec/restartPolicy", json!("Always")),
                ("/spec/terminationGracePeriodSeconds", json!(30)),
                ("/spec/dnsPolicy", json!("ClusterFirst")),
                ("/spec/schedulerName", json!("default-scheduler")),
                ("/spec/securityContext", json!({})),
                ("/spec/enableServiceLinks", json!(true)),
                ("/spec/preemptionPolicy", json!("PreemptLowerPriority")),
                ("/spec/priority", json!(0)),
                ("/spec/containers/0/imagePullPolicy", json!("Always")),
                ("/spec/containers/1/imagePullPolicy", json!("IfNotPresent")),
                ("/spec/containers/2/imagePullPolicy", json!("Always")),
                ("/spec/containers/3/imagePullPolicy", json!("IfNotPresent")),
                ("/spec/containers/0/terminationMessagePath", json!("/dev/termination-log")),
                ("/spec/containers/0/terminationMessagePolicy", json!("File")),
                ("/spec/containers/0/ports/0/protocol", json!("TCP")),
                ("/spec/containers/0/resources/requests/cpu", json!("1")),
                ("/spec/containers/0/livenessProbe/timeoutSeconds", json!(1)),
                ("/spec/containers/0/livenessProbe/periodSeconds", json!(10)),
                ("/spec/containers/0/livenessProbe/successThreshold", json!(1)),
                ("/spec/containers/0/livenessProbe/failureThreshold", json!(3)),
                ("/spec/containers/0/livenessProbe/httpGet/scheme", json!("HTTP")),
                ("/spec/containers/0/livenessProbe/httpGet/path", json!("/")),
                ("/spec/volumes/0/emptyDir", json!({})),
                ("/spec/volumes/1/secret/defaultMode", json!(420)),
            ],
        );
        // The default tolerations are DefaultTolerationSeconds admission's, not defaulting's.
        assert!(obj.pointer("/spec/tolerations").is_none(), "{obj}");
    }

    #[test]
    fn the_deprecated_service_account_alias_fills_service_account_name_and_mirrors_it() {
        // Only the alias: it becomes the name, and stays as the alias.
        let pod = check(
            "v1",
            "Pod",
            json!({"spec": {"serviceAccount": "sa1", "containers": [{"name": "c", "image": "x"}]}}),
            &[("/spec/serviceAccountName", json!("sa1")), ("/spec/serviceAccount", json!("sa1"))],
        );
        let _ = pod;
        // Only the name: the alias repeats it.
        check(
            "v1",
            "Pod",
            json!({"spec": {"serviceAccountName": "sa2", "containers": []}}),
            &[("/spec/serviceAccount", json!("sa2"))],
        );
        // Both, differing: the name wins.
        check(
            "v1",
            "Pod",
            json!({"spec": {"serviceAccountName": "new", "serviceAccount": "old", "containers": []}}),
            &[("/spec/serviceAccountName", json!("new")), ("/spec/serviceAccount", json!("new"))],
        );
        // Every pod template too.
        for (api_version, kind, obj, pointer) in [
            (
                "apps/v1",
                "Deployment",
                json!({"spec": {"template": {"spec": {"serviceAccount": "sa"}}}}),
                "/spec/template/spec",
            ),
            (
                "batch/v1",
                "CronJob",
                json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"serviceAccount": "sa"}}}}}}),
                "/spec/jobTemplate/spec/template/spec",
            ),
            ("v1", "PodTemplate", json!({"template": {"spec": {"serviceAccount": "sa"}}}), "/template/spec"),
        ] {
            check(api_version, kind, obj, &[(&format!("{pointer}/serviceAccountName"), json!("sa"))]);
        }
        // Neither: no alias appears.
        let mut none = json!({"spec": {"containers": []}});
        apply_defaults("v1", "Pod", &mut none);
        assert!(none["spec"].get("serviceAccount").is_none());
    }

    #[test]
    fn pod_ips_host_ips_pod_cidrs_and_cluster_ips_follow_their_singular_aliases() {
        // A client that sets only the singular field (older kubelets).
        let mut pod = json!({"spec": {}, "status": {"podIP": "10.0.0.5", "hostIP": "192.168.1.2"}});
        apply_defaults("v1", "Pod", &mut pod);
        assert_eq!(pod["status"]["podIPs"], json!([{"ip": "10.0.0.5"}]));
        assert_eq!(pod["status"]["hostIPs"], json!([{"ip": "192.168.1.2"}]));
        // Only the plural: the singular repeats its first item.
        let mut pod = json!({"spec": {}, "status": {"podIPs": [{"ip": "10.0.0.6"}, {"ip": "fd00::6"}]}});
        apply_defaults("v1", "Pod", &mut pod);
        assert_eq!(pod["status"]["podIP"], "10.0.0.6");
        assert_eq!(pod["status"]["podIPs"][1]["ip"], "fd00::6");
        // Both, differing: the singular is authoritative.
        let mut pod = json!({"spec": {}, "status": {"podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.6"}]}});
        apply_defaults("v1", "Pod", &mut pod);
        assert_eq!(pod["status"]["podIPs"], json!([{"ip": "10.0.0.7"}]));

        let mut node = json!({"spec": {"podCIDR": "10.42.0.0/24"}});
        apply_defaults("v1", "Node", &mut node);
        assert_eq!(node["spec"]["podCIDRs"], json!(["10.42.0.0/24"]));
        let mut node = json!({"spec": {"podCIDRs": ["10.42.1.0/24"]}});
        apply_defaults("v1", "Node", &mut node);
        assert_eq!(node["spec"]["podCIDR"], "10.42.1.0/24");

        check(
            "v1",
            "Service",
            json!({"spec": {"clusterIP": "None", "ports": [{"port": 80}]}}),
            &[("/spec/clusterIPs", json!(["None"]))],
        );
        let mut svc = json!({"spec": {"ports": [{"port": 80}]}});
        apply_defaults("v1", "Service", &mut svc);
        assert!(svc["spec"].get("clusterIPs").is_none());
    }

    #[test]
    fn explicit_values_are_kept() {
        check(
            "v1",
            "Pod",
            json!({"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "containers": [{"name": "a", "image": "x:latest", "imagePullPolicy": "Never"}]}}),
            &[
                ("/spec/restartPolicy", json!("Never")),
                ("/spec/terminationGracePeriodSeconds", json!(5)),
                ("/spec/containers/0/imagePullPolicy", json!("Never")),
            ],
        );
    }

    #[test]
    fn deployments_default_strategy_limits_and_their_pod_template() {
        let obj = check(
            "apps/v1",
            "Deployment",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "nginx"}]}}}}),
            &[
                ("/spec/replicas", json!(1)),
                (
                    "/spec/strategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
                ),
                ("/spec/revisionHistoryLimit", json!(10)),
                ("/spec/progressDeadlineSeconds", json!(600)),
                ("/spec/template/spec/restartPolicy", json!("Always")),
                ("/spec/template/spec/containers/0/imagePullPolicy", json!("Always")),
            ],
        );
        // Pod-only defaults do not go into templates.
        assert_eq!(obj.pointer("/spec/template/spec/enableServiceLinks"), None);
        assert_eq!(obj.pointer("/spec/template/spec/tolerations"), None);
        check(
            "apps/v1",
            "Deployment",
            json!({"spec": {"strategy": {"type": "Recreate"}}}),
            &[("/spec/strategy", json!({"type": "Recreate"}))],
        );
    }

    #[test]
    fn services_default_type_ports_and_policies() {
        check(
            "v1",
            "Service",
            json!({"spec": {"selector": {"app": "web"}, "ports": [{"port": 80}, {"port": 443, "targetPort": "https"}]}}),
            &[
                ("/spec/type", json!("ClusterIP")),
                ("/spec/sessionAffinity", json!("None")),
                ("/spec/ports/0/protocol", json!("TCP")),
                ("/spec/ports/0/targetPort", json!(80)),
                ("/spec/ports/1/targetPort", json!("https")),
                ("/spec/ipFamilyPolicy", json!("SingleStack")),
                ("/spec/ipFamilies", json!(["IPv4"])),
                ("/spec/internalTrafficPolicy", json!("Cluster")),
            ],
        );
        check(
            "v1",
            "Service",
            json!({"spec": {"type": "NodePort", "sessionAffinity": "ClientIP", "ports": [{"port": 80}]}}),
            &[
                ("/spec/externalTrafficPolicy", json!("Cluster")),
                ("/spec/sessionAffinityConfig/clientIP/timeoutSeconds", json!(10800)),
            ],
        );
    }

    #[test]
    fn secrets_namespaces_and_bindings_get_defaults() {
        check("v1", "Secret", json!({}), &[("/type", json!("Opaque"))]);
        let secret = check(
            "v1",
            "Secret",
            json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "hello", "c": "hi!"}}),
            &[("/data/a", json!("eA==")), ("/data/b", json!("aGVsbG8=")), ("/data/c", json!("aGkh"))],
        );
        assert_eq!(secret.get("stringData"), None);
        check(
            "v1",
            "Namespace",
            json!({"metadata": {"name": "team"}}),
            &[
                ("/spec/finalizers", json!(["kubernetes"])),
                ("/status/phase", json!("Active")),
                ("/metadata/labels/kubernetes.io~1metadata.name", json!("team")),
            ],
        );
        check(
            "v1",
            "Namespace",
            json!({"metadata": {"name": "t"}, "spec": {"finalizers": []}}),
            &[("/spec/finalizers", json!([]))],
        );
        check(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            json!({"roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "s"}]}),
            &[
                ("/roleRef/apiGroup", json!("rbac.authorization.k8s.io")),
                ("/subjects/0/apiGroup", json!("rbac.authorization.k8s.io")),
            ],
        );
    }

    #[test]
    fn other_workloads_get_their_defaults() {
        check("apps/v1", "ReplicaSet", json!({"spec": {}}), &[("/spec/replicas", json!(1))]);
        check(
            "apps/v1",
            "StatefulSet",
            json!({"spec": {}}),
            &[
                ("/spec/podManagementPolicy", json!("OrderedReady")),
                ("/spec/updateStrategy/rollingUpdate/partition", json!(0)),
            ],
        );
        check(
            "apps/v1",
            "DaemonSet",
            json!({"spec": {}}),
            &[("/spec/updateStrategy/rollingUpdate/maxUnavailable", json!(1))],
        );
        check(
            "batch/v1",
            "Job",
            json!({"spec": {}}),
            &[("/spec/completions", json!(1)), ("/spec/parallelism", json!(1)), ("/spec/backoffLimit", json!(6))],
        );
        check(
            "batch/v1",
            "CronJob",
            json!({"spec": {"jobTemplate": {"spec": {}}}}),
            &[("/spec/successfulJobsHistoryLimit", json!(3)), ("/spec/jobTemplate/spec/backoffLimit", json!(6))],
        );
    }

    #[test]
    fn image_tags_parse_like_kubernetes() {
        let cases = [
            ("nginx", "latest"),
            ("nginx:1.25", "1.25"),
            ("localhost:5000/app", "latest"),
            ("localhost:5000/app:v2", "v2"),
            ("app@sha256:0123", ""),
            ("app:v1@sha256:0123", "v1"),
        ];
        for (image, tag) in cases {
            assert_eq!(image_tag(image), tag, "{image}");
        }
    }
}
