//! Services end to end with the real kubectl on simulated nodes: the `kubernetes` Service,
//! `kubectl expose` giving a ClusterIP and EndpointSlices/Endpoints that follow pod readiness,
//! a headless Service, NodePorts, and the 422s of bad allocations.

mod common;

use common::Server;

/// The endpoints of the Service's slices: (address, ready).
fn slice_endpoints(server: &Server, svc: &str) -> Vec<(String, bool)> {
    let list = server.json(&["get", "endpointslices", "-l", &format!("kubernetes.io/service-name={svc}")]);
    let mut out: Vec<(String, bool)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .map(|e| (e["addresses"][0].as_str().unwrap().to_string(), e["conditions"]["ready"] == true))
        .collect();
    out.sort();
    out
}

fn pod_ips(server: &Server, selector: &str) -> Vec<(String, String)> {
    let pods = server.json(&["get", "pods", "-l", selector]);
    let mut out: Vec<(String, String)> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| Some((p["metadata"]["name"].as_str()?.to_string(), p["status"]["podIP"].as_str()?.to_string())))
        .collect();
    out.sort();
    out
}

#[test]
fn services_get_cluster_ips_and_endpoint_slices_that_follow_pod_readiness() {
    let server = Server::start_with(&["--simulated-nodes", "2"]);

    // The API server's own Service and its endpoints.
    let ip = server.eventually(30, "the kubernetes Service", || {
        let out = server.kubectl(&["get", "svc", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"]);
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    });
    assert_eq!(ip, "10.43.0.1");
    let kubernetes = server.eventually(30, "the kubernetes EndpointSlice", || {
        let eps = slice_endpoints(&server, "kubernetes");
        (!eps.is_empty()).then_some(eps)
    });
    assert_eq!(kubernetes.len(), 1);
    let port = server.ok(&["get", "endpointslice", "kubernetes", "-o", "jsonpath={.ports[0].port}"]);
    assert_eq!(port, server.port.to_string());

    // expose: a ClusterIP in the range and one endpoint per ready pod.
    server.ok(&["create", "deployment", "web", "--image=nginx", "--replicas=3", "--port=8080"]);
    server.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    server.ok(&["expose", "deployment", "web", "--port", "80", "--target-port", "8080"]);
    let svc = server.json(&["get", "svc", "web"]);
    let cluster_ip = svc["spec"]["clusterIP"].as_str().unwrap();
    assert!(cluster_ip.starts_with("10.43.") && cluster_ip != "10.43.0.1", "{svc}");
    assert_eq!(svc["spec"]["clusterIPs"], serde_json::json!([cluster_ip]));
    let pods = pod_ips(&server, "app=web");
    assert_eq!(pods.len(), 3);
    let want: Vec<(String, bool)> = {
        let mut v: Vec<_> = pods.iter().map(|(_, ip)| (ip.clone(), true)).collect();
        v.sort();
        v
    };
    server.eventually(30, "the web slices to list the 3 ready pods", || {
        (slice_endpoints(&server, "web") == want).then_some(())
    });
    let slice = &server.json(&["get", "endpointslices", "-l", "kubernetes.io/service-name=web"])["items"][0];
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    assert_eq!(slice["ports"][0]["port"], 8080);
    server.eventually(30, "the web Endpoints", || {
        let out = server.ok(&["get", "endpoints", "web", "-o", "jsonpath={.subsets[*].addresses[*].ip}"]);
        (out.split_whitespace().count() == 3).then_some(())
    });

    // A pod turning unready leaves the ready endpoints.
    let (unready, unready_ip) = pods[0].clone();
    server.ok(&[
        "patch",
        "pod",
        &unready,
        "--subresource=status",
        "--type=strategic",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"False"}]}}"#,
    ]);
    server.eventually(30, "the unready pod to leave the ready endpoints", || {
        let eps = slice_endpoints(&server, "web");
        eps.iter().any(|(ip, ready)| *ip == unready_ip && !ready).then_some(())
    });
    server.eventually(30, "the unready pod in notReadyAddresses", || {
        let out = server.ok(&["get", "endpoints", "web", "-o", "jsonpath={.subsets[*].notReadyAddresses[*].ip}"]);
        (out.trim() == unready_ip).then_some(())
    });

    // Headless: no ClusterIP, endpoints still.
    server.ok(&["create", "deployment", "db", "--image=postgres", "--replicas=2"]);
    server.ok(&["create", "service", "clusterip", "db", "--clusterip=None", "--tcp=5432"]);
    let db = server.json(&["get", "svc", "db"]);
    assert_eq!(db["spec"]["clusterIP"], "None");
    server.eventually(60, "the headless Service's endpoints", || {
        let eps = slice_endpoints(&server, "db");
        (eps.len() == 2 && eps.iter().all(|(_, r)| *r)).then_some(())
    });
    let labels = &server.json(&["get", "endpointslices", "-l", "kubernetes.io/service-name=db"])["items"][0]["metadata"]
        ["labels"];
    assert_eq!(labels["service.kubernetes.io/headless"], "");

    // NodePort: a port from the range.
    server.ok(&["create", "service", "nodeport", "np", "--tcp=80:8080"]);
    let np = server.json(&["get", "svc", "np"])["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&np), "{np}");

    // Bad allocations are 422 with the field, and allocate nothing.
    let err = server.fails(&["create", "service", "nodeport", "np2", "--tcp=80", &format!("--node-port={np}")]);
    assert!(
        err.contains("spec.ports[0].nodePort: Invalid value") && err.contains("provided port is already allocated"),
        "{err}"
    );
    let err = server.fails(&["create", "service", "nodeport", "np2", "--tcp=80", "--node-port=8080"]);
    assert!(err.contains("provided port is not in the valid range. The range of valid ports is 30000-32767"), "{err}");
    let err = server.fails(&["create", "service", "clusterip", "x", "--tcp=80", "--clusterip=10.43.0.1"]);
    assert!(
        err.contains("spec.clusterIPs: Invalid value") && err.contains("provided IP is already allocated"),
        "{err}"
    );
    let err = server.fails(&["create", "service", "clusterip", "x", "--tcp=80", "--clusterip=10.0.0.5"]);
    assert!(err.contains("is not in the valid range. The range of valid IPs is 10.43.0.0/16"), "{err}");

    // Deleting a Service frees its node port for another.
    server.ok(&["delete", "svc", "np"]);
    server.ok(&["create", "service", "nodeport", "np2", "--tcp=80", &format!("--node-port={np}")]);

    // LoadBalancer: node ports plus the nodes' addresses as ingress (k3s's ServiceLB).
    server.ok(&["create", "service", "loadbalancer", "lb", "--tcp=80"]);
    let nodes =
        server.ok(&["get", "nodes", "-o", "jsonpath={.items[*].status.addresses[?(@.type==\"InternalIP\")].address}"]);
    let mut want: Vec<&str> = nodes.split_whitespace().collect();
    want.sort();
    assert_eq!(want.len(), 2, "{nodes}");
    server.eventually(30, "the LoadBalancer ingress", || {
        let got = server.ok(&["get", "svc", "lb", "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}"]);
        let mut got: Vec<String> = got.split_whitespace().map(str::to_string).collect();
        got.sort();
        (got == want).then_some(())
    });
    assert!(server.json(&["get", "svc", "lb"])["spec"]["ports"][0]["nodePort"].as_i64().is_some());
}

#[test]
fn allocations_survive_a_restart() {
    let mut server = Server::start();
    server.ok(&["create", "service", "nodeport", "web", "--tcp=80", "--node-port=30080"]);
    let ip = server.ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    server.stop();
    server.spawn();
    let err = server.fails(&["create", "service", "clusterip", "other", "--tcp=80", &format!("--clusterip={ip}")]);
    assert!(err.contains("provided IP is already allocated"), "{err}");
    let err = server.fails(&["create", "service", "nodeport", "other", "--tcp=80", "--node-port=30080"]);
    assert!(err.contains("provided port is already allocated"), "{err}");
    // An update that leaves clusterIP and nodePort out keeps them.
    server.ok(&["patch", "svc", "web", "--type=merge", "-p", r#"{"metadata":{"labels":{"x":"y"}}}"#]);
    let svc = server.json(&["get", "svc", "web"]);
    assert_eq!(svc["spec"]["clusterIP"], ip.as_str());
    assert_eq!(svc["spec"]["ports"][0]["nodePort"], 30080);
    server.ok(&["delete", "svc", "web"]);
    server.ok(&["create", "service", "nodeport", "other", "--tcp=80", "--node-port=30080"]);
    server.ok(&["create", "service", "clusterip", "third", "--tcp=80", &format!("--clusterip={ip}")]);
}

/// An HTTP/1.1 server on loopback answering every request with its request line and the
/// `Authorization` header it saw; runs until the test process ends.
fn echo_server() -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut request_line = String::new();
                let _ = reader.read_line(&mut request_line);
                let mut auth = "none".to_string();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if h.to_ascii_lowercase().starts_with("authorization:") {
                        auth = h.trim().to_string();
                    }
                }
                let body = format!("{} auth={auth}", request_line.trim());
                let mut conn = conn;
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

#[test]
fn the_proxy_subresources_reach_a_services_endpoint_and_a_pods_ip_and_say_why_when_they_cannot() {
    let server = Server::start();
    let port = echo_server();

    // A Service without a selector, its endpoint written by hand on loopback.
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"{{"apiVersion": "v1", "kind": "List", "items": [
  {{"apiVersion": "v1", "kind": "Service", "metadata": {{"name": "echo", "namespace": "default"}},
    "spec": {{"ports": [{{"name": "web", "port": 80, "targetPort": {port}}}]}}}},
  {{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
    "metadata": {{"name": "echo-1", "namespace": "default", "labels": {{"kubernetes.io/service-name": "echo"}}}},
    "addressType": "IPv4", "ports": [{{"name": "web", "port": {port}}}],
    "endpoints": [{{"addresses": ["127.0.0.1"], "conditions": {{"ready": true}}}}]}}]}}"#
        ),
    );
    // By port number and by port name; the path and query are forwarded, the requester's
    // credentials are not.
    let out = server.ok(&["get", "--raw", "/api/v1/namespaces/default/services/echo:80/proxy/hello/world?x=1&watch=1"]);
    // (kubectl sorts the query's parameters.)
    assert!(out.starts_with("GET /hello/world?watch=1&x=1 HTTP/1.1"), "{out}");
    assert!(out.ends_with("auth=none"), "{out}");
    let out = server.ok(&["get", "--raw", "/api/v1/namespaces/default/services/http:echo:web/proxy/"]);
    assert!(out.starts_with("GET / HTTP/1.1"), "{out}");

    // A port the Service does not have, a Service without endpoints, a missing Service.
    let err = server.fails(&["get", "--raw", "/api/v1/namespaces/default/services/echo:81/proxy/"]);
    assert!(err.contains("no service port 81 found for service \"echo\""), "{err}");
    server.ok(&["create", "service", "clusterip", "lonely", "--tcp=80:8080"]);
    let err = server.fails(&["get", "--raw", "/api/v1/namespaces/default/services/lonely:80/proxy/"]);
    assert!(err.contains("no endpoints available for service \"lonely\""), "{err}");
    let err = server.fails(&["get", "--raw", "/api/v1/namespaces/default/services/missing/proxy/"]);
    assert!(err.contains("NotFound") || err.contains("not found"), "{err}");

    // A pod is reached at its IP and the port asked for; without an IP it is 503.
    server.ok_stdin(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}"#,
    );
    let err = server.fails(&["get", "--raw", &format!("/api/v1/namespaces/default/pods/p:{port}/proxy/")]);
    assert!(err.contains("has no IP address"), "{err}");
    server.ok(&[
        "patch",
        "pod",
        "p",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}}"#,
    ]);
    let out = server.ok(&["get", "--raw", &format!("/api/v1/namespaces/default/pods/p:{port}/proxy/metrics")]);
    assert!(out.starts_with("GET /metrics HTTP/1.1"), "{out}");
    let err = server.fails(&["get", "--raw", "/api/v1/namespaces/default/pods/ftp:p:21/proxy/"]);
    assert!(err.contains("invalid pod request"), "{err}");
}
