//! Projected service-account tokens against a real skiff API server: the kubelet's volume code
//! writes a token from the TokenRequest API and, with the clock past 80 % of its lifetime,
//! rewrites the file with a new token (the clock is injected: Kubernetes' shortest
//! `expirationSeconds` is 600 s).

mod common;

use std::time::{Duration, SystemTime};

use common::start_api_server_with;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Pod, PodSpec, ProjectedVolumeSource, ServiceAccount, ServiceAccountTokenProjection, Volume,
    VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use skiff_kubelet::envvars::NodeFacts;
use skiff_kubelet::host::ApiPodHost;
use skiff_kubelet::volumes::{jwt_issued_and_expiry, refresh_service_account_tokens, setup_volumes};

#[tokio::test]
async fn a_projected_token_file_is_replaced_with_a_new_token_once_due() {
    let h = start_api_server_with(true).await;
    let sas: Api<ServiceAccount> = Api::namespaced(h.client.clone(), "default");
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some("default".into()), ..Default::default() },
        ..Default::default()
    };
    match sas.create(&PostParams::default(), &sa).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating the service account: {e}"),
    }
    // The kube-api-access volume admission adds projects kube-root-ca.crt, which the controller
    // manager's root CA publisher writes; this test runs only the API server.
    let cms: Api<ConfigMap> = Api::namespaced(h.client.clone(), "default");
    let ca = ConfigMap {
        metadata: ObjectMeta { name: Some("kube-root-ca.crt".into()), ..Default::default() },
        data: Some([("ca.crt".to_string(), "test CA".to_string())].into()),
        ..Default::default()
    };
    match cms.create(&PostParams::default(), &ca).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating kube-root-ca.crt: {e}"),
    }
    let projection = VolumeProjection {
        service_account_token: Some(ServiceAccountTokenProjection {
            path: "token".into(),
            expiration_seconds: Some(600),
            audience: None,
        }),
        ..Default::default()
    };
    let pod = Pod {
        metadata: ObjectMeta { name: Some("token-user".into()), ..Default::default() },
        spec: Some(PodSpec {
            containers: vec![Container { name: "c".into(), image: Some("busybox".into()), ..Default::default() }],
            volumes: Some(vec![Volume {
                name: "token-vol".into(),
                projected: Some(ProjectedVolumeSource { sources: Some(vec![projection]), default_mode: None }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    let pod = pods.create(&PostParams::default(), &pod).await.unwrap_or_else(|e| panic!("creating the pod: {e}"));

    let host = ApiPodHost::new(h.client.clone(), "node-a");
    let root = h.dir.path().join("kubelet");
    let facts = NodeFacts {
        host_ip: "127.0.0.1".into(),
        pod_ip: "10.42.0.9".into(),
        allocatable_cpu_millis: 1000,
        allocatable_memory: 1 << 30,
        allocatable_ephemeral_storage: 1 << 30,
    };
    let paths = setup_volumes(host.as_ref(), &root, &pod, &facts).await.unwrap_or_else(|e| panic!("set up: {e}"));
    let file = paths["token-vol"].join("token");
    let first = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading the token: {e}"));
    let (iat, exp) = jwt_issued_and_expiry(&first).unwrap_or_else(|| panic!("not a JWT with iat/exp: {first:?}"));
    assert_eq!(exp.duration_since(iat).ok(), Some(Duration::from_secs(600)));

    // Well before 80 % of 600 s: untouched.
    let r = refresh_service_account_tokens(host.as_ref(), &root, &pod, iat + Duration::from_secs(60)).await;
    assert_eq!(r.as_ref().map(|r| r.0).ok(), Some(0), "{r:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap_or_default(), first);

    // Past it: a new token from the API server.
    let r = refresh_service_account_tokens(host.as_ref(), &root, &pod, iat + Duration::from_secs(481)).await;
    assert_eq!(r.as_ref().map(|r| r.0).ok(), Some(1), "{r:?}");
    let second = std::fs::read_to_string(&file).unwrap_or_default();
    assert_ne!(second, first, "the token file was not rewritten");
    let (iat2, exp2) = jwt_issued_and_expiry(&second).unwrap_or_else(|| panic!("not a JWT: {second:?}"));
    assert!(iat2 >= iat && exp2.duration_since(iat2).ok() == Some(Duration::from_secs(600)));
    assert!(exp2 > SystemTime::now());
}
