//! End to end: the real `kubectl` against an in-process API server (SQLite store in a temp
//! dir, loopback port) with the controller manager, the scheduler and three simulated nodes,
//! exercising Deployments the way a user does: apply, rollout status, scale, set image,
//! rollout history/undo/restart/pause/resume, cascading deletes, namespace deletion, events; and
//! the controllers that keep what the API server serves current (quota status,
//! `kube-root-ca.crt`, aggregated ClusterRoles).

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use skiff_apiserver::testing::TestApiServer;
use skiff_controllers::{ControllerManagerConfig, run_controller_manager};

const NGINX: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
spec:
  replicas: 3
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:1.14.2
        ports:
        - containerPort: 80
"#;

struct Cluster {
    dir: PathBuf,
    kubeconfig: PathBuf,
    api: Option<TestApiServer>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Cluster {
    async fn start() -> Cluster {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
            .with_test_writer()
            .try_init();
        // The production store options (5 s bookmarks, background compaction), as `skiff server`.
        let api = TestApiServer::start_with_store(skiff_store::Options::default(), |_| {}).await;
        let dir = api.dir.path().to_path_buf();
        let kubeconfig = api.server.kubeconfig_path().to_path_buf();
        let mut tasks = Vec::new();
        let cm_config = ControllerManagerConfig {
            leader_election: None,
            namespace_deletion_grace: Duration::from_millis(500),
            root_ca_pem: Some(api.server.pki().ca.cert_pem.clone()),
            ..Default::default()
        };
        let mut registry = prometheus_client_registry();
        let manager = run_controller_manager(api.server.client().await.unwrap(), cm_config, &mut registry);
        tasks.push(tokio::spawn(async move {
            if let Err(e) = manager.await {
                panic!("controller manager failed: {e:#}");
            }
        }));
        let client = api.server.client().await.unwrap();
        tasks.push(tokio::spawn(async move {
            let _ = skiff_scheduler::scheduler::run_scheduler(client, Default::default()).await;
        }));
        let client = api.server.client().await.unwrap();
        tasks.push(tokio::spawn(async move {
            let cfg = skiff_kubelet::SimulatedNodesConfig { count: 3, ..Default::default() };
            let _ = skiff_kubelet::run_simulated_nodes(client, cfg).await;
        }));
        Cluster { dir, kubeconfig, api: Some(api), tasks }
    }

    async fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.dir)
            .arg("--cache-dir")
            .arg(self.dir.join("kubectl-cache"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl is installed");
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).await.unwrap();
        }
        drop(input);
        child.wait_with_output().await.unwrap()
    }

    async fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_stdin(args, None).await
    }

    /// Runs kubectl and asserts success; returns stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls `kubectl args` until its stdout satisfies `pred` (60 s deadline).
    async fn eventually(&self, args: &[&str], pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.kubectl(args).await;
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() && pred(&stdout) {
                return stdout;
            }
            assert!(
                Instant::now() < deadline,
                "kubectl {args:?} never satisfied the condition; last stdout: {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn rollout_status(&self, deployment: &str) {
        self.rollout_status_in(deployment, "default").await;
    }

    async fn rollout_status_in(&self, deployment: &str, namespace: &str) {
        let out = self.ok(&["rollout", "status", deployment, "-n", namespace, "--timeout=90s"]).await;
        assert!(out.contains("successfully rolled out"), "{out}");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.api.take();
    }
}

fn prometheus_client_registry() -> prometheus_client::registry::Registry {
    prometheus_client::registry::Registry::default()
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.trim().is_empty()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deployments_roll_out_scale_roll_back_pause_and_delete_like_kubernetes() {
    let c = Cluster::start().await;
    let d = "deployment/nginx-deployment";

    // Apply and wait for the rollout, as in the seed.
    let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(NGINX)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    c.rollout_status(d).await;
    let rs = c
        .ok(&[
            "get",
            "rs",
            "-l",
            "app=nginx",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.status.readyReplicas}{\"\\n\"}{end}",
        ])
        .await;
    let rs = lines(&rs);
    assert_eq!(rs.len(), 1, "{rs:?}");
    assert!(rs[0].starts_with("nginx-deployment-") && rs[0].ends_with(" 3"), "{rs:?}");
    let ready = c
        .ok(&["get", d, "-o", "jsonpath={.status.readyReplicas}/{.status.availableReplicas}/{.status.updatedReplicas}"])
        .await;
    assert_eq!(ready, "3/3/3");
    let conds =
        c.ok(&["get", d, "-o", "jsonpath={range .status.conditions[*]}{.type}={.status}:{.reason} {end}"]).await;
    assert!(conds.contains("Available=True:MinimumReplicasAvailable"), "{conds}");
    assert!(conds.contains("Progressing=True:NewReplicaSetAvailable"), "{conds}");

    // Scale.
    c.ok(&["scale", d, "--replicas=5"]).await;
    c.rollout_status(d).await;
    c.eventually(&["get", d, "-o", "jsonpath={.status.availableReplicas}"], |s| s == "5").await;

    // Set image: a second revision.
    c.ok(&["set", "image", d, "nginx=nginx:1.16.1"]).await;
    c.rollout_status(d).await;
    let images = c
        .ok(&[
            "get",
            "rs",
            "-l",
            "app=nginx",
            "-o",
            "jsonpath={range .items[*]}{.spec.template.spec.containers[0].image}={.spec.replicas} {end}",
        ])
        .await;
    assert!(images.contains("nginx:1.16.1=5") && images.contains("nginx:1.14.2=0"), "{images}");
    let history = c.ok(&["rollout", "history", d]).await;
    assert!(
        history.contains("REVISION")
            && lines(&history).iter().any(|l| l.starts_with('1'))
            && lines(&history).iter().any(|l| l.starts_with('2')),
        "{history}"
    );
    let rev2 = c.ok(&["rollout", "history", d, "--revision=2"]).await;
    assert!(rev2.contains("nginx:1.16.1"), "{rev2}");

    // Undo: back to the first template as revision 3.
    c.ok(&["rollout", "undo", d]).await;
    c.rollout_status(d).await;
    let image = c.ok(&["get", d, "-o", "jsonpath={.spec.template.spec.containers[0].image}"]).await;
    assert_eq!(image, "nginx:1.14.2");
    let history = c.ok(&["rollout", "history", d]).await;
    let revisions: Vec<&str> = lines(&history).iter().skip(2).filter_map(|l| l.split_whitespace().next()).collect();
    if revisions != ["2", "3"] {
        let dj = c.ok(&["get", d, "-o", "json"]).await;
        let rj = c.ok(&["get", "rs", "-o", "json"]).await;
        panic!("{history}\n{dj}\n{rj}");
    }

    // Restart: a new template (restartedAt annotation), a new ReplicaSet.
    c.ok(&["rollout", "restart", d]).await;
    c.rollout_status(d).await;
    let rs_count = c.ok(&["get", "rs", "-l", "app=nginx", "-o", "name"]).await;
    assert_eq!(lines(&rs_count).len(), 3, "{rs_count}");

    // Pause: template changes do not roll out until resumed.
    c.ok(&["rollout", "pause", d]).await;
    c.ok(&["set", "image", d, "nginx=nginx:1.17"]).await;
    c.eventually(&["get", d, "-o", "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}"], |s| {
        s == "DeploymentPaused"
    })
    .await;
    let rs_count = c.ok(&["get", "rs", "-l", "app=nginx", "-o", "name"]).await;
    assert_eq!(lines(&rs_count).len(), 3, "paused: no new ReplicaSet yet: {rs_count}");
    c.ok(&["rollout", "resume", d]).await;
    c.rollout_status(d).await;
    let images = c
        .ok(&["get", "pods", "-l", "app=nginx", "-o", "jsonpath={range .items[*]}{.spec.containers[0].image} {end}"])
        .await;
    c.eventually(
        &["get", "pods", "-l", "app=nginx", "-o", "jsonpath={range .items[*]}{.spec.containers[0].image} {end}"],
        |s| {
            let v: Vec<&str> = s.split_whitespace().collect();
            v.len() == 5 && v.iter().all(|i| *i == "nginx:1.17")
        },
    )
    .await;
    let _ = images;

    // Events, as seed 000 §4.4 inspects them.
    let events = c.ok(&["get", "events", "--sort-by=.metadata.creationTimestamp"]).await;
    assert!(events.contains("ScalingReplicaSet"), "{events}");
    assert!(events.contains("SuccessfulCreate"), "{events}");
    assert!(events.contains("SuccessfulDelete"), "{events}");
    let describe = c.ok(&["describe", d]).await;
    assert!(describe.contains("Scaled up replica set"), "{describe}");

    // Orphan: the ReplicaSets and pods stay, released.
    c.ok(&["delete", d, "--cascade=orphan"]).await;
    c.eventually(&["get", "deployments", "-o", "name"], |s| s.trim().is_empty()).await;
    let owners = c
        .eventually(
            &[
                "get",
                "rs",
                "-l",
                "app=nginx",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}:{.metadata.ownerReferences} {end}",
            ],
            |s| !s.trim().is_empty() && s.split_whitespace().all(|e| e.ends_with(':')),
        )
        .await;
    assert_eq!(owners.split_whitespace().count(), 4, "{owners}");
    c.ok(&["delete", "rs", "-l", "app=nginx"]).await;
    c.eventually(&["get", "pods", "-l", "app=nginx", "-o", "name"], |s| s.trim().is_empty()).await;

    // Foreground and background: everything goes.
    for cascade in ["foreground", "background"] {
        let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(NGINX)).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        c.rollout_status(d).await;
        c.ok(&["delete", d, &format!("--cascade={cascade}")]).await;
        c.eventually(&["get", "deployments", "-o", "name"], |s| s.trim().is_empty()).await;
        c.eventually(&["get", "rs,pods", "-l", "app=nginx", "-o", "name"], |s| s.trim().is_empty()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_namespace_deletes_everything_in_it() {
    let c = Cluster::start().await;
    c.ok(&["create", "namespace", "team"]).await;
    c.eventually(&["get", "serviceaccount", "default", "-n", "team", "-o", "name"], |s| s.contains("default")).await;
    c.ok(&["create", "deployment", "web", "--image=nginx:1.14.2", "--replicas=2", "-n", "team"]).await;
    c.ok(&["create", "configmap", "settings", "--from-literal=a=b", "-n", "team"]).await;
    c.rollout_status_in("deployment/web", "team").await;
    let out = c.kubectl(&["delete", "namespace", "team", "--timeout=120s"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let gone = c.kubectl(&["get", "namespace", "team"]).await;
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"), "{}", String::from_utf8_lossy(&gone.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_of_two_managers_leads_and_a_shutdown_hands_the_lease_over() {
    use skiff_runtime::leaderelection::LeaderElectionConfig;
    let c = Cluster::start().await;
    let manager = |identity: &str, stop: tokio::sync::oneshot::Receiver<()>| {
        let le = LeaderElectionConfig {
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(200),
            ..LeaderElectionConfig::new("kube-system", "kube-controller-manager")
        };
        let config = ControllerManagerConfig {
            leader_election: Some(le),
            // Only the lease matters here: run no controller.
            disabled: [
                "deployment",
                "replicaset",
                "job",
                "cronjob",
                "ttl-after-finished",
                "garbagecollector",
                "namespace",
                "serviceaccount",
                "resourcequota",
                "root-ca-cert-publisher",
                "clusterrole-aggregation",
                "endpointslice",
                "endpoint",
                "endpointslicemirroring",
                "servicelb",
                "eventttl",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            ..Default::default()
        };
        let mut registry = prometheus_client_registry();
        let client = futures_client(&c);
        async move {
            let client = client.await;
            skiff_controllers::run_controller_manager_until(client, config, &mut registry, async move {
                let _ = stop.await;
            })
            .await
        }
    };
    let (stop_a, rx_a) = tokio::sync::oneshot::channel();
    let (stop_b, rx_b) = tokio::sync::oneshot::channel();
    let a = tokio::spawn(manager("server-a", rx_a));
    let holder_args =
        ["get", "lease", "kube-controller-manager", "-n", "kube-system", "-o", "jsonpath={.spec.holderIdentity}"];
    c.eventually(&holder_args, |h| h == "server-a").await;
    let b = tokio::spawn(manager("server-b", rx_b));
    // "server-b" campaigns but "server-a" keeps renewing.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(c.ok(&holder_args).await, "server-a");
    // A graceful shutdown releases the lease: "server-b" takes over without waiting it out.
    stop_a.send(()).unwrap();
    a.await.unwrap().unwrap();
    c.eventually(&holder_args, |h| h == "server-b").await;
    let transitions = c
        .ok(&[
            "get",
            "lease",
            "kube-controller-manager",
            "-n",
            "kube-system",
            "-o",
            "jsonpath={.spec.leaseTransitions}",
        ])
        .await;
    assert_eq!(transitions, "1");
    stop_b.send(()).unwrap();
    b.await.unwrap().unwrap();
}

fn futures_client(c: &Cluster) -> impl std::future::Future<Output = kube::Client> + Send + 'static {
    let kubeconfig = c.kubeconfig.clone();
    async move {
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
        kube::Client::try_from(config).unwrap()
    }
}

const QUOTA: &str = r#"
apiVersion: v1
kind: ResourceQuota
metadata:
  name: objects
  namespace: team
spec:
  hard:
    pods: "5"
    configmaps: "10"
    count/deployments.apps: "3"
"#;

const AGGREGATED_ROLES: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: monitoring
aggregationRule:
  clusterRoleSelectors:
  - matchLabels:
      example.com/aggregate-to-monitoring: "true"
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: monitoring-endpoints
  labels:
    example.com/aggregate-to-monitoring: "true"
rules:
- apiGroups: [""]
  resources: ["endpoints"]
  verbs: ["get", "list", "watch"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_manager_keeps_quota_status_the_root_ca_bundle_and_aggregated_cluster_roles_current() {
    let c = Cluster::start().await;
    let ca = c.api.as_ref().unwrap().server.pki().ca.cert_pem.clone();

    // root-ca-cert-publisher: every namespace gets the cluster CA.
    c.ok(&["create", "namespace", "team"]).await;
    let bundle = c
        .eventually(&["get", "configmap", "kube-root-ca.crt", "-n", "team", "-o", r"jsonpath={.data.ca\.crt}"], |s| {
            !s.is_empty()
        })
        .await;
    assert_eq!(bundle.trim(), ca.trim());

    // resourcequota: a new quota gets its status; objects appearing and disappearing (no
    // admission runs here) are counted by the controller alone.
    let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(QUOTA)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let used = ["get", "quota", "objects", "-n", "team", "-o", "jsonpath={.status.used}"];
    // Quantities as the controller prints them.
    let expect = |pods: &'static str, configmaps: &'static str, deployments: &'static str| {
        move |s: &str| {
            let v: serde_json::Value = serde_json::from_str(s).unwrap_or_default();
            v["pods"] == pods && v["configmaps"] == configmaps && v["count/deployments.apps"] == deployments
        }
    };
    // kube-root-ca.crt is already one ConfigMap.
    c.eventually(&used, expect("0", "1", "0")).await;
    c.ok(&["create", "configmap", "settings", "-n", "team", "--from-literal=a=b"]).await;
    c.ok(&["create", "deployment", "web", "-n", "team", "--image=nginx", "--replicas=0"]).await;
    c.eventually(&used, expect("0", "2", "1")).await;
    c.ok(&["delete", "configmap", "settings", "-n", "team"]).await;
    c.ok(&["delete", "deployment", "web", "-n", "team"]).await;
    c.eventually(&used, expect("0", "1", "0")).await;
    let hard = c.ok(&["get", "quota", "objects", "-n", "team", "-o", "jsonpath={.status.hard.pods}"]).await;
    assert_eq!(hard, "5");

    // clusterrole-aggregation: the aggregated role follows the roles its selector matches.
    let out = c.kubectl_stdin(&["apply", "-f", "-"], Some(AGGREGATED_ROLES)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rules = ["get", "clusterrole", "monitoring", "-o", "jsonpath={.rules[*].resources[*]}"];
    c.eventually(&rules, |s| s == "endpoints").await;
    c.ok(&["delete", "clusterrole", "monitoring-endpoints"]).await;
    c.eventually(&rules, str::is_empty).await;
}
