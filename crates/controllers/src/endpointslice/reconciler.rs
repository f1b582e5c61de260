//! The EndpointSlice reconciler (`staging/src/k8s.io/endpointslice/reconciler.go`): given the
//! slices a controller manages for one owner and the endpoints it wants, the slices to create,
//! update and delete. Shared by the EndpointSlice and the mirroring controllers.
//!
//! Endpoints are grouped by their port set (one slice never mixes port sets); an endpoint
//! already in a slice stays in it, new endpoints fill slices that change anyway, then slices
//! with room, then new slices of at most `max_per_slice`; a slice left empty is deleted. An
//! owner without endpoints keeps one empty "placeholder" slice, as Kubernetes does, so that
//! clients see the owner is handled.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// `discovery.k8s.io/v1`'s limit and the controllers' default (`--max-endpoints-per-slice`).
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// What every slice of one owner looks like apart from its endpoints and ports.
#[derive(Debug, Clone)]
pub struct SliceTemplate {
    /// Namespace of the slices.
    pub namespace: String,
    /// `metadata.generateName` of new slices (`<service>-`).
    pub generate_name: String,
    /// Labels every slice carries (service name, managed-by, copied labels).
    pub labels: BTreeMap<String, String>,
    /// Annotations every slice carries.
    pub annotations: BTreeMap<String, String>,
    /// The controller reference to the owner.
    pub owner: OwnerReference,
    /// `addressType`.
    pub address_type: String,
}

/// Writes that bring one owner's slices to the desired state.
#[derive(Debug, Default, Clone)]
pub struct Plan {
    /// New slices (named by `generateName`).
    pub create: Vec<EndpointSlice>,
    /// Changed slices (carrying the resourceVersion they were read at).
    pub update: Vec<EndpointSlice>,
    /// Slices to delete.
    pub delete: Vec<EndpointSlice>,
}

impl Plan {
    /// True when nothing is to be written.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.update.is_empty() && self.delete.is_empty()
    }
}

/// An endpoint's identity across syncs: its addresses and the object it stands for.
fn endpoint_key(e: &Endpoint) -> (Vec<String>, Option<String>) {
    (e.addresses.clone(), e.target_ref.as_ref().and_then(|r| r.name.clone()))
}

fn ports_key(ports: &[EndpointPort]) -> String {
    let mut v: Vec<String> = ports
        .iter()
        .map(|p| {
            format!(
                "{}/{}/{}/{}",
                p.name.as_deref().unwrap_or(""),
                p.port.unwrap_or(0),
                p.protocol.as_deref().unwrap_or("TCP"),
                p.app_protocol.as_deref().unwrap_or("")
            )
        })
        .collect();
    v.sort();
    v.join(",")
}

fn new_slice(t: &SliceTemplate, ports: &[EndpointPort], endpoints: Vec<Endpoint>) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(t.generate_name.clone()),
            namespace: Some(t.namespace.clone()),
            labels: Some(t.labels.clone()),
            annotations: (!t.annotations.is_empty()).then(|| t.annotations.clone()),
            owner_references: Some(vec![t.owner.clone()]),
            ..Default::default()
        },
        address_type: t.address_type.clone(),
        endpoints,
        ports: Some(ports.to_vec()),
    }
}

/// Whether the slice's metadata matches the template (else it is updated).
fn metadata_matches(s: &EndpointSlice, t: &SliceTemplate) -> bool {
    let annotations = s.metadata.annotations.clone().unwrap_or_default();
    s.metadata.labels.as_ref() == Some(&t.labels)
        && annotations == t.annotations
        && s.metadata.owner_references.as_deref() == Some(std::slice::from_ref(&t.owner))
}

fn with_template(mut s: EndpointSlice, t: &SliceTemplate) -> EndpointSlice {
    s.metadata.labels = Some(t.labels.clone());
    s.metadata.annotations = (!t.annotations.is_empty()).then(|| t.annotations.clone());
    s.metadata.owner_references = Some(vec![t.owner.clone()]);
    s
}

/// Plans the writes from `existing` (the owner's slices) to `desired` (port set → endpoints,
/// in a stable order).
pub fn reconcile(
    t: &SliceTemplate,
    existing: Vec<EndpointSlice>,
    desired: Vec<(Vec<EndpointPort>, Vec<Endpoint>)>,
    max_per_slice: usize,
) -> Plan {
    let max = max_per_slice.max(1);
    let mut plan = Plan::default();
    // Slices of another address type or owner are not this owner's any more.
    let (mut existing, foreign): (Vec<_>, Vec<_>) = existing.into_iter().partition(|s| {
        s.address_type == t.address_type
            && s.metadata.owner_references.iter().flatten().any(|o| o.uid == t.owner.uid && o.controller == Some(true))
    });
    plan.delete.extend(foreign);
    let total: usize = desired.iter().map(|(_, e)| e.len()).sum();
    if total == 0 {
        // One placeholder: an existing empty slice without ports, else a new one.
        let placeholder =
            existing.iter().position(|s| s.endpoints.is_empty() && s.ports.as_ref().is_none_or(Vec::is_empty));
        match placeholder {
            Some(i) => {
                let s = existing.remove(i);
                if !metadata_matches(&s, t) {
                    plan.update.push(with_template(s, t));
                }
            }
            None => plan.create.push(new_slice(t, &[], Vec::new())),
        }
        plan.delete.extend(existing);
        return plan;
    }
    let mut by_ports: BTreeMap<String, Vec<EndpointSlice>> = BTreeMap::new();
    for s in existing {
        by_ports.entry(ports_key(s.ports.as_deref().unwrap_or(&[]))).or_default().push(s);
    }
    for (ports, endpoints) in desired {
        if endpoints.is_empty() {
            continue;
        }
        let slices = by_ports.remove(&ports_key(&ports)).unwrap_or_default();
        let mut wanted: BTreeMap<(Vec<String>, Option<String>), Endpoint> =
            endpoints.iter().map(|e| (endpoint_key(e), e.clone())).collect();
        let order: Vec<_> = endpoints.iter().map(endpoint_key).collect();
        // Keep what is still wanted where it is (at its new state), drop the rest.
        let mut kept: Vec<(EndpointSlice, bool)> = Vec::new();
        for s in slices {
            let mut seen = BTreeSet::new();
            let eps: Vec<Endpoint> = s
                .endpoints
                .iter()
                .filter_map(|e| {
                    let k = endpoint_key(e);
                    if !seen.insert(k.clone()) {
                        return None;
                    }
                    wanted.remove(&k)
                })
                .take(max)
                .collect();
            let changed = eps != s.endpoints || !metadata_matches(&s, t);
            let mut s = s;
            s.endpoints = eps;
            kept.push((s, changed));
        }
        let mut fresh: Vec<Endpoint> = order.iter().filter_map(|k| wanted.remove(k)).collect();
        fresh.reverse();
        // Fill slices that are written anyway first, then the others with room.
        kept.sort_by_key(|(s, changed)| (!changed, std::cmp::Reverse(s.endpoints.len())));
        for (s, changed) in kept.iter_mut() {
            while s.endpoints.len() < max
                && let Some(e) = fresh.pop()
            {
                s.endpoints.push(e);
                *changed = true;
            }
        }
        fresh.reverse();
        for chunk in fresh.chunks(max) {
            plan.create.push(new_slice(t, &ports, chunk.to_vec()));
        }
        for (s, changed) in kept {
            if s.endpoints.is_empty() {
                plan.delete.push(s);
            } else if changed {
                plan.update.push(with_template(s, t));
            }
        }
    }
    // Port sets no endpoint has any more.
    plan.delete.extend(by_ports.into_values().flatten());
    plan
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::discovery::v1::EndpointConditions;

    use super::*;

    fn template() -> SliceTemplate {
        SliceTemplate {
            namespace: "default".into(),
            generate_name: "web-".into(),
            labels: BTreeMap::from([("kubernetes.io/service-name".to_string(), "web".to_string())]),
            annotations: BTreeMap::new(),
            owner: OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: "web".into(),
                uid: "u1".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            address_type: "IPv4".into(),
        }
    }

    fn ep(i: usize, ready: bool) -> Endpoint {
        Endpoint {
            addresses: vec![format!("10.42.{}.{}", i / 250, i % 250 + 1)],
            conditions: Some(EndpointConditions { ready: Some(ready), serving: Some(ready), terminating: Some(false) }),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                name: Some(format!("p{i}")),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn http() -> Vec<EndpointPort> {
        vec![EndpointPort {
            name: Some("http".into()),
            port: Some(80),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]
    }

    /// Applies a plan as the API server would (names for creates).
    fn apply(existing: Vec<EndpointSlice>, plan: Plan) -> Vec<EndpointSlice> {
        let gone: BTreeSet<_> = plan.delete.iter().map(|s| s.metadata.name.clone()).collect();
        let mut out: Vec<EndpointSlice> = existing.into_iter().filter(|s| !gone.contains(&s.metadata.name)).collect();
        for u in plan.update {
            let i = out.iter().position(|s| s.metadata.name == u.metadata.name).unwrap();
            out[i] = u;
        }
        for (i, mut c) in plan.create.into_iter().enumerate() {
            c.metadata.name = Some(format!("web-{}-{i}", out.len()));
            out.push(c);
        }
        out
    }

    #[test]
    fn endpoints_are_split_into_slices_of_at_most_the_maximum() {
        let eps: Vec<Endpoint> = (0..250).map(|i| ep(i, true)).collect();
        let plan = reconcile(&template(), vec![], vec![(http(), eps)], MAX_ENDPOINTS_PER_SLICE);
        let sizes: Vec<usize> = plan.create.iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
        assert!(plan.create.iter().all(|s| s.metadata.generate_name.as_deref() == Some("web-")));
        assert!(plan.update.is_empty() && plan.delete.is_empty());
    }

    #[test]
    fn a_readiness_change_updates_only_the_slice_holding_that_endpoint() {
        let eps: Vec<Endpoint> = (0..150).map(|i| ep(i, true)).collect();
        let slices = apply(vec![], reconcile(&template(), vec![], vec![(http(), eps.clone())], 100));
        assert!(reconcile(&template(), slices.clone(), vec![(http(), eps.clone())], 100).is_empty());
        let mut changed = eps.clone();
        changed[120] = ep(120, false);
        let plan = reconcile(&template(), slices.clone(), vec![(http(), changed)], 100);
        assert!(plan.create.is_empty() && plan.delete.is_empty());
        assert_eq!(plan.update.len(), 1);
        let updated = &plan.update[0];
        let e = updated.endpoints.iter().find(|e| e.addresses == ep(120, true).addresses).unwrap();
        assert_eq!(e.conditions.as_ref().unwrap().ready, Some(false));
    }

    #[test]
    fn removed_endpoints_leave_and_a_slice_left_empty_is_deleted() {
        let eps: Vec<Endpoint> = (0..150).map(|i| ep(i, true)).collect();
        let slices = apply(vec![], reconcile(&template(), vec![], vec![(http(), eps.clone())], 100));
        let plan = reconcile(&template(), slices, vec![(http(), eps[..100].to_vec())], 100);
        // The 50 in the second slice go; one of the two slices is deleted, the other is
        // updated unless it already held exactly the first 100.
        assert_eq!(plan.delete.len(), 1);
        assert!(plan.create.is_empty());
    }

    #[test]
    fn no_endpoints_leave_one_placeholder_slice() {
        let eps: Vec<Endpoint> = (0..3).map(|i| ep(i, true)).collect();
        let slices = apply(vec![], reconcile(&template(), vec![], vec![(http(), eps)], 100));
        let plan = reconcile(&template(), slices.clone(), vec![], 100);
        assert_eq!((plan.create.len(), plan.delete.len()), (1, 1));
        assert!(plan.create[0].endpoints.is_empty() && plan.create[0].ports.as_ref().unwrap().is_empty());
        let slices = apply(slices, plan);
        assert!(reconcile(&template(), slices, vec![], 100).is_empty());
    }

    #[test]
    fn a_slice_of_another_owner_or_port_set_is_deleted() {
        let eps: Vec<Endpoint> = (0..3).map(|i| ep(i, true)).collect();
        let mut slices = apply(vec![], reconcile(&template(), vec![], vec![(http(), eps.clone())], 100));
        slices[0].metadata.owner_references.as_mut().unwrap()[0].uid = "old".into();
        let plan = reconcile(&template(), slices, vec![(http(), eps.clone())], 100);
        assert_eq!((plan.create.len(), plan.delete.len()), (1, 1));
        let slices = apply(vec![], reconcile(&template(), vec![], vec![(http(), eps.clone())], 100));
        let mut https = http();
        https[0].port = Some(443);
        let plan = reconcile(&template(), slices, vec![(https, eps)], 100);
        assert_eq!((plan.create.len(), plan.delete.len()), (1, 1));
    }
}
