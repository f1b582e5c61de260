//! `/metrics/resource`: the kubelet's resource metrics in the Prometheus text format, from a
//! [`Summary`], with Kubernetes 1.33's metric names, help texts, labels and sample timestamps
//! (the time each value was measured, in milliseconds), as metrics-server reads them:
//! `node_cpu_usage_seconds_total`, `node_memory_working_set_bytes`,
//! `pod_cpu_usage_seconds_total`, `pod_memory_working_set_bytes` (`namespace`, `pod`),
//! `container_cpu_usage_seconds_total`, `container_memory_working_set_bytes`,
//! `container_start_time_seconds` (`container`, `namespace`, `pod`), and `scrape_error` /
//! `resource_scrape_error` (1 when some source failed).
//!
//! Written by hand rather than through `prometheus-client`: these are per-scrape custom
//! collections with explicit sample timestamps, which that crate's registry does not model.

use std::fmt::Write;

use super::summary::Summary;

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn header(out: &mut String, name: &str, stability: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} [{stability}] {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64, time_ns: i64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value} {}", time_ns.div_euclid(1_000_000));
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Renders the resource metrics of `summary`; `errors` > 0 sets the scrape error gauges.
pub fn render(summary: &Summary, errors: u32) -> String {
    let mut out = String::with_capacity(256 + summary.pods.len() * 1024);
    let pods = &summary.pods;
    let containers = || {
        pods.iter().flat_map(|p| {
            p.containers.iter().map(move |c| {
                (
                    c,
                    [
                        ("container", c.name.as_str()),
                        ("namespace", p.pod_ref.namespace.as_str()),
                        ("pod", p.pod_ref.name.as_str()),
                    ],
                )
            })
        })
    };
    header(
        &mut out,
        "container_cpu_usage_seconds_total",
        "STABLE",
        "Cumulative cpu time consumed by the container in core-seconds",
        "counter",
    );
    for (c, labels) in containers() {
        if let Some(cpu) = c.cpu
            && let Some(v) = cpu.usage_core_nano_seconds
        {
            sample(&mut out, "container_cpu_usage_seconds_total", &labels, seconds(v), cpu.time);
        }
    }
    header(
        &mut out,
        "container_memory_working_set_bytes",
        "STABLE",
        "Current working set of the container in bytes",
        "gauge",
    );
    for (c, labels) in containers() {
        if let Some(m) = c.memory
            && let Some(v) = m.working_set_bytes
        {
            sample(&mut out, "container_memory_working_set_bytes", &labels, v as f64, m.time);
        }
    }
    header(
        &mut out,
        "container_start_time_seconds",
        "STABLE",
        "Start time of the container since unix epoch in seconds",
        "gauge",
    );
    for (c, labels) in containers() {
        sample(&mut out, "container_start_time_seconds", &labels, c.start_time as f64 / 1e9, c.start_time);
    }
    header(
        &mut out,
        "node_cpu_usage_seconds_total",
        "STABLE",
        "Cumulative cpu time consumed by the node in core-seconds",
        "counter",
    );
    if let Some(cpu) = summary.node.cpu
        && let Some(v) = cpu.usage_core_nano_seconds
    {
        sample(&mut out, "node_cpu_usage_seconds_total", &[], seconds(v), cpu.time);
    }
    header(&mut out, "node_memory_working_set_bytes", "STABLE", "Current working set of the node in bytes", "gauge");
    if let Some(m) = summary.node.memory
        && let Some(v) = m.working_set_bytes
    {
        sample(&mut out, "node_memory_working_set_bytes", &[], v as f64, m.time);
    }
    header(
        &mut out,
        "pod_cpu_usage_seconds_total",
        "STABLE",
        "Cumulative cpu time consumed by the pod in core-seconds",
        "counter",
    );
    for p in pods {
        if let Some(cpu) = p.cpu
            && let Some(v) = cpu.usage_core_nano_seconds
        {
            let labels = [("namespace", p.pod_ref.namespace.as_str()), ("pod", p.pod_ref.name.as_str())];
            sample(&mut out, "pod_cpu_usage_seconds_total", &labels, seconds(v), cpu.time);
        }
    }
    header(&mut out, "pod_memory_working_set_bytes", "STABLE", "Current working set of the pod in bytes", "gauge");
    for p in pods {
        if let Some(m) = p.memory
            && let Some(v) = m.working_set_bytes
        {
            let labels = [("namespace", p.pod_ref.namespace.as_str()), ("pod", p.pod_ref.name.as_str())];
            sample(&mut out, "pod_memory_working_set_bytes", &labels, v as f64, m.time);
        }
    }
    let error = if errors > 0 { 1 } else { 0 };
    header(
        &mut out,
        "resource_scrape_error",
        "STABLE",
        "1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    );
    let _ = writeln!(out, "resource_scrape_error {error}");
    header(
        &mut out,
        "scrape_error",
        "ALPHA",
        "1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    );
    let _ = writeln!(out, "scrape_error {error}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{ContainerStats, CpuStats, MemoryStats, NodeStats, PodReference, PodStats};

    fn summary() -> Summary {
        let cpu = |ns| Some(CpuStats { time: 1_700_000_000_123_000_000, usage_core_nano_seconds: Some(ns) });
        let mem =
            |b| Some(MemoryStats { time: 1_700_000_000_456_000_000, working_set_bytes: Some(b), ..Default::default() });
        Summary {
            node: NodeStats {
                node_name: "n1".into(),
                start_time: 0,
                cpu: cpu(1_500_000_000),
                memory: mem(4096),
                rlimit: None,
            },
            pods: vec![PodStats {
                pod_ref: PodReference { name: "web".into(), namespace: "default".into(), uid: "u".into() },
                start_time: 0,
                containers: vec![ContainerStats {
                    name: "app".into(),
                    start_time: 1_600_000_000_000_000_000,
                    cpu: cpu(250_000_000),
                    memory: mem(1024),
                }],
                cpu: cpu(300_000_000),
                memory: None,
                process_stats: None,
            }],
        }
    }

    #[test]
    fn samples_carry_upstream_names_labels_and_timestamps() {
        let text = render(&summary(), 0);
        for line in [
            "# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds",
            "# TYPE node_cpu_usage_seconds_total counter",
            "node_cpu_usage_seconds_total 1.5 1700000000123",
            "node_memory_working_set_bytes 4096 1700000000456",
            r#"container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 0.25 1700000000123"#,
            r#"container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 1024 1700000000456"#,
            r#"container_start_time_seconds{container="app",namespace="default",pod="web"} 1600000000 1600000000000"#,
            r#"pod_cpu_usage_seconds_total{namespace="default",pod="web"} 0.3 1700000000123"#,
            "resource_scrape_error 0",
            "scrape_error 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("pod_memory_working_set_bytes{"), "a pod without memory has no sample:\n{text}");
    }

    #[test]
    fn errors_set_the_scrape_error_gauges() {
        let text = render(&summary(), 3);
        assert!(text.lines().any(|l| l == "resource_scrape_error 1"), "{text}");
    }

    #[test]
    fn what_the_kubelet_renders_the_metrics_server_reads_back() {
        // Same reading rules as skiff-apiserver's decoder: every sample line is name{labels} value ts.
        for line in render(&summary(), 0).lines().filter(|l| !l.starts_with('#')) {
            let fields: Vec<&str> = line.rsplitn(3, ' ').collect();
            assert!(fields.len() >= 2 && fields[fields.len() - 2].parse::<f64>().is_ok(), "{line}");
        }
    }
}
