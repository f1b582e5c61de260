//! Log verbosity and format of `skiff server` and `skiff agent`, with the flags of the
//! Kubernetes components (component-base `logs`: `-v`/`--v`, `--vmodule`, `--logging-format`)
//! mapped onto `tracing` filters.
//!
//! klog levels become per-crate `tracing` levels, following the Kubernetes logging
//! conventions (<https://github.com/kubernetes/community/blob/master/contributors/devel/sig-instrumentation/logging.md>):
//!
//! | `-v` | shown (besides `info` and above everywhere) |
//! |------|---------------------------------------------|
//! | 0-1  | nothing more                                 |
//! | 2    | reconcile decisions: `debug` of the controllers, scheduler, kubelet, node proxy and DNS (one line per decision: "too few replicas", "bound pod to node", ...) |
//! | 4    | request-level detail: `debug` of every skiff crate (the API server's per-request `HTTP` line, store, informers, admission) |
//! | 6    | API calls: `debug` of kube's client (each request a component makes) and `trace` of skiff |
//! | 8+   | everything at `trace`, HTTP/TLS libraries included |
//!
//! `--vmodule=COMPONENT=N,...` sets one component's level by the same table: components are
//! `apiserver`, `store`, `controller-manager` (or `controllers`), `scheduler`, `kubelet` (or
//! `agent`), `proxy`, `dns`, `runtime`, `admission`, `auth`, `kube-client`; any other name is
//! taken as a `tracing` target (a Rust module path such as `skiff_controllers::deployment`).
//! Without `-v`/`--vmodule`, `RUST_LOG` (tracing's `EnvFilter` syntax) is honoured, else `info`.
//! `--logging-format=json` writes one JSON object per line (tracing-subscriber's `json`
//! formatter), as component-base's JSON logger.

use tracing_subscriber::EnvFilter;

/// The logging flags shared by `skiff server` and `skiff agent`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LoggingArgs {
    /// Log verbosity (klog's `-v`): 2 shows reconcile decisions, 4 request-level detail, 6 the
    /// API calls components make, 8 everything.
    #[arg(short = 'v', long = "v", value_name = "LEVEL", default_value_t = 0)]
    pub v: u8,
    /// Per-component verbosity, `COMPONENT=LEVEL,...` (components: apiserver, store,
    /// controller-manager, scheduler, kubelet, proxy, dns, runtime, admission, auth,
    /// kube-client; other names are tracing targets).
    #[arg(long, value_delimiter = ',', value_parser = parse_vmodule_entry, value_name = "COMPONENT=LEVEL")]
    pub vmodule: Vec<(String, u8)>,
    /// Log format: `text` or `json` (one JSON object per line).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub logging_format: String,
}

/// Parses one `--vmodule` entry, `NAME=LEVEL`.
///
/// # Errors
/// No `=`, an empty name, or a level that is not a number 0-255.
pub fn parse_vmodule_entry(s: &str) -> Result<(String, u8), String> {
    let (name, level) = s.split_once('=').ok_or_else(|| format!("invalid --vmodule entry {s:?}: want NAME=LEVEL"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("invalid --vmodule entry {s:?}: empty name"));
    }
    let level =
        level.trim().parse::<u8>().map_err(|_| format!("invalid --vmodule entry {s:?}: LEVEL must be 0-255"))?;
    Ok((name.to_string(), level))
}

/// The crates that reconcile: their `debug` lines are decisions (klog level 2).
const RECONCILERS: &[&str] = &["skiff_controllers", "skiff_scheduler", "skiff_kubelet", "skiff_proxy", "skiff_dns"];
/// Every other skiff crate (klog level 4 shows their `debug` lines).
const OTHER_SKIFF: &[&str] =
    &["skiff", "skiff_apiserver", "skiff_store", "skiff_runtime", "skiff_admission", "skiff_auth"];
/// kube's client crates: their `debug` lines are the API calls (klog level 6).
const KUBE_CLIENT: &[&str] = &["kube_client", "kube_runtime", "kube"];

/// The tracing targets of a `--vmodule` component name.
fn component_targets(name: &str) -> Vec<String> {
    let t: &[&str] = match name {
        "apiserver" | "kube-apiserver" => &["skiff_apiserver"],
        "store" | "etcd" => &["skiff_store"],
        "controller-manager" | "kube-controller-manager" | "controllers" => &["skiff_controllers"],
        "scheduler" | "kube-scheduler" => &["skiff_scheduler"],
        "kubelet" | "agent" => &["skiff_kubelet"],
        "proxy" | "kube-proxy" => &["skiff_proxy"],
        "dns" => &["skiff_dns"],
        "runtime" => &["skiff_runtime"],
        "admission" => &["skiff_admission"],
        "auth" => &["skiff_auth"],
        "kube-client" => KUBE_CLIENT,
        other => return vec![other.replace('-', "_")],
    };
    t.iter().map(|s| s.to_string()).collect()
}

/// The `tracing` level a crate of `kind` logs at for klog level `v`, or None for the default
/// (`info`).
fn level_for(kind: Kind, v: u8) -> Option<&'static str> {
    match (kind, v) {
        (_, 8..) => Some("trace"),
        (Kind::Reconciler | Kind::OtherSkiff, 6..) => Some("trace"),
        (Kind::KubeClient, 6..) => Some("debug"),
        (Kind::Reconciler | Kind::OtherSkiff, 4..) => Some("debug"),
        (Kind::Reconciler, 2..) => Some("debug"),
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reconciler,
    OtherSkiff,
    KubeClient,
}

fn kind_of(target: &str) -> Kind {
    let krate = target.split("::").next().unwrap_or(target);
    if RECONCILERS.contains(&krate) {
        Kind::Reconciler
    } else if KUBE_CLIENT.contains(&krate) {
        Kind::KubeClient
    } else {
        Kind::OtherSkiff
    }
}

/// The `EnvFilter` directives for `-v` and `--vmodule` (later directives for the same target
/// win, so `--vmodule` overrides `-v`).
pub fn directives(v: u8, vmodule: &[(String, u8)]) -> String {
    let mut out = vec![if v >= 8 { "trace".to_string() } else { "info".to_string() }];
    for (kind, targets) in
        [(Kind::Reconciler, RECONCILERS), (Kind::OtherSkiff, OTHER_SKIFF), (Kind::KubeClient, KUBE_CLIENT)]
    {
        if let Some(level) = level_for(kind, v) {
            out.extend(targets.iter().map(|t| format!("{t}={level}")));
        }
    }
    for (name, level) in vmodule {
        for target in component_targets(name) {
            let l = level_for(kind_of(&target), *level)
                // A component asked for below its `-v` level is quietened back to info.
                .unwrap_or("info");
            // `--vmodule` names a component's own level: level 2 of any crate shows its
            // decisions, so non-reconciler crates get `debug` from 2 as well.
            let l = if *level >= 2 && l == "info" { "debug" } else { l };
            out.push(format!("{target}={l}"));
        }
    }
    out.join(",")
}

/// Installs the global subscriber for these flags, writing to stderr.
///
/// # Errors
/// A `--vmodule` target that is not a valid filter directive.
pub fn init(args: &LoggingArgs) -> anyhow::Result<()> {
    let filter = if args.v == 0 && args.vmodule.is_empty() {
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
    } else {
        EnvFilter::try_new(directives(args.v, &args.vmodule))
            .map_err(|e| anyhow::anyhow!("invalid --v/--vmodule: {e}"))?
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if args.logging_format == "json" {
        builder.json().flatten_event(true).with_current_span(false).init();
    } else {
        builder.init();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_zero_is_info_everywhere() {
        assert_eq!(directives(0, &[]), "info");
    }

    #[test]
    fn level_two_shows_the_reconcilers_decisions_only() {
        let d = directives(2, &[]);
        assert!(d.contains("skiff_controllers=debug") && d.contains("skiff_scheduler=debug"), "{d}");
        assert!(!d.contains("skiff_apiserver"), "{d}");
        assert!(!d.contains("kube_client"), "{d}");
    }

    #[test]
    fn level_four_adds_request_detail_and_six_adds_api_calls() {
        let d = directives(4, &[]);
        assert!(d.contains("skiff_apiserver=debug") && !d.contains("kube_client"), "{d}");
        let d = directives(6, &[]);
        assert!(d.contains("kube_client=debug") && d.contains("skiff_apiserver=trace"), "{d}");
        assert!(directives(8, &[]).starts_with("trace"));
    }

    #[test]
    fn vmodule_overrides_one_component() {
        let d = directives(0, &[("scheduler".into(), 4), ("apiserver".into(), 2)]);
        assert_eq!(d, "info,skiff_scheduler=debug,skiff_apiserver=debug");
        let d = directives(4, &[("apiserver".into(), 0)]);
        assert!(d.ends_with("skiff_apiserver=info"), "{d}");
        let d = directives(0, &[("skiff_controllers::deployment".into(), 6)]);
        assert_eq!(d, "info,skiff_controllers::deployment=trace");
        assert!(EnvFilter::try_new(d).is_ok());
    }

    #[test]
    fn bad_vmodule_entries_are_refused() {
        assert!(parse_vmodule_entry("scheduler").is_err());
        assert!(parse_vmodule_entry("=2").is_err());
        assert!(parse_vmodule_entry("scheduler=high").is_err());
        assert_eq!(parse_vmodule_entry("scheduler=4").unwrap(), ("scheduler".to_string(), 4));
    }
}
