//! PrioritySort: activeQ order — higher `spec.priority` first, then earlier queue time.

use crate::framework::{Plugin, QueueSortPlugin, QueuedPodInfo};

use super::names;

/// The PrioritySort plugin (`queuesort.PrioritySort`).
pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &str {
        names::PRIORITY_SORT
    }
    crate::extension_points!(queue_sort);
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (a.pod_info.priority, b.pod_info.priority);
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::make_pod;
    use std::time::{Duration, Instant};

    fn check(a: (i32, u64), b: (i32, u64), want: bool) {
        let t0 = Instant::now();
        let qa = QueuedPodInfo::new(make_pod("a").priority(a.0).info(), t0 + Duration::from_secs(a.1));
        let qb = QueuedPodInfo::new(make_pod("b").priority(b.0).info(), t0 + Duration::from_secs(b.1));
        assert_eq!(PrioritySort.less(&qa, &qb), want, "{a:?} < {b:?}");
    }

    #[test]
    fn higher_priority_then_earlier_timestamp_goes_first() {
        check((10, 5), (0, 0), true);
        check((0, 0), (10, 5), false);
        check((5, 1), (5, 2), true);
        check((5, 2), (5, 1), false);
    }
}
