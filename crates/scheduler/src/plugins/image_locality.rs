//! ImageLocality: prefers nodes that already hold the pod's images, weighted by image size and
//! damped by how many nodes hold them (so a popular image does not pull every pod to one node).

use std::sync::Arc;

use crate::framework::{
    CycleState, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, PreScorePlugin, ScorePlugin, Snapshot, Status,
    normalized_image_name,
};

use super::names;

const MB: i64 = 1024 * 1024;
/// Below this sum the score is 0.
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, above this sum the score is maximal.
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;
const PRE_SCORE_KEY: &str = "PreScoreImageLocality";

/// The ImageLocality plugin.
pub struct ImageLocality;

#[derive(Clone)]
struct TotalNodes(usize);

impl Plugin for ImageLocality {
    fn name(&self) -> &str {
        names::IMAGE_LOCALITY
    }
    crate::extension_points!(pre_score, score);
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        state.write(PRE_SCORE_KEY, TotalNodes(snapshot.num_nodes()));
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let total = state.read::<TotalNodes>(PRE_SCORE_KEY).map_or(1, |t| t.0.max(1));
        let Some(spec) = pod.pod.spec.as_ref() else { return Ok(0) };
        let states = node.image_states();
        let mut sum = 0i64;
        let mut containers = 0i64;
        for c in spec.init_containers.iter().flatten().chain(spec.containers.iter()) {
            containers += 1;
            if states.is_empty() {
                continue;
            }
            let Some(image) = c.image.as_deref() else { continue };
            if let Some(s) = states.get(&normalized_image_name(image)) {
                sum += (s.size as f64 * (s.num_nodes as f64 / total as f64)) as i64;
            }
        }
        let max = MAX_CONTAINER_THRESHOLD * containers.max(1);
        let clamped = sum.clamp(MIN_THRESHOLD, max);
        Ok(MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) / (max - MIN_THRESHOLD))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::ImageStateSummary;
    use crate::testing::{make_node, make_pod, node_info};
    use std::collections::HashMap;

    fn check(images_on_node: &[(&str, i64, usize)], total_nodes: usize, pod_images: &[&str], want: i64) {
        let mut ni = node_info(make_node("n").obj(), &[]);
        ni.set_image_states(
            images_on_node
                .iter()
                .map(|(n, size, nodes)| (n.to_string(), ImageStateSummary { size: *size, num_nodes: *nodes }))
                .collect::<HashMap<_, _>>(),
        );
        let mut pod = make_pod("p");
        for i in pod_images {
            pod = pod.container_image(i);
        }
        let mut state = CycleState::new();
        state.write(PRE_SCORE_KEY, TotalNodes(total_nodes));
        assert_eq!(ImageLocality.score(&state, &pod.info(), &ni).unwrap(), want);
    }

    #[test]
    fn larger_and_more_widespread_local_images_score_higher() {
        check(&[], 1, &["nginx"], 0);
        check(&[("nginx:latest", 500 * MB, 1)], 1, &["nginx"], 48);
        check(&[("nginx:latest", 500 * MB, 1)], 2, &["nginx"], 23);
        check(&[("nginx:latest", 2000 * MB, 1)], 1, &["nginx"], 100);
        check(&[("nginx:latest", 10 * MB, 1)], 1, &["nginx"], 0);
        check(&[("nginx:1.25", 500 * MB, 1)], 1, &["nginx"], 0);
    }
}
