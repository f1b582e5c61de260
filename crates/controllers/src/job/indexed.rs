//! Indexed Jobs (`pkg/controller/job/indexed_job_utils.go`): the completion index of a pod, the
//! `completedIndexes` interval string, and what a pod of index `i` looks like.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};

/// The annotation (and label) carrying a pod's completion index.
pub const JOB_COMPLETION_INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";
/// The environment variable every container of an Indexed Job's pod gets its index in.
pub const JOB_COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// `getCompletionIndex`: the pod's index from its annotation (or label); `None` when missing or
/// not a non-negative integer.
pub fn completion_index(pod: &Pod) -> Option<i32> {
    let from = |m: Option<&std::collections::BTreeMap<String, String>>| {
        m.and_then(|m| m.get(JOB_COMPLETION_INDEX_ANNOTATION)).and_then(|v| v.parse::<i32>().ok())
    };
    from(pod.metadata.annotations.as_ref()).or_else(|| from(pod.metadata.labels.as_ref())).filter(|i| *i >= 0)
}

/// The annotation counting the earlier failures of a pod's index that counted towards
/// `backoffLimitPerIndex` (`JobIndexFailureCountAnnotation`).
pub const JOB_INDEX_FAILURE_COUNT_ANNOTATION: &str = "batch.kubernetes.io/job-index-failure-count";
/// The annotation counting the earlier failures of a pod's index that a pod failure policy
/// ignored (`JobIndexIgnoredFailureCountAnnotation`).
pub const JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION: &str = "batch.kubernetes.io/job-index-ignored-failure-count";

fn annotation_count(pod: &Pod, key: &str) -> i32 {
    // A missing, unparsable or negative value counts as 0, as `parseInt32` does.
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|n| *n >= 0)
        .unwrap_or(0)
}

/// `getIndexFailureCount`: the counted failures of the pod's index before this pod.
pub fn index_failure_count(pod: &Pod) -> i32 {
    annotation_count(pod, JOB_INDEX_FAILURE_COUNT_ANNOTATION)
}

/// `getIndexAbsoluteFailureCount`: every failure of the pod's index before this pod, counted or
/// ignored.
pub fn index_absolute_failure_count(pod: &Pod) -> i32 {
    index_failure_count(pod).saturating_add(annotation_count(pod, JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION))
}

/// `addIndexFailureCountAnnotation`: the failure counts a replacement of `replaced` (a failed pod
/// of the same index, `counted` towards the limit or ignored) starts with; `(0, 0)` for an
/// index's first pod.
pub fn stamp_failure_counts(pod: &mut Pod, replaced: Option<(&Pod, bool)>) {
    let (failed, ignored) = match replaced {
        None => (0, 0),
        Some((p, true)) => {
            (index_failure_count(p) + 1, annotation_count(p, JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION))
        }
        Some((p, false)) => {
            (index_failure_count(p), annotation_count(p, JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION) + 1)
        }
    };
    let annotations = pod.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(JOB_INDEX_FAILURE_COUNT_ANNOTATION.into(), failed.to_string());
    if ignored > 0 {
        annotations.insert(JOB_INDEX_IGNORED_FAILURE_COUNT_ANNOTATION.into(), ignored.to_string());
    }
}

/// Parses `status.completedIndexes` (`1,3-5,7`), keeping indexes below `completions`.
pub fn parse_indexes(text: Option<&str>, completions: i32) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in text.unwrap_or_default().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
            out.extend((a..=b).filter(|i| *i < completions));
        }
    }
    out
}

/// Formats indexes as `completedIndexes` does (`orderedIntervals.String()`): ascending, `a-b`
/// for every run of three or more consecutive indexes (a pair is written `a,b`).
pub fn format_indexes(indexes: &BTreeSet<i32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(match end - start {
            0 => start.to_string(),
            1 => format!("{start},{end}"),
            _ => format!("{start}-{end}"),
        });
    }
    parts.join(",")
}

/// `addCompletionIndexEnvVariables`, `addCompletionIndexAnnotation` and the pod hostname:
/// stamps index `index` of Job `job_name` on a pod built from the template.
pub fn stamp_index(pod: &mut Pod, job_name: &str, index: i32) {
    let i = index.to_string();
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(JOB_COMPLETION_INDEX_ANNOTATION.into(), i.clone());
    pod.metadata.labels.get_or_insert_with(Default::default).insert(JOB_COMPLETION_INDEX_ANNOTATION.into(), i);
    pod.metadata.generate_name = Some(format!("{job_name}-{index}-"));
    let Some(spec) = pod.spec.as_mut() else { return };
    if spec.hostname.is_none() {
        spec.hostname = Some(format!("{job_name}-{index}"));
    }
    let env = EnvVar {
        name: JOB_COMPLETION_INDEX_ENV.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: format!("metadata.annotations['{JOB_COMPLETION_INDEX_ANNOTATION}']"),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        let vars = c.env.get_or_insert_with(Vec::new);
        if !vars.iter().any(|v| v.name == JOB_COMPLETION_INDEX_ENV) {
            vars.push(env.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_round_trip_as_intervals() {
        let set = parse_indexes(Some("0,2-4,7"), 10);
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), [0, 2, 3, 4, 7]);
        assert_eq!(format_indexes(&set), "0,2-4,7");
        assert_eq!(format_indexes(&[5, 6].into_iter().collect()), "5,6");
        assert_eq!(parse_indexes(Some("5,6"), 10).len(), 2);
    }

    #[test]
    fn a_replacement_pod_carries_the_failure_counts_of_its_index() {
        let mut failed = Pod::default();
        stamp_failure_counts(&mut failed, None);
        assert_eq!(index_failure_count(&failed), 0);
        let mut counted = Pod::default();
        stamp_failure_counts(&mut counted, Some((&failed, true)));
        assert_eq!((index_failure_count(&counted), index_absolute_failure_count(&counted)), (1, 1));
        let mut ignored = Pod::default();
        stamp_failure_counts(&mut ignored, Some((&counted, false)));
        assert_eq!((index_failure_count(&ignored), index_absolute_failure_count(&ignored)), (1, 2));
    }

    #[test]
    fn indexes_at_or_above_completions_are_dropped() {
        assert_eq!(parse_indexes(Some("1-5"), 3).into_iter().collect::<Vec<_>>(), [1, 2]);
    }
}
