//! The audit log (`--audit-policy-file`, `--audit-log-path`) of a real `skiff server`, driven
//! with kubectl: the policy's levels, a denied request, a watch's stages.

mod common;

use common::Server;
use serde_json::Value;

const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    users: ["system:apiserver"]
  - level: None
    userGroups: ["system:nodes", "system:serviceaccounts"]
  - level: Metadata
    resources:
      - group: ""
        resources: ["secrets"]
  - level: RequestResponse
    resources:
      - group: ""
        resources: ["configmaps"]
  - level: Metadata
    users: ["jane"]
  - level: Metadata
    verbs: ["watch"]
    resources:
      - group: ""
        resources: ["pods"]
"#;

fn events(s: &Server) -> Vec<Value> {
    std::fs::read_to_string(s.dir.path().join("audit/audit.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON event"))
        .collect()
}

fn find(s: &Server, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    s.eventually(20, what, || events(s).into_iter().find(|e| f(e)))
}

#[test]
fn the_audit_log_records_requests_at_their_policy_level() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let policy = policy.to_str().unwrap().to_string();
    let mut s = Server::start_with(&[]);
    let log = s.dir.path().join("audit/audit.log");
    let log = log.to_str().unwrap().to_string();
    s.stop();
    s.respawn_with(&["--audit-policy-file", &policy, "--audit-log-path", &log]);

    s.ok(&["create", "configmap", "cfg", "--from-literal=colour=blue"]);
    let e = find(&s, "the configmap create", |e| e["verb"] == "create" && e["objectRef"]["resource"] == "configmaps");
    assert_eq!((e["level"].as_str(), e["stage"].as_str()), (Some("RequestResponse"), Some("ResponseComplete")));
    assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(e["user"]["username"], "system:admin");
    assert_eq!(e["objectRef"]["namespace"], "default");
    assert_eq!(e["responseStatus"]["code"], 201);
    assert_eq!(e["requestObject"]["data"]["colour"], "blue");
    assert_eq!(e["responseObject"]["metadata"]["name"], "cfg");
    assert!(e["sourceIPs"][0].as_str().is_some_and(|ip| ip == "127.0.0.1"), "{e}");
    assert!(e["stageTimestamp"].as_str().unwrap().ends_with('Z'));

    // Secrets at Metadata: who and what, never the data.
    s.ok(&["create", "secret", "generic", "db", "--from-literal=password=hunter2-audit"]);
    let e = find(&s, "the secret create", |e| e["verb"] == "create" && e["objectRef"]["resource"] == "secrets");
    assert_eq!(e["level"], "Metadata");
    assert!(e.get("requestObject").is_none() && e.get("responseObject").is_none(), "{e}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("hunter2-audit") && !text.contains("aHVudGVyMi1hdWRpdA"), "secret data in the audit log");

    // A denied request: 403 with the reason and the authorization decision.
    let out = s.kubectl(&["--as=jane", "get", "pods"]);
    assert!(!out.status.success());
    let e = find(&s, "jane's denied list", |e| e["user"]["username"] == "jane" && e["verb"] == "list");
    assert_eq!(e["responseStatus"]["code"], 403);
    assert_eq!(e["responseStatus"]["reason"], "Forbidden");
    assert_eq!(e["annotations"]["authorization.k8s.io/decision"], "forbid");

    // A watch: ResponseStarted when it begins, ResponseComplete when it ends (here when its
    // timeoutSeconds passes).
    s.ok(&["get", "--raw", "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1"]);
    let started = find(&s, "the watch's start", |e| {
        e["stage"] == "ResponseStarted" && e["requestURI"].as_str().is_some_and(|u| u.contains("timeoutSeconds=1"))
    });
    assert_eq!((started["verb"].as_str(), started["user"]["username"].as_str()), (Some("watch"), Some("system:admin")));
    let done = find(&s, "the watch's end", |e| e["auditID"] == started["auditID"] && e["stage"] == "ResponseComplete");
    assert!(done["stageTimestamp"].as_str() >= started["stageTimestamp"].as_str());

    // omitStages: no RequestReceived events; rule None: nothing from the API server itself.
    let all = events(&s);
    assert!(all.iter().all(|e| e["stage"] != "RequestReceived"));
    assert!(all.iter().all(|e| e["user"]["username"] != "system:apiserver"));
}

#[test]
fn an_invalid_audit_policy_refuses_to_start_naming_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["server", "--disable-agent", "--bind-address", "127.0.0.1", "--cluster-dns-port", "0"])
        .arg("--https-listen-port")
        .arg(common::free_port().to_string())
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--audit-policy-file")
        .arg(&policy)
        .arg("--audit-log-path")
        .arg(dir.path().join("audit.log"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--audit-policy-file") && err.contains("policy.yaml") && err.contains("Loud"), "{err}");
}
