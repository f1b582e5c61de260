//! LimitRanger (<https://kubernetes.io/docs/concepts/policy/limit-range/>): a namespace's
//! LimitRanges default containers' requests and limits on pod creation (recording what was set
//! in the `kubernetes.io/limit-ranger` annotation) and enforce `min`, `max` and
//! `maxLimitRequestRatio` per Container, per Pod (sums) and per PersistentVolumeClaim
//! (`storage` requests).
//!
//! Defaults follow LimitRange defaulting: a missing `default` limit is the `max`, a missing
//! `defaultRequest` is the `default`, else the `min`.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use skiff_apimachinery::ApiError;

use crate::{AdmissionLookup, AdmissionRequest, Feedback, MutatingAdmission, Operation, ValidatingAdmission};
use skiff_apimachinery::quantity::Quantity;

/// The annotation recording what LimitRanger defaulted.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

type ResourceList = BTreeMap<String, Quantity>;

fn resource_list(v: &Value) -> ResourceList {
    v.as_object()
        .map(|m| m.iter().filter_map(|(k, q)| Quantity::from_json(q).map(|q| (k.clone(), q))).collect())
        .unwrap_or_default()
}

/// One `spec.limits[]` item with LimitRange defaulting applied.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitItem {
    /// `Container`, `Pod` or `PersistentVolumeClaim`.
    pub kind: String,
    /// `min`.
    pub min: ResourceList,
    /// `max`.
    pub max: ResourceList,
    /// `default` (limits).
    pub default: ResourceList,
    /// `defaultRequest`.
    pub default_request: ResourceList,
    /// `maxLimitRequestRatio`.
    pub max_ratio: ResourceList,
}

/// The items of a LimitRange object, defaulted.
pub fn limit_items(limit_range: &Value) -> Vec<LimitItem> {
    let mut out = Vec::new();
    for item in limit_range["spec"]["limits"].as_array().into_iter().flatten() {
        let mut li = LimitItem {
            kind: item["type"].as_str().unwrap_or_default().to_string(),
            min: resource_list(&item["min"]),
            max: resource_list(&item["max"]),
            default: resource_list(&item["default"]),
            default_request: resource_list(&item["defaultRequest"]),
            max_ratio: resource_list(&item["maxLimitRequestRatio"]),
        };
        if li.kind == "Container" {
            for (k, v) in &li.max {
                li.default.entry(k.clone()).or_insert(*v);
            }
            for (k, v) in &li.default {
                li.default_request.entry(k.clone()).or_insert(*v);
            }
            for (k, v) in &li.min {
                li.default_request.entry(k.clone()).or_insert(*v);
            }
        }
        out.push(li);
    }
    out
}

fn set_missing(obj: &mut Value, key: &str, defaults: &ResourceList) -> Vec<String> {
    let mut set = Vec::new();
    if defaults.is_empty() {
        return set;
    }
    if !obj["resources"].is_object() {
        obj["resources"] = Value::Object(Map::new());
    }
    if !obj["resources"][key].is_object() {
        obj["resources"][key] = Value::Object(Map::new());
    }
    for (k, v) in defaults {
        if obj["resources"][key].get(k).is_none() {
            obj["resources"][key][k] = v.to_string().into();
            set.push(k.clone());
        }
    }
    set
}

/// Applies every LimitRange's container defaults to a pod (JSON), setting the
/// `kubernetes.io/limit-ranger` annotation when something was set.
pub fn apply_defaults(pod: &mut Value, limit_ranges: &[Value]) {
    let items: Vec<LimitItem> = limit_ranges.iter().flat_map(limit_items).filter(|i| i.kind == "Container").collect();
    if items.is_empty() {
        return;
    }
    let mut notes = Vec::new();
    for (list, label) in [("containers", "container"), ("initContainers", "init container")] {
        let Some(containers) = pod["spec"][list].as_array_mut() else { continue };
        for c in containers {
            let name = c["name"].as_str().unwrap_or_default().to_string();
            let mut requests = Vec::new();
            let mut limits = Vec::new();
            for item in &items {
                limits.extend(set_missing(c, "limits", &item.default));
                requests.extend(set_missing(c, "requests", &item.default_request));
            }
            requests.sort();
            limits.sort();
            if !requests.is_empty() {
                notes.push(format!("{} request for {label} {name}", requests.join(", ")));
            }
            if !limits.is_empty() {
                notes.push(format!("{} limit for {label} {name}", limits.join(", ")));
            }
        }
    }
    if !notes.is_empty() {
        if !pod["metadata"]["annotations"].is_object() {
            pod["metadata"]["annotations"] = Value::Object(Map::new());
        }
        pod["metadata"]["annotations"][ANNOTATION] = format!("LimitRanger plugin set: {}", notes.join("; ")).into();
    }
}

fn min_constraint(kind: &str, res: &str, enforced: Quantity, req: &ResourceList, lim: &ResourceList) -> Option<String> {
    let Some(r) = req.get(res) else {
        return Some(format!("minimum {res} usage per {kind} is {enforced}.  No request is specified"));
    };
    if r.milli < enforced.milli {
        return Some(format!("minimum {res} usage per {kind} is {enforced}, but request is {r}"));
    }
    if let Some(l) = lim.get(res)
        && l.milli < enforced.milli
    {
        return Some(format!("minimum {res} usage per {kind} is {enforced}, but limit is {l}"));
    }
    None
}

fn max_constraint(kind: &str, res: &str, enforced: Quantity, req: &ResourceList, lim: &ResourceList) -> Option<String> {
    let Some(l) = lim.get(res) else {
        return Some(format!("maximum {res} usage per {kind} is {enforced}.  No limit is specified"));
    };
    if l.milli > enforced.milli {
        return Some(format!("maximum {res} usage per {kind} is {enforced}, but limit is {l}"));
    }
    if let Some(r) = req.get(res)
        && r.milli > enforced.milli
    {
        return Some(format!("maximum {res} usage per {kind} is {enforced}, but request is {r}"));
    }
    None
}

fn ratio_constraint(
    kind: &str,
    res: &str,
    enforced: Quantity,
    req: &ResourceList,
    lim: &ResourceList,
) -> Option<String> {
    let r = req.get(res).map(|q| q.milli).unwrap_or(0);
    let l = lim.get(res).map(|q| q.milli).unwrap_or(0);
    if r == 0 {
        return Some(format!(
            "{res} max limit to request ratio per {kind} is {enforced}, but no request is specified or request is 0"
        ));
    }
    if l == 0 {
        return Some(format!(
            "{res} max limit to request ratio per {kind} is {enforced}, but no limit is specified or limit is 0"
        ));
    }
    let ratio = l as f64 / r as f64;
    if ratio * 1000.0 > enforced.milli as f64 {
        return Some(format!(
            "{res} max limit to request ratio per {kind} is {enforced}, but provided ratio is {ratio:.6}"
        ));
    }
    None
}

fn check(item: &LimitItem, kind: &str, req: &ResourceList, lim: &ResourceList, errs: &mut Vec<String>) {
    for (k, v) in &item.min {
        errs.extend(min_constraint(kind, k, *v, req, lim));
    }
    for (k, v) in &item.max {
        errs.extend(max_constraint(kind, k, *v, req, lim));
    }
    for (k, v) in &item.max_ratio {
        errs.extend(ratio_constraint(kind, k, *v, req, lim));
    }
}

/// A container's (requests, limits).
pub fn container_resources(c: &Value) -> (ResourceList, ResourceList) {
    (resource_list(&c["resources"]["requests"]), resource_list(&c["resources"]["limits"]))
}

/// A pod's effective (requests, limits): the sum over containers, raised per resource to any
/// single init container's value (`PodRequests`/`PodLimits`), plus `spec.overhead`.
pub fn pod_resources(pod: &Value) -> (ResourceList, ResourceList) {
    let mut req = ResourceList::new();
    let mut lim = ResourceList::new();
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let (r, l) = container_resources(c);
        for (k, v) in r {
            let e = req.entry(k).or_insert(Quantity::ZERO);
            *e = *e + v;
        }
        for (k, v) in l {
            let e = lim.entry(k).or_insert(Quantity::ZERO);
            *e = *e + v;
        }
    }
    for c in pod["spec"]["initContainers"].as_array().into_iter().flatten() {
        let (r, l) = container_resources(c);
        for (k, v) in r {
            let e = req.entry(k).or_insert(Quantity::ZERO);
            *e = (*e).max(v);
        }
        for (k, v) in l {
            let e = lim.entry(k).or_insert(Quantity::ZERO);
            *e = (*e).max(v);
        }
    }
    for (k, v) in resource_list(&pod["spec"]["overhead"]) {
        let e = req.entry(k.clone()).or_insert(Quantity::ZERO);
        *e = *e + v;
        if let Some(l) = lim.get_mut(&k) {
            *l = *l + v;
        }
    }
    (req, lim)
}

/// The constraint violations of a pod, in Kubernetes' wording.
pub fn validate_pod(pod: &Value, limit_ranges: &[Value]) -> Vec<String> {
    let mut errs = Vec::new();
    for item in limit_ranges.iter().flat_map(limit_items) {
        match item.kind.as_str() {
            "Container" => {
                for list in ["containers", "initContainers"] {
                    for c in pod["spec"][list].as_array().into_iter().flatten() {
                        let (req, lim) = container_resources(c);
                        check(&item, "Container", &req, &lim, &mut errs);
                    }
                }
            }
            "Pod" => {
                let (req, lim) = pod_resources(pod);
                check(&item, "Pod", &req, &lim, &mut errs);
            }
            _ => {}
        }
    }
    errs
}

/// The constraint violations of a PersistentVolumeClaim (`storage` requests).
pub fn validate_pvc(pvc: &Value, limit_ranges: &[Value]) -> Vec<String> {
    let mut errs = Vec::new();
    let req = resource_list(&pvc["spec"]["resources"]["requests"]);
    for item in limit_ranges.iter().flat_map(limit_items).filter(|i| i.kind == "PersistentVolumeClaim") {
        for (k, v) in &item.min {
            errs.extend(min_constraint("PersistentVolumeClaim", k, *v, &req, &ResourceList::new()));
        }
        for (k, v) in &item.max {
            match req.get(k) {
                None => {
                    errs.push(format!("maximum {k} usage per PersistentVolumeClaim is {v}.  No request is specified"))
                }
                Some(r) if r.milli > v.milli => {
                    errs.push(format!("maximum {k} usage per PersistentVolumeClaim is {v}, but request is {r}"))
                }
                _ => {}
            }
        }
    }
    errs
}

/// Kubernetes' aggregate-error text: one message alone, several as `[a, b]` (duplicates once).
pub fn aggregate(errs: &[String]) -> String {
    let mut seen = Vec::new();
    for e in errs {
        if !seen.contains(e) {
            seen.push(e.clone());
        }
    }
    if seen.len() == 1 { seen.remove(0) } else { format!("[{}]", seen.join(", ")) }
}

/// The plugin.
pub struct LimitRanger {
    lookup: Arc<dyn AdmissionLookup>,
}

impl LimitRanger {
    /// The plugin over `lookup`.
    pub fn new(lookup: Arc<dyn AdmissionLookup>) -> Self {
        Self { lookup }
    }
}

fn applies(req: &AdmissionRequest) -> Option<&'static str> {
    if !req.sub_resource.is_empty() || !req.resource.group.is_empty() || req.namespace.is_empty() {
        return None;
    }
    match (req.resource.resource.as_str(), req.op()) {
        // Containers cannot be added or changed on update, so pods are checked on create only.
        ("pods", Operation::Create) => Some("pods"),
        ("persistentvolumeclaims", Operation::Create | Operation::Update) => Some("persistentvolumeclaims"),
        _ => None,
    }
}

#[async_trait]
impl MutatingAdmission for LimitRanger {
    fn name(&self) -> &str {
        "LimitRanger"
    }
    async fn admit(&self, req: &mut AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        if applies(req) != Some("pods") {
            return Ok(());
        }
        let ranges = self.lookup.limit_ranges(&req.namespace);
        if let Some(pod) = req.object.as_mut() {
            apply_defaults(pod, &ranges);
        }
        Ok(())
    }
}

#[async_trait]
impl ValidatingAdmission for LimitRanger {
    fn name(&self) -> &str {
        "LimitRanger"
    }
    async fn validate(&self, req: &AdmissionRequest, _f: &mut Feedback) -> Result<(), ApiError> {
        let Some(kind) = applies(req) else { return Ok(()) };
        let Some(obj) = &req.object else { return Ok(()) };
        let ranges = self.lookup.limit_ranges(&req.namespace);
        if ranges.is_empty() {
            return Ok(());
        }
        let errs = if kind == "pods" { validate_pod(obj, &ranges) } else { validate_pvc(obj, &ranges) };
        if errs.is_empty() { Ok(()) } else { Err(req.forbidden(&aggregate(&errs))) }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn range() -> Value {
        json!({"kind": "LimitRange", "metadata": {"name": "limits", "namespace": "ns"}, "spec": {"limits": [
            {"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"}, "defaultRequest": {"cpu": "100m"},
             "min": {"cpu": "50m"}, "max": {"cpu": "1", "memory": "1Gi"}, "maxLimitRequestRatio": {"cpu": "10"}},
            {"type": "Pod", "max": {"memory": "1536Mi"}},
        ]}})
    }

    #[test]
    fn containers_get_defaults_and_the_annotation_says_which() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "web"},
            {"name": "side", "resources": {"limits": {"cpu": "200m"}, "requests": {"cpu": "200m"}}}]}});
        apply_defaults(&mut pod, &[range()]);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "256Mi"}})
        );
        assert_eq!(pod["spec"]["containers"][1]["resources"]["limits"], json!({"cpu": "200m", "memory": "256Mi"}));
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container web; cpu, memory limit for container web; memory request for container side; memory limit for container side"
        );
        assert!(validate_pod(&pod, &[range()]).is_empty());
    }

    #[test]
    fn min_max_and_ratio_violations_use_kubernetes_messages() {
        let cases = [
            (
                json!({"requests": {"cpu": "10m", "memory": "1Gi"}, "limits": {"cpu": "50m", "memory": "1Gi"}}),
                vec!["minimum cpu usage per Container is 50m, but request is 10m"],
            ),
            (
                json!({"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}),
                vec![
                    "maximum cpu usage per Container is 1, but limit is 2",
                    "maximum memory usage per Container is 1Gi, but limit is 2Gi",
                    "cpu max limit to request ratio per Container is 10, but provided ratio is 20.000000",
                ],
            ),
            (
                json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}),
                vec![
                    "minimum cpu usage per Container is 50m.  No request is specified",
                    "maximum cpu usage per Container is 1.  No limit is specified",
                    "cpu max limit to request ratio per Container is 10, but no request is specified or request is 0",
                ],
            ),
        ];
        for (resources, want) in cases {
            let pod = json!({"spec": {"containers": [{"name": "c", "resources": resources}]}});
            let only_container = json!({"spec": {"limits": [range()["spec"]["limits"][0].clone()]}});
            assert_eq!(validate_pod(&pod, &[only_container]), want);
        }
        // Pod-level sums.
        let big = json!({"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"cpu": "100m", "memory": "1Gi"}});
        let pod = json!({"spec": {"containers": [{"name": "a", "resources": big}, {"name": "b", "resources": big}]}});
        assert_eq!(validate_pod(&pod, &[range()]), vec!["maximum memory usage per Pod is 1536Mi, but limit is 2Gi"]);
        assert_eq!(aggregate(&["a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "b".into(), "a".into()]), "[a, b]");
    }

    #[test]
    fn claims_are_checked_against_storage_bounds() {
        let lr = json!({"spec": {"limits": [{"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}]}});
        let pvc = |s: &str| json!({"spec": {"resources": {"requests": {"storage": s}}}});
        assert!(validate_pvc(&pvc("5Gi"), std::slice::from_ref(&lr)).is_empty());
        assert_eq!(
            validate_pvc(&pvc("500Mi"), std::slice::from_ref(&lr)),
            vec!["minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"]
        );
        assert_eq!(
            validate_pvc(&pvc("20Gi"), std::slice::from_ref(&lr)),
            vec!["maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"]
        );
    }
}
