//! etcd-specific behaviour of the etcd backend beyond the shared conformance suite: key prefixes,
//! ranges larger than the gRPC decode limit, the background compactor, TLS-free configuration
//! errors.

use std::time::Duration;

use skiff_store::etcd::harness::EtcdCluster;
use skiff_store::etcd::{EtcdBackend, EtcdConfig, EtcdTls};
use skiff_store::{Backend, Error, Options, RangeRequest, WatchResponse};
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(60);

fn options() -> Options {
    Options { progress_interval: Duration::from_millis(200), compaction_interval: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_prefixes_isolate_two_backends_sharing_one_etcd() {
    let cluster = EtcdCluster::start(1).await.expect("start etcd");
    let open = |prefix: &str| {
        let mut config = cluster.config();
        config.key_prefix = prefix.to_string();
        EtcdBackend::connect(config, options())
    };
    let one = open("/one").await.expect("connect one");
    let two = open("/two").await.expect("connect two");
    let start = one.current_revision().await.expect("revision");
    let mut watch_two = two.watch("/registry/", start).await.expect("watch two");
    one.create("/registry/pods/default/a", b"one".to_vec()).await.expect("create in one");
    let r = two.create("/registry/pods/default/a", b"two".to_vec()).await.expect("same key in two");

    let listed = two.range(RangeRequest { prefix: "/registry/".into(), ..Default::default() }).await.expect("range");
    assert_eq!(listed.kvs.len(), 1);
    assert_eq!((listed.kvs[0].key.as_str(), listed.kvs[0].value.as_slice()), ("/registry/pods/default/a", &b"two"[..]));
    assert_eq!(one.get("/registry/pods/default/a").await.expect("get").expect("a").value, b"one");
    let events = tokio::time::timeout(DEADLINE, async {
        loop {
            if let WatchResponse::Events(events) = watch_two.next().await.expect("open").expect("ok") {
                return events;
            }
        }
    })
    .await
    .expect("event");
    assert_eq!(events.len(), 1, "only the write under its own prefix: {events:?}");
    assert_eq!((events[0].kv.key.as_str(), events[0].kv.mod_revision), ("/registry/pods/default/a", r));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_larger_than_the_grpc_decode_limit_is_read_whole() {
    let cluster = EtcdCluster::start(1).await.expect("start etcd");
    let store = EtcdBackend::connect(cluster.config(), options()).await.expect("connect");
    // 12 values of 1 MiB: 12 MiB, three times etcd-client's default 4 MiB decode limit.
    let mut written = Vec::new();
    for i in 0..12u8 {
        let value = vec![i; 1 << 20];
        let key = format!("/registry/configmaps/big/{i:02}");
        store.create(&key, value.clone()).await.expect("create 1 MiB value");
        written.push((key, value));
    }
    let all = store
        .range(RangeRequest { prefix: "/registry/configmaps/".into(), ..Default::default() })
        .await
        .expect("range");
    assert_eq!(all.kvs.len(), written.len());
    assert!(!all.more);
    for (kv, (key, value)) in all.kvs.iter().zip(&written) {
        assert_eq!(&kv.key, key);
        assert!(kv.value == *value, "value of {key} intact");
    }
    let limited = store
        .range(RangeRequest { prefix: "/registry/configmaps/".into(), limit: 5, ..Default::default() })
        .await
        .expect("range with limit");
    assert_eq!((limited.kvs.len(), limited.more), (5, true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_compactor_compacts_to_the_revision_of_the_previous_tick() {
    let cluster = EtcdCluster::start(1).await.expect("start etcd");
    let opts = Options { compaction_interval: Some(Duration::from_millis(300)), ..options() };
    let store = EtcdBackend::connect(cluster.config(), opts).await.expect("connect");
    let mut rev = store.create("/registry/pods/default/a", b"0".to_vec()).await.expect("create");
    let deadline = Instant::now() + DEADLINE;
    let mut i = 0;
    loop {
        rev = store.update("/registry/pods/default/a", format!("{i}").into_bytes(), rev).await.expect("update");
        i += 1;
        let compacted = store.compacted_revision().await.expect("compacted_revision");
        if compacted > 1 {
            assert!(compacted < rev, "the compactor keeps the previous interval's history");
            break;
        }
        assert!(Instant::now() < deadline, "the background compactor never compacted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The latest value is untouched.
    assert_eq!(store.get("/registry/pods/default/a").await.expect("get").expect("a").mod_revision, rev);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_by_another_client_is_reported_exactly() {
    let cluster = EtcdCluster::start(1).await.expect("start etcd");
    let writer = EtcdBackend::connect(cluster.config(), options()).await.expect("connect writer");
    let other = EtcdBackend::connect(cluster.config(), options()).await.expect("connect other");
    let mut rev = writer.create("/registry/pods/default/a", b"0".to_vec()).await.expect("create");
    for i in 0..40 {
        rev = writer.update("/registry/pods/default/a", format!("{i}").into_bytes(), rev).await.expect("update");
    }
    writer.compact(rev - 7).await.expect("compact");
    // `other` never saw this compaction happen; it finds the exact revision.
    assert_eq!(other.compacted_revision().await.expect("compacted_revision"), rev - 7);
    match other.watch("/registry/", rev - 8).await {
        Err(Error::Compacted { requested, compacted }) => assert_eq!((requested, compacted), (rev - 8, rev - 7)),
        Err(e) => panic!("expected Compacted, got {e}"),
        Ok(_) => panic!("a watch below the compacted revision opened"),
    }
}

#[tokio::test]
async fn tls_files_that_do_not_exist_are_a_configuration_error_naming_the_file() {
    let mut config = EtcdConfig::new(["https://127.0.0.1:1"]);
    config.tls = Some(EtcdTls { ca_file: Some("/nonexistent/ca.pem".into()), cert_file: None, key_file: None });
    match EtcdBackend::connect(config, options()).await {
        Err(Error::Internal(message)) => assert!(message.contains("/nonexistent/ca.pem"), "{message}"),
        Err(other) => panic!("expected a configuration error, got {other}"),
        Ok(_) => panic!("connected with a missing CA file"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_all_writes_every_key_in_one_revision_or_none_when_one_exists() {
    let cluster = EtcdCluster::start(1).await.expect("start etcd");
    let store = EtcdBackend::connect(cluster.config(), options()).await.expect("connect");
    let kvs: Vec<(String, Vec<u8>)> = (0..skiff_store::etcd::MAX_TXN_OPS)
        .map(|i| (format!("/registry/configmaps/a/{i:03}"), vec![b'v'; i]))
        .collect();
    let rev = store.create_all(&kvs).await.expect("create_all");
    let listed =
        store.range(RangeRequest { prefix: "/registry/configmaps/a/".into(), ..Default::default() }).await.unwrap();
    assert_eq!(listed.kvs.len(), kvs.len());
    assert!(listed.kvs.iter().zip(&kvs).all(|(kv, (k, v))| kv.key == *k && kv.value == *v && kv.mod_revision == rev));

    // One existing key fails the whole batch, naming it; the new keys are not written.
    let mixed = vec![("/registry/configmaps/b/new".to_string(), b"x".to_vec()), kvs[7].clone()];
    match store.create_all(&mixed).await {
        Err(Error::AlreadyExists { key }) => assert_eq!(key, kvs[7].0),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    assert!(store.get("/registry/configmaps/b/new").await.unwrap().is_none());
    assert_eq!(store.current_revision().await.unwrap(), rev);

    let too_many: Vec<(String, Vec<u8>)> =
        (0..=skiff_store::etcd::MAX_TXN_OPS).map(|i| (format!("/registry/configmaps/c/{i}"), vec![])).collect();
    assert!(matches!(store.create_all(&too_many).await, Err(Error::Internal(_))));
}
