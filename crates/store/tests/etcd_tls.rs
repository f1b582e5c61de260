//! The etcd backend over TLS with client certificates (kube-apiserver's `--etcd-cafile`,
//! `--etcd-certfile`, `--etcd-keyfile`), against a real etcd serving `https://` and requiring
//! client certificates. The certificates are generated for the test with rcgen.

use std::path::Path;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use skiff_store::etcd::harness::{EtcdCluster, HarnessOptions, HarnessTls};
use skiff_store::etcd::{EtcdBackend, EtcdTls};
use skiff_store::{Backend, Error, Options, WatchResponse};

fn options() -> Options {
    Options { progress_interval: Duration::from_millis(200), compaction_interval: None }
}

/// A CA, a serving certificate for 127.0.0.1 and a client certificate, written under `dir`.
fn write_pki(dir: &Path, name: &str) -> HarnessTls {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, format!("{name} test CA"));
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key")).expect("CA cert");

    let server_key = KeyPair::generate().expect("server key");
    let server = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("server params");
    let server_cert = server.signed_by(&server_key, &ca).expect("server cert");

    let client_key = KeyPair::generate().expect("client key");
    let mut client = CertificateParams::new(Vec::<String>::new()).expect("client params");
    client.distinguished_name.push(DnType::CommonName, "skiff-apiserver");
    let client_cert = client.signed_by(&client_key, &ca).expect("client cert");

    let write = |file: &str, pem: String| {
        let path = dir.join(format!("{name}-{file}"));
        std::fs::write(&path, pem).expect("write PEM");
        path
    };
    HarnessTls {
        ca_file: write("ca.pem", ca.pem()),
        server_cert_file: write("server.pem", server_cert.pem()),
        server_key_file: write("server-key.pem", server_key.serialize_pem()),
        client_cert_file: write("client.pem", client_cert.pem()),
        client_key_file: write("client-key.pem", client_key.serialize_pem()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_talks_to_a_tls_etcd_with_a_client_certificate_and_is_refused_without_one() {
    let pki = tempfile::tempdir().expect("tempdir");
    let tls = write_pki(pki.path(), "good");
    let cluster = EtcdCluster::start_with(HarnessOptions { tls: Some(tls.clone()), ..HarnessOptions::default() })
        .await
        .expect("start etcd with TLS");
    assert!(cluster.endpoint(0).starts_with("https://"));

    let store = EtcdBackend::connect(cluster.config(), options()).await.expect("connect over TLS");
    let mut watch = store.watch("/registry/secrets/", 0).await.expect("watch over TLS");
    let rev = store.create("/registry/secrets/default/s", b"data".to_vec()).await.expect("create over TLS");
    assert_eq!(store.get("/registry/secrets/default/s").await.expect("get").expect("exists").mod_revision, rev);
    let events = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let WatchResponse::Events(events) = watch.next().await.expect("open").expect("ok") {
                return events;
            }
        }
    })
    .await
    .expect("the watch delivers over TLS");
    assert_eq!(events[0].kv.mod_revision, rev);

    // Without a client certificate the server refuses the handshake.
    let mut no_client_cert = cluster.config();
    no_client_cert.tls = Some(EtcdTls { ca_file: Some(tls.ca_file.clone()), cert_file: None, key_file: None });
    no_client_cert.request_timeout = Duration::from_secs(2);
    match EtcdBackend::connect(no_client_cert, options()).await {
        Err(Error::Unavailable(_)) => {}
        Err(other) => panic!("without a client certificate: expected Unavailable, got {other}"),
        Ok(_) => panic!("connected without a client certificate"),
    }

    // A CA that did not sign the server certificate: the client refuses the server.
    let other = write_pki(pki.path(), "other");
    let mut wrong_ca = cluster.config();
    wrong_ca.tls = Some(EtcdTls { ca_file: Some(other.ca_file), ..tls.client() });
    wrong_ca.request_timeout = Duration::from_secs(2);
    match EtcdBackend::connect(wrong_ca, options()).await {
        Err(Error::Unavailable(_)) => {}
        Err(other) => panic!("with the wrong CA: expected Unavailable, got {other}"),
        Ok(_) => panic!("trusted a server certificate from another CA"),
    }
}
