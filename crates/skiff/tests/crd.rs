//! End to end with the real kubectl: CustomResourceDefinitions (apply, wait for Established,
//! then apply/get/-o wide/patch/scale/delete custom resources) and the workload and policy
//! types beyond the core set (`kubectl get priorityclasses,pdb,sts,ds,jobs,cronjobs`).

mod common;

use common::Server;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.size
        statusReplicasPath: .status.size
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Color
      type: string
      jsonPath: .spec.color
      priority: 1
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 0}
              color: {type: string, default: red}
          status:
            type: object
            properties:
              size: {type: integer}
"#;

const WIDGET: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata:
  name: w1
spec:
  size: 2
"#;

#[test]
fn kubectl_applies_and_manages_custom_resources() {
    let s = Server::start();
    assert!(s.ok_stdin(&["apply", "-f", "-"], CRD).contains("widgets.example.com created"));
    s.ok(&["wait", "--for", "condition=Established", "crd/widgets.example.com", "--timeout=30s"]);

    assert!(s.ok_stdin(&["apply", "-f", "-"], WIDGET).contains("widget.example.com/w1 created"));
    let table = s.ok(&["get", "widgets"]);
    assert!(table.contains("NAME") && table.contains("SIZE"), "{table}");
    assert!(!table.contains("COLOR"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("w1") && l.contains('2')), "{table}");
    let wide = s.ok(&["get", "wd", "-o", "wide"]);
    assert!(wide.contains("COLOR") && wide.contains("red"), "{wide}");

    // Re-apply with a change: kubectl sends a JSON merge patch for custom resources.
    let changed = WIDGET.replace("size: 2", "size: 3\n  color: blue");
    assert!(s.ok_stdin(&["apply", "-f", "-"], &changed).contains("widget.example.com/w1 configured"));
    assert_eq!(s.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size} {.spec.color}"]).trim(), "3 blue");

    s.ok(&["patch", "widget", "w1", "--type=merge", "-p", r#"{"spec":{"size":5}}"#]);
    s.ok(&["patch", "widget", "w1", "--type=json", "-p", r#"[{"op":"replace","path":"/spec/color","value":"green"}]"#]);
    assert_eq!(s.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size} {.spec.color}"]).trim(), "5 green");
    // A strategic merge patch is refused for custom resources, as Kubernetes does.
    let smp = s.fails(&["patch", "widget", "w1", "-p", r#"{"spec":{"size":6}}"#]);
    assert!(smp.contains("strategic-merge-patch+json is not supported"), "{smp}");

    s.ok(&["scale", "widget", "w1", "--replicas=4"]);
    assert_eq!(s.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size}"]).trim(), "4");

    // Schema validation reaches kubectl as a 422 with the field path.
    let invalid = s.apply_stdin(&["apply", "-f", "-"], &WIDGET.replace("size: 2", "size: -1").replace("w1", "w2"));
    assert!(!invalid.status.success());
    let stderr = String::from_utf8_lossy(&invalid.stderr);
    assert!(stderr.contains("spec.size"), "{stderr}");

    assert!(s.ok(&["delete", "widget", "w1"]).contains("deleted"));
    assert!(s.ok(&["get", "widgets", "-o", "name"]).trim().is_empty());

    s.ok_stdin(&["apply", "-f", "-"], WIDGET);
    s.ok(&["delete", "crd", "widgets.example.com", "--wait=true", "--timeout=30s"]);
    let gone = s.fails(&["get", "widgets.example.com"]);
    assert!(gone.contains("the server doesn't have a resource type") || gone.contains("NotFound"), "{gone}");
}

#[test]
fn kubectl_gets_workload_and_policy_types() {
    let s = Server::start();
    s.ok(&["create", "cronjob", "tick", "--image=busybox", "--schedule=*/5 * * * *"]);
    s.ok(&["create", "job", "once", "--image=busybox"]);
    s.ok(&["create", "poddisruptionbudget", "pdb", "--selector=app=web", "--min-available=1"]);
    s.ok(&["create", "priorityclass", "high", "--value=1000"]);
    let out = s.ok(&["get", "priorityclasses,pdb,sts,ds,jobs,cronjobs"]);
    for want in [
        "system-node-critical",
        "priorityclass.scheduling.k8s.io/high",
        "poddisruptionbudget.policy/pdb",
        "job.batch/once",
        "cronjob.batch/tick",
    ] {
        assert!(out.contains(want), "{want} missing from:\n{out}");
    }
    let cj = s.ok(&["get", "cj"]);
    assert!(cj.contains("SCHEDULE") && cj.contains("*/5 * * * *"), "{cj}");
    let pdb = s.ok(&["get", "pdb"]);
    assert!(pdb.contains("MIN AVAILABLE") && pdb.contains("ALLOWED DISRUPTIONS"), "{pdb}");
    let resources = s.ok(&["api-resources"]);
    for want in
        ["priorityclasses", "statefulsets", "replicationcontrollers", "endpointslices", "persistentvolumeclaims"]
    {
        assert!(resources.contains(want), "{want} missing from api-resources");
    }
}
