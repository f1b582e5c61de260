//! End-to-end: `/openapi/v2` in gnostic's protobuf encoding, as the real kubectl uses it.
//!
//! kubectl 1.27 and 1.28 fetch OpenAPI only as
//! `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, for `explain`, for
//! client-side `apply` (the strategic-merge-patch metadata of a kind and whether the server
//! validates fields itself), `create` and `diff`; 1.29 and later read `/openapi/v3` and fall back
//! to protobuf v2 to validate a kind the v3 index does not list. The dispatcher at `kubectl`
//! picks the bundled binary matching the server's minor version (1.33), so older versions are
//! run by their bundled paths.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::Server;

/// Where the kubectl dispatcher keeps the bundled versions (`kubectl.1.27` … `kubectl.1.33`).
const BUNDLED: &str = "/usr/lib/google-cloud-sdk/bin";

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
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

const WIDGET: &str = "apiVersion: example.com/v1
kind: Widget
metadata:
  name: w
spec:
  size: 1
";

/// Runs the bundled kubectl 1.`minor` against `s` (its own cache dir), `stdin` as input.
fn kubectl(s: &Server, minor: u32, args: &[&str], stdin: &str) -> Output {
    let bin = format!("{BUNDLED}/kubectl.1.{minor}");
    assert!(std::path::Path::new(&bin).exists(), "{bin} is missing (it ships with the kubectl dispatcher)");
    let mut child = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(s.kubeconfig())
        .arg("--cache-dir")
        .arg(s.dir.path().join(format!("kubectl-cache-1.{minor}")))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running kubectl");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn ok(s: &Server, minor: u32, args: &[&str], stdin: &str) -> String {
    let out = kubectl(s, minor, args, stdin);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "kubectl 1.{minor} {args:?} failed: {stderr}\n{stdout}");
    assert!(!stderr.contains("warning"), "kubectl 1.{minor} {args:?} warned: {stderr}");
    stdout
}

/// kubectl's error for a kind the server does not serve, as against Kubernetes.
fn assert_unknown_kind_error(minor: u32, out: &Output) {
    let (stdout, stderr) = text(out);
    assert!(!out.status.success(), "kubectl 1.{minor} applied an unknown kind: {stdout}");
    assert!(
        stderr.contains(r#"no matches for kind "Widget" in version "example.com/v1""#),
        "kubectl 1.{minor}: {stderr}"
    );
    assert!(!stderr.contains("openapi") && !stderr.contains("content type"), "kubectl 1.{minor}: {stderr}");
}

#[test]
fn kubectl_1_27_and_1_28_explain_apply_and_validate_through_protobuf_openapi_v2() {
    let s = Server::start();
    for minor in [27, 28] {
        let explained = ok(&s, minor, &["explain", "deployment.spec.strategy"], "");
        assert!(explained.contains("rollingUpdate"), "1.{minor}: {explained}");
        assert!(explained.contains("DeploymentStrategy"), "1.{minor}: {explained}");
        let explained = ok(&s, minor, &["explain", "pods.spec.containers.ports"], "");
        assert!(explained.contains("containerPort") && explained.contains("<integer>"), "1.{minor}: {explained}");

        // Client-side apply: create, a sidecar added by someone else, then a re-apply whose
        // strategic merge patch (computed from the OpenAPI merge keys) keeps that sidecar.
        let name = format!("web{minor}");
        let manifest = DEPLOYMENT.replace("name: web\nspec", &format!("name: {name}\nspec"));
        let created = ok(&s, minor, &["apply", "-f", "-"], &manifest);
        assert!(created.contains(&format!("deployment.apps/{name} created")), "1.{minor}: {created}");
        ok(
            &s,
            minor,
            &[
                "patch",
                "deployment",
                &name,
                "--type=strategic",
                "-p",
                r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"busybox"}]}}}}"#,
            ],
            "",
        );
        let changed = manifest.replace("nginx:1.25", "nginx:1.27").replace("replicas: 2", "replicas: 3");
        let configured = ok(&s, minor, &["apply", "-f", "-"], &changed);
        assert!(configured.contains(&format!("deployment.apps/{name} configured")), "1.{minor}: {configured}");
        let got = ok(
            &s,
            minor,
            &["get", "deployment", &name, "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[*].image}"],
            "",
        );
        let mut images: Vec<&str> = got.split(' ').collect();
        images.sort();
        assert_eq!(images, ["3", "busybox", "nginx:1.27"], "1.{minor}: {got}");
        let diff = kubectl(&s, minor, &["diff", "-f", "-"], &changed);
        assert_eq!(diff.status.code(), Some(0), "1.{minor} diff: {:?}", text(&diff));

        assert_unknown_kind_error(minor, &kubectl(&s, minor, &["apply", "-f", "-"], WIDGET));
        assert_unknown_kind_error(minor, &kubectl(&s, minor, &["create", "-f", "-"], WIDGET));
    }
}

#[test]
fn kubectl_1_29_and_later_get_kubernetes_error_for_an_unknown_kind_after_the_v2_fallback() {
    let s = Server::start();
    for minor in [29, 33] {
        assert_unknown_kind_error(minor, &kubectl(&s, minor, &["apply", "-f", "-"], WIDGET));
        assert_unknown_kind_error(minor, &kubectl(&s, minor, &["create", "-f", "-"], WIDGET));
    }
    // The dispatcher (what users run) picks 1.33 for skiff.
    let out = s.apply_stdin(&["apply", "-f", "-"], WIDGET);
    assert_unknown_kind_error(33, &out);
}

const GADGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: The gadget's desired shape.
            properties:
              size:
                type: integer
                description: How many sprockets the gadget has.
              port:
                x-kubernetes-int-or-string: true
                description: Where the gadget listens.
"#;

/// Kubernetes publishes each established CRD's schema in OpenAPI v2 and v3, so `kubectl explain`
/// works for custom resources: 1.33 (through the dispatcher) reads v3, 1.27 protobuf v2.
#[test]
fn kubectl_explains_a_custom_resource_until_its_crd_is_deleted() {
    let s = Server::start();
    assert!(s.ok_stdin(&["apply", "-f", "-"], GADGET_CRD).contains("created"));
    s.ok(&["wait", "--for", "condition=Established", "crd/gadgets.example.com", "--timeout=30s"]);

    let explained = s.ok(&["explain", "gadgets.spec"]);
    assert!(explained.contains("How many sprockets the gadget has."), "1.33: {explained}");
    assert!(explained.contains("The gadget's desired shape."), "1.33: {explained}");
    let explained = ok(&s, 27, &["explain", "gadgets.spec"], "");
    assert!(explained.contains("How many sprockets the gadget has."), "1.27: {explained}");
    assert!(explained.contains("size") && explained.contains("<integer>"), "1.27: {explained}");
    let metadata = ok(&s, 27, &["explain", "gadgets.metadata"], "");
    assert!(metadata.contains("ObjectMeta"), "1.27: {metadata}");

    s.ok(&["delete", "crd", "gadgets.example.com", "--wait=true", "--timeout=30s"]);
    let gone = s.kubectl(&["explain", "gadgets.spec"]);
    assert!(!gone.status.success(), "1.33 explained a deleted CRD: {}", String::from_utf8_lossy(&gone.stdout));
    let gone = kubectl(&s, 27, &["explain", "gadgets.spec"], "");
    assert!(!gone.status.success(), "1.27 explained a deleted CRD: {}", String::from_utf8_lossy(&gone.stdout));
}
