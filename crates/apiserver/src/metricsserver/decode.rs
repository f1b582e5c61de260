//! Reading a kubelet's `/metrics/resource` (Prometheus text exposition format 0.0.4) into
//! samples, as metrics-server's `pkg/scraper/client/resource/decode.go` does: the node's and
//! each container's cumulative CPU (`*_cpu_usage_seconds_total`, core-seconds), working set
//! (`*_memory_working_set_bytes`) and start time (`container_start_time_seconds`), each with
//! its sample timestamp (milliseconds).
//!
//! A hand-written reader of the text format's sample lines: the one Rust parser crate
//! (`prometheus-parse`) has had no release since 2023 and brings `chrono` and `regex` for what
//! here is a line split and a label scanner. Lines it cannot read are skipped, never fatal: a
//! kubelet's answer is untrusted input.

use std::collections::HashMap;

use super::storage::{MetricsBatch, MetricsPoint};

/// One sample line: metric name, labels, value, optional timestamp (ms).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Label pairs in line order, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value (`NaN`, `+Inf`, `-Inf` allowed).
    pub value: f64,
    /// The timestamp, Unix milliseconds, if the line has one.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// Reads `{k="v",...}` from the start of `s`; returns the labels and the rest of the line.
fn parse_labels(s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut rest = s.strip_prefix('{')?;
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix('}') {
            return Some((labels, r));
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_string();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        rest = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.push((key, value));
        rest = rest[end + 1..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return None;
        }
    }
}

/// Parses one line; `None` for comments, blank lines and lines that are not a sample.
pub fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace()).unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        return None;
    }
    let (labels, rest) = if line[name_end..].starts_with('{') {
        parse_labels(&line[name_end..])?
    } else {
        (Vec::new(), &line[name_end..])
    };
    let mut fields = rest.split_whitespace();
    let value = parse_value(fields.next()?)?;
    let timestamp_ms = match fields.next() {
        Some(t) => Some(t.parse().ok()?),
        None => None,
    };
    if fields.next().is_some() {
        return None;
    }
    Some(Sample { name: name.to_string(), labels, value, timestamp_ms })
}

/// Every sample of a body, skipping what does not parse.
pub fn parse_text(text: &str) -> impl Iterator<Item = Sample> + '_ {
    text.lines().filter_map(parse_line)
}

#[derive(Default)]
struct Partial {
    start_ms: i64,
    cpu: Option<(u64, i64)>,
    memory: Option<u64>,
}

impl Partial {
    /// A point once CPU and memory are both known; the timestamp is the CPU sample's, as the
    /// rate is computed from it.
    fn point(&self) -> Option<MetricsPoint> {
        let (cpu, ts) = self.cpu?;
        Some(MetricsPoint {
            start_ms: self.start_ms,
            timestamp_ms: ts,
            cumulative_cpu_ns: cpu,
            memory_bytes: self.memory?,
        })
    }
}

/// A non-negative finite value, else `None` (a corrupt sample).
fn finite(v: f64) -> Option<f64> {
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// The node's and containers' points in the body of node `node`'s `/metrics/resource`.
/// `now_ms` stands in for a missing sample timestamp. Containers without both a CPU and a
/// memory sample, or with negative or non-finite values, are left out, as metrics-server
/// does.
pub fn decode_batch(node: &str, text: &str, now_ms: i64) -> MetricsBatch {
    let mut node_point = Partial::default();
    let mut containers: HashMap<(String, String, String), Partial> = HashMap::new();
    for s in parse_text(text) {
        let ts = s.timestamp_ms.unwrap_or(now_ms);
        let container_key = || -> Option<(String, String, String)> {
            Some((s.label("namespace")?.to_string(), s.label("pod")?.to_string(), s.label("container")?.to_string()))
        };
        match s.name.as_str() {
            "node_cpu_usage_seconds_total" => {
                if let Some(v) = finite(s.value) {
                    node_point.cpu = Some(((v * 1e9) as u64, ts));
                }
            }
            "node_memory_working_set_bytes" => node_point.memory = finite(s.value).map(|v| v as u64),
            "container_cpu_usage_seconds_total" => {
                if let (Some(k), Some(v)) = (container_key(), finite(s.value)) {
                    containers.entry(k).or_default().cpu = Some(((v * 1e9) as u64, ts));
                }
            }
            "container_memory_working_set_bytes" => {
                if let (Some(k), Some(v)) = (container_key(), finite(s.value)) {
                    containers.entry(k).or_default().memory = Some(v as u64);
                }
            }
            "container_start_time_seconds" => {
                if let (Some(k), Some(v)) = (container_key(), finite(s.value)) {
                    containers.entry(k).or_default().start_ms = (v * 1000.0) as i64;
                }
            }
            _ => {}
        }
    }
    let mut batch = MetricsBatch::default();
    if let Some(p) = node_point.point() {
        batch.nodes.insert(node.to_string(), p);
    }
    let mut keys: Vec<_> = containers.keys().cloned().collect();
    keys.sort();
    for key in keys {
        if let Some(p) = containers[&key].point() {
            let (ns, pod, container) = key;
            batch.pods.entry((ns, pod)).or_default().push((container, p));
        }
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBELET: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web-1"} 0.035062 1669950435121
container_cpu_usage_seconds_total{container="side",namespace="default",pod="web-1"} 2 1669950435121
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="default",pod="web-1"} 2.46897321e+08 1669950435121
container_memory_working_set_bytes{container="side",namespace="default",pod="web-1"} 1024 1669950435121
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="app",namespace="default",pod="web-1"} 1.6699504e+09 1669950400000
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 531271.893651 1669950438731
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 5.871231414e+09 1669950438731
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
"#;

    #[test]
    fn a_kubelet_answer_gives_the_node_and_container_points() {
        let b = decode_batch("n1", KUBELET, 0);
        let n = b.nodes["n1"];
        assert_eq!(n.cumulative_cpu_ns, 531_271_893_651_000);
        assert_eq!(n.memory_bytes, 5_871_231_414);
        assert_eq!(n.timestamp_ms, 1_669_950_438_731);
        let pod = &b.pods[&("default".to_string(), "web-1".to_string())];
        assert_eq!(pod.len(), 2);
        let (name, app) = &pod[0];
        assert_eq!(name, "app");
        assert_eq!(app.cumulative_cpu_ns, 35_062_000);
        assert_eq!(app.memory_bytes, 246_897_321);
        assert_eq!(app.start_ms, 1_669_950_400_000);
        assert_eq!(pod[1].1.start_ms, 0, "no start time sample: unknown");
    }

    #[test]
    fn labels_with_escapes_and_spaces_are_read() {
        let s = parse_line(r#"m{a="x\"y", b = "line\nbreak",c="back\\slash"} 1.5e3"#).unwrap();
        assert_eq!(s.label("a"), Some("x\"y"));
        assert_eq!(s.label("b"), Some("line\nbreak"));
        assert_eq!(s.label("c"), Some("back\\slash"));
        assert_eq!(s.value, 1500.0);
        assert_eq!(s.timestamp_ms, None);
    }

    #[test]
    fn garbage_lines_are_skipped_and_never_panic() {
        for line in [
            "",
            "# only a comment",
            "metric",
            "metric{",
            r#"metric{a="unterminated} 1"#,
            r#"metric{a=1} 1"#,
            "metric notanumber",
            "metric 1 notatimestamp",
            "metric 1 2 3",
            "{a=\"b\"} 1",
            "métric 1",
            "metric{=\"x\"} 1",
        ] {
            assert_eq!(parse_line(line), None, "{line:?}");
        }
    }

    #[test]
    fn a_container_without_memory_or_with_a_negative_value_is_left_out() {
        let text = r#"container_cpu_usage_seconds_total{container="a",namespace="n",pod="p"} 1 10
container_cpu_usage_seconds_total{container="b",namespace="n",pod="p"} -1 10
container_memory_working_set_bytes{container="b",namespace="n",pod="p"} 5 10
container_cpu_usage_seconds_total{container="c",namespace="n",pod="p"} NaN 10
container_memory_working_set_bytes{container="c",namespace="n",pod="p"} 5 10
container_cpu_usage_seconds_total{namespace="n",pod="p"} 1 10
node_cpu_usage_seconds_total +Inf 10
node_memory_working_set_bytes 5 10
"#;
        let b = decode_batch("n1", text, 0);
        assert!(b.pods.is_empty(), "{b:?}");
        assert!(b.nodes.is_empty(), "{b:?}");
    }

    #[test]
    fn a_sample_without_timestamp_is_taken_now() {
        let b = decode_batch("n1", "node_cpu_usage_seconds_total 2\nnode_memory_working_set_bytes 3\n", 777);
        assert_eq!(b.nodes["n1"].timestamp_ms, 777);
    }
}
