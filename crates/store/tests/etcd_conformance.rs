//! The shared conformance suite ([`skiff_store::conformance`]) against [`EtcdBackend`] on a real
//! single-member etcd started for each case on free loopback ports (package `etcd-server`).
//!
//! Reopening kills etcd with SIGKILL and restarts it on the same data dir before connecting a
//! new backend, so the persistence case also covers etcd's own crash recovery.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use skiff_store::Backend;
use skiff_store::conformance::Harness;
use skiff_store::etcd::EtcdBackend;
use skiff_store::etcd::harness::EtcdCluster;

struct EtcdHarness {
    cluster: EtcdCluster,
    opened: bool,
}

impl EtcdHarness {
    async fn new() -> Self {
        let cluster = EtcdCluster::start(1).await.expect("start etcd (Debian package etcd-server)");
        Self { cluster, opened: false }
    }
}

#[async_trait]
impl Harness for EtcdHarness {
    async fn open(&mut self) -> Arc<dyn Backend> {
        if self.opened {
            self.cluster.kill(0).expect("kill etcd");
            self.cluster.restart(0).await.expect("restart etcd");
        }
        self.opened = true;
        let opts = skiff_store::Options { progress_interval: Duration::from_millis(200), compaction_interval: None };
        let backend = EtcdBackend::connect(self.cluster.config(), opts).await.expect("connect to etcd");
        Arc::new(backend)
    }
}

skiff_store::conformance_tests!(|| async { EtcdHarness::new().await });
