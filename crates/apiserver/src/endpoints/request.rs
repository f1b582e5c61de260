//! What a request asks for (k8s.io/apiserver `pkg/endpoints/request` and the option decoding of
//! `pkg/endpoints/handlers`): the path → [`RequestInfo`]
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris>:
//! `/api/v1/namespaces/{ns}/{resource}/{name}/{subresource}` and `/apis/{group}/{version}/...`),
//! the decoded query, the body (up to [`MAX_BODY_BYTES`]) and the write, delete and list options.

use std::collections::HashMap;

use axum::body::Body;
use axum::http::{HeaderMap, Method};
use http_body_util::BodyExt;
use serde_json::Value;
use skiff_apimachinery::ApiError;
use skiff_apimachinery::status::Cause;

use crate::AppState;
use crate::auth::RequestUser;
use crate::endpoints::negotiation::decode_object;
use crate::registry::machinery::Selectors;
use crate::registry::store::{DeleteOptions, FieldValidation, ListOptions, WriteOptions};
use crate::resources::ResourceDef;

/// The largest request body accepted: 3 MiB, kube-apiserver's `--max-request-bytes` default for
/// JSON bodies.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// What a resource request is about (`request.RequestInfo`).
#[derive(Debug, Clone)]
pub struct RequestInfo {
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'static str,
    /// The resource.
    pub def: ResourceDef,
    /// Namespace from the path ("" when none).
    pub namespace: String,
    /// Object name ("" for collections).
    pub name: String,
    /// Subresource ("" when none).
    pub subresource: String,
    /// For the `proxy` subresource, the path after `/proxy` that is forwarded (`/` when none
    /// was given, with a trailing slash kept); "" for every other request.
    pub proxy_path: String,
}

/// Query parameters, decoded.
pub type Query = HashMap<String, String>;

pub(crate) fn parse_query(uri: &axum::http::Uri) -> Result<Query, ApiError> {
    match uri.query() {
        None => Ok(Query::new()),
        Some(q) => {
            let pairs: Vec<(String, String)> = serde_urlencoded_pairs(q);
            Ok(pairs.into_iter().collect())
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn serde_urlencoded_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

pub(crate) fn truthy(q: &Query, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("1" | "true" | "True"))
}

/// Splits a path into the resource request it names, or `None` when it names no resource.
pub fn parse_resource_path(
    state: &AppState,
    method: &Method,
    path: &str,
    q: &Query,
) -> Result<Option<RequestInfo>, ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] if !rest.is_empty() => ("", *v, rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return Ok(None),
    };
    let not_found = || ApiError::new(404, "NotFound", "the server could not find the requested resource");
    let (namespace, rest) = match rest {
        ["namespaces", ns, r, tail @ ..] if state.registry.get(group, version, r).is_some_and(|d| d.namespaced) => {
            (ns.to_string(), std::iter::once(*r).chain(tail.iter().copied()).collect::<Vec<_>>())
        }
        _ => (String::new(), rest.to_vec()),
    };
    let resource = rest[0];
    let def = state.registry.get(group, version, resource).ok_or_else(not_found)?.clone();
    let name = rest.get(1).map(|s| percent_decode(s)).unwrap_or_default();
    // A name can never contain '/' or be "." or "..": refuse them before they reach a key.
    if name.contains('/') || name == "." || name == ".." || namespace.contains('%') || namespace == ".." {
        return Err(ApiError::bad_request(format!("invalid resource name {name:?}")));
    }
    let subresource = rest.get(2).map(|s| s.to_string()).unwrap_or_default();
    // `.../{name}/proxy/{path...}`: the rest of the path goes to the proxied server.
    let proxy_path = if subresource == "proxy" {
        let mut p = format!("/{}", rest[3..].join("/"));
        if rest.len() > 3 && path.ends_with('/') {
            p.push('/');
        }
        p
    } else {
        if rest.len() > 3 {
            return Err(not_found());
        }
        String::new()
    };
    if !subresource.is_empty() && def.subresource(&subresource).is_none() {
        return Err(not_found());
    }
    // A proxied request's query belongs to the proxied server (`?watch=1` is not a watch).
    let watch = subresource != "proxy" && truthy(q, "watch");
    let verb = match (method.as_str(), name.is_empty()) {
        ("GET" | "HEAD", true) => {
            if watch {
                "watch"
            } else {
                "list"
            }
        }
        ("GET" | "HEAD", false) => {
            if watch {
                "watch"
            } else {
                "get"
            }
        }
        ("POST", true) => "create",
        ("POST", false) if !subresource.is_empty() => "create",
        ("PUT", false) => "update",
        ("PATCH", false) => "patch",
        ("DELETE", false) => "delete",
        ("DELETE", true) => "deletecollection",
        _ => {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource".to_string(),
            ));
        }
    };
    Ok(Some(RequestInfo { verb, def, namespace, name, subresource, proxy_path }))
}

/// Reads the body up to [`MAX_BODY_BYTES`]; 413 beyond (what is left unread is dealt with by
/// [`crate::server::unread_body`]).
pub(crate) async fn read_body(body: Body) -> Result<bytes::Bytes, ApiError> {
    let limited = http_body_util::Limited::new(body, MAX_BODY_BYTES);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                Err(ApiError::too_large(format!("Request entity too large: limit is {MAX_BODY_BYTES}")))
            } else {
                Err(ApiError::bad_request(format!("error reading the request body: {e}")))
            }
        }
    }
}

pub(crate) fn write_options(
    q: &Query,
    user: &Option<RequestUser>,
    headers: &HeaderMap,
) -> Result<WriteOptions, ApiError> {
    let user_agent = headers.get(axum::http::header::USER_AGENT).and_then(|v| v.to_str().ok());
    Ok(WriteOptions {
        dry_run: dry_run(q)?,
        field_validation: FieldValidation::parse(q.get("fieldValidation").map(String::as_str))?,
        user: user.clone(),
        field_manager: crate::registry::managedfields::manager_for_update(
            q.get("fieldManager").map(String::as_str),
            user_agent,
        ),
    })
}

pub(crate) fn dry_run(q: &Query) -> Result<bool, ApiError> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => {
            Err(ApiError::bad_request(format!("Invalid dry run value: {other:?}, only \"All\" is supported")))
        }
    }
}

/// The object name a field selector pins (`metadata.name=x` or `metadata.name==x`, alone or
/// among other requirements), as kube-apiserver's RequestInfo reads it for authorization.
pub fn single_name_selector(selector: &str) -> Option<String> {
    selector.split(',').find_map(|req| {
        let req = req.trim();
        if req.contains("!=") {
            return None;
        }
        let (k, v) = req.split_once("==").or_else(|| req.split_once('='))?;
        (k.trim() == "metadata.name" && !v.trim().is_empty()).then(|| v.trim().to_string())
    })
}

/// `DeleteOptions` from the body (if any) and query parameters.
pub(crate) fn delete_options(
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
    user: &Option<RequestUser>,
) -> Result<DeleteOptions, ApiError> {
    let mut opts = DeleteOptions { dry_run: dry_run(q)?, user: user.clone(), ..Default::default() };
    if !body.iter().all(u8::is_ascii_whitespace) {
        let (v, _) = decode_object(headers, body)?;
        if let Some(p) = v.get("preconditions") {
            opts.uid = p.get("uid").and_then(Value::as_str).map(str::to_string);
            opts.resource_version = p.get("resourceVersion").and_then(Value::as_str).map(str::to_string);
        }
        opts.propagation_policy = v.get("propagationPolicy").and_then(Value::as_str).map(str::to_string);
        opts.grace_period_seconds = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        if let Some(true) = v.get("orphanDependents").and_then(Value::as_bool) {
            opts.propagation_policy.get_or_insert_with(|| "Orphan".into());
        }
        if v.get("dryRun").and_then(Value::as_array).is_some_and(|a| a.iter().any(|x| x == "All")) {
            opts.dry_run = true;
        }
    }
    if let Some(p) = q.get("propagationPolicy") {
        opts.propagation_policy = Some(p.clone());
    }
    if let Some(g) = q.get("gracePeriodSeconds") {
        opts.grace_period_seconds =
            Some(g.parse().map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: {g:?}")))?);
    }
    if q.get("orphanDependents").map(String::as_str) == Some("true") {
        opts.propagation_policy.get_or_insert_with(|| "Orphan".into());
    }
    Ok(opts)
}

/// A `ListOptions` field error (`field.Forbidden`/`field.NotSupported`) as its 422 cause.
fn list_option_cause(reason: &str, field: &str, message: String) -> Cause {
    Cause { reason: reason.into(), message, field: field.into() }
}

/// `ValidateListOptions` (k8s.io/apimachinery `apis/meta/internalversion/validation`): which
/// combinations of `resourceVersion`, `resourceVersionMatch`, `continue` and
/// `sendInitialEvents` a list or a watch may ask for. Every violation is a cause of one 422
/// Invalid on `ListOptions.meta.k8s.io ""`, as kube-apiserver's list handler answers.
fn validate_list_options(q: &Query, watch: bool) -> Result<(), ApiError> {
    let get = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    let (rv, rv_match, cont) = (get("resourceVersion"), get("resourceVersionMatch"), get("continue"));
    let send_initial = q.get("sendInitialEvents").is_some_and(|v| !v.is_empty());
    let forbidden =
        |field: &str, why: &str| list_option_cause("FieldValueForbidden", field, format!("Forbidden: {why}"));
    let not_supported = |value: &str, supported: &[&str]| {
        let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
        list_option_cause(
            "FieldValueNotSupported",
            "resourceVersionMatch",
            format!("Unsupported value: \"{value}\": supported values: {}", list.join(", ")),
        )
    };
    let mut causes = Vec::new();
    if watch {
        if send_initial && rv_match != "NotOlderThan" {
            causes.push(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !rv_match.is_empty() {
            if !send_initial {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if rv_match != "NotOlderThan" {
                causes.push(not_supported(rv_match, &["NotOlderThan"]));
            }
            if !cont.is_empty() {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
    } else {
        if !rv_match.is_empty() {
            if rv.is_empty() {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !cont.is_empty() {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if rv_match != "Exact" && rv_match != "NotOlderThan" {
                causes.push(not_supported(rv_match, &["Exact", "NotOlderThan", ""]));
            }
            if rv_match == "Exact" && rv == "0" {
                causes.push(forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if send_initial {
            causes.push(forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"));
        }
    }
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", causes)) }
}

/// List options from the query, validated (422 for a combination Kubernetes forbids, 400 for
/// a continue token with a resourceVersion other than 0 or a malformed value).
pub fn list_options(def: &ResourceDef, q: &Query) -> Result<ListOptions, ApiError> {
    let watch = truthy(q, "watch");
    validate_list_options(q, watch)?;
    let selectors =
        Selectors::parse(def, q.get("labelSelector").map(String::as_str), q.get("fieldSelector").map(String::as_str))?;
    let limit = match q.get("limit") {
        None => 0,
        Some(l) => {
            l.parse::<i64>().map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?.max(0) as usize
        }
    };
    let rv = q.get("resourceVersion").filter(|s| !s.is_empty()).cloned();
    let rv_match = q.get("resourceVersionMatch").filter(|s| !s.is_empty()).cloned();
    let continue_token = q.get("continue").filter(|s| !s.is_empty()).cloned();
    if !watch && continue_token.is_some() && rv.as_deref().is_some_and(|r| r != "0") {
        // The etcd3 store's check (kube-apiserver answers it before reading anything).
        return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
    }
    Ok(ListOptions { selectors, limit, continue_token, resource_version: rv, resource_version_match: rv_match })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list_query(pairs: &[(&str, &str)]) -> Query {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// The causes of the 422 `ValidateListOptions` answers for a query, as `field: message`.
    fn list_option_errors(pairs: &[(&str, &str)]) -> Vec<String> {
        let q = list_query(pairs);
        match validate_list_options(&q, truthy(&q, "watch")) {
            Ok(()) => Vec::new(),
            Err(e) => {
                assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e}");
                let d = e.details.expect("details");
                assert_eq!((d.group.as_str(), d.kind.as_str(), d.name.as_str()), ("meta.k8s.io", "ListOptions", ""));
                d.causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
            }
        }
    }

    #[test]
    fn a_resource_version_match_without_a_resource_version_is_an_invalid_list() {
        assert_eq!(
            list_option_errors(&[("resourceVersionMatch", "NotOlderThan")]),
            ["resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"]
        );
        let e = validate_list_options(&list_query(&[("resourceVersionMatch", "Exact")]), false).unwrap_err();
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
        );
    }

    #[test]
    fn exact_at_resource_version_zero_and_unknown_matches_are_invalid_lists() {
        assert_eq!(
            list_option_errors(&[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")]),
            ["resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""]
        );
        assert_eq!(
            list_option_errors(&[("resourceVersion", "5"), ("resourceVersionMatch", "Newest")]),
            [
                "resourceVersionMatch: Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\""
            ]
        );
    }

    #[test]
    fn a_resource_version_match_with_a_continue_token_is_an_invalid_list() {
        assert_eq!(
            list_option_errors(&[("resourceVersion", "5"), ("resourceVersionMatch", "Exact"), ("continue", "x")]),
            ["resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"]
        );
        assert_eq!(
            list_option_errors(&[("sendInitialEvents", "true")]),
            ["sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"]
        );
    }

    #[test]
    fn every_row_of_the_list_table_kubernetes_allows_is_a_valid_list() {
        for pairs in [
            &[][..],
            &[("resourceVersion", "0")],
            &[("resourceVersion", "7")],
            &[("limit", "2"), ("resourceVersion", "7")],
            &[("limit", "2"), ("continue", "t")],
            &[("limit", "2"), ("continue", "t"), ("resourceVersion", "0")],
            &[("resourceVersion", "7"), ("resourceVersionMatch", "Exact")],
            &[("resourceVersion", "0"), ("resourceVersionMatch", "NotOlderThan")],
            &[("resourceVersion", "7"), ("resourceVersionMatch", "NotOlderThan"), ("limit", "2")],
        ] {
            assert_eq!(list_option_errors(pairs), Vec::<String>::new(), "{pairs:?}");
        }
    }

    #[test]
    fn a_continue_token_with_a_nonzero_resource_version_is_a_bad_request() {
        let def = crate::resources::Registry::default().get("", "v1", "configmaps").unwrap().clone();
        let e = list_options(&def, &list_query(&[("continue", "t"), ("resourceVersion", "7")])).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "specifying resource version is not allowed when using continue")
        );
        assert!(list_options(&def, &list_query(&[("continue", "t"), ("resourceVersion", "0")])).is_ok());
    }

    #[test]
    fn watch_options_follow_kubernetes_watch_validation() {
        assert_eq!(
            list_option_errors(&[("watch", "1"), ("resourceVersionMatch", "NotOlderThan")]),
            [
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
            ]
        );
        assert_eq!(
            list_option_errors(&[("watch", "1"), ("sendInitialEvents", "true")]),
            [
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
            ]
        );
        assert_eq!(
            list_option_errors(&[("watch", "1"), ("sendInitialEvents", "true"), ("resourceVersionMatch", "Exact")]),
            [
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                "resourceVersionMatch: Unsupported value: \"Exact\": supported values: \"NotOlderThan\"",
            ]
        );
        assert_eq!(
            list_option_errors(&[
                ("watch", "1"),
                ("sendInitialEvents", "true"),
                ("resourceVersionMatch", "NotOlderThan")
            ]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn query_values_are_percent_decoded() {
        let pairs = serde_urlencoded_pairs("labelSelector=app%3Dweb%2Ctier+in+%28a%29&limit=5");
        assert_eq!(pairs[0], ("labelSelector".to_string(), "app=web,tier in (a)".to_string()));
        assert_eq!(pairs[1], ("limit".to_string(), "5".to_string()));
    }
}
