//! Server-side printing: `Accept: application/json;as=Table;g=meta.k8s.io;v=v1` turns objects
//! into a `meta.k8s.io/v1` Table (custom resources: their CRD's `additionalPrinterColumns`) (<https://kubernetes.io/docs/reference/using-api/api-concepts/#receiving-resources-as-tables>).

use serde_json::{Value, json};

use crate::registry::machinery;
use crate::resources::ResourceDef;

/// `includeObject` of a Table request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object in rows.
    None,
    /// `PartialObjectMetadata` in each row (the default).
    #[default]
    Metadata,
    /// The full object in each row.
    Object,
}

impl IncludeObject {
    /// Parses the query parameter (unknown values → Metadata).
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

/// The `PartialObjectMetadata` of an object.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// A Table of `objects`. `list_meta` becomes the Table's metadata (resourceVersion, continue).
pub fn to_table(def: &ResourceDef, objects: &[Value], list_meta: Value, include: IncludeObject) -> Value {
    let api_version = def.api_version();
    let now = std::time::SystemTime::now();
    let cells = |o: &Value| match def.custom {
        Some(cr) => cr.table_cells(o, now),
        None => machinery::row_cells(&api_version, def.kind, o, now),
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(o)});
            let conditions = machinery::row_conditions(&api_version, def.kind, o);
            if !conditions.is_empty() {
                row["conditions"] = Value::Array(conditions);
            }
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(o),
                IncludeObject::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": match def.custom {
            Some(cr) => cr.table_columns(),
            None => machinery::column_definitions(&api_version, def.kind),
        },
        "rows": rows,
    })
}
