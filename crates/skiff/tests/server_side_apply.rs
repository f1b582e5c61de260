//! End-to-end: server-side apply with the real `kubectl` against `skiff server`: field managers,
//! conflicts with another manager, `--force-conflicts`, removal of fields no longer applied, and
//! managedFields as `kubectl get --show-managed-fields` prints them.

mod common;

use common::Server;
use serde_json::Value;

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    team: blue
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
        ports:
        - containerPort: 80
";

fn managed_fields(s: &Server) -> Vec<Value> {
    let out = s.ok(&["get", "deploy", "web", "-o", "json", "--show-managed-fields"]);
    let obj: Value = serde_json::from_str(&out).expect("kubectl printed JSON");
    obj["metadata"]["managedFields"].as_array().cloned().unwrap_or_default()
}

fn entry<'a>(mf: &'a [Value], manager: &str, operation: &str) -> Option<&'a Value> {
    mf.iter().find(|e| e["manager"] == manager && e["operation"] == operation)
}

#[test]
fn kubectl_server_side_apply_tracks_owners_and_reports_conflicts() {
    let s = Server::start();

    // Create by server-side apply: kubectl's Apply entry owns exactly the applied fields.
    let out = s.ok_stdin(&["apply", "--server-side", "-f", "-"], DEPLOYMENT);
    assert!(out.contains("deployment.apps/web serverside-applied"), "{out}");
    let yaml = s.ok(&["get", "deploy", "web", "-o", "yaml", "--show-managed-fields"]);
    assert!(yaml.contains("managedFields:"), "{yaml}");
    assert!(yaml.contains("manager: kubectl") && yaml.contains("operation: Apply"), "{yaml}");
    assert!(yaml.contains("f:replicas: {}"), "{yaml}");
    assert!(yaml.contains(r#"k:{"name":"nginx"}:"#), "{yaml}");
    assert!(yaml.contains(r#"k:{"containerPort":80,"protocol":"TCP"}:"#), "{yaml}");
    assert!(!s.ok(&["get", "deploy", "web", "-o", "yaml"]).contains("managedFields"), "hidden by default");
    let mf = managed_fields(&s);
    let apply = entry(&mf, "kubectl", "Apply").expect("an Apply entry for kubectl");
    assert_eq!(apply["apiVersion"], "apps/v1");
    assert_eq!(apply["fieldsType"], "FieldsV1");
    assert!(apply["fieldsV1"]["f:spec"].get("f:progressDeadlineSeconds").is_none(), "defaults are not applied fields");

    // An imperative update records its manager and takes the field it changed.
    s.ok(&["scale", "deploy", "web", "--replicas=5"]);
    let mf = managed_fields(&s);
    let scaler = mf
        .iter()
        .find(|e| e["operation"] == "Update" && e["fieldsV1"]["f:spec"].get("f:replicas").is_some())
        .expect("the scale's manager owns spec.replicas");
    let scaler_manager = scaler["manager"].as_str().unwrap().to_string();
    assert!(entry(&mf, "kubectl", "Apply").unwrap()["fieldsV1"]["f:spec"].get("f:replicas").is_none());

    // Re-applying replicas: 2 now conflicts with the scaler.
    let out = s.apply_stdin(&["apply", "--server-side", "-f", "-"], DEPLOYMENT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("Apply failed with 1 conflict: conflict with"), "{stderr}");
    assert!(stderr.contains(&format!("\"{scaler_manager}\"")), "{stderr}");
    assert!(stderr.contains(".spec.replicas"), "{stderr}");
    assert_eq!(s.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]), "5");

    // A second applier changing the image conflicts with kubectl's Apply.
    let other = DEPLOYMENT.replace("replicas: 2", "replicas: 5").replace("nginx:1.25", "nginx:1.27");
    let out = s.apply_stdin(&["apply", "--server-side", "--field-manager=deployer", "-f", "-"], &other);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(r#"conflict with "kubectl": .spec.template.spec.containers[name="nginx"].image"#),
        "{stderr}"
    );

    // --force-conflicts wins and takes ownership.
    s.ok_stdin(&["apply", "--server-side", "--force-conflicts", "-f", "-"], DEPLOYMENT);
    assert_eq!(s.ok(&["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]), "2");
    let mf = managed_fields(&s);
    assert!(entry(&mf, "kubectl", "Apply").unwrap()["fieldsV1"]["f:spec"].get("f:replicas").is_some());
    assert!(!mf.iter().any(|e| e["manager"] == scaler_manager.as_str() && e["operation"] == "Update"));

    // A label set by another manager survives; an annotation only kubectl applied goes.
    s.ok(&["label", "deploy", "web", "env=prod"]);
    let mf = managed_fields(&s);
    assert!(
        mf.iter().any(|e| e["operation"] == "Update" && e["fieldsV1"]["f:metadata"]["f:labels"].get("f:env").is_some())
    );
    let without = DEPLOYMENT.replace("  annotations:\n    team: blue\n", "");
    s.ok_stdin(&["apply", "--server-side", "-f", "-"], &without);
    assert_eq!(s.ok(&["get", "deploy", "web", "-o", "jsonpath={.metadata.annotations.team}"]), "");
    assert_eq!(s.ok(&["get", "deploy", "web", "-o", "jsonpath={.metadata.labels.env}"]), "prod");
}

/// `curl -i` against the server with the admin client certificate; returns the raw response.
fn curl(s: &Server, path: &str, headers: &[&str]) -> String {
    let tls = s.dir.path().join("data/tls");
    let mut c = std::process::Command::new("curl");
    c.args(["-sS", "-i", "--cacert"]).arg(tls.join("ca.crt"));
    c.arg("--cert").arg(tls.join("admin.crt")).arg("--key").arg(tls.join("admin.key"));
    for h in headers {
        c.args(["-H", h]);
    }
    c.arg(format!("https://127.0.0.1:{}{path}", s.port));
    let out = c.output().expect("running curl");
    assert!(out.status.success(), "curl failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn openapi_v2_is_served_with_etag_and_kubectl_explain_works() {
    let s = Server::start();
    let first = curl(&s, "/openapi/v2", &["Accept: application/json"]);
    let (head, body) = first.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/") && head.contains(" 200"), "{head}");
    let etag = head
        .lines()
        .find_map(|l| l.strip_prefix("etag: ").or_else(|| l.strip_prefix("ETag: ")))
        .expect("an ETag header")
        .trim()
        .to_string();
    let doc: Value = serde_json::from_str(body).expect("a JSON document");
    assert_eq!(doc["swagger"], "2.0");
    let deployment = &doc["definitions"]["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(deployment["x-kubernetes-group-version-kind"][0]["kind"], "Deployment");
    let containers = &doc["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");

    let again = curl(&s, "/openapi/v2", &["Accept: application/json", &format!("If-None-Match: {etag}")]);
    assert!(again.lines().next().unwrap_or("").contains(" 304"), "{again}");
    let pb = curl(&s, "/openapi/v2", &["Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf"]);
    let pb_head = pb.split("\r\n\r\n").next().unwrap_or("").to_ascii_lowercase();
    assert!(pb_head.contains(" 200"), "{pb_head}");
    assert!(pb_head.contains("content-type: application/com.github.proto-openapi.spec.v2.v1.0+protobuf"), "{pb_head}");

    let explained = s.ok(&["explain", "deployment.spec.strategy"]);
    assert!(explained.contains("rollingUpdate"), "{explained}");
    assert!(explained.contains("DeploymentStrategy") || explained.contains("strategy"), "{explained}");
}
