//! Reading a cgroup v2 directory's usage files
//! (<https://docs.kernel.org/admin-guide/cgroup-v2.html>): `cpu.stat` (`usage_usec`),
//! `memory.current`, `memory.stat` (`inactive_file`, for the working set), `io.stat` and
//! `pids.current`.
//!
//! Every file is optional — a hybrid host has no memory controller in its v2 hierarchy, a
//! cgroup can vanish between two reads — and every parser takes untrusted text: a missing,
//! unreadable or malformed file leaves its fields `None` and is counted in
//! [`CgroupStats::errors`], never a panic.

use std::path::Path;

/// What could be read of one cgroup. `None`: the file is absent or did not parse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// `cpu.stat` `usage_usec`, in nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    /// `memory.current`, bytes.
    pub memory_usage_bytes: Option<u64>,
    /// Working set, bytes: `memory.current` − `memory.stat inactive_file` (never below 0), as
    /// the kubelet (cadvisor) computes it.
    pub memory_working_set_bytes: Option<u64>,
    /// `memory.stat` `anon` (the RSS the Summary reports), bytes.
    pub memory_rss_bytes: Option<u64>,
    /// `memory.stat` `pgfault` and `pgmajfault`.
    pub page_faults: Option<(u64, u64)>,
    /// `io.stat`, summed over devices.
    pub io: Option<IoStat>,
    /// `pids.current`.
    pub pids: Option<u64>,
    /// Files that exist but could not be read or parsed.
    pub errors: u32,
}

/// `io.stat` totals over every device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStat {
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Read operations.
    pub read_ios: u64,
    /// Write operations.
    pub write_ios: u64,
}

/// A malformed file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed cgroup file: {0}")]
pub struct ParseError(pub String);

/// `key value` lines (`cpu.stat`, `memory.stat`): the value of `key`.
///
/// # Errors
/// When a line for `key` has no number, or no line names it.
pub fn flat_keyed(text: &str, key: &str) -> Result<u64, ParseError> {
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if f.next() == Some(key) {
            return f.next().and_then(|v| v.parse().ok()).ok_or_else(|| ParseError(format!("{key}: {line:?}")));
        }
    }
    Err(ParseError(format!("no {key}")))
}

/// A single-value file (`memory.current`, `pids.current`).
///
/// # Errors
/// When the text is not one unsigned number.
pub fn single_value(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    t.parse().map_err(|_| ParseError(format!("not a number: {t:?}")))
}

/// `io.stat`: `MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N` per device, summed.
/// Unknown keys are ignored (kernels add them).
///
/// # Errors
/// When a line has no device number or a value that is not a number.
pub fn io_stat(text: &str) -> Result<IoStat, ParseError> {
    let mut total = IoStat::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.split_whitespace();
        let device = fields.next().unwrap_or_default();
        if !device.split_once(':').is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok()) {
            return Err(ParseError(format!("io.stat device: {line:?}")));
        }
        for kv in fields {
            let Some((k, v)) = kv.split_once('=') else { return Err(ParseError(format!("io.stat: {kv:?}"))) };
            let v: u64 = v.parse().map_err(|_| ParseError(format!("io.stat: {kv:?}")))?;
            let slot = match k {
                "rbytes" => &mut total.read_bytes,
                "wbytes" => &mut total.write_bytes,
                "rios" => &mut total.read_ios,
                "wios" => &mut total.write_ios,
                _ => continue,
            };
            *slot = slot.saturating_add(v);
        }
    }
    Ok(total)
}

/// Reads `dir/name`; `None` when absent, `Err` when present but unreadable.
fn read(dir: &Path, name: &str, buf: &mut String) -> Option<Result<(), ()>> {
    use std::io::Read;
    buf.clear();
    match std::fs::File::open(dir.join(name)) {
        Ok(mut f) => Some(f.read_to_string(buf).map(|_| ()).map_err(|_| ())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(_) => Some(Err(())),
    }
}

/// Reads what there is of a cgroup v2 directory. `None` when the directory does not exist.
pub fn read_cgroup(dir: &Path) -> Option<CgroupStats> {
    if !dir.is_dir() {
        return None;
    }
    let mut s = CgroupStats::default();
    let mut buf = String::with_capacity(1024);
    let mut take = |name: &str, s: &mut CgroupStats, f: &mut dyn FnMut(&str, &mut CgroupStats) -> bool| match read(
        dir, name, &mut buf,
    ) {
        None => {}
        Some(Err(())) => s.errors += 1,
        Some(Ok(())) if !f(&buf, s) => s.errors += 1,
        Some(Ok(())) => {}
    };
    take("cpu.stat", &mut s, &mut |t, s| {
        s.cpu_usage_ns = flat_keyed(t, "usage_usec").ok().and_then(|us| us.checked_mul(1000));
        s.cpu_usage_ns.is_some()
    });
    take("memory.current", &mut s, &mut |t, s| {
        s.memory_usage_bytes = single_value(t).ok();
        s.memory_usage_bytes.is_some()
    });
    take("memory.stat", &mut s, &mut |t, s| {
        let inactive = flat_keyed(t, "inactive_file").ok();
        s.memory_rss_bytes = flat_keyed(t, "anon").ok();
        s.page_faults = flat_keyed(t, "pgfault").ok().zip(flat_keyed(t, "pgmajfault").ok());
        if let (Some(usage), Some(inactive)) = (s.memory_usage_bytes, inactive) {
            s.memory_working_set_bytes = Some(usage.saturating_sub(inactive));
        }
        inactive.is_some()
    });
    take("io.stat", &mut s, &mut |t, s| {
        s.io = io_stat(t).ok();
        s.io.is_some()
    });
    take("pids.current", &mut s, &mut |t, s| {
        s.pids = single_value(t).ok();
        s.pids.is_some()
    });
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Samples read from a Linux 6.x cgroup v2 hierarchy.
    const CPU_STAT: &str = "usage_usec 1693429\nuser_usec 1147390\nsystem_usec 546038\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n";
    const MEMORY_STAT: &str = "anon 1646592\nfile 2838528\nkernel 512000\nkernel_stack 32768\npagetables 61440\nsec_pagetables 0\npercpu 1440\nsock 0\nvmalloc 0\nshmem 0\nzswap 0\nzswapped 0\nfile_mapped 1490944\nfile_dirty 0\nfile_writeback 0\nswapcached 0\nanon_thp 0\nfile_thp 0\nshmem_thp 0\ninactive_anon 1609728\nactive_anon 36864\ninactive_file 1179648\nactive_file 1658880\nunevictable 0\nslab_reclaimable 130216\nslab_unreclaimable 160392\nslab 290608\nworkingset_refault_anon 0\nworkingset_refault_file 0\npgfault 2941\npgmajfault 9\n";
    const IO_STAT: &str = "254:0 rbytes=2531328 wbytes=4096 rios=94 wios=1 dbytes=0 dios=0\n8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0 cost.usage=5\n";

    fn cgroup(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn a_full_cgroup_gives_cpu_memory_working_set_io_and_pids() {
        let dir = cgroup(&[
            ("cpu.stat", CPU_STAT),
            ("memory.current", "5308416\n"),
            ("memory.stat", MEMORY_STAT),
            ("io.stat", IO_STAT),
            ("pids.current", "3\n"),
        ]);
        let s = read_cgroup(dir.path()).unwrap();
        assert_eq!(s.cpu_usage_ns, Some(1_693_429_000));
        assert_eq!(s.memory_usage_bytes, Some(5_308_416));
        assert_eq!(s.memory_working_set_bytes, Some(5_308_416 - 1_179_648));
        assert_eq!(s.memory_rss_bytes, Some(1_646_592));
        assert_eq!(s.page_faults, Some((2941, 9)));
        assert_eq!(s.io, Some(IoStat { read_bytes: 2_535_424, write_bytes: 12_288, read_ios: 95, write_ios: 3 }));
        assert_eq!(s.pids, Some(3));
        assert_eq!(s.errors, 0);
    }

    #[test]
    fn a_hybrid_hosts_v2_cgroup_has_cpu_only() {
        // cgroup v2 always has cpu.stat; the memory and pids controllers may be bound to v1.
        let dir = cgroup(&[("cpu.stat", CPU_STAT)]);
        let s = read_cgroup(dir.path()).unwrap();
        assert_eq!(s.cpu_usage_ns, Some(1_693_429_000));
        assert_eq!((s.memory_usage_bytes, s.memory_working_set_bytes, s.pids, s.errors), (None, None, None, 0));
    }

    #[test]
    fn corrupt_files_are_counted_and_leave_their_fields_empty() {
        let dir = cgroup(&[
            ("cpu.stat", "usage_usec lots\n"),
            ("memory.current", "\u{0}\u{1}garbage"),
            ("memory.stat", "anon\n"),
            ("io.stat", "sda rbytes=1\n"),
            ("pids.current", "-1\n"),
        ]);
        let s = read_cgroup(dir.path()).unwrap();
        assert_eq!(s, CgroupStats { errors: 5, ..Default::default() });
    }

    #[test]
    fn inactive_file_above_usage_gives_a_zero_working_set() {
        let dir = cgroup(&[("memory.current", "100\n"), ("memory.stat", "inactive_file 4096\n")]);
        assert_eq!(read_cgroup(dir.path()).unwrap().memory_working_set_bytes, Some(0));
    }

    #[test]
    fn truncated_and_empty_files_do_not_panic() {
        for cut in 0..CPU_STAT.len() {
            let _ = flat_keyed(&CPU_STAT[..cut], "usage_usec");
        }
        for cut in 0..IO_STAT.len() {
            let _ = io_stat(&IO_STAT[..cut]);
        }
        let dir = cgroup(&[("cpu.stat", ""), ("memory.current", ""), ("io.stat", "")]);
        let s = read_cgroup(dir.path()).unwrap();
        assert_eq!(s.io, Some(IoStat::default()), "an empty io.stat is a cgroup without I/O");
        assert_eq!(s.errors, 2);
    }

    #[test]
    fn a_missing_directory_is_none_and_huge_values_saturate() {
        assert_eq!(read_cgroup(Path::new("/nonexistent/cgroup")), None);
        assert_eq!(flat_keyed("usage_usec 18446744073709551615", "usage_usec"), Ok(u64::MAX));
        let dir = cgroup(&[("cpu.stat", "usage_usec 18446744073709551615\n")]);
        let s = read_cgroup(dir.path()).unwrap();
        assert_eq!((s.cpu_usage_ns, s.errors), (None, 1), "overflowing microseconds are corrupt, not wrapped");
    }
}
