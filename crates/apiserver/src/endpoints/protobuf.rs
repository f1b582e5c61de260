//! Decoding of `application/vnd.kubernetes.protobuf` request bodies into JSON objects.
//!
//! client-go's typed clients (kubectl's `create configmap|secret|token`, `auth can-i`, …) send
//! protobuf. The body is Kubernetes' envelope (<https://kubernetes.io/docs/reference/using-api/api-concepts/#protobuf-encoding>):
//! the magic `k8s\0` then a `runtime.Unknown` whose `raw` holds the object's message. Field
//! numbers and JSON names come from [`go_json::SCHEMA`]. Responses are always JSON (clients ask
//! for `application/vnd.kubernetes.protobuf,application/json`).
//!
//! A body decodes to the JSON Kubernetes would store for it: Go's encoders write every
//! non-pointer field, so a zero `stdin`, `hostIPC` or `generation` and a zero `Time` are on the
//! wire although Go's JSON leaves them out (`omitempty`, and `null` for a zero time). Those
//! zeros are dropped here for the non-pointer `omitempty` scalars of the Go types
//! ([`go_json`]); a pointer field keeps its explicit `false`/`0`. Otherwise a template sent by a typed client (`kubectl
//! create deployment`) would not equal the same template sent as JSON (`kubectl rollout undo`).

use std::collections::HashMap;

use base64::Engine;
use serde_json::{Map, Value, json};
use skiff_apimachinery::ApiError;

use crate::registry::go_json::{self, SCHEMA};

/// The protobuf media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Whether a decoded non-repeated scalar is a zero Go leaves out of its JSON. Messages the
/// table does not know keep the older rule: only empty strings are left out.
fn zero_omitted(message: &str, tag: u32, v: &Value) -> bool {
    go_json::zero_omitted(message, tag, v).unwrap_or_else(|| v.as_str() == Some(""))
}

fn bad(what: &str) -> ApiError {
    ApiError::bad_request(format!("unable to decode the protobuf body: {what}"))
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ApiError> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or_else(|| bad("truncated varint"))?;
            self.pos += 1;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(bad("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ApiError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or_else(|| bad("truncated field"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next (tag, wire type, payload): varints as their value, fixed as raw bytes.
    fn field(&mut self) -> Result<Option<(u32, Wire<'a>)>, ApiError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = (key >> 3) as u32;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed(self.take(8)?),
            2 => {
                let n = self.varint()? as usize;
                Wire::Bytes(self.take(n)?)
            }
            5 => Wire::Fixed(self.take(4)?),
            w => return Err(bad(&format!("unsupported wire type {w}"))),
        };
        Ok(Some((tag, wire)))
    }
}

enum Wire<'a> {
    Varint(u64),
    Fixed(&'a [u8]),
    Bytes(&'a [u8]),
}

fn scalar(kind: &str, w: &Wire) -> Result<Value, ApiError> {
    Ok(match (kind, w) {
        ("string", Wire::Bytes(b)) => Value::String(String::from_utf8_lossy(b).into_owned()),
        ("bytes", Wire::Bytes(b)) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        ("bool", Wire::Varint(v)) => Value::Bool(*v != 0),
        ("int32", Wire::Varint(v)) => json!(*v as i64 as i32),
        ("int64", Wire::Varint(v)) => json!(*v as i64),
        ("uint32" | "uint64", Wire::Varint(v)) => json!(*v),
        ("double", Wire::Fixed(b)) if b.len() == 8 => {
            json!(f64::from_le_bytes(<[u8; 8]>::try_from(*b).map_err(|_| bad("double"))?))
        }
        ("float", Wire::Fixed(b)) if b.len() == 4 => {
            json!(f32::from_le_bytes(<[u8; 4]>::try_from(*b).map_err(|_| bad("float"))?))
        }
        (k, _) => return Err(bad(&format!("field of kind {k} has the wrong wire type"))),
    })
}

fn micro_time(seconds: i64, nanos: i64) -> String {
    let base = crate::util::rfc3339(seconds);
    format!("{}.{:06}Z", base.trim_end_matches('Z'), nanos / 1000)
}

/// Decodes one message of type `name` into JSON.
fn message(name: &str, bytes: &[u8], depth: usize) -> Result<Value, ApiError> {
    if depth > 64 {
        return Err(bad("nesting too deep"));
    }
    let plain = |bytes: &[u8]| -> Result<HashMap<u32, Value>, ApiError> {
        let mut r = Reader { buf: bytes, pos: 0 };
        let mut out = HashMap::new();
        while let Some((tag, w)) = r.field()? {
            let v = match w {
                Wire::Varint(v) => json!(v as i64),
                Wire::Bytes(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
                Wire::Fixed(_) => Value::Null,
            };
            out.insert(tag, v);
        }
        Ok(out)
    };
    let raw_json = |bytes: &[u8]| -> Result<Value, ApiError> {
        let mut r = Reader { buf: bytes, pos: 0 };
        while let Some((tag, w)) = r.field()? {
            if let (1, Wire::Bytes(b)) = (tag, w) {
                return serde_json::from_slice(b).map_err(|e| bad(&format!("embedded JSON: {e}")));
            }
        }
        Ok(Value::Null)
    };
    match name {
        // A zero time is an empty message: JSON `null`, and the field is left out.
        "apimachinery.pkg.apis.meta.v1.Time" | "apimachinery.pkg.apis.meta.v1.MicroTime" if bytes.is_empty() => {
            return Ok(Value::Null);
        }
        "apimachinery.pkg.apis.meta.v1.Time" => {
            let f = plain(bytes)?;
            return Ok(Value::String(crate::util::rfc3339(f.get(&1).and_then(Value::as_i64).unwrap_or(0))));
        }
        "apimachinery.pkg.apis.meta.v1.MicroTime" => {
            let f = plain(bytes)?;
            let s = f.get(&1).and_then(Value::as_i64).unwrap_or(0);
            let n = f.get(&2).and_then(Value::as_i64).unwrap_or(0);
            return Ok(Value::String(micro_time(s, n)));
        }
        "apimachinery.pkg.apis.meta.v1.Duration" => {
            let f = plain(bytes)?;
            let ns = f.get(&1).and_then(Value::as_i64).unwrap_or(0);
            return Ok(Value::String(format!("{}s", ns as f64 / 1e9)));
        }
        "apimachinery.pkg.api.resource.Quantity" => {
            let f = plain(bytes)?;
            return Ok(f.get(&1).cloned().unwrap_or(Value::String("0".into())));
        }
        "apimachinery.pkg.util.intstr.IntOrString" => {
            let f = plain(bytes)?;
            return Ok(if f.get(&1).and_then(Value::as_i64) == Some(1) {
                f.get(&3).cloned().unwrap_or(Value::String(String::new()))
            } else {
                f.get(&2).cloned().unwrap_or(json!(0))
            });
        }
        "apimachinery.pkg.apis.meta.v1.FieldsV1"
        | "apimachinery.pkg.runtime.RawExtension"
        | "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON" => return raw_json(bytes),
        _ => {}
    }
    let fields = SCHEMA.get(name).ok_or_else(|| bad(&format!("unknown message {name}")))?;
    let mut out = Map::new();
    let mut r = Reader { buf: bytes, pos: 0 };
    while let Some((tag, w)) = r.field()? {
        let Some(f) = fields.get(&tag) else { continue };
        let (json_name, kind, msg, repeated) = (&f.1, f.2.as_str(), f.3.as_str(), f.4);
        if kind == "map" {
            let Wire::Bytes(entry) = w else { return Err(bad("map entry is not length-delimited")) };
            let mut er = Reader { buf: entry, pos: 0 };
            let (mut key, mut val) = (String::new(), Value::Null);
            while let Some((t, ew)) = er.field()? {
                match t {
                    1 => key = scalar("string", &ew)?.as_str().unwrap_or_default().to_string(),
                    2 => {
                        val = if f.5 == "message" {
                            let Wire::Bytes(b) = ew else { return Err(bad("map value")) };
                            message(&f.6, b, depth + 1)?
                        } else {
                            scalar(&f.5, &ew)?
                        }
                    }
                    _ => {}
                }
            }
            if val.is_null() {
                val = match f.5.as_str() {
                    "string" | "bytes" => Value::String(String::new()),
                    "message" => json!({}),
                    _ => json!(0),
                };
            }
            let entry = out.entry(json_name.clone()).or_insert_with(|| Value::Object(Map::new()));
            if let Some(m) = entry.as_object_mut() {
                m.insert(key, val);
            }
            continue;
        }
        let values: Vec<Value> = match (&w, kind) {
            (Wire::Bytes(b), "message") => vec![message(msg, b, depth + 1)?],
            // Packed repeated scalars.
            (Wire::Bytes(b), "int32" | "int64" | "bool" | "uint32" | "uint64") if repeated => {
                let mut pr = Reader { buf: b, pos: 0 };
                let mut vs = Vec::new();
                while pr.pos < b.len() {
                    vs.push(scalar(kind, &Wire::Varint(pr.varint()?))?);
                }
                vs
            }
            _ => vec![scalar(kind, &w)?],
        };
        if repeated {
            let entry = out.entry(json_name.clone()).or_insert_with(|| Value::Array(Vec::new()));
            if let Some(a) = entry.as_array_mut() {
                a.extend(values);
            }
        } else if let Some(v) = values.into_iter().next()
            && !v.is_null()
            && !zero_omitted(name, tag, &v)
        {
            out.insert(json_name.clone(), v);
        }
    }
    Ok(Value::Object(out))
}

/// Decodes a protobuf request body (envelope included) into the object's JSON form.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let rest = body.strip_prefix(b"k8s\0").ok_or_else(|| bad("missing the k8s protobuf envelope"))?;
    let unknown = message("apimachinery.pkg.runtime.Unknown", rest, 0)?;
    let api_version = unknown["typeMeta"]["apiVersion"].as_str().unwrap_or("").to_string();
    let kind = unknown["typeMeta"]["kind"].as_str().unwrap_or("").to_string();
    let raw = unknown["raw"].as_str().unwrap_or("");
    let raw = base64::engine::general_purpose::STANDARD.decode(raw).map_err(|_| bad("raw"))?;
    let name = go_json::message_name(&api_version, &kind);
    let obj = message(&name, &raw, 0)?;
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version.clone()));
    out.insert("kind".into(), Value::String(kind));
    if let Value::Object(m) = obj {
        out.extend(m);
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(tag: u32, b: &[u8], out: &mut Vec<u8>) {
        varint(u64::from(tag << 3 | 2), out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }

    #[test]
    fn a_configmap_envelope_decodes_to_json() {
        // ObjectMeta{name: "c1", namespace: "default"}
        let mut meta = Vec::new();
        bytes_field(1, b"c1", &mut meta);
        bytes_field(3, b"default", &mut meta);
        // ConfigMap{metadata, data: {k: v}}
        let mut entry = Vec::new();
        bytes_field(1, b"k", &mut entry);
        bytes_field(2, b"v", &mut entry);
        let mut cm = Vec::new();
        bytes_field(1, &meta, &mut cm);
        bytes_field(2, &entry, &mut cm);
        let mut type_meta = Vec::new();
        bytes_field(1, b"v1", &mut type_meta);
        bytes_field(2, b"ConfigMap", &mut type_meta);
        let mut unknown = Vec::new();
        bytes_field(1, &type_meta, &mut unknown);
        bytes_field(2, &cm, &mut unknown);
        let mut body = b"k8s\0".to_vec();
        body.extend(unknown);
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1", "namespace": "default"}, "data": {"k": "v"}})
        );
    }

    fn varint_field(tag: u32, v: u64, out: &mut Vec<u8>) {
        varint(u64::from(tag << 3), out);
        varint(v, out);
    }

    fn envelope(api_version: &[u8], kind: &[u8], raw: &[u8]) -> Vec<u8> {
        let mut type_meta = Vec::new();
        bytes_field(1, api_version, &mut type_meta);
        bytes_field(2, kind, &mut type_meta);
        let mut unknown = Vec::new();
        bytes_field(1, &type_meta, &mut unknown);
        bytes_field(2, raw, &mut unknown);
        let mut body = b"k8s\0".to_vec();
        body.extend(unknown);
        body
    }

    #[test]
    fn zero_non_pointer_fields_are_left_out_as_go_json_omits_them_and_pointer_zeros_stay() {
        // What Go's encoder writes for a pod a typed client built: every non-pointer field,
        // zero or not, and an empty message for the zero creationTimestamp.
        let mut meta = Vec::new();
        bytes_field(1, b"p", &mut meta);
        varint_field(7, 0, &mut meta); // generation: int64, omitempty
        bytes_field(8, b"", &mut meta); // creationTimestamp: zero Time
        let mut container = Vec::new();
        bytes_field(1, b"c", &mut container);
        bytes_field(2, b"", &mut container); // image: string, omitempty
        varint_field(16, 0, &mut container); // stdin: bool, omitempty
        let mut spec = Vec::new();
        bytes_field(2, &container, &mut spec);
        varint_field(4, 0, &mut spec); // terminationGracePeriodSeconds: *int64
        varint_field(13, 0, &mut spec); // hostIPC: bool, omitempty
        varint_field(21, 0, &mut spec); // automountServiceAccountToken: *bool
        let mut pod = Vec::new();
        bytes_field(1, &meta, &mut pod);
        bytes_field(2, &spec, &mut pod);
        let v = decode(&envelope(b"v1", b"Pod", &pod)).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [{"name": "c"}],
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": false,
                },
            })
        );
    }

    #[test]
    fn garbage_is_a_bad_request() {
        assert_eq!(decode(b"nope").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code, 400);
    }
}
