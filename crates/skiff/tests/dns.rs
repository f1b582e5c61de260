//! Cluster DNS end to end on simulated nodes: `skiff server` keeps the `kube-system/kube-dns`
//! Service on 10.43.0.10 with an EndpointSlice naming its DNS server, and that server answers
//! for what the real kubectl created — a Service's ClusterIP, SRV for its named port, a
//! headless Service's pod IPs, PTR, NXDOMAIN — over UDP and TCP (queries built with
//! hickory-proto).

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use common::Server;
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use serde_json::Value;

/// One query to `addr`; `None` when no answer came within a second (UDP may be lost).
fn query(addr: SocketAddr, name: &str, qtype: RecordType, tcp: bool) -> Option<Message> {
    let mut msg = Message::new();
    msg.set_id(0x5a5a).set_message_type(MessageType::Query).set_op_code(OpCode::Query).set_recursion_desired(true);
    msg.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    let bytes = msg.to_vec().unwrap();
    let answer = if tcp {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        stream.write_all(&(bytes.len() as u16).to_be_bytes()).ok()?;
        stream.write_all(&bytes).ok()?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).ok()?;
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut buf).ok()?;
        buf
    } else {
        let socket = UdpSocket::bind("0.0.0.0:0").unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        socket.send_to(&bytes, addr).unwrap();
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).ok()?;
        buf[..n].to_vec()
    };
    let answer = Message::from_vec(&answer).unwrap();
    assert_eq!(answer.id(), 0x5a5a);
    Some(answer)
}

/// The answer's records as text (`10.43.0.10`, `0 100 80 web.default.svc.cluster.local.`), sorted.
fn rdatas(answer: &Message) -> Vec<String> {
    let mut out: Vec<String> = answer.answers().iter().map(|r| r.data().to_string()).collect();
    out.sort();
    out
}

/// Waits until `name`/`qtype` is answered with `rcode` and these records, over UDP and TCP.
fn expect(server: &Server, dns: SocketAddr, name: &str, qtype: RecordType, rcode: ResponseCode, want: &[String]) {
    for tcp in [false, true] {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = None;
        loop {
            if let Some(answer) = query(dns, name, qtype, tcp) {
                let got = (answer.response_code(), rdatas(&answer));
                if got.0 == rcode && got.1 == want {
                    break;
                }
                last = Some(got);
            }
            assert!(
                Instant::now() < deadline,
                "{name} {qtype} over {}: want {rcode:?} {want:?}, last answer {last:?}\n{}",
                if tcp { "TCP" } else { "UDP" },
                server.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    out.sort();
    out
}

const WEB: &str = "
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: web-headless}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 8080, protocol: TCP}]
";

#[test]
fn the_cluster_dns_answers_for_services_and_their_pods() {
    let server = Server::start_with(&["--simulated-nodes", "2"]);

    // The kube-dns Service, on k3s's address, and its endpoints: this server's DNS server.
    let kube_dns = server.eventually(30, "the kube-dns Service", || {
        let out = server.kubectl(&["get", "svc", "-n", "kube-system", "kube-dns", "-o", "json"]);
        out.status.success().then(|| serde_json::from_slice::<Value>(&out.stdout).unwrap())
    });
    assert_eq!(kube_dns["spec"]["clusterIP"], "10.43.0.10", "{kube_dns}");
    let ports: Vec<(String, i64, String)> = kube_dns["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["port"].as_i64().unwrap(),
                p["protocol"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(ports, [("dns".to_string(), 53, "UDP".to_string()), ("dns-tcp".to_string(), 53, "TCP".to_string())]);
    assert_eq!(kube_dns["metadata"]["labels"]["k8s-app"], "kube-dns");
    let dns: SocketAddr = server.eventually(30, "the kube-dns EndpointSlice", || {
        let slice = server.json(&["get", "endpointslice", "-n", "kube-system", "kube-dns"]);
        let ip: IpAddr = slice["endpoints"][0]["addresses"][0].as_str()?.parse().ok()?;
        let port = u16::try_from(slice["ports"][0]["port"].as_u64()?).ok()?;
        Some(SocketAddr::new(ip, port))
    });

    // The server's own Services resolve.
    let a = RecordType::A;
    expect(
        &server,
        dns,
        "kube-dns.kube-system.svc.cluster.local.",
        a,
        ResponseCode::NoError,
        &strings(&["10.43.0.10"]),
    );
    expect(&server, dns, "kubernetes.default.svc.cluster.local.", a, ResponseCode::NoError, &strings(&["10.43.0.1"]));

    // A Deployment behind a ClusterIP Service and a headless one.
    server.ok(&["create", "deployment", "web", "--image=nginx", "--replicas=2", "--port=8080"]);
    server.ok_stdin(&["apply", "-f", "-"], WEB);
    server.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    let cluster_ip = server.json(&["get", "svc", "web"])["spec"]["clusterIP"].as_str().unwrap().to_string();
    let web = "web.default.svc.cluster.local.";
    expect(&server, dns, web, a, ResponseCode::NoError, std::slice::from_ref(&cluster_ip));
    expect(&server, dns, "WEB.Default.svc.cluster.local.", a, ResponseCode::NoError, std::slice::from_ref(&cluster_ip));
    expect(
        &server,
        dns,
        "_http._tcp.web.default.svc.cluster.local.",
        RecordType::SRV,
        ResponseCode::NoError,
        &strings(&["0 100 80 web.default.svc.cluster.local."]),
    );
    let pods = server.eventually(60, "two pod IPs", || {
        let list = server.json(&["get", "pods", "-l", "app=web"]);
        let ips: Vec<String> =
            list["items"].as_array()?.iter().filter_map(|p| Some(p["status"]["podIP"].as_str()?.to_string())).collect();
        (ips.len() == 2).then_some(ips)
    });
    let mut pods = pods;
    pods.sort();
    expect(&server, dns, "web-headless.default.svc.cluster.local.", a, ResponseCode::NoError, &pods);

    // PTR of the ClusterIP; NXDOMAIN for what does not exist.
    let octets: Vec<&str> = cluster_ip.split('.').rev().collect();
    let reverse = format!("{}.in-addr.arpa.", octets.join("."));
    expect(&server, dns, &reverse, RecordType::PTR, ResponseCode::NoError, &[web.to_string()]);
    expect(&server, dns, "nope.default.svc.cluster.local.", a, ResponseCode::NXDomain, &[]);
    expect(&server, dns, "web.nope.svc.cluster.local.", a, ResponseCode::NXDomain, &[]);

    // A deleted Service stops resolving.
    server.ok(&["delete", "svc", "web"]);
    expect(&server, dns, web, a, ResponseCode::NXDomain, &[]);
}

#[test]
fn a_cluster_dns_outside_the_service_range_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args(["server", "--disable-agent", "--bind-address", "127.0.0.1", "--https-listen-port"])
        .arg(common::free_port().to_string())
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--cluster-dns", "10.99.0.10", "--cluster-dns-port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--cluster-dns 10.99.0.10 is not in --service-cluster-ip-range"), "{stderr}");
}
