//! Node-level usage when the cgroup v2 root does not have it: `/proc/stat` (cumulative CPU,
//! boot time) and `/proc/meminfo` (the node's working set as the kubelet's cadvisor computes it
//! for the root cgroup: usage − inactive file pages, usage being total − free).

/// USER_HZ: the unit of `/proc/stat`'s CPU times (100 on every Linux ABI skiff runs on).
const USER_HZ: u64 = 100;

/// Cumulative busy CPU of all cores (the `cpu` line less `idle` and `iowait`), nanoseconds.
pub fn proc_stat_cpu_ns(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    if fields.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let busy: u64 = fields.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| *v).sum();
    busy.checked_mul(1_000_000_000 / USER_HZ)
}

/// `btime` of `/proc/stat`: boot time, Unix seconds.
pub fn proc_stat_boot_time(text: &str) -> Option<i64> {
    text.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// The node's memory from `/proc/meminfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeMemory {
    /// MemTotal, bytes.
    pub capacity: u64,
    /// MemTotal − MemFree, bytes.
    pub usage: u64,
    /// usage − Inactive(file), bytes.
    pub working_set: u64,
}

/// Parses `/proc/meminfo` (`Key:   N kB` lines).
pub fn meminfo(text: &str) -> Option<NodeMemory> {
    let get = |key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.split(':').next() == Some(key))?;
        let mut f = line.split(':').nth(1)?.split_whitespace();
        let v: u64 = f.next()?.parse().ok()?;
        match f.next() {
            Some("kB") => v.checked_mul(1024),
            None => Some(v),
            Some(_) => None,
        }
    };
    let total = get("MemTotal")?;
    let free = get("MemFree")?;
    let inactive_file = get("Inactive(file)").unwrap_or(0);
    let usage = total.saturating_sub(free);
    Some(NodeMemory { capacity: total, usage, working_set: usage.saturating_sub(inactive_file) })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0\ncpu0 1393280 32966 572056 13366730 5 0 1 0 0 0\nintr 199292 0\nctxt 3453823\nbtime 1764684000\nprocesses 26442\nprocs_running 2\n";
    const MEMINFO: &str = "MemTotal:        8129012 kB\nMemFree:          245424 kB\nMemAvailable:    5119812 kB\nBuffers:          342052 kB\nCached:          4300124 kB\nActive(file):    2306920 kB\nInactive(file):  2266652 kB\n";

    #[test]
    fn proc_stat_gives_busy_cpu_and_boot_time() {
        let busy = 10_132_153u64 + 290_696 + 3_084_719 + 25_195;
        assert_eq!(proc_stat_cpu_ns(STAT), Some(busy * 10_000_000));
        assert_eq!(proc_stat_boot_time(STAT), Some(1_764_684_000));
    }

    #[test]
    fn meminfo_gives_the_working_set() {
        let m = meminfo(MEMINFO).unwrap();
        assert_eq!(m.capacity, 8_129_012 * 1024);
        assert_eq!(m.usage, (8_129_012 - 245_424) * 1024);
        assert_eq!(m.working_set, (8_129_012 - 245_424 - 2_266_652) * 1024);
    }

    #[test]
    fn corrupt_proc_files_give_nothing() {
        for text in ["", "cpu", "cpu a b c d", "cpu 1 2", "intr 1\n"] {
            assert_eq!(proc_stat_cpu_ns(text), None, "{text:?}");
        }
        assert_eq!(proc_stat_boot_time("btime soon\n"), None);
        for text in ["", "MemTotal: 1 kB\n", "MemTotal: x kB\nMemFree: 1 kB\n", "MemTotal: 1 MB\nMemFree: 1 kB\n"] {
            assert_eq!(meminfo(text), None, "{text:?}");
        }
    }
}
