//! Reading container logs written by the runtime in the CRI log format
//! (`<RFC3339Nano timestamp> <stdout|stderr> <P|F> <content>`), with the options of
//! `kubectl logs`: tail, since, timestamps, limit bytes.
//!
//! Reference: the CRI logging format
//! (<https://github.com/kubernetes/design-proposals-archive/blob/main/node/kubelet-cri-logging.md>)
//! and `PodLogOptions`.

use std::path::Path;

use k8s_openapi::jiff::Timestamp;

/// One parsed log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// When the runtime captured the line.
    pub timestamp: Timestamp,
    /// The raw timestamp text as written by the runtime.
    pub timestamp_text: String,
    /// "stdout" or "stderr".
    pub stream: String,
    /// True for a full line ("F"), false for a partial one ("P").
    pub full: bool,
    /// The content, without the trailing newline.
    pub content: String,
}

/// Parses one CRI log line; `None` for malformed lines.
pub fn parse_line(line: &str) -> Option<LogLine> {
    let mut parts = line.splitn(4, ' ');
    let ts = parts.next()?;
    let stream = parts.next()?;
    let tag = parts.next()?;
    let content = parts.next().unwrap_or_default();
    let timestamp: Timestamp = ts.parse().ok()?;
    if stream != "stdout" && stream != "stderr" {
        return None;
    }
    Some(LogLine {
        timestamp,
        timestamp_text: ts.to_string(),
        stream: stream.to_string(),
        full: !tag.split(':').any(|t| t == "P"),
        content: content.to_string(),
    })
}

/// Options of a log read (a subset of `PodLogOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Only the last N lines.
    pub tail_lines: Option<usize>,
    /// Only lines at or after this time.
    pub since: Option<Timestamp>,
    /// Prefix each line with its RFC3339Nano timestamp.
    pub timestamps: bool,
    /// Stop after this many bytes.
    pub limit_bytes: Option<usize>,
}

/// Renders parsed lines as `kubectl logs` prints them (partial lines joined with the next).
pub fn render(lines: &[LogLine], opts: &LogOptions) -> Vec<u8> {
    let mut complete: Vec<(String, String)> = Vec::new();
    let mut pending: Option<(String, String)> = None;
    for l in lines {
        if opts.since.is_some_and(|s| l.timestamp < s) {
            continue;
        }
        let entry = pending.get_or_insert_with(|| (l.timestamp_text.clone(), String::new()));
        entry.1.push_str(&l.content);
        if l.full
            && let Some(done) = pending.take()
        {
            complete.push(done);
        }
    }
    if let Some(p) = pending {
        complete.push(p);
    }
    let start = opts.tail_lines.map(|n| complete.len().saturating_sub(n)).unwrap_or(0);
    let mut out = Vec::new();
    for (ts, content) in &complete[start..] {
        if opts.timestamps {
            out.extend_from_slice(ts.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(content.as_bytes());
        out.push(b'\n');
        if let Some(limit) = opts.limit_bytes
            && out.len() >= limit
        {
            out.truncate(limit);
            break;
        }
    }
    out
}

/// Reads and renders a container log file.
///
/// # Errors
/// The I/O error when the file cannot be read.
pub fn read_log_file(path: &Path, opts: &LogOptions) -> std::io::Result<Vec<u8>> {
    let text = std::fs::read_to_string(path)?;
    let lines: Vec<LogLine> = text.lines().filter_map(parse_line).collect();
    Ok(render(&lines, opts))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "2024-01-01T00:00:00.000000001Z stdout F hello\n\
                       2024-01-01T00:00:01.5Z stderr P par\n\
                       2024-01-01T00:00:01.6Z stderr F tial\n\
                       garbage line\n\
                       2024-01-01T00:00:02Z stdout F last\n";

    fn lines() -> Vec<LogLine> {
        LOG.lines().filter_map(parse_line).collect()
    }

    #[test]
    fn cri_lines_parse_and_malformed_ones_are_skipped() {
        let l = lines();
        assert_eq!(l.len(), 4);
        assert_eq!(l[0].stream, "stdout");
        assert!(l[0].full);
        assert!(!l[1].full);
    }

    #[test]
    fn partial_lines_are_joined() {
        assert_eq!(String::from_utf8_lossy(&render(&lines(), &LogOptions::default())), "hello\npartial\nlast\n");
    }

    #[test]
    fn tail_since_timestamps_and_limit_apply() {
        let l = lines();
        let tail = render(&l, &LogOptions { tail_lines: Some(1), ..Default::default() });
        assert_eq!(String::from_utf8_lossy(&tail), "last\n");
        let since: Timestamp = "2024-01-01T00:00:01Z".parse().unwrap_or(Timestamp::UNIX_EPOCH);
        let s = render(&l, &LogOptions { since: Some(since), ..Default::default() });
        assert_eq!(String::from_utf8_lossy(&s), "partial\nlast\n");
        let ts = render(&l, &LogOptions { timestamps: true, tail_lines: Some(1), ..Default::default() });
        assert_eq!(String::from_utf8_lossy(&ts), "2024-01-01T00:00:02Z last\n");
        let limited = render(&l, &LogOptions { limit_bytes: Some(3), ..Default::default() });
        assert_eq!(String::from_utf8_lossy(&limited), "hel");
    }
}
