//! Content negotiation (k8s.io/apiserver `pkg/endpoints/handlers/negotiation`): the output a
//! client accepts (`Accept`: JSON, a `meta.k8s.io/v1` Table, `PartialObjectMetadata`) and the
//! decoding of request bodies by `Content-Type` (JSON, YAML, protobuf).

use std::collections::HashMap;

use axum::http::{HeaderMap, header};
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;

use crate::endpoints::request::Query;
use crate::endpoints::table::{IncludeObject, partial_metadata, to_table};
use crate::resources::ResourceDef;
use crate::util::meta_str;

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

pub(crate) fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Decodes an object body (JSON or YAML). Returns the value and, for JSON, the raw bytes.
pub(crate) fn decode_object(headers: &HeaderMap, body: &[u8]) -> Result<(Value, bool), ApiError> {
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

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

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
