//! CRD conversion webhooks (`spec.conversion.strategy: Webhook`,
//! <https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definition-versioning/#webhook-conversion>),
//! apiextensions-apiserver's `webhook_converter.go`.
//!
//! An object read at a version other than the one it is stored in, or written at a version
//! other than the storage version, is sent to the webhook in a `ConversionReview`
//! (`apiextensions.k8s.io/v1`, or `v1beta1` when `conversionReviewVersions` does not list v1)
//! over HTTPS trusting the `caBundle`, at `clientConfig.url` or a ready endpoint of
//! `clientConfig.service`. The answer must carry the request's uid, `result.status: Success`
//! and one object per object sent, at the desired `apiVersion` and of the same kind; only its
//! labels and annotations may differ in metadata (the rest is restored from the original, as
//! upstream's `restoreObjectMeta`). Anything else fails the request with a 500 naming the
//! webhook's error, for this resource only.
//!
//! Because reads are converted, objects stored at an older storage version are served at
//! every version, and every update rewrites them at the current storage version.
//!
//! The generic registry converts synchronously ([`crate::registry::convert`]), so a call
//! blocks its thread: on the server's multi-threaded runtime inside `block_in_place`, so other
//! tasks move to other workers; elsewhere on a thread of its own.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skiff_admission::webhook::ServiceResolver;
use skiff_admission::webhook::client::{Endpoint, post_json};
use skiff_apimachinery::ApiError;

/// How long a conversion call may take (apiextensions' webhook timeout).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The conversion webhook of one CRD.
#[derive(Clone)]
pub struct WebhookConverter {
    /// `spec.conversion.webhook.clientConfig`.
    client_config: Value,
    /// The ConversionReview version sent: `v1` when listed, else `v1beta1`.
    review_version: &'static str,
    /// Resolves `clientConfig.service` to a ready endpoint.
    services: Arc<dyn ServiceResolver>,
    /// The storage version's `openAPIV3Schema`: objects are converted before pruning and
    /// validation, so those use it ([`crate::resources::CustomResource::effective_schema`]).
    pub storage_schema: Option<Value>,
}

impl PartialEq for WebhookConverter {
    fn eq(&self, o: &Self) -> bool {
        self.client_config == o.client_config
            && self.review_version == o.review_version
            && self.storage_schema == o.storage_schema
    }
}

impl Eq for WebhookConverter {}

impl std::fmt::Debug for WebhookConverter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConverter").field("client_config", &self.client_config).finish_non_exhaustive()
    }
}

fn bracket(host: &str) -> String {
    if host.contains(':') { format!("[{host}]") } else { host.to_string() }
}

impl WebhookConverter {
    /// The converter of `crd`, when its strategy is `Webhook`.
    pub fn from_crd(crd: &Value, services: Arc<dyn ServiceResolver>) -> Option<Self> {
        let conversion = &crd["spec"]["conversion"];
        if conversion["strategy"] != "Webhook" {
            return None;
        }
        let webhook = &conversion["webhook"];
        let versions = webhook["conversionReviewVersions"].as_array().cloned().unwrap_or_default();
        let review_version = if versions.iter().any(|v| v == "v1") { "v1" } else { "v1beta1" };
        let storage_schema = crd["spec"]["versions"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
            .and_then(|v| v["schema"].get("openAPIV3Schema").cloned());
        Some(Self { client_config: webhook["clientConfig"].clone(), review_version, services, storage_schema })
    }

    fn endpoint(&self) -> Result<Endpoint, String> {
        use base64::Engine;
        let cc = &self.client_config;
        let ca_bundle = cc["caBundle"]
            .as_str()
            .map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap_or_default())
            .unwrap_or_default();
        if let Some(url) = cc["url"].as_str() {
            let rest = url.strip_prefix("https://").ok_or_else(|| format!("webhook URL {url:?} must use https"))?;
            let (authority, path) = match rest.find('/') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, "/"),
            };
            let (host, port) = match authority.rsplit_once(':') {
                Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
                    (h.trim_matches(['[', ']']).to_string(), p.parse::<u16>().unwrap_or(443))
                }
                _ => (authority.trim_matches(['[', ']']).to_string(), 443),
            };
            return Ok(Endpoint {
                connect: format!("{}:{port}", bracket(&host)),
                server_name: host,
                authority: authority.to_string(),
                path: path.to_string(),
                ca_bundle,
            });
        }
        let svc = &cc["service"];
        let (ns, name) = (svc["namespace"].as_str().unwrap_or_default(), svc["name"].as_str().unwrap_or_default());
        if name.is_empty() {
            return Err("webhook has neither url nor service".into());
        }
        let port = svc["port"].as_i64().unwrap_or(443) as i32;
        let connect = self.services.resolve(ns, name, port)?;
        let host = format!("{name}.{ns}.svc");
        Ok(Endpoint {
            connect,
            server_name: host.clone(),
            authority: format!("{host}:{port}"),
            path: svc["path"].as_str().filter(|p| !p.is_empty()).unwrap_or("/").to_string(),
            ca_bundle,
        })
    }

    /// Converts `objects` to `desired` (`group/version`); objects already there are returned
    /// as they are. Blocks the calling thread for the webhook call.
    ///
    /// # Errors
    /// 500 InternalError with the webhook's failure, in apiextensions' words.
    pub fn convert(&self, objects: Vec<Value>, desired: &str) -> Result<Vec<Value>, ApiError> {
        let todo: Vec<usize> = (0..objects.len()).filter(|&i| objects[i]["apiVersion"] != desired).collect();
        if todo.is_empty() {
            return Ok(objects);
        }
        let first = &objects[todo[0]];
        let gvk = format!(
            "{}, Kind={}",
            first["apiVersion"].as_str().unwrap_or_default(),
            first["kind"].as_str().unwrap_or_default()
        );
        let uid = crate::util::new_uid();
        let sent: Vec<Value> = todo.iter().map(|&i| objects[i].clone()).collect();
        let review = json!({
            "apiVersion": format!("apiextensions.k8s.io/{}", self.review_version),
            "kind": "ConversionReview",
            "request": {"uid": uid, "desiredAPIVersion": desired, "objects": sent},
        });
        let endpoint = self.endpoint().map_err(|e| failed(&gvk, &e))?;
        let resp =
            block_on(async move { post_json(&endpoint, &review, TIMEOUT).await }).map_err(|e| failed(&gvk, &e))?;
        let converted = check_response(&resp, &uid, todo.len(), desired, &gvk)?;
        let mut out = objects;
        for (&i, c) in todo.iter().zip(converted) {
            out[i] = restore_object_meta(&out[i], c).map_err(|e| failed(&gvk, &e))?;
        }
        Ok(out)
    }
}

fn failed(gvk: &str, e: &str) -> ApiError {
    ApiError::internal(format!("conversion webhook for {gvk} failed: {e}"))
}

/// The converted objects of a `ConversionReview` answer, checked as apiextensions checks them.
fn check_response(resp: &Value, uid: &str, n: usize, desired: &str, gvk: &str) -> Result<Vec<Value>, ApiError> {
    let r = resp.get("response").filter(|r| r.is_object()).ok_or_else(|| failed(gvk, "response is nil"))?;
    let got_uid = r["uid"].as_str().unwrap_or_default();
    if got_uid != uid {
        return Err(failed(gvk, &format!("expected response uid {uid:?}, got {got_uid:?}")));
    }
    if r["result"]["status"] != "Success" {
        let message = r["result"]["message"].as_str().unwrap_or_default();
        return Err(ApiError::internal(format!("conversion webhook for {gvk} returned failure: {message}")));
    }
    let converted = r["convertedObjects"].as_array().cloned().unwrap_or_default();
    if converted.len() != n {
        return Err(failed(gvk, &format!("expected {n} converted objects, got {}", converted.len())));
    }
    for (i, c) in converted.iter().enumerate() {
        let av = c["apiVersion"].as_str().unwrap_or_default();
        if av != desired {
            return Err(failed(
                gvk,
                &format!("invalid converted object at index {i}: invalid apiVersion {av:?}, expected {desired:?}"),
            ));
        }
    }
    Ok(converted)
}

/// The converted object with the original's metadata, except labels and annotations, which the
/// webhook may change; its kind must be the original's.
fn restore_object_meta(original: &Value, mut converted: Value) -> Result<Value, String> {
    if converted["kind"] != original["kind"] {
        return Err(format!(
            "invalid converted object: invalid kind {}, expected {}",
            converted["kind"], original["kind"]
        ));
    }
    let new_meta = converted.get("metadata").cloned().unwrap_or(Value::Null);
    if !new_meta.is_object() && !new_meta.is_null() {
        return Err("invalid converted object: metadata is not an object".into());
    }
    let mut meta = original["metadata"].clone();
    if let Some(m) = meta.as_object_mut() {
        for k in ["labels", "annotations"] {
            match new_meta.get(k).filter(|v| v.is_object()) {
                Some(v) => {
                    m.insert(k.into(), v.clone());
                }
                None => {
                    m.remove(k);
                }
            }
        }
    }
    if let Some(c) = converted.as_object_mut() {
        c.insert("metadata".into(), meta);
    }
    Ok(converted)
}

/// Runs `f` to completion from synchronous code (see the module docs).
fn block_on<F>(f: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    if let Ok(h) = Handle::try_current()
        && h.runtime_flavor() == RuntimeFlavor::MultiThread
    {
        return tokio::task::block_in_place(|| h.block_on(f));
    }
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        rt.block_on(f)
    });
    thread.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_labels_and_annotations_of_a_converted_object_are_kept() {
        let original =
            json!({"apiVersion": "x.io/v1", "kind": "W", "metadata": {"name": "a", "uid": "u", "labels": {"a": "1"}}});
        let converted = json!({"apiVersion": "x.io/v2", "kind": "W",
            "metadata": {"name": "renamed", "uid": "other", "annotations": {"b": "2"}}, "spec": {"x": 1}});
        let out = restore_object_meta(&original, converted).unwrap();
        assert_eq!(out["metadata"], json!({"name": "a", "uid": "u", "annotations": {"b": "2"}}));
        assert_eq!(out["spec"]["x"], 1);
        let wrong_kind = json!({"apiVersion": "x.io/v2", "kind": "Other", "metadata": {}});
        assert!(restore_object_meta(&original, wrong_kind).is_err());
    }

    #[test]
    fn an_answer_with_another_uid_a_failure_or_the_wrong_version_is_an_error() {
        let ok = json!({"response": {"uid": "u1", "result": {"status": "Success"}, "convertedObjects": [{"apiVersion": "x.io/v2"}]}});
        assert_eq!(check_response(&ok, "u1", 1, "x.io/v2", "x.io/v1, Kind=W").unwrap().len(), 1);
        let e = check_response(&ok, "u2", 1, "x.io/v2", "x.io/v1, Kind=W").unwrap_err();
        assert_eq!(e.code, 500);
        assert!(e.message.contains("expected response uid \"u2\", got \"u1\""), "{}", e.message);
        let e = check_response(&ok, "u1", 1, "x.io/v3", "x.io/v1, Kind=W").unwrap_err();
        assert!(e.message.contains("invalid apiVersion \"x.io/v2\", expected \"x.io/v3\""), "{}", e.message);
        let failure = json!({"response": {"uid": "u1", "result": {"status": "Failure", "message": "no way"}}});
        let e = check_response(&failure, "u1", 1, "x.io/v2", "x.io/v1, Kind=W").unwrap_err();
        assert_eq!(e.message, "conversion webhook for x.io/v1, Kind=W returned failure: no way");
    }

    #[test]
    fn a_v1beta1_review_is_sent_only_when_v1_is_not_listed() {
        let crd = |versions: Value| {
            json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": versions,
                "clientConfig": {"url": "https://x/"}}}}})
        };
        let services = || -> Arc<dyn ServiceResolver> { Arc::new(skiff_admission::webhook::NoServices) };
        assert_eq!(WebhookConverter::from_crd(&crd(json!(["v1beta1"])), services()).unwrap().review_version, "v1beta1");
        assert_eq!(
            WebhookConverter::from_crd(&crd(json!(["v1beta1", "v1"])), services()).unwrap().review_version,
            "v1"
        );
        let none = json!({"spec": {"conversion": {"strategy": "None"}}});
        assert!(WebhookConverter::from_crd(&none, services()).is_none());
    }

    #[test]
    fn objects_already_at_the_desired_version_need_no_call() {
        let conv = WebhookConverter {
            client_config: json!({"url": "https://127.0.0.1:1/never"}),
            review_version: "v1",
            services: Arc::new(skiff_admission::webhook::NoServices),
            storage_schema: None,
        };
        let objs = vec![json!({"apiVersion": "x.io/v2", "kind": "W"})];
        assert_eq!(conv.convert(objs.clone(), "x.io/v2").unwrap(), objs);
        // A webhook nobody listens at fails the request with a 500 naming the call.
        let e =
            conv.convert(vec![json!({"apiVersion": "x.io/v1", "kind": "W", "metadata": {}})], "x.io/v2").unwrap_err();
        assert_eq!(e.code, 500);
        assert!(e.message.starts_with("conversion webhook for x.io/v1, Kind=W failed: "), "{}", e.message);
    }
}
