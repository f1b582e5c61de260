//! The HTTP layer: parses a Kubernetes API request (path → [`RequestInfo`], query, body,
//! content negotiation), dispatches it to [`crate::registry::store`] or [`crate::endpoints::watch`], and renders
//! the answer or a `metav1.Status`.
//!
//! Paths follow <https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris>:
//! `/api/v1/namespaces/{ns}/{resource}/{name}/{subresource}` and
//! `/apis/{group}/{version}/...`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::Response;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::AppState;
use crate::auth::{Attributes, PeerIdentity, RequestUser, is_public_path};
use crate::endpoints::discovery;
use crate::endpoints::table::{IncludeObject, partial_metadata, to_table};
use crate::registry::machinery::Selectors;
use crate::registry::store::{DeleteOptions, FieldValidation, ListOptions, WriteOptions, parse_rv};
use crate::resources::ResourceDef;
use crate::util::{meta_str, set_in};

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
}

/// How the client wants objects rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Plain JSON objects and lists.
    Json,
    /// `meta.k8s.io/v1` Table.
    Table(IncludeObject),
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata,
}

/// Query parameters, decoded.
pub type Query = HashMap<String, String>;

fn parse_query(uri: &axum::http::Uri) -> Result<Query, ApiError> {
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

fn truthy(q: &Query, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("1" | "true" | "True"))
}

/// A JSON response.
pub fn json_response(code: StatusCode, body: &Value) -> Response {
    json_bytes_response(code, serde_json::to_vec(body).unwrap_or_default())
}

/// A response of JSON already serialized.
fn json_bytes_response(code: StatusCode, bytes: Vec<u8>) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(bytes))
        .unwrap_or_default()
}

/// A `metav1.Status` failure response.
pub fn error_response(e: &ApiError) -> Response {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(code, &e.to_status());
    if let Some(s) = e.details.as_ref().and_then(|d| d.retry_after_seconds)
        && let Ok(v) = HeaderValue::from_str(&s.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn add_warnings(resp: &mut Response, warnings: &[String]) {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append("Warning", v);
        }
    }
}

fn success_status(def: &ResourceDef, name: &str, uid: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": name, "group": def.group, "kind": def.resource, "uid": uid},
    })
}

/// Parses `Accept` into the output the client wants; 406 when nothing offered is served.
pub fn negotiate(headers: &HeaderMap, q: &Query) -> Result<Output, ApiError> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.trim().is_empty() {
        return Ok(Output::Json);
    }
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let mime = parts.next().unwrap_or("").to_ascii_lowercase();
        let params: HashMap<String, String> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        if !matches!(mime.as_str(), "application/json" | "*/*" | "application/*") {
            continue;
        }
        match params.get("as").map(String::as_str) {
            None => return Ok(Output::Json),
            Some("Table") if params.get("g").map(String::as_str) == Some("meta.k8s.io") => {
                return Ok(Output::Table(IncludeObject::parse(q.get("includeObject").map(String::as_str))));
            }
            Some("PartialObjectMetadata" | "PartialObjectMetadataList")
                if params.get("g").map(String::as_str) == Some("meta.k8s.io") =>
            {
                return Ok(Output::Metadata);
            }
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable(
        "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io",
    ))
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
    if rest.len() > 3 {
        return Err(not_found());
    }
    if !subresource.is_empty() && def.subresource(&subresource).is_none() {
        return Err(not_found());
    }
    let watch = truthy(q, "watch");
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
    Ok(Some(RequestInfo { verb, def, namespace, name, subresource }))
}

/// Reads the body up to [`MAX_BODY_BYTES`]; 413 beyond (what is left unread is dealt with by
/// [`crate::server::unread_body`]).
async fn read_body(body: Body) -> Result<bytes::Bytes, ApiError> {
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

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Decodes an object body (JSON or YAML). Returns the value and, for JSON, the raw bytes.
fn decode_object(headers: &HeaderMap, body: &[u8]) -> Result<(Value, bool), ApiError> {
    match content_type(headers).as_str() {
        "" | "application/json" | "*/*" => serde_json::from_slice(body)
            .map(|v| (v, true))
            .map_err(|e| ApiError::bad_request(format!("json parse error: {e}"))),
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("yaml body is not UTF-8"))?;
            serde_saphyr::from_str::<Value>(text)
                .map(|v| (v, false))
                .map_err(|e| ApiError::bad_request(format!("yaml parse error: {e}")))
        }
        crate::endpoints::protobuf::MEDIA_TYPE => crate::endpoints::protobuf::decode(body).map(|v| (v, false)),
        other => Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format ({other}) - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"
        ))),
    }
}

fn write_options(q: &Query, user: &Option<RequestUser>, headers: &HeaderMap) -> Result<WriteOptions, ApiError> {
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

fn dry_run(q: &Query) -> Result<bool, ApiError> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => {
            Err(ApiError::bad_request(format!("Invalid dry run value: {other:?}, only \"All\" is supported")))
        }
    }
}

/// Renders one object for the client's [`Output`].
pub fn render_object(def: &ResourceDef, obj: Value, out: Output) -> Value {
    match out {
        Output::Json => obj,
        Output::Metadata => partial_metadata(&obj),
        Output::Table(inc) => {
            let rv = meta_str(&obj, "resourceVersion").to_string();
            to_table(def, &[obj], json!({"resourceVersion": rv}), inc)
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

/// The entry point for every request: authentication, routing, metrics.
pub async fn handle(state: Arc<AppState>, req: Request<Body>) -> Response {
    let start = Instant::now();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let peer = parts.extensions.get::<PeerIdentity>().cloned().unwrap_or_default();
    let user = match state.authenticator.authenticate_request(&parts, &peer) {
        Ok(u) => u,
        Err(e) => return error_response(&e),
    };
    if user.is_none() && !is_public_path(&path) {
        state.metrics.observe_request("", "", "", "", 401, None);
        return error_response(&ApiError::unauthorized());
    }
    let q = match parse_query(&parts.uri) {
        Ok(q) => q,
        Err(e) => return error_response(&e),
    };
    let info = match parse_resource_path(&state, &parts.method, &path, &q) {
        Ok(i) => i,
        Err(e) => return error_response(&e),
    };
    let Some(info) = info else {
        if let Some(user) = &user {
            let attrs = Attributes {
                verb: parts.method.as_str().to_ascii_lowercase(),
                group: String::new(),
                version: String::new(),
                resource: String::new(),
                subresource: String::new(),
                namespace: String::new(),
                name: String::new(),
                path: path.clone(),
                resource_request: false,
                field_selector: String::new(),
            };
            if let Err(e) = state.authorizer.authorize(user, &attrs) {
                return error_response(&e);
            }
        }
        let resp = crate::endpoints::nonresource::handle(&state, &parts, &path, &q).await;
        return resp;
    };
    if let Some(user) = &user {
        let field_selector = q.get("fieldSelector").cloned().unwrap_or_default();
        let mut name = info.name.clone();
        if name.is_empty() && matches!(info.verb, "list" | "watch") {
            // As kube-apiserver's RequestInfo: a list or watch of one object by
            // `fieldSelector=metadata.name=x` is authorized as a request on "x".
            name = single_name_selector(&field_selector).unwrap_or_default();
        }
        let attrs = Attributes {
            verb: info.verb.to_string(),
            group: info.def.group.to_string(),
            version: info.def.version.to_string(),
            resource: info.def.resource.to_string(),
            subresource: info.subresource.clone(),
            namespace: info.namespace.clone(),
            name,
            path: path.clone(),
            resource_request: true,
            field_selector,
        };
        if let Err(e) = state.authorizer.authorize(user, &attrs) {
            return error_response(&e);
        }
    }
    let verb = info.verb;
    let resp = match dispatch(&state, &parts, body, &q, &info, user).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    let metric_verb = match verb {
        "get" => "GET",
        "list" => "LIST",
        "watch" => "WATCH",
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "delete" => "DELETE",
        _ => "DELETECOLLECTION",
    };
    let secs = if verb == "watch" { None } else { Some(start.elapsed().as_secs_f64()) };
    state.metrics.observe_request(
        metric_verb,
        info.def.group,
        info.def.resource,
        &info.subresource,
        resp.status().as_u16(),
        secs,
    );
    resp
}

async fn dispatch(
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
        ("get" | "create", "exec" | "attach" | "portforward") => {
            crate::endpoints::streams::connect(state, parts, ns, name, sub, q).await
        }
        ("get", "") | ("get", "status") => {
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
        ("update", "" | "status" | "finalize") => {
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

/// `DeleteOptions` from the body (if any) and query parameters.
fn delete_options(
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

/// List options from the query.
pub fn list_options(def: &ResourceDef, q: &Query) -> Result<ListOptions, ApiError> {
    let watch = truthy(q, "watch");
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
    if let Some(m) = &rv_match {
        // A watch-list may leave resourceVersion empty ("the most recent"); a list may not.
        if rv.is_none() && !watch {
            return Err(ApiError::bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided"));
        }
        if m != "NotOlderThan" && m != "Exact" {
            return Err(ApiError::bad_request(format!(
                "resourceVersionMatch: Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
            )));
        }
        if m == "Exact" && rv.as_deref() == Some("0") {
            return Err(ApiError::bad_request("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""));
        }
    }
    let continue_token = q.get("continue").filter(|s| !s.is_empty()).cloned();
    if continue_token.is_some() && rv.as_deref().is_some_and(|r| r != "0") {
        return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
    }
    Ok(ListOptions { selectors, limit, continue_token, resource_version: rv, resource_version_match: rv_match })
}

/// A `<Kind>List` body.
pub fn list_body(def: &ResourceDef, items: Vec<Value>, revision: i64, continue_token: Option<String>) -> Value {
    let mut meta = json!({"resourceVersion": revision.to_string()});
    if let Some(c) = continue_token {
        meta["continue"] = json!(c);
    }
    json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(), "metadata": meta, "items": items})
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
    // resourceVersion=0 ("any") and NotOlderThan are served from the watch cache; unset (the
    // most recent, consistent) and Exact from the store.
    let from_cache = opts.continue_token.is_none()
        && matches!(
            (opts.resource_version.as_deref(), opts.resource_version_match.as_deref()),
            (Some("0"), _) | (Some(_), Some("NotOlderThan")) | (Some(_), None)
        );
    let listed = if from_cache {
        let rv = parse_rv(opts.resource_version.as_deref().unwrap_or("0"))?;
        let cache = state.cache(def)?;
        if !cache.wait_for(rv, std::time::Duration::from_secs(3)).await {
            let current = state.objects.store.current_revision().await.unwrap_or(0);
            let mut e = ApiError::new(504, "Timeout", format!("Too large resource version: {rv}, current: {current}"));
            e.details =
                Some(skiff_apimachinery::status::Details { retry_after_seconds: Some(1), ..Default::default() });
            return Err(e);
        }
        let snap = cache.snapshot(&def.namespace_prefix(ns_opt));
        let items = snap
            .objects
            .iter()
            .filter(|o| opts.selectors.matches(def, o))
            .map(|o| crate::registry::convert::to_external(def, (**o).clone()))
            .collect();
        crate::registry::store::Listed { items, revision: snap.revision, continue_token: None }
    } else {
        let revision = match (opts.resource_version.as_deref(), opts.resource_version_match.as_deref()) {
            (Some(rv), Some("Exact")) => parse_rv(rv)?,
            _ => 0,
        };
        state.objects.list_from_store(def, ns_opt, &opts, revision).await?
    };
    let body = match out {
        Output::Json => list_body(def, listed.items, listed.revision, listed.continue_token),
        Output::Metadata => {
            let mut l = list_body(
                def,
                listed.items.iter().map(partial_metadata).collect(),
                listed.revision,
                listed.continue_token,
            );
            set_in(&mut l, &["kind"], json!("PartialObjectMetadataList"));
            set_in(&mut l, &["apiVersion"], json!("meta.k8s.io/v1"));
            l
        }
        Output::Table(inc) => {
            let mut meta = json!({"resourceVersion": listed.revision.to_string()});
            if let Some(c) = listed.continue_token {
                meta["continue"] = json!(c);
            }
            to_table(def, &listed.items, meta, inc)
        }
    };
    Ok(json_response(StatusCode::OK, &body))
}

/// `/api` and `/apis` discovery, plain or aggregated per `Accept`.
pub fn discovery_response(state: &AppState, headers: &HeaderMap, core: bool) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    // The first media range the server can produce wins (client-go lists v2, v2beta1, then
    // plain JSON).
    let mut wants_aggregated = false;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let mime = parts.next().unwrap_or("");
        let params: HashMap<&str, &str> = parts.filter_map(|p| p.split_once('=')).collect();
        if mime != "application/json" && mime != "*/*" {
            continue;
        }
        match (params.get("as"), params.get("g"), params.get("v")) {
            (Some(&"APIGroupDiscoveryList"), Some(&"apidiscovery.k8s.io"), Some(&"v2")) => {
                wants_aggregated = true;
                break;
            }
            (None, _, _) => break,
            _ => continue,
        }
    }
    if wants_aggregated {
        let body = discovery::aggregated(&state.registry, core);
        let mut resp = json_response(StatusCode::OK, &body);
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(discovery::AGGREGATED_V2));
        resp.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
        return resp;
    }
    let body =
        if core { discovery::api_versions(&state.server_address) } else { discovery::api_group_list(&state.registry) };
    let mut resp = json_response(StatusCode::OK, &body);
    resp.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded() {
        let pairs = serde_urlencoded_pairs("labelSelector=app%3Dweb%2Ctier+in+%28a%29&limit=5");
        assert_eq!(pairs[0], ("labelSelector".to_string(), "app=web,tier in (a)".to_string()));
        assert_eq!(pairs[1], ("limit".to_string(), "5".to_string()));
    }

    #[test]
    fn table_is_chosen_when_kubectl_asks_for_it() {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"));
        assert_eq!(negotiate(&h, &Query::new()).unwrap(), Output::Table(IncludeObject::Metadata));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/vnd.kubernetes.protobuf"));
        assert_eq!(negotiate(&h, &Query::new()).unwrap_err().code, 406);
        h.insert(header::ACCEPT, HeaderValue::from_static("application/vnd.kubernetes.protobuf, */*"));
        assert_eq!(negotiate(&h, &Query::new()).unwrap(), Output::Json);
    }
}
