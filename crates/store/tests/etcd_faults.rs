//! The etcd backend under faults, on real etcd processes: an unreachable cluster fails fast with
//! `Unavailable` and the backend recovers when etcd returns; a 3-member cluster keeps accepting
//! writes after one member (the leader) is killed with SIGKILL.

use std::time::Duration;

use skiff_store::etcd::harness::EtcdCluster;
use skiff_store::etcd::{EtcdBackend, EtcdConfig};
use skiff_store::{Backend, Error, Options, WatchResponse};
use tokio::time::Instant;

/// Upper bound for any single wait in these tests; a backend that hangs fails the test.
const DEADLINE: Duration = Duration::from_secs(60);

fn options() -> Options {
    Options { progress_interval: Duration::from_millis(200), compaction_interval: None }
}

fn config(cluster: &EtcdCluster) -> EtcdConfig {
    let mut config = cluster.config();
    config.dial_timeout = Duration::from_secs(1);
    config.request_timeout = Duration::from_secs(2);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_port_nothing_listens_on_fails_with_unavailable_naming_the_endpoint() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let mut config = EtcdConfig::new([endpoint.clone()]);
    config.dial_timeout = Duration::from_millis(500);
    config.request_timeout = Duration::from_secs(1);
    let result = tokio::time::timeout(DEADLINE, EtcdBackend::connect(config, options())).await.expect("connect hung");
    match result {
        Err(Error::Unavailable(message)) => assert!(message.contains(&endpoint), "{message:?} names {endpoint}"),
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("connected to a port nothing listens on"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_fail_fast_while_etcd_is_down_and_work_again_when_it_returns() {
    let mut cluster = EtcdCluster::start(1).await.expect("start etcd");
    let endpoint = cluster.endpoint(0);
    let store = EtcdBackend::connect(config(&cluster), options()).await.expect("connect");
    let r1 = store.create("/registry/pods/default/a", b"a".to_vec()).await.expect("create");
    let mut watch = store.watch("/registry/pods/", r1).await.expect("watch");

    cluster.stop(0).expect("stop etcd");

    // Reads and writes fail with Unavailable naming the endpoint instead of hanging.
    for (what, result) in [
        ("get", store.get("/registry/pods/default/a").await.map(|_| ())),
        ("create", store.create("/registry/pods/default/b", b"b".to_vec()).await.map(|_| ())),
        ("current_revision", store.current_revision().await.map(|_| ())),
    ] {
        match result {
            Err(Error::Unavailable(message)) => assert!(message.contains(&endpoint), "{what}: {message:?}"),
            other => panic!("{what} while etcd is down: expected Unavailable, got {other:?}"),
        }
    }
    // The open watch ends with an error (the consumer then resumes from its last revision).
    let ended = tokio::time::timeout(DEADLINE, async {
        loop {
            match watch.next().await {
                Some(Ok(WatchResponse::Progress { .. })) => continue,
                Some(Ok(WatchResponse::Events(events))) => panic!("unexpected events while etcd is down: {events:?}"),
                Some(Err(e)) => return Some(e),
                None => return None,
            }
        }
    })
    .await
    .expect("the watch stream noticed etcd going away");
    if let Some(e) = ended {
        assert!(matches!(e, Error::Unavailable(_)), "watch error while etcd is down: {e}");
    }
    match store.watch("/registry/pods/", r1).await {
        Err(Error::Unavailable(_)) => {}
        Err(other) => panic!("watch while etcd is down: expected Unavailable, got {other}"),
        Ok(_) => panic!("a watch opened while etcd is down"),
    }

    cluster.restart(0).await.expect("restart etcd");

    // The same backend recovers on its own.
    let deadline = Instant::now() + DEADLINE;
    let r2 = loop {
        match store.create("/registry/pods/default/b", b"b".to_vec()).await {
            Ok(rev) => break rev,
            Err(Error::Unavailable(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // A create whose answer was lost just before the stop may have landed.
            Err(Error::AlreadyExists { .. }) => {
                break store.get("/registry/pods/default/b").await.expect("get").expect("b exists").mod_revision;
            }
            Err(e) => panic!("create after etcd returned: {e}"),
        }
    };
    assert!(r2 > r1);
    let a = store.get("/registry/pods/default/a").await.expect("get after recovery").expect("a survived");
    assert_eq!(a.mod_revision, r1);
    let mut watch = store.watch("/registry/pods/", r1).await.expect("watch after recovery");
    let event = tokio::time::timeout(DEADLINE, async {
        loop {
            match watch.next().await.expect("watch open").expect("watch ok") {
                WatchResponse::Events(events) => return events,
                WatchResponse::Progress { .. } => continue,
            }
        }
    })
    .await
    .expect("the resumed watch delivers the write");
    assert_eq!(event[0].kv.key, "/registry/pods/default/b");
    assert_eq!(event[0].kv.mod_revision, r2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_continue_when_one_of_three_members_is_killed() {
    let mut cluster = EtcdCluster::start(3).await.expect("start a 3-member etcd cluster");
    let store = EtcdBackend::connect(config(&cluster), options()).await.expect("connect");
    let mut acked = Vec::new();
    for i in 0..10 {
        let key = format!("/registry/pods/default/before-{i}");
        acked.push((key.clone(), store.create(&key, b"x".to_vec()).await.expect("create before the kill")));
    }
    let deadline = Instant::now() + DEADLINE;
    let leader = loop {
        if let Some(leader) = cluster.leader().await {
            break leader;
        }
        assert!(Instant::now() < deadline, "the cluster never reported a leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The leader is the hardest member to lose: the others must elect a new one.
    cluster.kill(leader).expect("kill the leader");

    let deadline = Instant::now() + DEADLINE;
    let mut after = 0;
    let mut failures = 0;
    while after < 20 {
        let key = format!("/registry/pods/default/after-{after}");
        match store.create(&key, b"y".to_vec()).await {
            Ok(rev) => {
                acked.push((key, rev));
                after += 1;
            }
            // In flight when the leader died: the write may or may not have landed.
            Err(Error::AlreadyExists { .. }) => {
                let kv = store.get(&key).await.expect("get").expect("exists");
                acked.push((key, kv.mod_revision));
                after += 1;
            }
            Err(Error::Unavailable(message)) => {
                failures += 1;
                assert!(Instant::now() < deadline, "writes did not resume after the kill: {message}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("write after the kill: {e}"),
        }
    }
    // Every acknowledged write is readable, at its revision, through the surviving members.
    for (key, rev) in &acked {
        let kv = store.get(key).await.expect("get").unwrap_or_else(|| panic!("{key} lost"));
        assert_eq!(kv.mod_revision, *rev, "{key}");
    }
    let revs: Vec<_> = acked.iter().map(|(_, r)| *r).collect();
    assert!(revs.windows(2).all(|w| w[0] < w[1]), "revisions increase: {revs:?}");
    assert!(!cluster.is_running(leader));
    eprintln!("writes resumed after {failures} failed attempts");

    // The killed member rejoins and catches up.
    cluster.restart(leader).await.expect("restart the killed member");
    let mut only_it = config(&cluster);
    only_it.endpoints = vec![cluster.endpoint(leader)];
    let it = EtcdBackend::connect(only_it, options()).await.expect("connect to the restarted member");
    let last = &acked[acked.len() - 1];
    assert_eq!(it.get(&last.0).await.expect("get").expect("caught up").mod_revision, last.1);
}
