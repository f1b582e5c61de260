//! Integration tests of the HTTP layer: a real API server on a real SQLite store in a temp dir,
//! driven over HTTPS with kube-rs' raw client.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skiff_apiserver::testing::TestApiServer;

struct Resp {
    code: u16,
    body: Value,
    headers: axum::http::HeaderMap,
}

async fn call(
    client: &kube::Client,
    method: &str,
    path: &str,
    ctype: &str,
    body: Option<Vec<u8>>,
    accept: Option<&str>,
) -> Resp {
    let mut b = axum::http::Request::builder().method(method).uri(path);
    if !ctype.is_empty() {
        b = b.header("Content-Type", ctype);
    }
    if let Some(a) = accept {
        b = b.header("Accept", a);
    }
    let req = b.body(kube::client::Body::from(body.unwrap_or_default())).unwrap();
    let resp = client.send(req).await.unwrap();
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect_bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Resp { code, body, headers }
}

async fn json_call(client: &kube::Client, method: &str, path: &str, body: Value) -> Resp {
    call(client, method, path, "application/json", Some(serde_json::to_vec(&body).unwrap()), None).await
}

async fn get(client: &kube::Client, path: &str) -> Resp {
    call(client, "GET", path, "", None, None).await
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"app": "web"}}, "data": {"k": "v"}})
}

fn deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}})
}

#[tokio::test]
async fn configmap_create_get_update_delete_round_trip() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("a")).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let rv = r.body["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    assert!(r.body["metadata"]["uid"].as_str().unwrap().len() == 36);
    assert!(r.body["metadata"]["creationTimestamp"].is_string());

    let g = get(c, "/api/v1/namespaces/default/configmaps/a").await;
    assert_eq!(g.code, 200);
    assert_eq!(g.body["metadata"]["resourceVersion"], rv);

    let mut updated = g.body.clone();
    updated["data"]["k"] = json!("v2");
    let u = json_call(c, "PUT", "/api/v1/namespaces/default/configmaps/a", updated.clone()).await;
    assert_eq!(u.code, 200, "{}", u.body);
    assert_ne!(u.body["metadata"]["resourceVersion"], rv);

    let mut renamed = g.body.clone();
    renamed["metadata"]["name"] = json!("b");
    assert_eq!(json_call(c, "PUT", "/api/v1/namespaces/default/configmaps/a", renamed).await.code, 400);

    // The same body again carries the old resourceVersion: Conflict.
    let stale = json_call(c, "PUT", "/api/v1/namespaces/default/configmaps/a", updated).await;
    assert_eq!(stale.code, 409);
    assert_eq!(stale.body["reason"], "Conflict");

    let again = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("a")).await;
    assert_eq!(again.code, 409);
    assert_eq!(again.body["reason"], "AlreadyExists");

    let d = call(c, "DELETE", "/api/v1/namespaces/default/configmaps/a", "", None, None).await;
    assert_eq!(d.code, 200);
    assert_eq!(get(c, "/api/v1/namespaces/default/configmaps/a").await.code, 404);
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn create_validates_namespace_body_and_media_type() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r = json_call(c, "POST", "/api/v1/namespaces/nope/configmaps", cm("a")).await;
    assert_eq!(r.code, 404);
    assert_eq!(r.body["message"], "namespaces \"nope\" not found");

    let mut wrong_ns = cm("b");
    wrong_ns["metadata"]["namespace"] = json!("kube-system");
    assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/configmaps", wrong_ns).await.code, 400);

    let wrong_kind = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}});
    assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/configmaps", wrong_kind).await.code, 400);

    let malformed =
        call(c, "POST", "/api/v1/namespaces/default/configmaps", "application/json", Some(b"{not json".to_vec()), None)
            .await;
    assert_eq!(malformed.code, 400);
    assert_eq!(malformed.body["kind"], "Status");

    let proto =
        call(c, "POST", "/api/v1/namespaces/default/configmaps", "application/cbor", Some(vec![1, 2]), None).await;
    assert_eq!(proto.code, 415);

    let huge = vec![b' '; 3 * 1024 * 1024 + 10];
    assert_eq!(
        call(c, "POST", "/api/v1/namespaces/default/configmaps", "application/json", Some(huge), None).await.code,
        413
    );

    // ConfigMaps are limited to 1 MiB by validation; a Role has no such limit, so the store's
    // 1.5 MiB object limit applies.
    let big = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "big"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["x".repeat(1_700_000)]}]});
    let r = json_call(c, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", big).await;
    assert_eq!(r.code, 413, "{}", r.body);

    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fromyaml\ndata:\n  a: b\n".to_vec();
    let y = call(c, "POST", "/api/v1/namespaces/default/configmaps", "application/yaml", Some(yaml), None).await;
    assert_eq!(y.code, 201, "{}", y.body);

    let generated = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}});
    let g = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", generated).await;
    assert_eq!(g.code, 201);
    assert!(g.body["metadata"]["name"].as_str().unwrap().starts_with("gen-"));
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn strict_field_validation_rejects_unknown_and_duplicate_fields_and_warn_warns() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let mut body = cm("s");
    body["bogus"] = json!(1);
    let strict =
        json_call(c, "POST", "/api/v1/namespaces/default/configmaps?fieldValidation=Strict", body.clone()).await;
    assert_eq!(strict.code, 400);
    assert!(strict.body["message"].as_str().unwrap().contains("unknown field \"bogus\""), "{}", strict.body);

    let dup = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d","name":"d"}}"#.to_vec();
    let d = call(
        c,
        "POST",
        "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
        "application/json",
        Some(dup),
        None,
    )
    .await;
    assert_eq!(d.code, 400);
    assert!(d.body["message"].as_str().unwrap().contains("duplicate field \"metadata.name\""), "{}", d.body);

    let warn = json_call(c, "POST", "/api/v1/namespaces/default/configmaps?fieldValidation=Warn", body).await;
    assert_eq!(warn.code, 201);
    let w = warn.headers.get("Warning").unwrap().to_str().unwrap();
    assert!(w.contains("unknown field"), "{w}");
    assert!(warn.body.get("bogus").is_none());
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn dry_run_persists_nothing() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r = json_call(c, "POST", "/api/v1/namespaces/default/configmaps?dryRun=All", cm("dry")).await;
    assert_eq!(r.code, 201);
    assert_eq!(get(c, "/api/v1/namespaces/default/configmaps/dry").await.code, 404);
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn deployment_status_is_split_from_spec_and_generation_tracks_spec() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r = json_call(c, "POST", "/apis/apps/v1/namespaces/default/deployments", deployment("web")).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["metadata"]["generation"], 1);

    // Status through the main resource is ignored.
    let mut obj = r.body.clone();
    obj["status"] = json!({"replicas": 5});
    let u = json_call(c, "PUT", "/apis/apps/v1/namespaces/default/deployments/web", obj).await;
    assert_eq!(u.code, 200);
    assert!(u.body["status"]["replicas"].is_null(), "{}", u.body);
    assert_eq!(u.body["metadata"]["generation"], 1);

    // Spec through /status is ignored, status lands.
    let mut obj = u.body.clone();
    obj["status"] = json!({"replicas": 5});
    obj["spec"]["replicas"] = json!(9);
    let s = json_call(c, "PUT", "/apis/apps/v1/namespaces/default/deployments/web/status", obj).await;
    assert_eq!(s.code, 200, "{}", s.body);
    assert_eq!(s.body["status"]["replicas"], 5);
    assert_eq!(s.body["spec"]["replicas"], 2);
    assert_eq!(s.body["metadata"]["generation"], 1);

    // /status writes the metadata too (the controller's revision annotation), but not the
    // Deployment's labels (deploymentStatusStrategy).
    let mut obj = s.body.clone();
    obj["metadata"]["annotations"] = json!({"deployment.kubernetes.io/revision": "1"});
    obj["metadata"]["labels"] = json!({"other": "x"});
    let s = json_call(c, "PUT", "/apis/apps/v1/namespaces/default/deployments/web/status", obj).await;
    assert_eq!(s.code, 200, "{}", s.body);
    assert_eq!(s.body["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1", "{}", s.body);
    assert!(s.body["metadata"]["labels"].get("other").is_none(), "{}", s.body);
    assert_eq!(s.body["metadata"]["generation"], 1);

    // An annotation change through the main resource bumps generation (they are copied to
    // the ReplicaSets).
    let a = call(
        c,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web",
        "application/merge-patch+json",
        Some(br#"{"metadata":{"annotations":{"kubernetes.io/change-cause":"x"}}}"#.to_vec()),
        None,
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.body);
    assert_eq!(a.body["metadata"]["generation"], 2);

    // A spec change bumps generation.
    let p = call(
        c,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web",
        "application/merge-patch+json",
        Some(br#"{"spec":{"replicas":3}}"#.to_vec()),
        None,
    )
    .await;
    assert_eq!(p.code, 200, "{}", p.body);
    assert_eq!(p.body["metadata"]["generation"], 3);

    // Scale.
    let sc = get(c, "/apis/apps/v1/namespaces/default/deployments/web/scale").await;
    assert_eq!(sc.body["kind"], "Scale");
    assert_eq!(sc.body["spec"]["replicas"], 3);
    assert_eq!(sc.body["status"]["selector"], "app=web");
    let sp = call(
        c,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
        "application/merge-patch+json",
        Some(br#"{"spec":{"replicas":7}}"#.to_vec()),
        None,
    )
    .await;
    assert_eq!(sp.code, 200, "{}", sp.body);
    assert_eq!(get(c, "/apis/apps/v1/namespaces/default/deployments/web").await.body["spec"]["replicas"], 7);
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn json_patch_and_strategic_merge_patch_apply() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    assert_eq!(json_call(c, "POST", "/apis/apps/v1/namespaces/default/deployments", deployment("p")).await.code, 201);
    let jp = call(
        c,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/p",
        "application/json-patch+json",
        Some(br#"[{"op":"replace","path":"/spec/replicas","value":4}]"#.to_vec()),
        None,
    )
    .await;
    assert_eq!(jp.code, 200, "{}", jp.body);
    assert_eq!(jp.body["spec"]["replicas"], 4);
    let smp = call(
        c,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/p",
        "application/strategic-merge-patch+json",
        Some(br#"{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx:1.27"}]}}}}"#.to_vec()),
        None,
    )
    .await;
    assert_eq!(smp.code, 200, "{}", smp.body);
    assert_eq!(smp.body["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27");
    let bad =
        call(c, "PATCH", "/apis/apps/v1/namespaces/default/deployments/p", "text/plain", Some(b"x".to_vec()), None)
            .await;
    assert_eq!(bad.code, 415);
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn concurrent_patches_without_a_resource_version_all_apply_and_one_that_pins_a_stale_one_conflicts() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let path = "/api/v1/namespaces/default/configmaps/shared";
    let created = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("shared")).await;
    assert_eq!(created.code, 201, "{}", created.body);
    // 24 writers patch the same object at once, each adding its own key: a patch that does not
    // name a resourceVersion is re-applied to the newer object instead of failing with 409.
    let patches = (0..24).map(|i| async move {
        let body = json!({"data": {format!("k{i}"): "v"}});
        for ct in ["application/merge-patch+json", "application/strategic-merge-patch+json"] {
            let r = call(c, "PATCH", path, ct, Some(serde_json::to_vec(&body).unwrap()), None).await;
            assert_eq!(r.code, 200, "{ct}: {}", r.body);
        }
    });
    futures::future::join_all(patches).await;
    let now = get(c, path).await.body;
    for i in 0..24 {
        assert_eq!(now["data"][format!("k{i}")], "v", "{now}");
    }
    // A patch that sets the resourceVersion pins it: a stale one is a conflict.
    let stale = created.body["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let pinned = json!({"metadata": {"resourceVersion": stale}, "data": {"late": "v"}});
    let r =
        call(c, "PATCH", path, "application/merge-patch+json", Some(serde_json::to_vec(&pinned).unwrap()), None).await;
    assert_eq!(r.code, 409, "{}", r.body);
    assert_eq!(r.body["reason"], "Conflict");
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn finalizers_defer_deletion_until_removed() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let mut body = cm("f");
    body["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/configmaps", body).await.code, 201);
    let d = call(c, "DELETE", "/api/v1/namespaces/default/configmaps/f", "", None, None).await;
    assert_eq!(d.code, 200);
    assert!(d.body["metadata"]["deletionTimestamp"].is_string(), "{}", d.body);
    let g = get(c, "/api/v1/namespaces/default/configmaps/f").await;
    assert_eq!(g.code, 200);
    let p = call(
        c,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/f",
        "application/merge-patch+json",
        Some(br#"{"metadata":{"finalizers":null}}"#.to_vec()),
        None,
    )
    .await;
    assert_eq!(p.code, 200, "{}", p.body);
    assert_eq!(get(c, "/api/v1/namespaces/default/configmaps/f").await.code, 404);

    // Preconditions.
    let created = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("pre")).await;
    let wrong =
        json_call(c, "DELETE", "/api/v1/namespaces/default/configmaps/pre", json!({"preconditions": {"uid": "nope"}}))
            .await;
    assert_eq!(wrong.code, 409);
    let uid = created.body["metadata"]["uid"].clone();
    let ok =
        json_call(c, "DELETE", "/api/v1/namespaces/default/configmaps/pre", json!({"preconditions": {"uid": uid}}))
            .await;
    assert_eq!(ok.code, 200);
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn terminating_namespace_refuses_new_content_and_default_cannot_be_deleted() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "doomed"}});
    let r = json_call(c, "POST", "/api/v1/namespaces", ns).await;
    assert_eq!(r.code, 201);
    assert_eq!(r.body["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(r.body["status"]["phase"], "Active");
    let d = call(c, "DELETE", "/api/v1/namespaces/doomed", "", None, None).await;
    assert_eq!(d.code, 200);
    assert_eq!(d.body["status"]["phase"], "Terminating");
    let create = json_call(c, "POST", "/api/v1/namespaces/doomed/configmaps", cm("x")).await;
    assert_eq!(create.code, 403);
    assert_eq!(
        create.body["message"],
        "configmaps \"x\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );
    // Finalizing removes the namespace.
    let mut fin = d.body.clone();
    fin["spec"]["finalizers"] = json!([]);
    let f = json_call(c, "PUT", "/api/v1/namespaces/doomed/finalize", fin).await;
    assert_eq!(f.code, 200, "{}", f.body);
    assert_eq!(get(c, "/api/v1/namespaces/doomed").await.code, 404);
    assert_eq!(call(c, "DELETE", "/api/v1/namespaces/default", "", None, None).await.code, 403);
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn lists_paginate_over_one_snapshot_and_filter_by_selectors() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    for i in 0..5 {
        let mut b = cm(&format!("c{i}"));
        b["metadata"]["labels"]["idx"] = json!(i.to_string());
        assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/configmaps", b).await.code, 201);
    }
    let p1 = get(c, "/api/v1/namespaces/default/configmaps?limit=2").await;
    assert_eq!(p1.body["items"].as_array().unwrap().len(), 2);
    let token = p1.body["metadata"]["continue"].as_str().unwrap().to_string();
    let rv = p1.body["metadata"]["resourceVersion"].clone();
    // A write between pages is not seen by the paginated list.
    assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("c9")).await.code, 201);
    let p2 = get(c, &format!("/api/v1/namespaces/default/configmaps?limit=10&continue={token}")).await;
    assert_eq!(p2.code, 200, "{}", p2.body);
    assert_eq!(p2.body["items"].as_array().unwrap().len(), 3);
    assert_eq!(p2.body["metadata"]["resourceVersion"], rv);
    assert!(p2.body["metadata"]["continue"].is_null());

    let sel = get(c, "/api/v1/namespaces/default/configmaps?labelSelector=idx%20in%20(1,3)").await;
    let names: Vec<&str> =
        sel.body["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["c1", "c3"]);
    let fs = get(c, "/api/v1/configmaps?fieldSelector=metadata.name%3Dc2").await;
    assert_eq!(fs.body["items"].as_array().unwrap().len(), 1);
    let bad = get(c, "/api/v1/configmaps?fieldSelector=spec.bogus%3Dx").await;
    assert_eq!(bad.code, 400);

    // Compaction expires the continue token.
    let p = get(c, "/api/v1/namespaces/default/configmaps?limit=1").await;
    let token = p.body["metadata"]["continue"].as_str().unwrap().to_string();
    assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("c10")).await.code, 201);
    let current = h.store.current_revision().await.unwrap();
    h.store.compact(current).await.unwrap();
    let expired = get(c, &format!("/api/v1/namespaces/default/configmaps?limit=1&continue={token}")).await;
    assert_eq!(expired.code, 410);
    assert_eq!(expired.body["reason"], "Expired");

    // deletecollection.
    let dc = call(c, "DELETE", "/api/v1/namespaces/default/configmaps?labelSelector=idx", "", None, None).await;
    assert_eq!(dc.code, 200);
    assert_eq!(
        get(c, "/api/v1/namespaces/default/configmaps?labelSelector=idx").await.body["items"].as_array().unwrap().len(),
        0
    );
    h.server.shutdown(Duration::from_secs(5)).await;
}

// Resource version semantics of list
// (https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list).

fn names(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

/// Five ConfigMaps c0..c4 in `default` and their state at `r1`; then c0 is changed, c1 deleted
/// and c5 created, so the latest state differs from the one at `r1` in every way a snapshot can.
async fn configmaps_changed_after(c: &kube::Client) -> String {
    for i in 0..5 {
        assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm(&format!("c{i}"))).await.code, 201);
    }
    let r1 = get(c, "/api/v1/namespaces/default/configmaps").await.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let p = call(
        c,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/c0",
        "application/merge-patch+json",
        Some(br#"{"data":{"k":"changed"}}"#.to_vec()),
        None,
    )
    .await;
    assert_eq!(p.code, 200, "{}", p.body);
    assert_eq!(call(c, "DELETE", "/api/v1/namespaces/default/configmaps/c1", "", None, None).await.code, 200);
    assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("c5")).await.code, 201);
    r1
}

#[tokio::test]
async fn a_list_at_a_resource_version_with_a_limit_is_exact_and_pages_through_that_snapshot() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r1 = configmaps_changed_after(c).await;
    // resourceVersion=R with limit and no resourceVersionMatch: Exact.
    let whole = get(c, &format!("/api/v1/namespaces/default/configmaps?resourceVersion={r1}&limit=50")).await;
    assert_eq!(whole.code, 200, "{}", whole.body);
    assert_eq!(whole.body["metadata"]["resourceVersion"], r1.as_str());
    assert_eq!(names(&whole.body), ["c0", "c1", "c2", "c3", "c4"]);
    assert_eq!(whole.body["items"][0]["data"]["k"], "v", "c0 as it was at R1");
    assert!(
        whole.body["metadata"].get("continue").is_none() && whole.body["metadata"].get("remainingItemCount").is_none()
    );
    // Paged: every item of the snapshot, across pages, with remainingItemCount.
    let p1 = get(c, &format!("/api/v1/namespaces/default/configmaps?resourceVersion={r1}&limit=2")).await;
    assert_eq!(p1.code, 200, "{}", p1.body);
    assert_eq!(names(&p1.body), ["c0", "c1"]);
    assert_eq!(p1.body["metadata"]["resourceVersion"], r1.as_str());
    assert_eq!(p1.body["metadata"]["remainingItemCount"], 3);
    let token = p1.body["metadata"]["continue"].as_str().expect("a continue token").to_string();
    let p2 = get(c, &format!("/api/v1/namespaces/default/configmaps?limit=2&continue={token}")).await;
    assert_eq!(names(&p2.body), ["c2", "c3"]);
    assert_eq!(p2.body["metadata"]["resourceVersion"], r1.as_str(), "a continued list keeps the first page's");
    assert_eq!(p2.body["metadata"]["remainingItemCount"], 1);
    let token = p2.body["metadata"]["continue"].as_str().unwrap().to_string();
    // Continue with resourceVersion=0 is treated as the token alone.
    let p3 = get(c, &format!("/api/v1/namespaces/default/configmaps?limit=2&continue={token}&resourceVersion=0")).await;
    assert_eq!(names(&p3.body), ["c4"]);
    assert!(p3.body["metadata"].get("continue").is_none() && p3.body["metadata"].get("remainingItemCount").is_none());
    // resourceVersionMatch=Exact, with and without limit: the same snapshot.
    let exact =
        get(c, &format!("/api/v1/namespaces/default/configmaps?resourceVersion={r1}&resourceVersionMatch=Exact")).await;
    assert_eq!(
        (names(&exact.body), exact.body["metadata"]["resourceVersion"].clone()),
        (names(&whole.body), json!(r1))
    );
    let exact_paged = get(
        c,
        &format!("/api/v1/namespaces/default/configmaps?resourceVersion={r1}&resourceVersionMatch=Exact&limit=4"),
    )
    .await;
    assert_eq!(names(&exact_paged.body), ["c0", "c1", "c2", "c3"]);
    assert_eq!(exact_paged.body["metadata"]["remainingItemCount"], 1);
    // A continue token with a resourceVersion other than 0 is a bad request.
    let both =
        get(c, &format!("/api/v1/namespaces/default/configmaps?limit=2&continue={token}&resourceVersion={r1}")).await;
    assert_eq!((both.code, both.body["reason"].as_str()), (400, Some("BadRequest")));
    assert_eq!(both.body["message"], "specifying resource version is not allowed when using continue");
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_list_without_a_limit_or_not_older_than_is_the_current_state_and_resource_version_zero_ignores_the_limit() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r1 = configmaps_changed_after(c).await;
    let latest = ["c0", "c2", "c3", "c4", "c5"];
    let current = h.store.current_revision().await.unwrap();
    // resourceVersion=R without limit: Not older than R (the current state).
    let nolimit = get(c, &format!("/api/v1/namespaces/default/configmaps?resourceVersion={r1}")).await;
    assert_eq!(names(&nolimit.body), latest);
    assert!(nolimit.body["metadata"]["resourceVersion"].as_str().unwrap().parse::<i64>().unwrap() >= current);
    // resourceVersionMatch=NotOlderThan with limit: the current state, paged.
    let q =
        format!("/api/v1/namespaces/default/configmaps?resourceVersion={r1}&resourceVersionMatch=NotOlderThan&limit=2");
    let p1 = get(c, &q).await;
    assert_eq!(p1.code, 200, "{}", p1.body);
    assert_eq!(names(&p1.body), ["c0", "c2"]);
    assert_eq!(p1.body["items"][0]["data"]["k"], "changed");
    assert_eq!(p1.body["metadata"]["remainingItemCount"], 3);
    let rv = p1.body["metadata"]["resourceVersion"].clone();
    let token = p1.body["metadata"]["continue"].as_str().unwrap().to_string();
    let p2 = get(c, &format!("/api/v1/namespaces/default/configmaps?limit=10&continue={token}")).await;
    assert_eq!(names(&p2.body), ["c3", "c4", "c5"]);
    assert_eq!(p2.body["metadata"]["resourceVersion"], rv);
    // resourceVersion=0: Any, and the limit is not applied (the cacher's list is whole).
    for q in ["resourceVersion=0&limit=2", "resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=2"] {
        let any = get(c, &format!("/api/v1/namespaces/default/configmaps?{q}")).await;
        assert_eq!(names(&any.body), latest, "{q}");
        assert!(any.body["metadata"].get("continue").is_none(), "{q}");
    }
    // resourceVersion unset: Most Recent, paged with remainingItemCount; with a selector, no count.
    let recent = get(c, "/api/v1/namespaces/default/configmaps?limit=4").await;
    assert_eq!(names(&recent.body), ["c0", "c2", "c3", "c4"]);
    assert_eq!(recent.body["metadata"]["remainingItemCount"], 1);
    let selected = get(c, "/api/v1/namespaces/default/configmaps?limit=2&labelSelector=app%3Dweb").await;
    assert!(selected.body["metadata"]["continue"].is_string());
    assert!(selected.body["metadata"].get("remainingItemCount").is_none(), "{}", selected.body["metadata"]);
    // Tables and metadata-only lists carry the same list metadata.
    let table = call(
        c,
        "GET",
        "/api/v1/namespaces/default/configmaps?limit=2",
        "",
        None,
        Some("application/json;as=Table;v=v1;g=meta.k8s.io"),
    )
    .await;
    assert_eq!(table.body["kind"], "Table");
    assert_eq!(table.body["metadata"]["remainingItemCount"], 3);
    assert!(table.body["metadata"]["continue"].is_string());
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_list_at_a_too_large_resource_version_times_out_with_the_resource_version_too_large_cause() {
    let h = TestApiServer::start().await;
    // A client that shows the 504 instead of retrying it (kube's default client retries 504s
    // for minutes).
    let kubeconfig = kube::config::Kubeconfig::read_from(h.server.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    config.default_retry = false;
    let c = &kube::Client::try_from(config).unwrap();
    let future = h.store.current_revision().await.unwrap() + 100;
    // Not older than (served by the watch cache): 504, retry after a second.
    let r = get(c, &format!("/api/v1/namespaces/default/configmaps?resourceVersion={future}")).await;
    assert_eq!((r.code, r.body["reason"].as_str()), (504, Some("Timeout")), "{}", r.body);
    let message = r.body["message"].as_str().unwrap();
    assert!(message.starts_with(&format!("Timeout: Too large resource version: {future}, current: ")), "{message}");
    assert_eq!(
        r.body["details"]["causes"],
        json!([{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}])
    );
    assert_eq!(r.body["details"]["retryAfterSeconds"], 1);
    assert_eq!(r.headers.get("Retry-After").and_then(|v| v.to_str().ok()), Some("1"));
    // Exact (read from the store): the same cause.
    let current = h.store.current_revision().await.unwrap();
    let e =
        get(c, &format!("/api/v1/namespaces/default/configmaps?resourceVersion={future}&resourceVersionMatch=Exact"))
            .await;
    assert_eq!(e.code, 504, "{}", e.body);
    assert_eq!(e.body["message"], format!("Timeout: Too large resource version: {future}, current: {current}"));
    assert_eq!(e.body["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
    // A watch asking for the state at it: an ERROR event with the same Status.
    let wl = watch(
        c,
        &format!(
            "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion={future}&allowWatchBookmarks=true"
        ),
    )
    .await;
    let events = read_events(wl, 1).await;
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 504);
    assert_eq!(events[0]["object"]["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn list_options_kubernetes_forbids_are_invalid_list_options() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r = get(c, "/api/v1/namespaces/default/configmaps?resourceVersionMatch=Exact").await;
    assert_eq!((r.code, r.body["reason"].as_str()), (422, Some("Invalid")), "{}", r.body);
    assert_eq!(
        r.body["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
    );
    assert_eq!(r.body["details"]["group"], "meta.k8s.io");
    assert_eq!(r.body["details"]["kind"], "ListOptions");
    assert_eq!(
        r.body["details"]["causes"],
        json!([{"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
            "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"}])
    );
    let zero = get(c, "/api/v1/namespaces/default/configmaps?resourceVersion=0&resourceVersionMatch=Exact").await;
    assert_eq!(zero.code, 422, "{}", zero.body);
    let watch_match =
        get(c, "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=1&resourceVersionMatch=NotOlderThan")
            .await;
    assert_eq!(watch_match.code, 422, "{}", watch_match.body);
    assert_eq!(
        watch_match.body["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
    );
    let token = get(c, "/api/v1/namespaces/default/configmaps?limit=1&continue=bm90LWEtdG9rZW4").await;
    assert_eq!(token.code, 400, "{}", token.body);
    assert_eq!(token.body["message"], "invalid continue token: continue key is not valid");
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_compacted_continue_token_is_gone_with_a_token_for_the_rest_at_the_latest_revision() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r1 = configmaps_changed_after(c).await;
    let p1 = get(c, "/api/v1/namespaces/default/configmaps?limit=2").await;
    assert_eq!(names(&p1.body), ["c0", "c2"]);
    let token = p1.body["metadata"]["continue"].as_str().unwrap().to_string();
    assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("c6")).await.code, 201);
    let current = h.store.current_revision().await.unwrap();
    h.store.compact(current).await.unwrap();
    let expired = get(c, &format!("/api/v1/namespaces/default/configmaps?limit=10&continue={token}")).await;
    assert_eq!((expired.code, expired.body["reason"].as_str()), (410, Some("Expired")), "{}", expired.body);
    assert!(
        expired.body["message"].as_str().unwrap().starts_with(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results."
        ),
        "{}",
        expired.body
    );
    // The Status' token lists the rest from the latest revision: c6 is seen.
    let rest_token = expired.body["metadata"]["continue"].as_str().expect("a token in the Status").to_string();
    let rest = get(c, &format!("/api/v1/namespaces/default/configmaps?limit=10&continue={rest_token}")).await;
    assert_eq!(rest.code, 200, "{}", rest.body);
    assert_eq!(names(&rest.body), ["c3", "c4", "c5", "c6"]);
    assert_eq!(rest.body["metadata"]["resourceVersion"], current.to_string());
    // An exact list at a compacted revision is gone too.
    for q in [format!("resourceVersion={r1}&limit=2"), format!("resourceVersion={r1}&resourceVersionMatch=Exact")] {
        let old = get(c, &format!("/api/v1/namespaces/default/configmaps?{q}")).await;
        assert_eq!((old.code, old.body["reason"].as_str()), (410, Some("Expired")), "{q}: {}", old.body);
        assert_eq!(old.body["message"], "The resourceVersion for the provided list is too old.");
    }
    // A watch from a compacted revision: an ERROR event naming the oldest it could start at.
    let old = watch(c, &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={r1}")).await;
    let events = read_events(old, 1).await;
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["reason"], "Expired");
    assert_eq!(events[0]["object"]["message"], format!("too old resource version: {r1} ({current})"));
    h.server.shutdown(Duration::from_secs(5)).await;
}

// Metadata a create sets, clears or refuses (rest.BeforeCreate, FillObjectMetaSystemFields and
// the etcd3 store's Create).

#[tokio::test]
async fn a_create_with_a_resource_version_is_refused_as_a_bad_request_with_kubernetes_message() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let mut with_rv = cm("rv");
    with_rv["metadata"]["resourceVersion"] = json!("12");
    let r = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", with_rv.clone()).await;
    assert_eq!(r.code, 400, "{}", r.body);
    assert_eq!(r.body["message"], "resourceVersion should not be set on objects to be created");
    assert_eq!(r.body["status"], "Failure");
    assert_eq!(r.body["reason"], "BadRequest", "{}", r.body);
    assert_eq!(get(c, "/api/v1/namespaces/default/configmaps/rv").await.code, 404, "nothing was stored");
    // A dry run never reaches the store's check.
    let dry = json_call(c, "POST", "/api/v1/namespaces/default/configmaps?dryRun=All", with_rv).await;
    assert_eq!(dry.code, 201, "{}", dry.body);
    // "0" and what does not parse as a version are dropped, as Kubernetes does.
    for (name, rv) in [("zero", "0"), ("negative", "-1")] {
        let mut b = cm(name);
        b["metadata"]["resourceVersion"] = json!(rv);
        let r = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", b).await;
        assert_eq!(r.code, 201, "{rv}: {}", r.body);
        assert_ne!(r.body["metadata"]["resourceVersion"], rv);
    }
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_create_replaces_system_metadata_clears_deletion_and_sets_generation_where_tracked() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let mut b = cm("meta");
    b["metadata"]["uid"] = json!("11111111-1111-1111-1111-111111111111");
    b["metadata"]["creationTimestamp"] = json!("2001-01-01T00:00:00Z");
    b["metadata"]["deletionTimestamp"] = json!("2001-01-01T00:00:00Z");
    b["metadata"]["deletionGracePeriodSeconds"] = json!(30);
    b["metadata"]["selfLink"] = json!("/api/v1/namespaces/default/configmaps/meta");
    b["metadata"]["generation"] = json!(7);
    let r = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", b).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let m = &r.body["metadata"];
    assert_ne!(m["uid"], "11111111-1111-1111-1111-111111111111");
    assert_ne!(m["creationTimestamp"], "2001-01-01T00:00:00Z");
    for f in ["deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
        assert!(m.get(f).is_none(), "{f}: {m}");
    }
    assert_eq!(m["generation"], 7, "no ConfigMap strategy touches generation");
    let mut negative = cm("negative");
    negative["metadata"]["generation"] = json!(-1);
    let n = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", negative).await;
    assert_eq!(n.code, 422, "{}", n.body);
    assert_eq!(n.body["details"]["causes"][0]["field"], "metadata.generation");
    let mut d = deployment("gen");
    d["metadata"]["generation"] = json!(7);
    let r = json_call(c, "POST", "/apis/apps/v1/namespaces/default/deployments", d).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["metadata"]["generation"], 1, "a Deployment starts at generation 1");
    h.server.shutdown(Duration::from_secs(5)).await;
}

async fn read_events(resp: axum::http::Response<kube::client::Body>, n: usize) -> Vec<Value> {
    use futures::StreamExt;
    use http_body_util::BodyExt;
    let mut body = resp.into_body().into_data_stream();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        let chunk = tokio::time::timeout_at(deadline, body.next()).await.expect("timed out waiting for watch events");
        let Some(Ok(chunk)) = chunk else { break };
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            out.push(serde_json::from_slice(&line).unwrap());
        }
    }
    out
}

async fn watch(c: &kube::Client, path: &str) -> axum::http::Response<kube::client::Body> {
    let req = axum::http::Request::get(path).body(kube::client::Body::empty()).unwrap();
    let resp = c.send(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp
}

#[tokio::test]
async fn watch_streams_changes_from_a_resource_version_and_follows_selectors() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("w")).await;
    let rv = r.body["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let all = watch(c, &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}")).await;
    let selected = watch(
        c,
        &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&labelSelector=app%3Dweb"),
    )
    .await;
    let p = call(
        c,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/w",
        "application/merge-patch+json",
        Some(br#"{"metadata":{"labels":{"app":"other"}}}"#.to_vec()),
        None,
    )
    .await;
    assert_eq!(p.code, 200);
    assert_eq!(call(c, "DELETE", "/api/v1/namespaces/default/configmaps/w", "", None, None).await.code, 200);
    let events = read_events(all, 2).await;
    assert_eq!(events[0]["type"], "MODIFIED");
    assert_eq!(events[1]["type"], "DELETED");
    let events = read_events(selected, 1).await;
    assert_eq!(events[0]["type"], "DELETED", "leaving the selector is a DELETED event");
    assert_eq!(events[0]["object"]["metadata"]["labels"]["app"], "web");

    // Initial events and the end bookmark.
    json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("i1")).await;
    let wl = watch(c, "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=&allowWatchBookmarks=true").await;
    let events = read_events(wl, 2).await;
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[1]["type"], "BOOKMARK");
    assert_eq!(events[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");

    // A compacted revision is gone.
    let current = h.store.current_revision().await.unwrap();
    h.store.compact(current).await.unwrap();
    let old = watch(c, &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}")).await;
    let events = read_events(old, 1).await;
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    h.server.shutdown(Duration::from_secs(5)).await;
}

/// Every line of a watch body until the server ends it (a minute at most).
async fn read_until_end(resp: axum::http::Response<kube::client::Body>) -> Vec<Value> {
    use futures::StreamExt;
    use http_body_util::BodyExt;
    let mut body = resp.into_body().into_data_stream();
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Some(chunk) = tokio::time::timeout_at(deadline, body.next()).await.expect("the watch did not end") {
        buf.extend_from_slice(&chunk.expect("a watch chunk"));
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            out.push(serde_json::from_slice(&line).unwrap());
        }
    }
    out
}

#[tokio::test]
async fn a_stalled_watcher_is_cut_off_instead_of_buffering_and_resumes_from_its_last_resource_version() {
    use futures::StreamExt;
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("start")).await;
    let rv = r.body["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    // A watcher that reads nothing while far more changes than its backlog
    // (WATCHER_BACKLOG, 1,024) and the transport's windows hold are written: 3,000 ConfigMaps
    // of 8 KiB, 24 MB; the watch cache's ring (4,096 events) still holds them all.
    let stalled = watch(c, &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}")).await;
    let total = 3000;
    let padding = "x".repeat(8192);
    futures::stream::iter(0..total)
        .map(|i| {
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")},
                "data": {"k": padding}});
            async move { assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/configmaps", body).await.code, 201) }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    // Reading again, the watcher gets what was already on its way, then its stream ends, as
    // kube-apiserver's cacher closes a watcher that cannot keep up: the server did not keep
    // the other changes queued for it.
    let got = read_until_end(stalled).await;
    assert!(got.iter().all(|e| e["type"] == "ADDED"), "only ADDED events, no error");
    assert!(!got.is_empty() && got.len() < total, "cut off after {} of {total} events", got.len());
    let rvs: Vec<u64> =
        got.iter().map(|e| e["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()).collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "in resourceVersion order");
    // The client resumes from the last resourceVersion it saw and misses nothing.
    let last = rvs[rvs.len() - 1];
    let resumed = watch(c, &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={last}")).await;
    let rest = read_events(resumed, total - got.len()).await;
    let rest_rvs: Vec<u64> =
        rest.iter().map(|e| e["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()).collect();
    assert_eq!(rest.len(), total - got.len());
    assert!(rest_rvs[0] > last && rest_rvs.windows(2).all(|w| w[0] < w[1]));
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn binding_sets_the_node_once() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let r = json_call(c, "POST", "/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["status"]["phase"], "Pending");
    let b = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
    assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/pods/p/binding", b.clone()).await.code, 201);
    let g = get(c, "/api/v1/namespaces/default/pods/p").await;
    assert_eq!(g.body["spec"]["nodeName"], "n1");
    assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/pods/p/binding", b).await.code, 409);
    // A bound pod is deleted gracefully: marked, then removed with grace 0.
    let d = call(c, "DELETE", "/api/v1/namespaces/default/pods/p", "", None, None).await;
    assert_eq!(d.code, 200);
    assert_eq!(d.body["metadata"]["deletionGracePeriodSeconds"], 30);
    let d0 = call(c, "DELETE", "/api/v1/namespaces/default/pods/p?gracePeriodSeconds=0", "", None, None).await;
    assert_eq!(d0.code, 200);
    assert_eq!(get(c, "/api/v1/namespaces/default/pods/p").await.code, 404);
    h.server.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn discovery_version_table_and_anonymous_access() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let v = get(c, "/version").await;
    assert_eq!(v.body["major"], "1");
    assert_eq!(v.body["minor"], "33");
    for f in ["buildDate", "compiler", "gitCommit", "gitTreeState", "gitVersion", "goVersion", "platform"] {
        assert!(v.body[f].is_string(), "{f}");
    }
    let agg = call(
        c,
        "GET",
        "/apis",
        "",
        None,
        Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"),
    )
    .await;
    assert_eq!(
        agg.headers.get("content-type").unwrap(),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(agg.body["kind"], "APIGroupDiscoveryList");
    let beta_only = call(
        c,
        "GET",
        "/apis",
        "",
        None,
        Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"),
    )
    .await;
    assert_eq!(beta_only.body["kind"], "APIGroupList", "v2beta1 is not served: fall back to plain discovery");
    let plain = get(c, "/apis").await;
    assert_eq!(plain.body["kind"], "APIGroupList");
    assert_eq!(get(c, "/api/v1").await.body["kind"], "APIResourceList");

    let t = call(
        c,
        "GET",
        "/api/v1/namespaces?limit=500",
        "",
        None,
        Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
    )
    .await;
    assert_eq!(t.body["kind"], "Table");
    assert_eq!(t.body["rows"].as_array().unwrap().len(), 4);
    assert_eq!(t.body["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    assert_eq!(get(c, "/readyz").await.code, 200);
    let m = get(c, "/metrics").await;
    assert!(m.body.as_str().unwrap().contains("apiserver_request_total"));

    // No client certificate: 401 except for the public paths.
    let mut cfg = kube::Config::new(h.server.url().parse().unwrap());
    let ca = rustls::pki_types::pem::PemObject::from_pem_slice(h.server.pki().ca.cert_pem.as_bytes())
        .map(|c: rustls::pki_types::CertificateDer| c.to_vec())
        .unwrap();
    cfg.root_cert = Some(vec![ca]);
    let anon = kube::Client::try_from(cfg).unwrap();
    assert_eq!(get(&anon, "/api/v1/namespaces").await.code, 401);
    assert_eq!(get(&anon, "/version").await.code, 200);
    assert_eq!(get(&anon, "/healthz").await.code, 200);
    h.server.shutdown(Duration::from_secs(5)).await;
}

struct LabelAndDeny;

#[async_trait::async_trait]
impl skiff_apiserver::admission::seam::Admission for LabelAndDeny {
    async fn mutate(
        &self,
        a: &skiff_apiserver::admission::seam::Attributes<'_>,
        obj: &mut Value,
    ) -> Result<(), skiff_apimachinery::ApiError> {
        if a.def.resource == "configmaps" {
            obj["metadata"]["labels"]["admitted-by"] =
                json!(a.user.map(|u| u.name.clone()).unwrap_or_default().replace(':', "-"));
        }
        Ok(())
    }

    async fn validate(
        &self,
        a: &skiff_apiserver::admission::seam::Attributes<'_>,
        _obj: &Value,
    ) -> Result<(), skiff_apimachinery::ApiError> {
        if a.name == "forbidden" {
            return Err(skiff_apimachinery::ApiError::forbidden(
                "",
                a.def.resource,
                a.name,
                "denied by the test plug-in",
            ));
        }
        Ok(())
    }
}

#[tokio::test]
async fn admission_plugins_mutate_and_reject_writes_with_the_user_known() {
    let h = TestApiServer::start_with(|c| c.admission = Some(Arc::new(LabelAndDeny))).await;
    let c = &h.client;
    let r = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("ok")).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["metadata"]["labels"]["admitted-by"], "system-admin");
    let denied = json_call(c, "POST", "/api/v1/namespaces/default/configmaps", cm("forbidden")).await;
    assert_eq!(denied.code, 403);
    assert_eq!(get(c, "/api/v1/namespaces/default/configmaps/forbidden").await.code, 404);
    h.server.shutdown(Duration::from_secs(5)).await;
}

/// A stand-in kubelet: HTTPS on a loopback port, client certificates from the cluster CA
/// required, `/containerLogs/...` answered with a fixed text.
async fn fake_kubelet(ca_pem: &str) -> u16 {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = rustls::pki_types::CertificateDer::from(ck.cert.der().to_vec());
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(ck.signing_key.serialize_pem().as_bytes()).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![cert], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/containerLogs/{ns}/{pod}/{container}",
        axum::routing::get(
            |axum::extract::Path((ns, pod, c)): axum::extract::Path<(String, String, String)>| async move {
                format!("log of {ns}/{pod}/{c}\n")
            },
        ),
    );
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let svc = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    port
}

#[tokio::test]
async fn pod_logs_are_fetched_from_the_pods_kubelet() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let port = fake_kubelet(&h.server.pki().ca.cert_pem).await;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}], "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}});
    assert_eq!(json_call(c, "POST", "/api/v1/nodes", node).await.code, 201);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}});
    assert_eq!(json_call(c, "POST", "/api/v1/namespaces/default/pods", pod).await.code, 201);
    let logs = get(c, "/api/v1/namespaces/default/pods/p/log").await;
    assert_eq!(logs.code, 200, "{}", logs.body);
    assert_eq!(logs.body, Value::String("log of default/p/c\n".into()));
    let wrong = get(c, "/api/v1/namespaces/default/pods/p/log?container=nope").await;
    assert_eq!(wrong.code, 400);
    h.server.shutdown(Duration::from_secs(5)).await;
}

struct Allow;

#[async_trait::async_trait]
impl skiff_apiserver::registry::virtual_resources::VirtualHandler for Allow {
    async fn create(
        &self,
        req: &skiff_apiserver::registry::virtual_resources::VirtualRequest<'_>,
        mut body: Value,
    ) -> Result<Value, skiff_apimachinery::ApiError> {
        body["status"] =
            json!({"allowed": true, "reason": format!("{} asked about {}", req.user.unwrap().name, req.def.resource)});
        Ok(body)
    }
}

#[tokio::test]
async fn virtual_resources_are_answered_by_their_handlers() {
    let review = skiff_apiserver::registry::virtual_resources::standard_defs().into_iter().next().unwrap();
    let sa = skiff_apiserver::resources::builtin().into_iter().find(|d| d.resource == "serviceaccounts").unwrap();
    let h = TestApiServer::start_with(|c| {
        c.virtual_resources = vec![
            skiff_apiserver::registry::virtual_resources::VirtualResource {
                def: review,
                subresource: None,
                handler: Arc::new(Allow),
            },
            skiff_apiserver::registry::virtual_resources::VirtualResource {
                def: sa,
                subresource: Some("token"),
                handler: Arc::new(Allow),
            },
        ]
    })
    .await;
    let c = &h.client;
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}});
    let r = json_call(c, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["status"]["allowed"], true);
    assert_eq!(r.body["status"]["reason"], "system:admin asked about selfsubjectaccessreviews");
    assert_eq!(get(c, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews").await.code, 405);
    let disc = get(c, "/apis/authorization.k8s.io/v1").await;
    assert_eq!(disc.body["resources"][0]["verbs"], json!(["create"]));
    let tr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": []}});
    let t = json_call(c, "POST", "/api/v1/namespaces/default/serviceaccounts/default/token", tr).await;
    assert_eq!(t.code, 201, "{}", t.body);
    h.server.shutdown(Duration::from_secs(5)).await;
}

/// Requests rejected before or while their body is read get the same `metav1.Status` over
/// HTTP/2 as over HTTP/1.1: 413 past the body limit, 415 for an unsupported content type, 400
/// for a malformed body, 429 from the max-in-flight filter. kubectl and client-go speak HTTP/2,
/// where a body left unread must not reset the stream before the Status is sent. The requests
/// are made with curl, which (unlike hyper's client) reports a stream reset while it is still
/// uploading as an error: the strictest of the usual clients.
mod early_rejections {
    use std::convert::Infallible;
    use std::path::Path;
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::combinators::BoxBody;
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use serde_json::Value;
    use skiff_apiserver::ApiServer;
    use skiff_apiserver::testing::TestApiServer;

    pub(super) type Body = BoxBody<Bytes, Infallible>;
    pub(super) type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Body>;

    const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

    #[derive(Clone, Copy, Debug)]
    pub(super) enum Protocol {
        Http1,
        Http2,
    }

    /// A raw hyper client of `protocol` that presents the admin client certificate.
    pub(super) async fn client(server: &ApiServer, protocol: Protocol) -> HttpsClient {
        use kube::client::ConfigExt as _;
        let kubeconfig = kube::config::Kubeconfig::read_from(server.kubeconfig_path()).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
        let connector = config.rustls_https_connector().unwrap();
        let mut builder = Client::builder(hyper_util::rt::TokioExecutor::new());
        if let Protocol::Http2 = protocol {
            builder.http2_only(true);
        }
        builder.build(connector)
    }

    /// POSTs `body` to the ConfigMaps with curl over `protocol`, as the admin (client certificate)
    /// or as nobody; the answer's code and its body as JSON.
    fn curl(
        server_dir: &Path,
        server: &ApiServer,
        protocol: Protocol,
        admin: bool,
        content_type: &str,
        body: &[u8],
    ) -> (u16, Value) {
        let scratch = tempfile::tempdir().unwrap();
        let body_file = scratch.path().join("body");
        std::fs::write(&body_file, body).unwrap();
        let tls = server_dir.join("tls");
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "-X", "POST", "-o", "-", "-w", "\n%{http_code}"])
            .arg(match protocol {
                Protocol::Http1 => "--http1.1",
                Protocol::Http2 => "--http2",
            })
            .arg("--cacert")
            .arg(tls.join("ca.crt"))
            .args(["-H", &format!("Content-Type: {content_type}"), "--data-binary"])
            .arg(format!("@{}", body_file.display()));
        if admin {
            cmd.arg("--cert").arg(tls.join("admin.crt")).arg("--key").arg(tls.join("admin.key"));
        }
        let out = cmd
            .arg(format!("{}{CONFIGMAPS}", server.url()))
            .output()
            .expect("running curl (scripts/install-deps installs it)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{protocol:?}: curl failed: {}{stdout}", String::from_utf8_lossy(&out.stderr));
        let (json, code) = stdout.rsplit_once('\n').unwrap_or_else(|| panic!("{protocol:?}: no status line: {stdout}"));
        let status = serde_json::from_str(json).unwrap_or_else(|e| panic!("{protocol:?}: not JSON ({e}): {json}"));
        (code.trim().parse().unwrap(), status)
    }

    fn assert_status(protocol: Protocol, (code, status): (u16, Value), want_code: u16, want_reason: &str) {
        assert_eq!(code, want_code, "{protocol:?}: {status}");
        assert_eq!(status["kind"], "Status", "{protocol:?}: {status}");
        assert_eq!(status["code"], want_code, "{protocol:?}: {status}");
        assert_eq!(status["reason"], want_reason, "{protocol:?}: {status}");
    }

    /// A ConfigMap whose JSON is `size` bytes or a little more.
    fn config_map_of(size: usize) -> Vec<u8> {
        let data = "x".repeat(size);
        serde_json::to_vec(&serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "big"}, "data": {"a": data}}))
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn oversized_unsupported_and_malformed_bodies_get_their_status_over_both_protocols() {
        let h = TestApiServer::start().await;
        let (dir, server) = (&h.dir, &h.server);
        for protocol in [Protocol::Http1, Protocol::Http2] {
            let big = curl(dir.path(), server, protocol, true, "application/json", &config_map_of(4 << 20));
            assert!(big.1["message"].as_str().unwrap().contains("limit is 3145728"), "{protocol:?}: {}", big.1);
            assert_status(protocol, big, 413, "RequestEntityTooLarge");

            let unsupported = curl(dir.path(), server, protocol, true, "text/plain", &config_map_of(2 << 20));
            assert_status(protocol, unsupported, 415, "UnsupportedMediaType");

            let malformed =
                curl(dir.path(), server, protocol, true, "application/json", b"{\"apiVersion\": \"v1\", \"kind\":");
            assert_status(protocol, malformed, 400, "BadRequest");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_beyond_the_mutating_limit_gets_429_over_both_protocols() {
        let h = TestApiServer::start_with(|c| c.max_mutating_requests_inflight = 1).await;
        let (dir, server) = (&h.dir, &h.server);
        for protocol in [Protocol::Http1, Protocol::Http2] {
            // The admin's create holds the one mutating seat while its body is still coming.
            let admin = client(server, protocol).await;
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(1);
            tx.send(Ok(Frame::data(Bytes::from_static(b"{\"apiVersion\":\"v1\",")))).await.unwrap();
            let held_body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx)).boxed();
            let held = tokio::spawn({
                let url = format!("{}{CONFIGMAPS}", server.url());
                async move {
                    let request =
                        hyper::Request::post(url).header("content-type", "application/json").body(held_body).unwrap();
                    admin.request(request).await.map(|r| r.status().as_u16())
                }
            });
            // Anyone else (no client certificate: not system:masters, so not exempt) is throttled
            // once the seat is taken, before its body is read; wait for that with a deadline.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            let throttled = loop {
                let body = config_map_of(2 << 20);
                let answer = tokio::task::block_in_place(|| {
                    curl(dir.path(), server, protocol, false, "application/json", &body)
                });
                if answer.0 == 429 {
                    break answer;
                }
                assert!(tokio::time::Instant::now() < deadline, "{protocol:?}: never throttled: {}", answer.1);
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert_status(protocol, throttled, 429, "TooManyRequests");
            tx.send(Ok(Frame::data(Bytes::from_static(
                b"\"kind\":\"ConfigMap\",\"metadata\":{\"generateName\":\"held-\"}}",
            ))))
            .await
            .unwrap();
            drop(tx);
            assert_eq!(held.await.unwrap().unwrap(), 201, "{protocol:?}: the held create completes");
        }
    }
}

/// `pods/eviction` honours PodDisruptionBudgets as kube-apiserver's eviction REST does, over
/// HTTP/1.1 and HTTP/2 (kubectl drain speaks HTTP/2). The budgets' status is written by hand
/// here, standing in for the disruption controller.
mod eviction {
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use serde_json::{Value, json};
    use skiff_apiserver::ApiServer;
    use skiff_apiserver::testing::TestApiServer;

    use super::early_rejections::{HttpsClient, Protocol, client};

    const NS: &str = "/api/v1/namespaces/default";
    const PDBS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";

    struct Api<'a> {
        server: &'a ApiServer,
        client: HttpsClient,
        protocol: Protocol,
    }

    impl Api<'_> {
        async fn send(&self, method: &str, path: &str, content_type: &str, body: Option<Value>) -> (u16, Value) {
            let bytes = body.map(|b| serde_json::to_vec(&b).unwrap()).unwrap_or_default();
            let request = hyper::Request::builder()
                .method(method)
                .uri(format!("{}{path}", self.server.url()))
                .header("content-type", content_type)
                .body(Full::new(Bytes::from(bytes)).boxed())
                .unwrap();
            let resp = self.client.request(request).await.unwrap();
            let code = resp.status().as_u16();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
        }

        async fn ok(&self, method: &str, path: &str, content_type: &str, body: Value) -> Value {
            let (code, answer) = self.send(method, path, content_type, Some(body)).await;
            assert!(code < 300, "{:?}: {method} {path}: {code} {answer}", self.protocol);
            answer
        }

        /// A pod labelled `app=<app>`, Running (and Ready when `ready`) unless `phase` is Pending.
        async fn pod(&self, name: &str, app: &str, phase: &str, ready: bool) -> Value {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
            let created = self.ok("POST", &format!("{NS}/pods"), "application/json", pod).await;
            if phase == "Pending" {
                return created;
            }
            let status = json!({"status": {"phase": phase,
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
            self.ok("PATCH", &format!("{NS}/pods/{name}/status"), "application/merge-patch+json", status).await
        }

        /// A budget selecting `app=<app>` with the given status counts, observed at generation 1.
        async fn pdb(&self, name: &str, app: &str, allowed: i64, current: i64, desired: i64) {
            let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
                "spec": {"minAvailable": desired, "selector": {"matchLabels": {"app": app}}}});
            self.ok("POST", PDBS, "application/json", pdb).await;
            self.pdb_status(name, allowed, current, desired, 1).await;
        }

        async fn pdb_status(&self, name: &str, allowed: i64, current: i64, desired: i64, observed: i64) {
            let status = json!({"status": {"disruptionsAllowed": allowed, "currentHealthy": current,
                "desiredHealthy": desired, "expectedPods": current, "observedGeneration": observed}});
            self.ok("PATCH", &format!("{PDBS}/{name}/status"), "application/merge-patch+json", status).await;
        }

        async fn evict(&self, name: &str, query: &str, delete_options: Value) -> (u16, Value) {
            let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name},
                "deleteOptions": delete_options});
            self.send("POST", &format!("{NS}/pods/{name}/eviction{query}"), "application/json", Some(eviction)).await
        }

        async fn get(&self, path: &str) -> (u16, Value) {
            self.send("GET", path, "application/json", None).await
        }

        /// Whether the pod is gone or being deleted (an unbound pod goes at once).
        async fn evicted(&self, name: &str) -> bool {
            let (code, pod) = self.get(&format!("{NS}/pods/{name}")).await;
            code == 404 || pod["metadata"]["deletionTimestamp"].is_string()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn evictions_honour_disruption_budgets_over_both_protocols() {
        let h = TestApiServer::start().await;
        for (protocol, t) in [(Protocol::Http1, "h1"), (Protocol::Http2, "h2")] {
            let api = Api { server: &h.server, client: client(&h.server, protocol).await, protocol };
            let name = |base: &str| format!("{base}-{t}");

            // No disruption allowed: 429 with Kubernetes' message and the budget's reason.
            api.pod(&name("a"), &name("a"), "Running", true).await;
            api.pdb(&name("a"), &name("a"), 0, 1, 1).await;
            let (code, status) = api.evict(&name("a"), "", Value::Null).await;
            assert_eq!(code, 429, "{protocol:?}: {status}");
            assert_eq!(status["reason"], "TooManyRequests");
            assert_eq!(status["message"], "Cannot evict pod as it would violate the pod's disruption budget.");
            assert_eq!(status["details"]["causes"][0]["reason"], "DisruptionBudget");
            assert_eq!(
                status["details"]["causes"][0]["message"],
                format!("The disruption budget {} needs 1 healthy pods and has 1 currently", name("a"))
            );
            assert!(!api.evicted(&name("a")).await);

            // One allowed: a dry run changes nothing, a real eviction spends it.
            api.pdb_status(&name("a"), 1, 2, 1, 1).await;
            let (code, status) = api.evict(&name("a"), "?dryRun=All", Value::Null).await;
            assert_eq!(code, 201, "{protocol:?}: {status}");
            let (code, status) = api.evict(&name("a"), "", json!({"dryRun": ["All"]})).await;
            assert_eq!(code, 201, "{protocol:?}: {status}");
            assert!(!api.evicted(&name("a")).await, "{protocol:?}: a dry run deleted the pod");
            let (_, pdb) = api.get(&format!("{PDBS}/{}", name("a"))).await;
            assert_eq!(pdb["status"]["disruptionsAllowed"], 1, "{protocol:?}: a dry run spent the disruption");
            let (code, status) = api.evict(&name("a"), "", Value::Null).await;
            assert_eq!(code, 201, "{protocol:?}: {status}");
            assert_eq!(status["status"], "Success");
            assert!(api.evicted(&name("a")).await);
            let (_, pdb) = api.get(&format!("{PDBS}/{}", name("a"))).await;
            assert_eq!(pdb["status"]["disruptionsAllowed"], 0);
            assert!(pdb["status"]["disruptedPods"][name("a")].is_string(), "{protocol:?}: {pdb}");
            let cond = &pdb["status"]["conditions"][0];
            assert_eq!((cond["type"].as_str(), cond["status"].as_str()), (Some("DisruptionAllowed"), Some("False")));
            assert_eq!(cond["reason"], "InsufficientPods");

            // A Pending pod disrupts nothing: evicted without looking at the exhausted budget.
            api.pod(&name("pending"), &name("a"), "Pending", false).await;
            let (code, status) = api.evict(&name("pending"), "", Value::Null).await;
            assert_eq!(code, 201, "{protocol:?}: {status}");
            assert!(api.evicted(&name("pending")).await);

            // An unready pod (IfHealthyBudget, the default): deleted without spending a
            // disruption while the budget has its healthy pods, refused while it is short;
            // always deleted with AlwaysAllow.
            api.pod(&name("unready1"), &name("a"), "Running", false).await;
            let (code, status) = api.evict(&name("unready1"), "", Value::Null).await;
            assert_eq!(code, 201, "{protocol:?}: {status}");
            assert!(api.evicted(&name("unready1")).await);
            let (_, pdb) = api.get(&format!("{PDBS}/{}", name("a"))).await;
            assert!(pdb["status"]["disruptedPods"].get(name("unready1")).is_none(), "{protocol:?}: {pdb}");
            api.pod(&name("unready"), &name("a"), "Running", false).await;
            api.pdb_status(&name("a"), 0, 0, 1, 1).await;
            let (code, status) = api.evict(&name("unready"), "", Value::Null).await;
            assert_eq!(code, 429, "{protocol:?}: {status}");
            let policy = json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}});
            api.ok("PATCH", &format!("{PDBS}/{}", name("a")), "application/merge-patch+json", policy).await;
            let (code, status) = api.evict(&name("unready"), "", Value::Null).await;
            assert_eq!(code, 201, "{protocol:?}: {status}");
            assert!(api.evicted(&name("unready")).await);

            // A budget whose status has not caught up with its spec: 429, retry after 10 s.
            api.pod(&name("s"), &name("s"), "Running", true).await;
            api.pdb(&name("s"), &name("s"), 1, 2, 1).await;
            api.pdb_status(&name("s"), 1, 2, 1, 0).await;
            let (code, status) = api.evict(&name("s"), "", Value::Null).await;
            assert_eq!(code, 429, "{protocol:?}: {status}");
            assert_eq!(status["details"]["retryAfterSeconds"], 10);
            assert_eq!(
                status["details"]["causes"][0]["message"],
                format!("The disruption budget {} is still being processed by the server.", name("s"))
            );

            // Two budgets over one pod: 500, as Kubernetes.
            api.pod(&name("m"), &name("m"), "Running", true).await;
            api.pdb(&name("m1"), &name("m"), 1, 1, 0).await;
            api.pdb(&name("m2"), &name("m"), 1, 1, 0).await;
            let (code, status) = api.evict(&name("m"), "", Value::Null).await;
            assert_eq!(code, 500, "{protocol:?}: {status}");
            assert_eq!(
                status["message"],
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
            );

            // deleteOptions preconditions, and the Eviction's name.
            let pod = api.pod(&name("n"), &name("n"), "Running", true).await;
            let (code, status) = api.evict(&name("n"), "", json!({"preconditions": {"uid": "wrong"}})).await;
            assert_eq!(code, 409, "{protocol:?}: {status}");
            assert!(!api.evicted(&name("n")).await);
            let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}});
            let path = format!("{NS}/pods/{}/eviction", name("n"));
            let (code, _) = api.send("POST", &path, "application/json", Some(eviction)).await;
            assert_eq!(code, 400);
            let uid = pod["metadata"]["uid"].clone();
            let (code, status) = api.evict(&name("n"), "", json!({"preconditions": {"uid": uid}})).await;
            assert_eq!(code, 201, "{protocol:?}: {status}");
            assert!(api.evicted(&name("n")).await);
        }
        h.server.shutdown(Duration::from_secs(5)).await;
    }
}
