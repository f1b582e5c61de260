//! End-to-end: API behaviours Kubernetes defines and kubectl relies on, checked with the real
//! `kubectl` against the real `skiff server --disable-agent` (no node runs the pods): Deployment
//! revisions and `kubectl rollout undo`, garbage collection of owner references that name an
//! owner in another namespace, and the deprecated `spec.serviceAccount` alias.

mod common;

use std::time::{Duration, Instant};

use common::Server;

/// Polls `f` until it returns `Some`, failing with `what` and the last value after 60 s.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => panic!("timed out waiting for {what}; last: {last}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// The revision numbers `kubectl rollout history` lists.
fn history(s: &Server, deployment: &str) -> Vec<String> {
    s.ok(&["rollout", "history", deployment])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_string)
        .collect()
}

fn revision(s: &Server, deployment: &str) -> String {
    s.ok(&["get", deployment, "-o", r#"jsonpath={.metadata.annotations.deployment\.kubernetes\.io/revision}"#])
}

#[test]
fn rollout_undo_reuses_the_old_replica_set_as_a_new_revision_and_refuses_a_missing_one() {
    let s = Server::start();
    // A typed client (protobuf body, every zero field on the wire).
    s.ok(&["create", "deployment", "u", "--image=nginx:1"]);
    wait_for("revision 1 on the Deployment", || match revision(&s, "deploy/u") {
        r if r == "1" => Ok(()),
        r => Err(r),
    });
    s.ok(&["set", "image", "deploy/u", "nginx=nginx:2"]);
    wait_for("revision 2", || match revision(&s, "deploy/u") {
        r if r == "2" => Ok(()),
        r => Err(r),
    });
    assert_eq!(history(&s, "deploy/u"), ["1", "2"]);

    let err = s.fails(&["rollout", "undo", "deploy/u", "--to-revision=9"]);
    assert!(err.contains("unable to find specified revision 9 in history"), "{err}");

    s.ok(&["rollout", "undo", "deploy/u"]);
    wait_for("revision 3", || match revision(&s, "deploy/u") {
        r if r == "3" => Ok(()),
        r => Err(r),
    });
    // Revision 1's ReplicaSet was reused: it is revision 3 now, and no third ReplicaSet exists.
    assert_eq!(history(&s, "deploy/u"), ["2", "3"]);
    let rss = s.ok(&["get", "rs", "-l", "app=u", "-o", "name"]);
    assert_eq!(rss.lines().count(), 2, "{rss}");
    let image = s.ok(&["get", "deploy/u", "-o", "jsonpath={.spec.template.spec.containers[0].image}"]);
    assert_eq!(image, "nginx:1");
    let reused = s.ok(&[
        "get",
        "rs",
        "-l",
        "app=u",
        "-o",
        r#"jsonpath={range .items[*]}{.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\.kubernetes\.io/revision} {.metadata.annotations.deployment\.kubernetes\.io/revision-history}{"\n"}{end}"#,
    ]);
    assert!(reused.lines().any(|l| l == "nginx:1 3 1"), "{reused}");
    // The template a typed client sent carries no explicit zeros.
    let template = s.ok(&["get", "deploy/u", "-o", "jsonpath={.spec.template}"]);
    for zero in ["\"stdin\"", "\"hostIPC\"", "\"generation\"", "creationTimestamp"] {
        assert!(!template.contains(zero), "{zero} in {template}");
    }
}

#[test]
fn a_dependent_whose_owner_is_in_another_namespace_is_collected_with_a_warning_event() {
    let s = Server::start();
    s.ok(&["create", "namespace", "ns-a"]);
    s.ok(&["create", "namespace", "ns-b"]);
    s.ok(&["create", "configmap", "owner", "-n", "ns-a"]);
    let uid = s.ok(&["get", "configmap", "owner", "-n", "ns-a", "-o", "jsonpath={.metadata.uid}"]);
    let dependent = |name: &str, ns: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n  ownerReferences:\n  \
             - apiVersion: v1\n    kind: ConfigMap\n    name: owner\n    uid: {uid}\n"
        )
    };
    s.ok_stdin(&["create", "-f", "-"], &dependent("good", "ns-a"));
    s.ok_stdin(&["create", "-f", "-"], &dependent("bad", "ns-b"));
    wait_for("the dependent in ns-b to be collected", || {
        let out = s.kubectl(&["get", "configmap", "bad", "-n", "ns-b"]);
        if out.status.success() { Err("still there".to_string()) } else { Ok(()) }
    });
    let events = wait_for("the OwnerRefInvalidNamespace event", || {
        let out = s.ok(&[
            "get",
            "events",
            "-n",
            "ns-b",
            "--field-selector=reason=OwnerRefInvalidNamespace",
            "-o",
            "jsonpath={range .items[*]}{.type} {.involvedObject.name} {.message}{\"\\n\"}{end}",
        ]);
        if out.is_empty() { Err(out) } else { Ok(out) }
    });
    assert!(
        events.contains(&format!(
            "Warning bad ownerRef [v1/ConfigMap, namespace: ns-b, name: owner, uid: {uid}] does not exist in \
             namespace \"ns-b\""
        )),
        "{events}"
    );
    // The owner is absent from ns-b only: its dependent in its own namespace stays.
    s.ok(&["get", "configmap", "good", "-n", "ns-a"]);
    s.ok(&["get", "configmap", "owner", "-n", "ns-a"]);
}

#[test]
fn a_pod_with_only_the_deprecated_service_account_gets_both_fields() {
    let s = Server::start();
    s.ok(&["create", "serviceaccount", "sa1"]);
    s.ok_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  serviceAccount: sa1\n  containers:\n  - name: c\n    \
         image: nginx\n",
    );
    let got = s.ok(&["get", "pod", "p", "-o", "jsonpath={.spec.serviceAccountName} {.spec.serviceAccount}"]);
    assert_eq!(got, "sa1 sa1");
    // A pod without either runs as `default`, and the alias says so too.
    s.ok(&["run", "q", "--image=nginx"]);
    let got = s.ok(&["get", "pod", "q", "-o", "jsonpath={.spec.serviceAccountName} {.spec.serviceAccount}"]);
    assert_eq!(got, "default default");

    // A template applied with serviceAccountName, then without it: the stored alias still
    // names sa1, so the name stays sa1 (Kubernetes' conversion), rather than both going.
    let manifest = |sa: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  selector:\n    matchLabels: {{app: d}}\n  \
             template:\n    metadata:\n      labels: {{app: d}}\n    spec:\n{sa}      containers:\n      - name: c\n        \
             image: nginx\n"
        )
    };
    s.ok_stdin(&["apply", "-f", "-"], &manifest("      serviceAccountName: sa1\n"));
    s.ok_stdin(&["apply", "-f", "-"], &manifest(""));
    let got = s.ok(&[
        "get",
        "deploy",
        "d",
        "-o",
        "jsonpath={.spec.template.spec.serviceAccountName} {.spec.template.spec.serviceAccount}",
    ]);
    assert_eq!(got, "sa1 sa1");
}

#[test]
fn a_template_that_differs_only_by_zero_values_go_omits_is_the_same_revision() {
    let s = Server::start();
    let manifest = |extra: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: z\nspec:\n  selector:\n    matchLabels: {{app: z}}\n  \
             template:\n    metadata:\n      labels: {{app: z}}\n    spec:\n{extra}      containers:\n      - name: c\n        \
             image: nginx:1\n"
        )
    };
    s.ok_stdin(&["apply", "-f", "-"], &manifest("      hostNetwork: false\n      hostPID: false\n"));
    wait_for("revision 1", || match revision(&s, "deploy/z") {
        r if r == "1" => Ok(()),
        r => Err(r),
    });
    // The same template without the explicit zeros: once the controller has seen it (the
    // last-applied annotation changed, so the generation did), still one ReplicaSet.
    s.ok_stdin(&["apply", "-f", "-"], &manifest(""));
    wait_for("the controller to observe the apply", || {
        let g = s.ok(&["get", "deploy/z", "-o", "jsonpath={.metadata.generation} {.status.observedGeneration}"]);
        match g.split_once(' ') {
            Some((a, b)) if a == b && a != "1" => Ok(()),
            _ => Err(g),
        }
    });
    assert_eq!(revision(&s, "deploy/z"), "1");
    assert_eq!(s.ok(&["get", "rs", "-l", "app=z", "-o", "name"]).lines().count(), 1);
    // A real change is a new revision (and shows the controller is still syncing this Deployment).
    s.ok_stdin(&["apply", "-f", "-"], &manifest("      hostNetwork: true\n"));
    wait_for("revision 2", || match revision(&s, "deploy/z") {
        r if r == "2" => Ok(()),
        r => Err(r),
    });
    assert_eq!(history(&s, "deploy/z"), ["1", "2"]);
}
