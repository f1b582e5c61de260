//! The resource handlers (k8s.io/apiserver `pkg/endpoints/handlers`): get, list, create,
//! update, patch, delete and deletecollection of a parsed [`RequestInfo`], dispatched to the
//! registry ([`crate::registry::store`]), to [`crate::endpoints::watch`] or to a subresource or
//! virtual resource, and rendered through [`crate::endpoints::responsewriters`].

use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::AppState;
use crate::auth::RequestUser;
use crate::endpoints::negotiation::{Output, content_type, decode_object, negotiate, render_object};
use crate::endpoints::request::{Query, RequestInfo, delete_options, dry_run, list_options, read_body, write_options};
use crate::endpoints::responsewriters::{add_warnings, json_bytes_response, json_response, success_status};
use crate::endpoints::table::{partial_metadata, to_table};
use crate::registry::store::{ListOptions, Listed, page_of_snapshot, parse_rv};
use crate::resources::ResourceDef;
use crate::util::meta_str;

/// Serves one resource request whose user is authenticated and authorized.
pub async fn dispatch(
    state: &Arc<AppState>,
    parts: &axum::http::request::Parts,
    body: Body,
    q: &Query,
    info: &RequestInfo,
    user: Option<RequestUser>,
) -> Result<Response, ApiError> {
    let def = &info.def;
    let ns = info.namespace.as_str();
    let name = info.name.as_str();
    if def.namespaced && !name.is_empty() && ns.is_empty() && info.verb != "list" && info.verb != "watch" {
        return Err(ApiError::new(404, "NotFound", "the server could not find the requested resource"));
    }
    let out = negotiate(&parts.headers, q)?;
    let sub = info.subresource.as_str();
    if def.group == crate::metricsserver::GROUP {
        return crate::metricsserver::api::serve(state, info, q, out);
    }
    let virtual_key = (def.group.to_string(), def.resource.to_string(), sub.to_string());
    if let Some(handler) = state.virtuals.get(&virtual_key) {
        if info.verb != "create" {
            return Err(ApiError::method_not_allowed(format!(
                "the server does not allow this method on the requested resource ({}{}{})",
                def.resource,
                if sub.is_empty() { "" } else { "/" },
                sub
            )));
        }
        let bytes = read_body(body).await?;
        let (mut obj, _) = decode_object(&parts.headers, &bytes)?;
        let dry_run = dry_run(q)?;
        let mut warnings = Vec::new();
        // Virtual creates pass the admission chain like stored ones, as in kube-apiserver:
        // NodeRestriction limits a node to tokens bound to its own pods (TokenRequest),
        // NamespaceLifecycle refuses terminating namespaces (access reviews are exempt),
        // webhooks may match them.
        let attrs = crate::admission::seam::Attributes {
            operation: crate::admission::seam::Operation::Create,
            def,
            namespace: ns,
            name,
            subresource: (!sub.is_empty()).then_some(sub),
            user: user.as_ref(),
            old: None,
            dry_run,
        };
        let admission = &state.objects.admission;
        admission.mutate_collecting(&attrs, &mut obj, &mut warnings).await?;
        admission.validate_collecting(&attrs, &mut obj, &mut warnings).await?;
        let req = crate::registry::virtual_resources::VirtualRequest {
            def,
            subresource: sub,
            namespace: ns,
            name,
            user: user.as_ref(),
            dry_run,
        };
        let answer = handler.create(&req, obj).await?;
        let mut resp = json_response(StatusCode::CREATED, &answer);
        add_warnings(&mut resp, &warnings);
        return Ok(resp);
    }
    if def.storage.is_empty() {
        return Err(ApiError::method_not_allowed("the server does not allow this method on the requested resource"));
    }
    match (info.verb, sub) {
        (_, "proxy") => crate::endpoints::proxy::proxy(state, parts, body, info).await,
        ("get" | "create", "exec" | "attach" | "portforward") => {
            crate::endpoints::streams::connect(state, parts, ns, name, sub, q).await
        }
        ("get", "" | "status" | "ephemeralcontainers") => {
            let obj = state.objects.get(def, ns, name).await?;
            Ok(json_response(StatusCode::OK, &render_object(def, obj, out)))
        }
        ("get", "scale") => {
            let obj = state.objects.get(def, ns, name).await?;
            Ok(json_response(StatusCode::OK, &crate::registry::subresources::scale_of(def, &obj)))
        }
        ("get", "log") => crate::endpoints::proxy::pod_log(state, ns, name, q).await,
        ("list", _) => list(state, def, ns, q, out).await,
        ("watch", _) => {
            let mut q = q.clone();
            if !name.is_empty() {
                // GET .../pods/x?watch=1 is a watch with fieldSelector=metadata.name=x.
                let fs = q.get("fieldSelector").cloned().unwrap_or_default();
                let extra = format!("metadata.name={name}");
                q.insert("fieldSelector".into(), if fs.is_empty() { extra } else { format!("{fs},{extra}") });
            }
            crate::endpoints::watch::serve(state, def, if ns.is_empty() { None } else { Some(ns) }, &q, out).await
        }
        ("create", "") => {
            let bytes = read_body(body).await?;
            let (obj, is_json) = decode_object(&parts.headers, &bytes)?;
            let opts = write_options(q, &user, &parts.headers)?;
            let w = state.objects.create(def, ns, obj, is_json.then_some(&bytes[..]), &opts).await?;
            let mut resp = match (out, w.json) {
                (Output::Json, Some(json)) => json_bytes_response(StatusCode::CREATED, json),
                _ => json_response(StatusCode::CREATED, &render_object(def, w.object, out)),
            };
            add_warnings(&mut resp, &w.warnings);
            Ok(resp)
        }
        ("create", "binding") | ("create", "eviction") => {
            let bytes = read_body(body).await?;
            let (obj, _) = decode_object(&parts.headers, &bytes)?;
            let opts = write_options(q, &user, &parts.headers)?;
            let status = if sub == "binding" {
                crate::registry::subresources::bind(state, def, ns, name, obj, &opts).await?
            } else {
                crate::registry::subresources::evict(state, def, ns, name, obj, &opts).await?
            };
            Ok(json_response(StatusCode::CREATED, &status))
        }
        ("update", "" | "status" | "finalize" | "ephemeralcontainers") => {
            let bytes = read_body(body).await?;
            let (obj, is_json) = decode_object(&parts.headers, &bytes)?;
            let body_name = meta_str(&obj, "name");
            if !body_name.is_empty() && body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            let opts = write_options(q, &user, &parts.headers)?;
            let subr = if sub.is_empty() { None } else { Some(sub) };
            let w = state
                .objects
                .update(def, ns, name, subr, &opts, is_json.then_some(&bytes[..]), |_old| Ok(obj.clone()))
                .await?;
            let code = if w.created { StatusCode::CREATED } else { StatusCode::OK };
            let mut resp = match (out, w.json) {
                (Output::Json, Some(json)) => json_bytes_response(code, json),
                _ => json_response(code, &render_object(def, w.object, out)),
            };
            add_warnings(&mut resp, &w.warnings);
            Ok(resp)
        }
        ("update", "scale") => {
            let bytes = read_body(body).await?;
            let (scale, _) = decode_object(&parts.headers, &bytes)?;
            let opts = write_options(q, &user, &parts.headers)?;
            let w =
                crate::registry::subresources::update_scale(state, def, ns, name, &opts, |_| Ok(scale.clone())).await?;
            Ok(json_response(StatusCode::OK, &w))
        }
        ("patch", _) => {
            let bytes = read_body(body).await?;
            let ctype = content_type(&parts.headers);
            let opts = write_options(q, &user, &parts.headers)?;
            crate::endpoints::patch::serve(state, def, ns, name, sub, &ctype, &bytes, &opts, q, out).await
        }
        ("delete", "") => {
            let bytes = read_body(body).await?;
            let opts = delete_options(q, &parts.headers, &bytes, &user)?;
            let d = state.objects.delete(def, ns, name, &opts).await?;
            let body = if d.removed && !(def.group.is_empty() && def.resource == "pods") {
                success_status(def, name, meta_str(&d.object, "uid"))
            } else {
                render_object(def, d.object, out)
            };
            Ok(json_response(StatusCode::OK, &body))
        }
        ("deletecollection", "") => {
            let bytes = read_body(body).await?;
            let opts = delete_options(q, &parts.headers, &bytes, &user)?;
            let list_opts = list_options(def, q)?;
            let listed = state
                .objects
                .list_from_store(
                    def,
                    if ns.is_empty() { None } else { Some(ns) },
                    &ListOptions { limit: 0, continue_token: None, ..list_opts },
                    0,
                )
                .await?;
            let mut deleted = Vec::new();
            for item in listed.items {
                let item_ns = meta_str(&item, "namespace").to_string();
                let item_name = meta_str(&item, "name").to_string();
                match state.objects.delete(def, &item_ns, &item_name, &opts).await {
                    Ok(d) => deleted.push(d.object),
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            let list = list_body(def, deleted, listed.revision, None);
            Ok(json_response(StatusCode::OK, &list))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({}/{})",
            def.resource, sub
        ))),
    }
}

/// The `metadata` of a list: `ListMeta`'s resourceVersion, continue and remainingItemCount.
fn list_meta(listed: &Listed) -> Value {
    let mut meta = json!({"resourceVersion": listed.revision.to_string()});
    if let Some(c) = &listed.continue_token {
        meta["continue"] = json!(c);
    }
    if let Some(n) = listed.remaining_item_count {
        meta["remainingItemCount"] = json!(n);
    }
    meta
}

/// A `<Kind>List` body.
pub fn list_body(def: &ResourceDef, items: Vec<Value>, revision: i64, continue_token: Option<String>) -> Value {
    let listed = Listed { items: Vec::new(), revision, continue_token, remaining_item_count: None };
    json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(), "metadata": list_meta(&listed), "items": items})
}

/// Where a list is read, by Kubernetes 1.33's resource version semantics for list
/// (<https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list>)
/// and the cacher's `shouldDelegateList`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListSource {
    /// The store, at this revision (0: the latest). Most Recent (resourceVersion unset),
    /// Exact (`resourceVersionMatch=Exact`, or a `limit` with a resourceVersion other than 0
    /// and no match: the legacy exact read) and Continuation (the token's revision).
    Store(i64),
    /// The watch cache, once it has reached `min` (Any at 0, Not older than otherwise); `limit`
    /// pages it unless the resourceVersion is 0, whose list is always whole (the cacher's
    /// `computeListLimit`).
    Cache {
        /// The revision the cache must have reached.
        min: i64,
        /// Whether `limit` applies.
        paginate: bool,
    },
}

fn list_source(opts: &ListOptions) -> Result<ListSource, ApiError> {
    let rv = opts.resource_version.as_deref();
    Ok(match (opts.resource_version_match.as_deref(), rv) {
        _ if opts.continue_token.is_some() => ListSource::Store(0),
        (_, None) => ListSource::Store(0),
        (Some("Exact"), Some(rv)) => ListSource::Store(parse_rv(rv)?),
        (None, Some(rv)) if opts.limit > 0 && rv != "0" => ListSource::Store(parse_rv(rv)?),
        (_, Some(rv)) => ListSource::Cache { min: parse_rv(rv)?, paginate: rv != "0" },
    })
}

async fn list(
    state: &Arc<AppState>,
    def: &ResourceDef,
    ns: &str,
    q: &Query,
    out: Output,
) -> Result<Response, ApiError> {
    let opts = list_options(def, q)?;
    let ns_opt = if ns.is_empty() { None } else { Some(ns) };
    let listed = match list_source(&opts)? {
        ListSource::Store(revision) => state.objects.list_from_store(def, ns_opt, &opts, revision).await?,
        ListSource::Cache { min, paginate } => {
            let cache = state.cache(def)?;
            if !cache.wait_for(min, std::time::Duration::from_secs(3)).await {
                return Err(ApiError::too_large_resource_version(min, cache.revision(), 1));
            }
            let prefix = def.namespace_prefix(ns_opt);
            let snap = cache.snapshot(&prefix);
            let limit = if paginate { opts.limit } else { 0 };
            page_of_snapshot(def, &prefix, &snap.objects, snap.revision, &opts, limit)?
        }
    };
    let body = match out {
        Output::Json => {
            json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(),
                "metadata": list_meta(&listed), "items": listed.items})
        }
        Output::Metadata => {
            let items: Vec<Value> = listed.items.iter().map(partial_metadata).collect();
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                "metadata": list_meta(&listed), "items": items})
        }
        Output::Table(inc) => to_table(def, &listed.items, list_meta(&listed), inc),
    };
    Ok(json_response(StatusCode::OK, &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(rv: Option<&str>, rv_match: Option<&str>, limit: usize, cont: Option<&str>) -> ListOptions {
        ListOptions {
            limit,
            continue_token: cont.map(str::to_string),
            resource_version: rv.map(str::to_string),
            resource_version_match: rv_match.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn a_list_without_resource_version_is_a_most_recent_read_of_the_store() {
        assert_eq!(list_source(&opts(None, None, 0, None)).unwrap(), ListSource::Store(0));
        assert_eq!(list_source(&opts(None, None, 2, None)).unwrap(), ListSource::Store(0));
    }

    #[test]
    fn resource_version_zero_is_any_from_the_cache_whole_even_with_a_limit() {
        for limit in [0, 2] {
            assert_eq!(
                list_source(&opts(Some("0"), None, limit, None)).unwrap(),
                ListSource::Cache { min: 0, paginate: false }
            );
            assert_eq!(
                list_source(&opts(Some("0"), Some("NotOlderThan"), limit, None)).unwrap(),
                ListSource::Cache { min: 0, paginate: false }
            );
        }
    }

    #[test]
    fn a_resource_version_without_limit_is_not_older_than_from_the_cache() {
        assert_eq!(list_source(&opts(Some("9"), None, 0, None)).unwrap(), ListSource::Cache { min: 9, paginate: true });
    }

    #[test]
    fn a_resource_version_with_limit_and_no_match_is_an_exact_read_of_the_store() {
        assert_eq!(list_source(&opts(Some("9"), None, 50, None)).unwrap(), ListSource::Store(9));
    }

    #[test]
    fn exact_is_read_from_the_store_at_that_revision_with_or_without_limit() {
        assert_eq!(list_source(&opts(Some("9"), Some("Exact"), 0, None)).unwrap(), ListSource::Store(9));
        assert_eq!(list_source(&opts(Some("9"), Some("Exact"), 2, None)).unwrap(), ListSource::Store(9));
    }

    #[test]
    fn not_older_than_is_read_from_the_cache_and_paginated_with_a_limit() {
        assert_eq!(
            list_source(&opts(Some("9"), Some("NotOlderThan"), 2, None)).unwrap(),
            ListSource::Cache { min: 9, paginate: true }
        );
    }

    #[test]
    fn a_continue_token_is_read_from_the_store_at_the_tokens_revision() {
        assert_eq!(list_source(&opts(None, None, 2, Some("t"))).unwrap(), ListSource::Store(0));
        assert_eq!(list_source(&opts(Some("0"), None, 2, Some("t"))).unwrap(), ListSource::Store(0));
    }

    #[test]
    fn a_resource_version_that_is_no_number_is_a_bad_request() {
        assert_eq!(list_source(&opts(Some("x"), None, 2, None)).unwrap_err().code, 400);
    }
}
