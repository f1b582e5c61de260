//! The `kube-system/extension-apiserver-authentication` ConfigMap (kube-apiserver's
//! `ClusterAuthenticationTrustController`, `pkg/controlplane/controller/clusterauthenticationtrust`):
//! how extension API servers built with k8s.io/apiserver learn to authenticate callers —
//! `client-ca-file` (the cluster CA, for client certificates) and the request-header settings
//! the front proxy ([`crate::aggregator::proxy`]) uses: its CA, the one allowed client name and
//! the `X-Remote-User`/`X-Remote-Group`/`X-Remote-Extra-` headers, each list as a JSON array in
//! a string, as upstream writes them. As upstream, the CA bundles are merged with the ones
//! already published, so every server of a cluster on one datastore — each with its own
//! request-header CA — is trusted.

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::AppState;
use crate::pki::{FRONT_PROXY_CLIENT_NAME, Pki};
use crate::registry::store::WriteOptions;

/// The ConfigMap's namespace and name.
pub const NAMESPACE: &str = "kube-system";
/// The ConfigMap's name.
pub const NAME: &str = "extension-apiserver-authentication";

/// The ConfigMap's `data`.
pub fn data(pki: &Pki) -> Value {
    let list = |v: &[&str]| serde_json::to_string(v).unwrap_or_default();
    json!({
        "client-ca-file": pki.ca.cert_pem,
        "requestheader-client-ca-file": pki.request_header_ca.cert_pem,
        "requestheader-allowed-names": list(&[FRONT_PROXY_CLIENT_NAME]),
        "requestheader-username-headers": list(&["X-Remote-User"]),
        "requestheader-group-headers": list(&["X-Remote-Group"]),
        "requestheader-extra-headers-prefix": list(&["X-Remote-Extra-"]),
    })
}

/// The PEM blocks of a bundle, in order.
fn pem_blocks(bundle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in bundle.lines() {
        if line.starts_with("-----BEGIN") {
            cur.clear();
        }
        cur.push_str(line);
        cur.push('\n');
        if line.starts_with("-----END") {
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

/// `published` when it holds every certificate of `mine` (no rewrite), else `mine` followed by
/// the certificates of `published` it lacks.
fn merge_bundles(mine: &str, published: Option<&str>) -> String {
    let mut blocks = pem_blocks(mine);
    let others = published.map(pem_blocks).unwrap_or_default();
    if !others.is_empty() && blocks.iter().all(|b| others.contains(b)) {
        return others.concat();
    }
    for b in others {
        if !blocks.contains(&b) {
            blocks.push(b);
        }
    }
    blocks.concat()
}

/// Creates the ConfigMap, or rewrites its `data` when it lacks this server's CAs or settings.
///
/// # Errors
/// When the store refuses the write.
pub async fn publish(state: &AppState, pki: &Pki) -> Result<()> {
    let def = state.registry.get("", "v1", "configmaps").context("configmaps are not registered")?.clone();
    let mut want = data(pki);
    let opts = WriteOptions::default();
    match state.objects.get(&def, NAMESPACE, NAME).await {
        Ok(cm) => {
            for k in ["client-ca-file", "requestheader-client-ca-file"] {
                let merged = merge_bundles(want[k].as_str().unwrap_or_default(), cm["data"][k].as_str());
                want[k] = json!(merged);
            }
            if cm["data"] == want {
                return Ok(());
            }
            state
                .objects
                .update(&def, NAMESPACE, NAME, None, &opts, None, |old| {
                    let mut new = old.cloned().unwrap_or_else(|| json!({"apiVersion": "v1", "kind": "ConfigMap"}));
                    new["data"] = want.clone();
                    if let Some(m) = new["metadata"].as_object_mut() {
                        m.remove("resourceVersion");
                    }
                    Ok(new)
                })
                .await
                .map_err(|e| anyhow::anyhow!("updating {NAMESPACE}/{NAME}: {e}"))?;
        }
        Err(e) if e.code == 404 => {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": NAME, "namespace": NAMESPACE}, "data": want});
            match state.objects.create(&def, NAMESPACE, cm, None, &opts).await {
                Ok(_) => {}
                Err(e) if e.code == 409 => {}
                Err(e) => anyhow::bail!("creating {NAMESPACE}/{NAME}: {e}"),
            }
        }
        Err(e) => anyhow::bail!("reading {NAMESPACE}/{NAME}: {e}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_gains_this_servers_ca_once_and_is_left_alone_when_it_has_it() {
        let a = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n";
        let b = "-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n";
        assert_eq!(merge_bundles(a, Some(b)), format!("{a}{b}"));
        assert_eq!(merge_bundles(a, Some(&format!("{b}{a}"))), format!("{b}{a}"));
        assert_eq!(merge_bundles(a, None), a);
    }

    #[tokio::test]
    async fn the_configmap_names_the_request_header_ca_and_headers_as_json_lists() {
        let server = crate::testing::TestApiServer::start().await;
        let state = server.server.state();
        let def = state.registry.get("", "v1", "configmaps").unwrap().clone();
        let cm = state.objects.get(&def, NAMESPACE, NAME).await.expect("published at start");
        let pki = server.server.pki();
        assert_eq!(cm["data"]["requestheader-client-ca-file"], pki.request_header_ca.cert_pem.as_str());
        assert_eq!(cm["data"]["client-ca-file"], pki.ca.cert_pem.as_str());
        assert_eq!(cm["data"]["requestheader-allowed-names"], "[\"front-proxy-client\"]");
        assert_eq!(cm["data"]["requestheader-extra-headers-prefix"], "[\"X-Remote-Extra-\"]");
        // A second start on the same data changes nothing.
        publish(state, pki).await.unwrap();
        let again = state.objects.get(&def, NAMESPACE, NAME).await.unwrap();
        assert_eq!(again["metadata"]["resourceVersion"], cm["metadata"]["resourceVersion"]);
    }
}
