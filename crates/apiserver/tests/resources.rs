//! HTTP-level tests of the resource types beyond the core set (priority classes, PDBs,
//! StatefulSets, ReplicationControllers, Jobs, CronJobs, …) and of custom resources served from
//! CustomResourceDefinitions: a real API server on a real SQLite store in a temp dir.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skiff_apiserver::testing::TestApiServer;

struct Resp {
    code: u16,
    body: Value,
    headers: axum::http::HeaderMap,
}

async fn call(client: &kube::Client, method: &str, path: &str, ctype: &str, body: Option<Value>, accept: &str) -> Resp {
    let mut b = axum::http::Request::builder().method(method).uri(path);
    if !ctype.is_empty() {
        b = b.header("Content-Type", ctype);
    }
    if !accept.is_empty() {
        b = b.header("Accept", accept);
    }
    let bytes = body.map(|v| serde_json::to_vec(&v).unwrap()).unwrap_or_default();
    let req = b.body(kube::client::Body::from(bytes)).unwrap();
    let resp = client.send(req).await.unwrap();
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect_bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Resp { code, body, headers }
}

async fn post(c: &kube::Client, path: &str, body: Value) -> Resp {
    call(c, "POST", path, "application/json", Some(body), "").await
}

async fn get(c: &kube::Client, path: &str) -> Resp {
    call(c, "GET", path, "", None, "").await
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

fn column_names(table: &Value) -> Vec<String> {
    table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
}

/// Polls `path` until `done` holds for its body (or panics after 20 s).
async fn wait_for(c: &kube::Client, path: &str, done: impl Fn(&Resp) -> bool) -> Resp {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = get(c, path).await;
        if done(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "timed out waiting on {path}: {} {}", r.code, r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn pod_template(app: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}})
}

#[tokio::test]
async fn system_priority_classes_exist_and_only_one_class_may_be_the_global_default() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r = get(c, "/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical").await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert_eq!(r.body["value"], 2_000_001_000);
    assert_eq!(r.body["preemptionPolicy"], "PreemptLowerPriority");
    assert_eq!(get(c, "/apis/scheduling.k8s.io/v1/priorityclasses/system-cluster-critical").await.code, 200);

    let pc = |name: &str, default: bool| {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": 1000, "globalDefault": default})
    };
    assert_eq!(post(c, "/apis/scheduling.k8s.io/v1/priorityclasses", pc("high", true)).await.code, 201);
    let second = post(c, "/apis/scheduling.k8s.io/v1/priorityclasses", pc("other", true)).await;
    assert_eq!(second.code, 403, "{}", second.body);
    assert!(second.body["message"].as_str().unwrap().contains("already marked as default"));
    let reserved = post(c, "/apis/scheduling.k8s.io/v1/priorityclasses", pc("system-mine", false)).await;
    assert_eq!(reserved.code, 422, "{}", reserved.body);

    let t = call(c, "GET", "/apis/scheduling.k8s.io/v1/priorityclasses", "", None, TABLE).await;
    assert_eq!(column_names(&t.body), ["Name", "Value", "Global-Default", "Age", "PreemptionPolicy"]);
    assert_eq!(t.body["rows"].as_array().unwrap().len(), 3);

    let disc = get(c, "/apis/scheduling.k8s.io/v1").await;
    let res = disc.body["resources"].as_array().unwrap();
    let pcs = res.iter().find(|r| r["name"] == "priorityclasses").unwrap();
    assert_eq!(pcs["shortNames"], json!(["pc"]));
    assert_eq!(pcs["namespaced"], false);
}

#[tokio::test]
async fn workload_types_are_served_with_status_scale_defaults_and_validation() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": pod_template("db")}});
    let r = post(c, "/apis/apps/v1/namespaces/default/statefulsets", sts).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["spec"]["podManagementPolicy"], "OrderedReady");
    assert_eq!(r.body["metadata"]["generation"], 1);
    let scale = get(c, "/apis/apps/v1/namespaces/default/statefulsets/db/scale").await;
    assert_eq!(scale.body["spec"]["replicas"], 2);
    assert_eq!(scale.body["status"]["selector"], "app=db");

    let rc = json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "template": pod_template("web")}});
    let r = post(c, "/api/v1/namespaces/default/replicationcontrollers", rc).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["spec"]["replicas"], 1);
    let patched = call(
        c,
        "PATCH",
        "/api/v1/namespaces/default/replicationcontrollers/web/scale",
        "application/merge-patch+json",
        Some(json!({"spec": {"replicas": 3}})),
        "",
    )
    .await;
    assert_eq!(patched.code, 200, "{}", patched.body);
    assert_eq!(patched.body["status"]["selector"], "app=web");
    assert_eq!(get(c, "/api/v1/namespaces/default/replicationcontrollers/web").await.body["spec"]["replicas"], 3);

    // The main resource ignores status; /status writes it.
    let mut job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
        "status": {"active": 5}});
    let r = post(c, "/apis/batch/v1/namespaces/default/jobs", job.clone()).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert!(r.body.get("status").is_none_or(|s| s.get("active").is_none()), "{}", r.body);
    // The Job strategy generates the selector and template labels from the uid.
    let uid = r.body["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(r.body["spec"]["selector"], json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}));
    assert_eq!(r.body["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"], "once");
    assert_eq!(r.body["spec"]["backoffLimit"], 6);
    // Its selector and template are immutable; bad ranges are 422 with field causes.
    let mut changed = r.body.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx");
    let u = call(c, "PUT", "/apis/batch/v1/namespaces/default/jobs/once", "application/json", Some(changed), "").await;
    assert_eq!(u.code, 422, "{}", u.body);
    assert_eq!(u.body["details"]["causes"][0]["field"], "spec.template", "{}", u.body);
    let bad = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bad"},
        "spec": {"completionMode": "Indexed", "parallelism": -1,
                 "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}});
    let b = post(c, "/apis/batch/v1/namespaces/default/jobs", bad).await;
    assert_eq!(b.code, 422, "{}", b.body);
    let causes: Vec<&str> =
        b.body["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert!(causes.contains(&"spec.parallelism") && causes.contains(&"spec.completions"), "{}", b.body);
    assert_eq!(get(c, "/apis/batch/v1/namespaces/default/jobs/bad").await.code, 404);
    job = r.body.clone();
    job["status"] = json!({"active": 1});
    let s =
        call(c, "PUT", "/apis/batch/v1/namespaces/default/jobs/once/status", "application/json", Some(job), "").await;
    assert_eq!(s.code, 200, "{}", s.body);
    assert_eq!(s.body["status"]["active"], 1);

    let cj = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"},
        "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure",
            "containers": [{"name": "c", "image": "busybox"}]}}}}}});
    let r = post(c, "/apis/batch/v1/namespaces/default/cronjobs", cj).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["spec"]["concurrencyPolicy"], "Allow");
    let t = call(c, "GET", "/apis/batch/v1/namespaces/default/cronjobs", "", None, TABLE).await;
    assert_eq!(&column_names(&t.body)[..3], ["Name", "Schedule", "Timezone"]);
    assert_eq!(t.body["rows"][0]["cells"][1], "*/5 * * * *");

    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p"},
        "spec": {"minAvailable": 1, "maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}}});
    let r = post(c, "/apis/policy/v1/namespaces/default/poddisruptionbudgets", pdb).await;
    assert_eq!(r.code, 422, "{}", r.body);

    for path in [
        "/apis/apps/v1/namespaces/default/daemonsets",
        "/apis/apps/v1/namespaces/default/controllerrevisions",
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
        "/api/v1/namespaces/default/limitranges",
        "/api/v1/namespaces/default/resourcequotas",
        "/api/v1/namespaces/default/persistentvolumeclaims",
        "/api/v1/persistentvolumes",
        "/api/v1/namespaces/default/podtemplates",
        "/apis/networking.k8s.io/v1/namespaces/default/ingresses",
        "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies",
        "/apis/storage.k8s.io/v1/storageclasses",
        "/apis/storage.k8s.io/v1/csidrivers",
        "/apis/storage.k8s.io/v1/csinodes",
        "/apis/storage.k8s.io/v1/volumeattachments",
        "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities",
    ] {
        let r = get(c, path).await;
        assert_eq!(r.code, 200, "{path}: {}", r.body);
        assert!(r.body["kind"].as_str().unwrap().ends_with("List"), "{path}");
    }
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "size": {"type": "integer", "minimum": 0},
                        "color": {"type": "string", "default": "red"},
                    }},
                    "status": {"type": "object", "properties": {"size": {"type": "integer"}}},
                }}},
            }],
        },
    })
}

fn widget(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "labels": {"tier": "a"}},
        "spec": {"size": size}})
}

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

#[tokio::test]
async fn custom_resources_are_served_once_their_crd_is_established() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let r = post(c, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widget_crd()).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let crd = wait_for(c, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", |r| {
        r.body["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
    })
    .await;
    assert_eq!(crd.body["status"]["acceptedNames"]["listKind"], "WidgetList");

    // Discovery, plain and aggregated.
    let d = wait_for(c, "/apis/example.com/v1", |r| r.code == 200).await;
    let w = d.body["resources"].as_array().unwrap().iter().find(|r| r["name"] == "widgets").unwrap().clone();
    assert_eq!(w["shortNames"], json!(["wd"]));
    assert_eq!(w["categories"], json!(["all"]));
    assert!(d.body["resources"].as_array().unwrap().iter().any(|r| r["name"] == "widgets/scale"));
    let groups = get(c, "/apis").await;
    assert!(groups.body["groups"].as_array().unwrap().iter().any(|g| g["name"] == "example.com"));
    let agg =
        call(c, "GET", "/apis", "", None, "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList").await;
    let g = agg.body["items"].as_array().unwrap().iter().find(|g| g["metadata"]["name"] == "example.com").unwrap();
    assert_eq!(g["versions"][0]["resources"][0]["resource"], "widgets");

    // Create: defaults filled, unknown fields pruned with a warning, status dropped.
    let mut body = widget("w1", 2);
    body["spec"]["bogus"] = json!(true);
    body["status"] = json!({"size": 9});
    let r = post(c, WIDGETS, body.clone()).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["spec"]["color"], "red");
    assert!(r.body["spec"].get("bogus").is_none());
    assert!(r.body.get("status").is_none());
    assert_eq!(r.body["metadata"]["generation"], 1);
    let warning = r.headers.get("warning").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    assert!(warning.contains("unknown field \\\"spec.bogus\\\""), "{warning}");
    body["metadata"]["name"] = json!("w-strict");
    let strict =
        call(c, "POST", &format!("{WIDGETS}?fieldValidation=Strict"), "application/json", Some(body), "").await;
    assert_eq!(strict.code, 400, "{}", strict.body);

    // Schema validation.
    let bad = post(
        c,
        WIDGETS,
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "bad"},
        "spec": {"size": "big"}}),
    )
    .await;
    assert_eq!(bad.code, 422, "{}", bad.body);
    assert_eq!(bad.body["details"]["causes"][0]["field"], "spec.size");
    let missing = post(
        c,
        WIDGETS,
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "bad"}, "spec": {}}),
    )
    .await;
    assert_eq!(missing.code, 422, "{}", missing.body);

    assert_eq!(post(c, WIDGETS, widget("w2", 5)).await.code, 201);
    let mut other = widget("w3", 1);
    other["metadata"]["labels"]["tier"] = json!("b");
    assert_eq!(post(c, WIDGETS, other).await.code, 201);

    // Lists with label selectors, Tables with the printer columns.
    let l = get(c, &format!("{WIDGETS}?labelSelector=tier%3Da")).await;
    assert_eq!(l.body["kind"], "WidgetList");
    assert_eq!(l.body["items"].as_array().unwrap().len(), 2);
    let t = call(c, "GET", WIDGETS, "", None, TABLE).await;
    assert_eq!(column_names(&t.body), ["Name", "Size", "Color", "Age"]);
    assert_eq!(t.body["columnDefinitions"][2]["priority"], 1);
    assert_eq!(t.body["rows"][0]["cells"][0], "w1");
    assert_eq!(t.body["rows"][0]["cells"][1], 2);
    assert_eq!(t.body["rows"][0]["cells"][2], "red");

    // Patches: merge and JSON patch work, strategic merge is 415.
    let m = call(
        c,
        "PATCH",
        &format!("{WIDGETS}/w1"),
        "application/merge-patch+json",
        Some(json!({"spec": {"size": 3}})),
        "",
    )
    .await;
    assert_eq!(m.code, 200, "{}", m.body);
    assert_eq!(m.body["spec"]["size"], 3);
    assert_eq!(m.body["metadata"]["generation"], 2);
    let jp = call(
        c,
        "PATCH",
        &format!("{WIDGETS}/w1"),
        "application/json-patch+json",
        Some(json!([{"op": "replace", "path": "/spec/color", "value": "blue"}])),
        "",
    )
    .await;
    assert_eq!(jp.code, 200, "{}", jp.body);
    assert_eq!(jp.body["spec"]["color"], "blue");
    let smp = call(
        c,
        "PATCH",
        &format!("{WIDGETS}/w1"),
        "application/strategic-merge-patch+json",
        Some(json!({"spec": {"size": 4}})),
        "",
    )
    .await;
    assert_eq!(smp.code, 415, "{}", smp.body);

    // Status and scale subresources.
    let s = call(
        c,
        "PATCH",
        &format!("{WIDGETS}/w1/status"),
        "application/merge-patch+json",
        Some(json!({"status": {"size": 3}, "spec": {"size": 100}})),
        "",
    )
    .await;
    assert_eq!(s.code, 200, "{}", s.body);
    assert_eq!(s.body["status"]["size"], 3);
    assert_eq!(s.body["spec"]["size"], 3);
    let scale = get(c, &format!("{WIDGETS}/w1/scale")).await;
    assert_eq!(scale.body["kind"], "Scale");
    assert_eq!(scale.body["spec"]["replicas"], 3);
    assert_eq!(scale.body["status"]["replicas"], 3);
    let scaled = call(
        c,
        "PATCH",
        &format!("{WIDGETS}/w1/scale"),
        "application/merge-patch+json",
        Some(json!({"spec": {"replicas": 7}})),
        "",
    )
    .await;
    assert_eq!(scaled.code, 200, "{}", scaled.body);
    assert_eq!(get(c, &format!("{WIDGETS}/w1")).await.body["spec"]["size"], 7);

    // A watch from the list's resourceVersion sees a delete.
    let rv = get(c, WIDGETS).await.body["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let del = call(c, "DELETE", &format!("{WIDGETS}/w2"), "", None, "").await;
    assert_eq!(del.code, 200, "{}", del.body);
    let w = call(c, "GET", &format!("{WIDGETS}?watch=1&resourceVersion={rv}&timeoutSeconds=1"), "", None, "").await;
    let text = match &w.body {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    assert!(text.contains("\"DELETED\"") && text.contains("\"w2\""), "{text}");

    // Deleting the CRD removes its objects and stops serving them.
    let d =
        call(c, "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", "", None, "")
            .await;
    assert_eq!(d.code, 200, "{}", d.body);
    wait_for(c, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com", |r| r.code == 404).await;
    assert_eq!(get(c, WIDGETS).await.code, 404);
    // Recreated, it starts empty.
    assert_eq!(post(c, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widget_crd()).await.code, 201);
    let l = wait_for(c, WIDGETS, |r| r.code == 200).await;
    assert_eq!(l.body["items"].as_array().unwrap().len(), 0, "{}", l.body);
}

#[tokio::test]
async fn cluster_scoped_custom_resources_have_no_namespace() {
    let h = TestApiServer::start().await;
    let c = &h.client;
    let mut crd = widget_crd();
    crd["metadata"]["name"] = json!("gadgets.example.com");
    crd["spec"]["scope"] = json!("Cluster");
    crd["spec"]["names"] = json!({"plural": "gadgets", "kind": "Gadget"});
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = json!([]);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    assert_eq!(post(c, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd).await.code, 201);
    wait_for(c, "/apis/example.com/v1/gadgets", |r| r.code == 200).await;
    let g =
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "anything": {"goes": 1}});
    let r = post(c, "/apis/example.com/v1/gadgets", g).await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert!(r.body["metadata"].get("namespace").is_none());
    assert_eq!(r.body["anything"]["goes"], 1);
    let t = call(c, "GET", "/apis/example.com/v1/gadgets", "", None, TABLE).await;
    assert_eq!(column_names(&t.body), ["Name", "Age"]);
}
