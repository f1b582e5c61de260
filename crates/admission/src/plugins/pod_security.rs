//! PodSecurity admission (<https://kubernetes.io/docs/concepts/security/pod-security-admission/>)
//! enforcing the Pod Security Standards (<https://kubernetes.io/docs/concepts/security/pod-security-standards/>).
//!
//! A namespace's labels `pod-security.kubernetes.io/{enforce,audit,warn}` pick a level
//! (`privileged`, `baseline`, `restricted`) and `…-version` labels a version (`latest` or
//! `v1.N`; skiff evaluates every version with the current checks). `enforce` rejects pods
//! (`pods "x" is forbidden: violates PodSecurity "restricted:latest": …`), `warn` returns
//! `would violate PodSecurity …` warnings for pods and for workload pod templates, `audit` adds
//! an audit annotation. An invalid level label enforces `restricted`.
//!
//! Checks run in Kubernetes' order (baseline checks, then the restricted ones, each group in
//! check-name order) and use its wording: `reason (detail), reason (detail)`.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use skiff_apimachinery::ApiError;

use crate::{AdmissionLookup, AdmissionRequest, Feedback, Operation, ValidatingAdmission, labels};

/// Label prefix of the namespace policy.
pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Unrestricted.
    Privileged,
    /// Prevents known privilege escalations.
    Baseline,
    /// Hardening best practices.
    Restricted,
}

impl Level {
    /// Parses `privileged`, `baseline`, `restricted`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "privileged" => Self::Privileged,
            "baseline" => Self::Baseline,
            "restricted" => Self::Restricted,
            _ => return None,
        })
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Privileged => "privileged",
            Self::Baseline => "baseline",
            Self::Restricted => "restricted",
        }
    }
}

/// A level and a version (`latest` or `v1.N`), printed `restricted:latest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelVersion {
    /// Level.
    pub level: Level,
    /// Version.
    pub version: String,
}

impl LevelVersion {
    /// `privileged:latest`.
    pub fn privileged() -> Self {
        Self { level: Level::Privileged, version: "latest".into() }
    }
}

impl std::fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// The three modes of a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespacePolicy {
    /// Rejects violating pods.
    pub enforce: LevelVersion,
    /// Annotates audit events.
    pub audit: LevelVersion,
    /// Returns warnings.
    pub warn: LevelVersion,
}

impl Default for NamespacePolicy {
    fn default() -> Self {
        Self {
            enforce: LevelVersion::privileged(),
            audit: LevelVersion::privileged(),
            warn: LevelVersion::privileged(),
        }
    }
}

/// Admission configuration (`PodSecurityConfiguration`): defaults for unlabelled namespaces and
/// exemptions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodSecurityConfig {
    /// Policy of namespaces without labels.
    pub defaults: NamespacePolicy,
    /// Users whose requests are not checked.
    pub exempt_usernames: Vec<String>,
    /// Namespaces not checked.
    pub exempt_namespaces: Vec<String>,
    /// Runtime classes not checked.
    pub exempt_runtime_classes: Vec<String>,
}

fn version_ok(v: &str) -> bool {
    v == "latest"
        || v.strip_prefix("v1.").is_some_and(|minor| !minor.is_empty() && minor.chars().all(|c| c.is_ascii_digit()))
}

/// The policy a namespace's labels select (invalid values enforce `restricted:latest`).
pub fn policy_from_labels(
    labels: &std::collections::BTreeMap<String, String>,
    defaults: &NamespacePolicy,
) -> NamespacePolicy {
    let mode = |name: &str, default: &LevelVersion| -> LevelVersion {
        let level = match labels.get(&format!("{LABEL_PREFIX}{name}")) {
            None => return default.clone(),
            Some(l) => Level::parse(l),
        };
        let version = labels.get(&format!("{LABEL_PREFIX}{name}-version")).cloned().unwrap_or_else(|| "latest".into());
        match level {
            Some(level) if version_ok(&version) => LevelVersion { level, version },
            Some(level) => LevelVersion { level, version: "latest".into() },
            None => LevelVersion { level: Level::Restricted, version: "latest".into() },
        }
    };
    NamespacePolicy {
        enforce: mode("enforce", &defaults.enforce),
        audit: mode("audit", &defaults.audit),
        warn: mode("warn", &defaults.warn),
    }
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Short reason, e.g. `privileged`.
    pub reason: String,
    /// Detail, e.g. `container "x" must not set securityContext.privileged=true`.
    pub detail: String,
}

fn join_quote(items: &[String]) -> String {
    if items.is_empty() { String::new() } else { format!("\"{}\"", items.join("\", \"")) }
}

fn plural<'a>(one: &'a str, many: &'a str, n: usize) -> &'a str {
    if n == 1 { one } else { many }
}

fn containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|l| spec[*l].as_array().into_iter().flatten())
        .collect()
}

fn cname(c: &Value) -> String {
    c["name"].as_str().unwrap_or_default().to_string()
}

fn v(reason: &str, detail: String) -> Option<Violation> {
    Some(Violation { reason: reason.into(), detail })
}

fn containers_phrase(names: &[String]) -> String {
    format!("{} {}", plural("container", "containers", names.len()), join_quote(names))
}

fn app_armor(meta: &Value, spec: &Value) -> Option<Violation> {
    let mut bad: Vec<String> = Vec::new();
    if let Some(annotations) = meta["annotations"].as_object() {
        for (k, val) in annotations {
            let val = val.as_str().unwrap_or_default();
            if k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && !(val.is_empty() || val == "runtime/default" || val.starts_with("localhost/"))
            {
                bad.push(format!("{k}={val:?}"));
            }
        }
    }
    if !bad.is_empty() {
        bad.sort();
        return v(plural("forbidden AppArmor profile", "forbidden AppArmor profiles", bad.len()), bad.join(", "));
    }
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let ty = |sc: &Value| sc["appArmorProfile"]["type"].as_str().map(str::to_string);
    if let Some(t) = ty(&spec["securityContext"]).filter(|t| t == "Unconfined") {
        setters.push("pod".to_string());
        values.insert(t);
    }
    let names: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| ty(&c["securityContext"]).is_some_and(|t| t == "Unconfined"))
        .map(cname)
        .collect();
    if !names.is_empty() {
        setters.push(containers_phrase(&names));
        values.insert("Unconfined".into());
    }
    if setters.is_empty() {
        return None;
    }
    let values: Vec<String> = values.into_iter().collect();
    v(
        "forbidden AppArmor profile",
        format!(
            "{} must not set securityContext.appArmorProfile.type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

fn host_namespaces(spec: &Value) -> Option<Violation> {
    let set: Vec<String> = ["hostIPC", "hostNetwork", "hostPID"]
        .iter()
        .filter(|k| spec[**k].as_bool() == Some(true))
        .map(|k| k.to_string())
        .collect();
    if set.is_empty() { None } else { v("host namespaces", set.join(", ")) }
}

fn host_ports(spec: &Value) -> Option<Violation> {
    let mut names = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut bad = false;
        for p in c["ports"].as_array().into_iter().flatten() {
            if let Some(hp) = p["hostPort"].as_i64().filter(|h| *h != 0) {
                ports.insert(hp.to_string());
                bad = true;
            }
        }
        if bad {
            names.push(cname(c));
        }
    }
    if names.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    v(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&names),
            plural("uses", "use", names.len()),
            plural("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn privileged(spec: &Value) -> Option<Violation> {
    let names: Vec<String> =
        containers(spec).into_iter().filter(|c| c["securityContext"]["privileged"] == true).map(cname).collect();
    if names.is_empty() {
        return None;
    }
    v("privileged", format!("{} must not set securityContext.privileged=true", containers_phrase(&names)))
}

fn proc_mount(spec: &Value) -> Option<Violation> {
    let mut names = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(spec) {
        if let Some(t) = c["securityContext"]["procMount"].as_str().filter(|t| *t != "Default") {
            names.push(cname(c));
            types.insert(t.to_string());
        }
    }
    if names.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    v(
        "procMount",
        format!("{} must not set securityContext.procMount to {}", containers_phrase(&names), join_quote(&types)),
    )
}

fn se_linux(spec: &Value) -> Option<Violation> {
    const ALLOWED: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];
    let mut setters = Vec::new();
    let mut bad_types = BTreeSet::new();
    let (mut user, mut role) = (false, false);
    let mut valid = |o: &Value| -> bool {
        if o.is_null() {
            return true;
        }
        let mut ok = true;
        let t = o["type"].as_str().unwrap_or_default();
        if !ALLOWED.contains(&t) {
            bad_types.insert(t.to_string());
            ok = false;
        }
        if !o["user"].as_str().unwrap_or_default().is_empty() {
            user = true;
            ok = false;
        }
        if !o["role"].as_str().unwrap_or_default().is_empty() {
            role = true;
            ok = false;
        }
        ok
    };
    if !valid(&spec["securityContext"]["seLinuxOptions"]) {
        setters.push("pod".to_string());
    }
    let names: Vec<String> =
        containers(spec).into_iter().filter(|c| !valid(&c["securityContext"]["seLinuxOptions"])).map(cname).collect();
    if !names.is_empty() {
        setters.push(containers_phrase(&names));
    }
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let t: Vec<String> = bad_types.into_iter().collect();
        data.push(format!("{} {}", plural("type", "types", t.len()), join_quote(&t)));
    }
    if user {
        data.push("user may not be set".into());
    }
    if role {
        data.push("role may not be set".into());
    }
    v(
        "seLinuxOptions",
        format!("{} set forbidden securityContext.seLinuxOptions: {}", setters.join(" and "), data.join("; ")),
    )
}

fn sysctls(spec: &Value) -> Option<Violation> {
    const SAFE: &[&str] = &[
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    ];
    let bad: Vec<String> = spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|n| !SAFE.contains(n))
        .map(str::to_string)
        .collect();
    if bad.is_empty() { None } else { v("forbidden sysctls", bad.join(", ")) }
}

fn windows_host_process(spec: &Value) -> Option<Violation> {
    let pod = spec["securityContext"]["windowsOptions"]["hostProcess"] == true;
    let names: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| c["securityContext"]["windowsOptions"]["hostProcess"] == true)
        .map(cname)
        .collect();
    if !pod && names.is_empty() {
        return None;
    }
    let mut setters = Vec::new();
    if pod {
        setters.push("pod".to_string());
    }
    if !names.is_empty() {
        setters.push(containers_phrase(&names));
    }
    v("hostProcess", format!("{} must not set securityContext.windowsOptions.hostProcess=true", setters.join(" and ")))
}

fn capabilities_baseline(spec: &Value) -> Option<Violation> {
    const DEFAULT: &[&str] = &[
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ];
    let mut names = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let mut bad = false;
        for cap in
            c["securityContext"]["capabilities"]["add"].as_array().into_iter().flatten().filter_map(Value::as_str)
        {
            if !DEFAULT.contains(&cap) {
                caps.insert(cap.to_string());
                bad = true;
            }
        }
        if bad {
            names.push(cname(c));
        }
    }
    if names.is_empty() {
        return None;
    }
    let caps: Vec<String> = caps.into_iter().collect();
    v(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&names),
            join_quote(&caps)
        ),
    )
}

fn host_path_volumes(spec: &Value) -> Option<Violation> {
    let names: Vec<String> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|vol| !vol["hostPath"].is_null())
        .map(|vol| vol["name"].as_str().unwrap_or_default().to_string())
        .collect();
    if names.is_empty() {
        return None;
    }
    v("hostPath volumes", format!("{} {}", plural("volume", "volumes", names.len()), join_quote(&names)))
}

fn valid_seccomp(t: &str) -> bool {
    t == "RuntimeDefault" || t == "Localhost"
}

fn seccomp(spec: &Value, restricted: bool) -> Option<Violation> {
    let ty = |sc: &Value| sc["seccompProfile"]["type"].as_str().map(str::to_string);
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_ok = false;
    if let Some(t) = ty(&spec["securityContext"]) {
        if valid_seccomp(&t) {
            pod_ok = true;
        } else {
            setters.push("pod".to_string());
            values.insert(t);
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match ty(&c["securityContext"]) {
            Some(t) if !valid_seccomp(&t) => {
                explicit.push(cname(c));
                values.insert(t);
            }
            Some(_) => {}
            None if !pod_ok => implicit.push(cname(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        let values: Vec<String> = values.into_iter().collect();
        return v(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if restricted && !implicit.is_empty() {
        return v(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}

fn allow_privilege_escalation(spec: &Value) -> Option<Violation> {
    let names: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| c["securityContext"]["allowPrivilegeEscalation"] != false)
        .map(cname)
        .collect();
    if names.is_empty() {
        return None;
    }
    v(
        "allowPrivilegeEscalation != false",
        format!("{} must set securityContext.allowPrivilegeEscalation=false", containers_phrase(&names)),
    )
}

fn capabilities_restricted(spec: &Value) -> Option<Violation> {
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let cap = &c["securityContext"]["capabilities"];
        if cap.is_null() {
            missing_drop.push(cname(c));
            continue;
        }
        if !cap["drop"].as_array().into_iter().flatten().any(|d| d == "ALL") {
            missing_drop.push(cname(c));
        }
        let mut bad = false;
        for a in cap["add"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if a != "NET_BIND_SERVICE" {
                caps.insert(a.to_string());
                bad = true;
            }
        }
        if bad {
            adding.push(cname(c));
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details
            .push(format!("{} must set securityContext.capabilities.drop=[\"ALL\"]", containers_phrase(&missing_drop)));
    }
    if !adding.is_empty() {
        let caps: Vec<String> = caps.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&caps)
        ));
    }
    if details.is_empty() { None } else { v("unrestricted capabilities", details.join("; ")) }
}

fn restricted_volumes(spec: &Value) -> Option<Violation> {
    const ALLOWED: &[&str] =
        &["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
    let mut names = Vec::new();
    let mut types = BTreeSet::new();
    for vol in spec["volumes"].as_array().into_iter().flatten() {
        let Some(obj) = vol.as_object() else { continue };
        let kinds: Vec<&String> = obj.keys().filter(|k| *k != "name" && !obj[k.as_str()].is_null()).collect();
        if kinds.iter().any(|k| ALLOWED.contains(&k.as_str())) {
            continue;
        }
        names.push(vol["name"].as_str().unwrap_or_default().to_string());
        match kinds.first() {
            Some(k) => types.insert(k.to_string()),
            None => types.insert("unknown".to_string()),
        };
    }
    if names.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    v(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            plural("volume", "volumes", names.len()),
            join_quote(&names),
            plural("uses", "use", names.len()),
            plural("restricted volume type", "restricted volume types", types.len()),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(spec: &Value) -> Option<Violation> {
    let mut setters = Vec::new();
    let mut pod_ok = false;
    match spec["securityContext"]["runAsNonRoot"].as_bool() {
        Some(false) => setters.push("pod".to_string()),
        Some(true) => pod_ok = true,
        None => {}
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match c["securityContext"]["runAsNonRoot"].as_bool() {
            Some(false) => explicit.push(cname(c)),
            Some(true) => {}
            None if !pod_ok => implicit.push(cname(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return v(
            "runAsNonRoot != true",
            format!("{} must not set securityContext.runAsNonRoot=false", setters.join(" and ")),
        );
    }
    if !implicit.is_empty() {
        return v(
            "runAsNonRoot != true",
            format!("pod or {} must set securityContext.runAsNonRoot=true", containers_phrase(&implicit)),
        );
    }
    None
}

fn run_as_user(spec: &Value) -> Option<Violation> {
    let mut setters = Vec::new();
    if spec["securityContext"]["runAsUser"].as_i64() == Some(0) {
        setters.push("pod".to_string());
    }
    let names: Vec<String> = containers(spec)
        .into_iter()
        .filter(|c| c["securityContext"]["runAsUser"].as_i64() == Some(0))
        .map(cname)
        .collect();
    if !names.is_empty() {
        setters.push(containers_phrase(&names));
    }
    if setters.is_empty() {
        return None;
    }
    v("runAsUser=0", format!("{} must not set runAsUser=0", setters.join(" and ")))
}

/// Every violation of `level` by a pod's metadata and spec, in Kubernetes' order.
pub fn check_pod(level: Level, meta: &Value, spec: &Value) -> Vec<Violation> {
    if level == Level::Privileged {
        return Vec::new();
    }
    let mut out: Vec<Option<Violation>> = vec![
        app_armor(meta, spec),
        host_namespaces(spec),
        host_ports(spec),
        privileged(spec),
        proc_mount(spec),
        se_linux(spec),
        sysctls(spec),
        windows_host_process(spec),
    ];
    if level == Level::Baseline {
        out.extend([capabilities_baseline(spec), host_path_volumes(spec), seccomp(spec, false)]);
    } else {
        out.extend([
            allow_privilege_escalation(spec),
            capabilities_restricted(spec),
            restricted_volumes(spec),
            run_as_non_root(spec),
            run_as_user(spec),
            seccomp(spec, true),
        ]);
    }
    out.into_iter().flatten().collect()
}

/// `reason (detail), reason (detail)`.
pub fn describe(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| if v.detail.is_empty() { v.reason.clone() } else { format!("{} ({})", v.reason, v.detail) })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The pod template of a workload object (`spec.template`, or a CronJob's
/// `spec.jobTemplate.spec.template`), for warnings.
fn pod_template<'a>(group: &str, resource: &str, obj: &'a Value) -> Option<&'a Value> {
    match (group, resource) {
        ("", "podtemplates") => Some(&obj["template"]),
        ("", "replicationcontrollers")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some(&obj["spec"]["template"]),
        ("batch", "cronjobs") => Some(&obj["spec"]["jobTemplate"]["spec"]["template"]),
        _ => None,
    }
}

/// The result of evaluating one request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Evaluation {
    /// The enforce-mode rejection, if any.
    pub forbidden: Option<String>,
    /// Warnings.
    pub warnings: Vec<String>,
    /// Audit annotations.
    pub audit: Vec<(String, String)>,
}

/// Evaluates a request under a namespace's policy.
pub fn evaluate(req: &AdmissionRequest, policy: &NamespacePolicy, config: &PodSecurityConfig) -> Evaluation {
    let mut out = Evaluation::default();
    let Some(obj) = &req.object else { return out };
    if config.exempt_usernames.contains(&req.user.name) || config.exempt_namespaces.contains(&req.namespace) {
        return out;
    }
    let g = req.resource.group.as_str();
    let r = req.resource.resource.as_str();
    let is_pod = g.is_empty() && r == "pods";
    if is_pod {
        if !(req.sub_resource.is_empty() || req.sub_resource == "ephemeralcontainers") {
            return out;
        }
        let rc = obj["spec"]["runtimeClassName"].as_str().unwrap_or_default();
        if !rc.is_empty() && config.exempt_runtime_classes.iter().any(|e| e == rc) {
            return out;
        }
        // Updates that change neither the spec nor the annotations checks read are not checked.
        if req.op() == Operation::Update
            && let Some(old) = &req.old_object
            && old["spec"] == obj["spec"]
            && old["metadata"]["annotations"] == obj["metadata"]["annotations"]
        {
            return out;
        }
        let meta = &obj["metadata"];
        let spec = &obj["spec"];
        let enforce = check_pod(policy.enforce.level, meta, spec);
        if !enforce.is_empty() {
            out.forbidden = Some(format!("violates PodSecurity \"{}\": {}", policy.enforce, describe(&enforce)));
        }
        let warn = check_pod(policy.warn.level, meta, spec);
        if !warn.is_empty() && out.forbidden.is_none() {
            out.warnings.push(format!("would violate PodSecurity \"{}\": {}", policy.warn, describe(&warn)));
        }
        let audit = check_pod(policy.audit.level, meta, spec);
        if !audit.is_empty() {
            out.audit.push((
                "pod-security.kubernetes.io/audit-violations".into(),
                format!("would violate PodSecurity \"{}\": {}", policy.audit, describe(&audit)),
            ));
        }
        return out;
    }
    if let Some(template) = pod_template(g, r, obj) {
        let meta = &template["metadata"];
        let spec = &template["spec"];
        let warn = check_pod(policy.warn.level, meta, spec);
        if !warn.is_empty() {
            out.warnings.push(format!("would violate PodSecurity \"{}\": {}", policy.warn, describe(&warn)));
        }
        let audit = check_pod(policy.audit.level, meta, spec);
        if !audit.is_empty() {
            out.audit.push((
                "pod-security.kubernetes.io/audit-violations".into(),
                format!("would violate PodSecurity \"{}\": {}", policy.audit, describe(&audit)),
            ));
        }
    }
    out
}

/// The plugin.
pub struct PodSecurity {
    lookup: Arc<dyn AdmissionLookup>,
    config: PodSecurityConfig,
}

impl PodSecurity {
    /// The plugin over `lookup` with `config`.
    pub fn new(lookup: Arc<dyn AdmissionLookup>, config: PodSecurityConfig) -> Self {
        Self { lookup, config }
    }
}

#[async_trait]
impl ValidatingAdmission for PodSecurity {
    fn name(&self) -> &str {
        "PodSecurity"
    }
    async fn validate(&self, req: &AdmissionRequest, feedback: &mut Feedback) -> Result<(), ApiError> {
        if req.namespace.is_empty() || !matches!(req.op(), Operation::Create | Operation::Update) {
            return Ok(());
        }
        let ns_labels = self.lookup.namespace(&req.namespace).map(|ns| labels(&ns)).unwrap_or_default();
        let policy = policy_from_labels(&ns_labels, &self.config.defaults);
        if policy.enforce.level == Level::Privileged
            && policy.warn.level == Level::Privileged
            && policy.audit.level == Level::Privileged
        {
            return Ok(());
        }
        let e = evaluate(req, &policy, &self.config);
        feedback.warnings.extend(e.warnings);
        feedback.audit_annotations.extend(e.audit);
        match e.forbidden {
            Some(msg) => Err(req.forbidden(&msg)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::MemoryLookup;

    fn restricted_ok_container(name: &str) -> Value {
        json!({"name": name, "image": "nginx", "securityContext": {"allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}})
    }

    fn check(level: Level, spec: Value) -> String {
        describe(&check_pod(level, &json!({}), &spec))
    }

    #[test]
    fn pod_security_standards_cases() {
        let cases: Vec<(Level, Value, &str)> = vec![
            (Level::Baseline, json!({"containers": [{"name": "x"}]}), ""),
            (
                Level::Baseline,
                json!({"containers": [{"name": "x", "securityContext": {"privileged": true}}]}),
                r#"privileged (container "x" must not set securityContext.privileged=true)"#,
            ),
            (
                Level::Baseline,
                json!({"hostNetwork": true, "hostPID": true, "containers": [{"name": "x"}]}),
                "host namespaces (hostNetwork, hostPID)",
            ),
            (
                Level::Baseline,
                json!({"containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}]},
                                                    {"name": "b", "ports": [{"containerPort": 81, "hostPort": 9090}]}]}),
                r#"hostPort (containers "a", "b" use hostPorts 8080, 9090)"#,
            ),
            (
                Level::Baseline,
                json!({"containers": [{"name": "x", "securityContext": {"capabilities": {"add": ["NET_ADMIN", "CHOWN"]}}}]}),
                r#"non-default capabilities (container "x" must not include "NET_ADMIN" in securityContext.capabilities.add)"#,
            ),
            (
                Level::Baseline,
                json!({"volumes": [{"name": "host", "hostPath": {"path": "/"}}], "containers": [{"name": "x"}]}),
                r#"hostPath volumes (volume "host")"#,
            ),
            (
                Level::Baseline,
                json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "x"}]}),
                r#"seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")"#,
            ),
            (
                Level::Baseline,
                json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}, {"name": "net.ipv4.tcp_syncookies", "value": "1"}]}, "containers": [{"name": "x"}]}),
                "forbidden sysctls (kernel.msgmax)",
            ),
            (
                Level::Baseline,
                json!({"containers": [{"name": "x", "securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "root"}}}]}),
                r#"seLinuxOptions (container "x" set forbidden securityContext.seLinuxOptions: type "spc_t"; user may not be set)"#,
            ),
            (
                Level::Baseline,
                json!({"containers": [{"name": "x", "securityContext": {"procMount": "Unmasked"}}]}),
                r#"procMount (container "x" must not set securityContext.procMount to "Unmasked")"#,
            ),
            (Level::Restricted, json!({"containers": [restricted_ok_container("x")]}), ""),
            (
                Level::Restricted,
                json!({"containers": [{"name": "nginx", "image": "nginx"}]}),
                r#"allowPrivilegeEscalation != false (container "nginx" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "nginx" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "nginx" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "nginx" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#,
            ),
            (
                Level::Restricted,
                json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "x", "securityContext": {"allowPrivilegeEscalation": false, "privileged": true,
                    "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN", "NET_BIND_SERVICE"]}, "runAsUser": 0}}]}),
                r#"privileged (container "x" must not set securityContext.privileged=true), unrestricted capabilities (container "x" must not include "SYS_ADMIN" in securityContext.capabilities.add), runAsUser=0 (container "x" must not set runAsUser=0)"#,
            ),
            (
                Level::Restricted,
                json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "volumes": [{"name": "data", "emptyDir": {}}, {"name": "host", "hostPath": {"path": "/"}}, {"name": "nfs", "nfs": {"server": "x", "path": "/"}}],
                "containers": [{"name": "x", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}),
                r#"restricted volume types (volumes "host", "nfs" use restricted volume types "hostPath", "nfs")"#,
            ),
            (
                Level::Privileged,
                json!({"hostNetwork": true, "containers": [{"name": "x", "securityContext": {"privileged": true}}]}),
                "",
            ),
        ];
        for (level, spec, want) in cases {
            assert_eq!(check(level, spec.clone()), want, "{level:?} {spec}");
        }
    }

    #[test]
    fn namespace_labels_select_levels_and_versions() {
        let labels =
            |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (format!("{LABEL_PREFIX}{k}"), v.to_string())).collect();
        let p = policy_from_labels(
            &labels(&[("enforce", "baseline"), ("enforce-version", "v1.33"), ("warn", "restricted")]),
            &NamespacePolicy::default(),
        );
        assert_eq!(p.enforce.to_string(), "baseline:v1.33");
        assert_eq!(p.warn.to_string(), "restricted:latest");
        assert_eq!(p.audit.to_string(), "privileged:latest");
        let p = policy_from_labels(&labels(&[("enforce", "bogus")]), &NamespacePolicy::default());
        assert_eq!(p.enforce.to_string(), "restricted:latest");
    }

    #[tokio::test]
    async fn enforce_rejects_and_warn_warns_in_kubernetes_wording() {
        let l = Arc::new(MemoryLookup::new());
        l.put(json!({"kind": "Namespace", "metadata": {"name": "secure", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}));
        l.put(json!({"kind": "Namespace", "metadata": {"name": "soft", "labels": {"pod-security.kubernetes.io/warn": "baseline"}}}));
        let plugin = PodSecurity::new(l, PodSecurityConfig::default());
        let mut req = AdmissionRequest::new(Operation::Create, "", "v1", "pods", "Pod");
        req.namespace = "secure".into();
        req.object = Some(
            json!({"metadata": {"name": "priv"}, "spec": {"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "x", "securityContext": {"privileged": true, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}),
        );
        let e = plugin.validate(&req, &mut Feedback::default()).await.unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            r#"pods "priv" is forbidden: violates PodSecurity "restricted:latest": privileged (container "x" must not set securityContext.privileged=true)"#
        );
        req.namespace = "soft".into();
        let mut fb = Feedback::default();
        plugin.validate(&req, &mut fb).await.unwrap();
        assert_eq!(
            fb.warnings,
            vec![
                r#"would violate PodSecurity "baseline:latest": privileged (container "x" must not set securityContext.privileged=true)"#
            ]
        );
        // Workloads are only warned about.
        let mut dep = AdmissionRequest::new(Operation::Create, "apps", "v1", "deployments", "Deployment");
        dep.namespace = "secure".into();
        dep.object = Some(
            json!({"metadata": {"name": "web"}, "spec": {"template": {"spec": {"containers": [{"name": "web"}]}}}}),
        );
        let mut fb = Feedback::default();
        plugin.validate(&dep, &mut fb).await.unwrap();
        assert!(fb.warnings.is_empty());
    }
}
