//! The shared e2e harness: a real `skiff server --disable-agent` on a free loopback port with a
//! temp data dir, and a `kubectl` with its own cache dir.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running `skiff server` child process.
pub struct Server {
    child: Option<Child>,
    /// The temp dir (data dir under `data/`).
    pub dir: tempfile::TempDir,
    /// The HTTPS port.
    pub port: u16,
    extra: Vec<String>,
    /// Run the local node agent (containerd) instead of `--disable-agent`.
    agent: bool,
}

/// A free loopback TCP port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Server {
    /// Starts a server and waits for /readyz.
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    /// Starts a server with extra flags and waits for /readyz.
    pub fn start_with(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Server {
            child: None,
            dir,
            port: free_port(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            agent: false,
        };
        s.spawn();
        s
    }

    /// Starts a server with its local node agent (a managed containerd; needs root) and waits
    /// for /readyz. The node gets a pod CIDR of its own (`--cluster-cidr 10.42.N.0/24`, N from
    /// the process id) so that pods left by another run can never share its addresses; when
    /// the `Server` is dropped, whatever the node left on the host is stopped (`skiff killall`).
    pub fn start_with_agent(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        if !extra.iter().any(|a| a == "--cluster-cidr") {
            let n = 100 + std::process::id() % 150;
            extra.extend(["--cluster-cidr".to_string(), format!("10.42.{n}.0/24")]);
        }
        let mut s = Server { child: None, dir, port: free_port(), extra, agent: true };
        s.spawn();
        s
    }

    /// SIGKILL the server process (no graceful shutdown) and wait for it to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// (Re)starts the process and waits for /readyz.
    pub fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["server", "--bind-address", "127.0.0.1"])
            .args(if self.agent { None } else { Some("--disable-agent") })
            .args(if self.extra.iter().any(|a| a == "--etcd-compaction-interval") {
                vec![]
            } else {
                vec!["--etcd-compaction-interval", "0"]
            })
            // A free port for the cluster DNS, so that test servers never contend for port 53.
            .args(if self.extra.iter().any(|a| a == "--cluster-dns-port") {
                vec![]
            } else {
                vec!["--cluster-dns-port", "0"]
            })
            .arg("--https-listen-port")
            .arg(self.port.to_string())
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting skiff server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.kubeconfig().exists() {
                let out = self.kubectl(&["get", "--raw", "/readyz"]);
                if out.status.success() {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("skiff server exited with {status}: {}", self.log());
            }
            assert!(Instant::now() < deadline, "server not ready: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the (stopped) server again with `extra` instead of its earlier extra flags, on
    /// the same data dir and port, and waits for /readyz.
    pub fn respawn_with(&mut self, extra: &[&str]) {
        assert!(self.child.is_none(), "respawn_with needs a stopped server");
        self.extra = extra.iter().map(|s| s.to_string()).collect();
        self.spawn();
    }

    /// The server's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// The admin kubeconfig the server wrote.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("data/kubeconfig.yaml")
    }

    /// A kubectl command with this server's kubeconfig and cache dir.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig").arg(self.kubeconfig()).arg("--cache-dir").arg(self.dir.path().join("kubectl-cache"));
        c.args(args);
        c
    }

    /// Runs kubectl.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("running kubectl")
    }

    /// Runs kubectl, asserting success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl, asserting failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} unexpectedly succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Runs kubectl with `input` on stdin.
    pub fn apply_stdin(&self, args: &[&str], input: &str) -> Output {
        let mut child =
            self.command(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// Runs kubectl with `input` on stdin, asserting success; returns stdout.
    pub fn ok_stdin(&self, args: &[&str], input: &str) -> String {
        let out = self.apply_stdin(args, input);
        assert!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls `f` every 200 ms until it returns `Some`, failing after `secs` with `what` and the
    /// server's log.
    pub fn eventually<T>(&self, secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `kubectl … -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&a)).expect("kubectl printed JSON")
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("server did not exit after SIGTERM: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if self.agent {
            let _ = Command::new(env!("CARGO_BIN_EXE_skiff"))
                .args(["killall", "--data-dir"])
                .arg(self.dir.path().join("data"))
                .status();
        }
    }
}

/// A real single-member etcd on free loopback ports in a temp dir, killed on drop. Panics when
/// `etcd` is not installed (`scripts/install-deps` installs Debian's etcd-server).
pub struct Etcd {
    child: Child,
    /// The client URL, e.g. `http://127.0.0.1:PORT`.
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts etcd and waits until its client port accepts connections.
    pub fn start() -> Etcd {
        let dir = tempfile::tempdir().unwrap();
        let (client, peer) = (free_port(), free_port());
        let url = format!("http://127.0.0.1:{client}");
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(dir.path().join("etcd"))
            .args(["--listen-client-urls", &url, "--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-cluster", &format!("default=http://127.0.0.1:{peer}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting etcd (install it with scripts/install-deps)");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
            assert!(Instant::now() < deadline, "etcd did not start listening");
            std::thread::sleep(Duration::from_millis(50));
        }
        Etcd { child, url, _dir: dir }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
