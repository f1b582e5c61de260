//! The node-affinity and toleration helpers of `k8s.io/component-helpers/scheduling/corev1`,
//! shared by the scheduler's plugins and the controllers that decide placement themselves (the
//! DaemonSet controller's `NodeShouldRunDaemonPod`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelectorTerm, Pod, Taint, Toleration};

use crate::selector::{Operator, Requirement};

/// The union of the node label set and its name, for node affinity matching.
fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

/// One compiled `nodeSelectorTerm`: label requirements and `metadata.name` field requirements.
#[derive(Clone, Debug)]
pub struct CompiledNodeSelectorTerm {
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
    valid: bool,
}

impl CompiledNodeSelectorTerm {
    /// Compiles a term; an invalid term matches no node (as in Kubernetes).
    pub fn new(term: &NodeSelectorTerm) -> Self {
        let mut out = Self { labels: Vec::new(), fields: Vec::new(), valid: true };
        let conv = |op: &str| match op {
            "In" => Some(Operator::In),
            "NotIn" => Some(Operator::NotIn),
            "Exists" => Some(Operator::Exists),
            "DoesNotExist" => Some(Operator::DoesNotExist),
            "Gt" => Some(Operator::GreaterThan),
            "Lt" => Some(Operator::LessThan),
            _ => None,
        };
        for e in term.match_expressions.iter().flatten() {
            match conv(&e.operator)
                .and_then(|op| Requirement::new(&e.key, op, e.values.clone().unwrap_or_default()).ok())
            {
                Some(r) => out.labels.push(r),
                None => out.valid = false,
            }
        }
        for e in term.match_fields.iter().flatten() {
            let op = match e.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                _ => {
                    out.valid = false;
                    continue;
                }
            };
            let values = e.values.clone().unwrap_or_default();
            if e.key != "metadata.name" || values.len() != 1 {
                out.valid = false;
                continue;
            }
            match Requirement::new(&e.key, op, values) {
                Ok(r) => out.fields.push(r),
                Err(_) => out.valid = false,
            }
        }
        if out.labels.is_empty() && out.fields.is_empty() {
            out.valid = false;
        }
        out
    }

    /// Whether the node satisfies every requirement of the term.
    pub fn matches(&self, node: &Node) -> bool {
        if !self.valid {
            return false;
        }
        let labels = node_labels(node);
        if !self.labels.iter().all(|r| r.matches(labels)) {
            return false;
        }
        if self.fields.is_empty() {
            return true;
        }
        let mut f = BTreeMap::new();
        f.insert("metadata.name".to_string(), node.metadata.name.clone().unwrap_or_default());
        self.fields.iter().all(|r| r.matches(&f))
    }

    /// Node names this term is restricted to by `metadata.name In [..]`, if any.
    pub fn required_node_names(&self) -> Option<Vec<String>> {
        let r = self.fields.iter().find(|r| r.operator() == Operator::In)?;
        Some(r.values().to_vec())
    }
}

/// A pod's hard node constraints: `spec.nodeSelector` AND
/// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` (terms ORed)
/// (`nodeaffinity.RequiredNodeAffinity`).
#[derive(Clone, Debug, Default)]
pub struct RequiredNodeAffinity {
    node_selector: Option<BTreeMap<String, String>>,
    terms: Option<Vec<CompiledNodeSelectorTerm>>,
}

impl RequiredNodeAffinity {
    /// Extracts the constraints of `pod`.
    pub fn from_pod(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        let node_selector = spec.and_then(|s| s.node_selector.clone()).filter(|m| !m.is_empty());
        let terms = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|ns| ns.node_selector_terms.iter().map(CompiledNodeSelectorTerm::new).collect());
        Self { node_selector, terms }
    }

    /// Whether there is any constraint at all.
    pub fn is_empty(&self) -> bool {
        self.node_selector.is_none() && self.terms.is_none()
    }

    /// Whether `node` satisfies the constraints.
    pub fn matches(&self, node: &Node) -> bool {
        if let Some(sel) = &self.node_selector {
            let labels = node_labels(node);
            if !sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                return false;
            }
        }
        match &self.terms {
            None => true,
            Some(terms) => terms.iter().any(|t| t.matches(node)),
        }
    }

    /// The required terms (None when the pod has no required node affinity).
    pub fn terms(&self) -> Option<&[CompiledNodeSelectorTerm]> {
        self.terms.as_deref()
    }
}

/// Whether `toleration` tolerates `taint` (`Toleration.ToleratesTaint`): same effect (or empty),
/// same key (or empty), and `Exists`, or `Equal` with the same value.
pub fn tolerates_taint(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && e != taint.effect
    {
        return false;
    }
    if let Some(k) = toleration.key.as_deref().filter(|k| !k.is_empty())
        && k != taint.key
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

/// The first taint passing `filter` that no toleration tolerates (`FindMatchingUntoleratedTaint`).
pub fn find_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    filter: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints.iter().filter(|t| filter(t)).find(|t| !tolerations.iter().any(|tol| tolerates_taint(tol, t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some(op.into()),
            value: Some(value.into()),
            effect: Some(effect.into()),
            ..Default::default()
        }
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint { key: key.into(), value: Some(value.into()), effect: effect.into(), ..Default::default() }
    }

    #[test]
    fn tolerations_match_like_kubernetes() {
        let t = taint("dedicated", "x", "NoSchedule");
        assert!(tolerates_taint(&tol("dedicated", "Equal", "x", "NoSchedule"), &t));
        assert!(tolerates_taint(&tol("dedicated", "Exists", "", ""), &t));
        assert!(tolerates_taint(&tol("", "Exists", "", ""), &t));
        assert!(!tolerates_taint(&tol("dedicated", "Equal", "y", "NoSchedule"), &t));
        assert!(!tolerates_taint(&tol("dedicated", "Equal", "x", "NoExecute"), &t));
    }
}
