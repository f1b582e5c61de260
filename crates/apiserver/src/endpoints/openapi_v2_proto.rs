//! The protobuf encoding of OpenAPI v2 that kube-apiserver serves at `/openapi/v2` for
//! `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`: the `openapi.v2.Document`
//! message of gnostic (`github.com/google/gnostic`, `openapiv2/OpenAPIv2.proto`), which kubectl
//! decodes for `kubectl explain`, client-side apply's strategic-merge-patch metadata and
//! validation, and the `fieldValidation` query-parameter check.
//!
//! The messages below carry the published field numbers; a field skiff's document never has
//! (OAuth2 security schemes, response headers and examples, `google.protobuf.Any` values) is left
//! out, which decoders treat as unset. [`encode`] converts a Swagger 2.0 JSON document the way
//! gnostic's compiler does: maps become ordered `Named*` lists, every `x-` key becomes a
//! `NamedAny` whose `yaml` holds the value as YAML (kubectl parses vendor extensions from that
//! text), and parameters are split by `in` into body, query, form-data, path and header kinds.

// The messages mirror gnostic's .proto: variant names and oneof layouts are its own, and
// prost encodes a oneof's message inline, so the lints about them do not apply.
#![allow(clippy::large_enum_variant, clippy::enum_variant_names)]

use prost::Message;
use serde_json::{Map, Value};

/// `openapi.v2.Document`.
#[derive(Clone, PartialEq, Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(string, tag = "3")]
    pub host: String,
    #[prost(string, tag = "4")]
    pub base_path: String,
    #[prost(string, repeated, tag = "5")]
    pub schemes: Vec<String>,
    #[prost(string, repeated, tag = "6")]
    pub consumes: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub produces: Vec<String>,
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
    #[prost(message, optional, tag = "10")]
    pub parameters: Option<ParameterDefinitions>,
    #[prost(message, optional, tag = "11")]
    pub responses: Option<ResponseDefinitions>,
    #[prost(message, repeated, tag = "12")]
    pub security: Vec<SecurityRequirement>,
    #[prost(message, optional, tag = "13")]
    pub security_definitions: Option<SecurityDefinitions>,
    #[prost(message, repeated, tag = "14")]
    pub tags: Vec<Tag>,
    #[prost(message, optional, tag = "15")]
    pub external_docs: Option<ExternalDocs>,
    #[prost(message, repeated, tag = "16")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Info` (contact and license are not carried).
#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub terms_of_service: String,
    #[prost(message, repeated, tag = "7")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Any`: a JSON value as YAML text (the `google.protobuf.Any` form is not used).
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "2")]
    pub yaml: String,
}

/// `openapi.v2.NamedAny`: one vendor extension (or one entry of a map of values).
#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

/// `openapi.v2.ExternalDocs`.
#[derive(Clone, PartialEq, Message)]
pub struct ExternalDocs {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(string, tag = "2")]
    pub url: String,
    #[prost(message, repeated, tag = "3")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Tag`.
#[derive(Clone, PartialEq, Message)]
pub struct Tag {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(message, optional, tag = "3")]
    pub external_docs: Option<ExternalDocs>,
    #[prost(message, repeated, tag = "4")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Paths`.
#[derive(Clone, PartialEq, Message)]
pub struct Paths {
    #[prost(message, repeated, tag = "1")]
    pub vendor_extension: Vec<NamedAny>,
    #[prost(message, repeated, tag = "2")]
    pub path: Vec<NamedPathItem>,
}

/// `openapi.v2.NamedPathItem`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedPathItem {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<PathItem>,
}

/// `openapi.v2.PathItem`.
#[derive(Clone, PartialEq, Message)]
pub struct PathItem {
    #[prost(string, tag = "1")]
    pub xref: String,
    #[prost(message, optional, tag = "2")]
    pub get: Option<Operation>,
    #[prost(message, optional, tag = "3")]
    pub put: Option<Operation>,
    #[prost(message, optional, tag = "4")]
    pub post: Option<Operation>,
    #[prost(message, optional, tag = "5")]
    pub delete: Option<Operation>,
    #[prost(message, optional, tag = "6")]
    pub options: Option<Operation>,
    #[prost(message, optional, tag = "7")]
    pub head: Option<Operation>,
    #[prost(message, optional, tag = "8")]
    pub patch: Option<Operation>,
    #[prost(message, repeated, tag = "9")]
    pub parameters: Vec<ParametersItem>,
    #[prost(message, repeated, tag = "10")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Operation`.
#[derive(Clone, PartialEq, Message)]
pub struct Operation {
    #[prost(string, repeated, tag = "1")]
    pub tags: Vec<String>,
    #[prost(string, tag = "2")]
    pub summary: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(message, optional, tag = "4")]
    pub external_docs: Option<ExternalDocs>,
    #[prost(string, tag = "5")]
    pub operation_id: String,
    #[prost(string, repeated, tag = "6")]
    pub produces: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub consumes: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    pub parameters: Vec<ParametersItem>,
    #[prost(message, optional, tag = "9")]
    pub responses: Option<Responses>,
    #[prost(string, repeated, tag = "10")]
    pub schemes: Vec<String>,
    #[prost(bool, tag = "11")]
    pub deprecated: bool,
    #[prost(message, repeated, tag = "12")]
    pub security: Vec<SecurityRequirement>,
    #[prost(message, repeated, tag = "13")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.JsonReference`.
#[derive(Clone, PartialEq, Message)]
pub struct JsonReference {
    #[prost(string, tag = "1")]
    pub xref: String,
    #[prost(string, tag = "2")]
    pub description: String,
}

/// `openapi.v2.ParametersItem`: a parameter or a reference to one.
#[derive(Clone, PartialEq, Message)]
pub struct ParametersItem {
    #[prost(oneof = "ParametersItemOneof", tags = "1, 2")]
    pub oneof: Option<ParametersItemOneof>,
}

/// The `oneof` of [`ParametersItem`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ParametersItemOneof {
    #[prost(message, tag = "1")]
    Parameter(Parameter),
    #[prost(message, tag = "2")]
    JsonReference(JsonReference),
}

/// `openapi.v2.Parameter`.
#[derive(Clone, PartialEq, Message)]
pub struct Parameter {
    #[prost(oneof = "ParameterOneof", tags = "1, 2")]
    pub oneof: Option<ParameterOneof>,
}

/// The `oneof` of [`Parameter`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ParameterOneof {
    #[prost(message, tag = "1")]
    BodyParameter(BodyParameter),
    #[prost(message, tag = "2")]
    NonBodyParameter(NonBodyParameter),
}

/// `openapi.v2.BodyParameter`.
#[derive(Clone, PartialEq, Message)]
pub struct BodyParameter {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub r#in: String,
    #[prost(bool, tag = "4")]
    pub required: bool,
    #[prost(message, optional, tag = "5")]
    pub schema: Option<Schema>,
    #[prost(message, repeated, tag = "6")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.NonBodyParameter`.
#[derive(Clone, PartialEq, Message)]
pub struct NonBodyParameter {
    #[prost(oneof = "NonBodyParameterOneof", tags = "1, 2, 3, 4")]
    pub oneof: Option<NonBodyParameterOneof>,
}

/// The `oneof` of [`NonBodyParameter`]. Query and form-data parameters share one field layout,
/// and so do header and path parameters.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum NonBodyParameterOneof {
    #[prost(message, tag = "1")]
    HeaderParameterSubSchema(PathParameterSubSchema),
    #[prost(message, tag = "2")]
    FormDataParameterSubSchema(QueryParameterSubSchema),
    #[prost(message, tag = "3")]
    QueryParameterSubSchema(QueryParameterSubSchema),
    #[prost(message, tag = "4")]
    PathParameterSubSchema(PathParameterSubSchema),
}

/// `openapi.v2.QueryParameterSubSchema` (also the layout of `FormDataParameterSubSchema`).
#[derive(Clone, PartialEq, Message)]
pub struct QueryParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(bool, tag = "5")]
    pub allow_empty_value: bool,
    #[prost(string, tag = "6")]
    pub r#type: String,
    #[prost(string, tag = "7")]
    pub format: String,
    #[prost(message, optional, tag = "8")]
    pub items: Option<PrimitivesItems>,
    #[prost(string, tag = "9")]
    pub collection_format: String,
    #[prost(message, optional, tag = "10")]
    pub default: Option<Any>,
    #[prost(double, tag = "11")]
    pub maximum: f64,
    #[prost(bool, tag = "12")]
    pub exclusive_maximum: bool,
    #[prost(double, tag = "13")]
    pub minimum: f64,
    #[prost(bool, tag = "14")]
    pub exclusive_minimum: bool,
    #[prost(int64, tag = "15")]
    pub max_length: i64,
    #[prost(int64, tag = "16")]
    pub min_length: i64,
    #[prost(string, tag = "17")]
    pub pattern: String,
    #[prost(int64, tag = "18")]
    pub max_items: i64,
    #[prost(int64, tag = "19")]
    pub min_items: i64,
    #[prost(bool, tag = "20")]
    pub unique_items: bool,
    #[prost(message, repeated, tag = "21")]
    pub r#enum: Vec<Any>,
    #[prost(double, tag = "22")]
    pub multiple_of: f64,
    #[prost(message, repeated, tag = "23")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.PathParameterSubSchema` (also the layout of `HeaderParameterSubSchema`).
#[derive(Clone, PartialEq, Message)]
pub struct PathParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "5")]
    pub r#type: String,
    #[prost(string, tag = "6")]
    pub format: String,
    #[prost(message, optional, tag = "7")]
    pub items: Option<PrimitivesItems>,
    #[prost(string, tag = "8")]
    pub collection_format: String,
    #[prost(message, optional, tag = "9")]
    pub default: Option<Any>,
    #[prost(double, tag = "10")]
    pub maximum: f64,
    #[prost(bool, tag = "11")]
    pub exclusive_maximum: bool,
    #[prost(double, tag = "12")]
    pub minimum: f64,
    #[prost(bool, tag = "13")]
    pub exclusive_minimum: bool,
    #[prost(int64, tag = "14")]
    pub max_length: i64,
    #[prost(int64, tag = "15")]
    pub min_length: i64,
    #[prost(string, tag = "16")]
    pub pattern: String,
    #[prost(int64, tag = "17")]
    pub max_items: i64,
    #[prost(int64, tag = "18")]
    pub min_items: i64,
    #[prost(bool, tag = "19")]
    pub unique_items: bool,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    #[prost(double, tag = "21")]
    pub multiple_of: f64,
    #[prost(message, repeated, tag = "22")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.PrimitivesItems`: the `items` of an array-typed non-body parameter.
#[derive(Clone, PartialEq, Message)]
pub struct PrimitivesItems {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(message, optional, boxed, tag = "3")]
    pub items: Option<Box<PrimitivesItems>>,
    #[prost(string, tag = "4")]
    pub collection_format: String,
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    #[prost(double, tag = "6")]
    pub maximum: f64,
    #[prost(bool, tag = "7")]
    pub exclusive_maximum: bool,
    #[prost(double, tag = "8")]
    pub minimum: f64,
    #[prost(bool, tag = "9")]
    pub exclusive_minimum: bool,
    #[prost(int64, tag = "10")]
    pub max_length: i64,
    #[prost(int64, tag = "11")]
    pub min_length: i64,
    #[prost(string, tag = "12")]
    pub pattern: String,
    #[prost(int64, tag = "13")]
    pub max_items: i64,
    #[prost(int64, tag = "14")]
    pub min_items: i64,
    #[prost(bool, tag = "15")]
    pub unique_items: bool,
    #[prost(message, repeated, tag = "16")]
    pub r#enum: Vec<Any>,
    #[prost(double, tag = "17")]
    pub multiple_of: f64,
    #[prost(message, repeated, tag = "18")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Responses`.
#[derive(Clone, PartialEq, Message)]
pub struct Responses {
    #[prost(message, repeated, tag = "1")]
    pub response_code: Vec<NamedResponseValue>,
    #[prost(message, repeated, tag = "2")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.NamedResponseValue`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedResponseValue {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<ResponseValue>,
}

/// `openapi.v2.ResponseValue`.
#[derive(Clone, PartialEq, Message)]
pub struct ResponseValue {
    #[prost(oneof = "ResponseValueOneof", tags = "1, 2")]
    pub oneof: Option<ResponseValueOneof>,
}

/// The `oneof` of [`ResponseValue`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ResponseValueOneof {
    #[prost(message, tag = "1")]
    Response(Response),
    #[prost(message, tag = "2")]
    JsonReference(JsonReference),
}

/// `openapi.v2.Response` (headers and examples are not carried).
#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(message, optional, tag = "2")]
    pub schema: Option<SchemaItem>,
    #[prost(message, repeated, tag = "5")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.SchemaItem` (only its `schema` case; `file_schema` is not produced).
#[derive(Clone, PartialEq, Message)]
pub struct SchemaItem {
    #[prost(message, optional, tag = "1")]
    pub schema: Option<Schema>,
}

/// `openapi.v2.ParameterDefinitions`.
#[derive(Clone, PartialEq, Message)]
pub struct ParameterDefinitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedParameter>,
}

/// `openapi.v2.NamedParameter`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedParameter {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Parameter>,
}

/// `openapi.v2.ResponseDefinitions`.
#[derive(Clone, PartialEq, Message)]
pub struct ResponseDefinitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedResponse>,
}

/// `openapi.v2.NamedResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedResponse {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Response>,
}

/// `openapi.v2.Definitions`.
#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.NamedSchema`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

/// `openapi.v2.Properties`.
#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.TypeItem`.
#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

/// `openapi.v2.ItemsItem`.
#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

/// `openapi.v2.AdditionalPropertiesItem`.
#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    #[prost(oneof = "AdditionalPropertiesOneof", tags = "1, 2")]
    pub oneof: Option<AdditionalPropertiesOneof>,
}

/// The `oneof` of [`AdditionalPropertiesItem`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AdditionalPropertiesOneof {
    #[prost(message, tag = "1")]
    Schema(Box<Schema>),
    #[prost(bool, tag = "2")]
    Boolean(bool),
}

/// `openapi.v2.Xml`.
#[derive(Clone, PartialEq, Message)]
pub struct Xml {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(string, tag = "3")]
    pub prefix: String,
    #[prost(bool, tag = "4")]
    pub attribute: bool,
    #[prost(bool, tag = "5")]
    pub wrapped: bool,
    #[prost(message, repeated, tag = "6")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.Schema`.
#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub xref: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "3")]
    pub title: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    #[prost(double, tag = "6")]
    pub multiple_of: f64,
    #[prost(double, tag = "7")]
    pub maximum: f64,
    #[prost(bool, tag = "8")]
    pub exclusive_maximum: bool,
    #[prost(double, tag = "9")]
    pub minimum: f64,
    #[prost(bool, tag = "10")]
    pub exclusive_minimum: bool,
    #[prost(int64, tag = "11")]
    pub max_length: i64,
    #[prost(int64, tag = "12")]
    pub min_length: i64,
    #[prost(string, tag = "13")]
    pub pattern: String,
    #[prost(int64, tag = "14")]
    pub max_items: i64,
    #[prost(int64, tag = "15")]
    pub min_items: i64,
    #[prost(bool, tag = "16")]
    pub unique_items: bool,
    #[prost(int64, tag = "17")]
    pub max_properties: i64,
    #[prost(int64, tag = "18")]
    pub min_properties: i64,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    #[prost(message, optional, tag = "21")]
    pub additional_properties: Option<AdditionalPropertiesItem>,
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    #[prost(string, tag = "26")]
    pub discriminator: String,
    #[prost(bool, tag = "27")]
    pub read_only: bool,
    #[prost(message, optional, tag = "28")]
    pub xml: Option<Xml>,
    #[prost(message, optional, tag = "29")]
    pub external_docs: Option<ExternalDocs>,
    #[prost(message, optional, tag = "30")]
    pub example: Option<Any>,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.SecurityRequirement`.
#[derive(Clone, PartialEq, Message)]
pub struct SecurityRequirement {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedStringArray>,
}

/// `openapi.v2.NamedStringArray`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedStringArray {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<StringArray>,
}

/// `openapi.v2.StringArray`.
#[derive(Clone, PartialEq, Message)]
pub struct StringArray {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

/// `openapi.v2.SecurityDefinitions`.
#[derive(Clone, PartialEq, Message)]
pub struct SecurityDefinitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSecurityDefinitionsItem>,
}

/// `openapi.v2.NamedSecurityDefinitionsItem`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedSecurityDefinitionsItem {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<SecurityDefinitionsItem>,
}

/// `openapi.v2.SecurityDefinitionsItem` (basic and API-key schemes; OAuth2 is not produced).
#[derive(Clone, PartialEq, Message)]
pub struct SecurityDefinitionsItem {
    #[prost(oneof = "SecurityDefinitionsOneof", tags = "1, 2")]
    pub oneof: Option<SecurityDefinitionsOneof>,
}

/// The `oneof` of [`SecurityDefinitionsItem`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum SecurityDefinitionsOneof {
    #[prost(message, tag = "1")]
    BasicAuthenticationSecurity(BasicAuthenticationSecurity),
    #[prost(message, tag = "2")]
    ApiKeySecurity(ApiKeySecurity),
}

/// `openapi.v2.BasicAuthenticationSecurity`.
#[derive(Clone, PartialEq, Message)]
pub struct BasicAuthenticationSecurity {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(message, repeated, tag = "3")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.ApiKeySecurity`.
#[derive(Clone, PartialEq, Message)]
pub struct ApiKeySecurity {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub r#in: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(message, repeated, tag = "5")]
    pub vendor_extension: Vec<NamedAny>,
}

/// The protobuf encoding of a Swagger 2.0 JSON document (`doc` is not validated: a value of the
/// wrong JSON type reads as unset, as gnostic's compiler would reject the document instead).
pub fn encode(doc: &Value) -> Vec<u8> {
    document(doc).encode_to_vec()
}

/// Decodes a served document (for tests).
#[cfg(test)]
pub fn decode(bytes: &[u8]) -> Result<Document, prost::DecodeError> {
    Document::decode(bytes)
}

static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

fn obj(v: &Value) -> &Map<String, Value> {
    v.as_object().unwrap_or(&EMPTY)
}

fn string(m: &Map<String, Value>, key: &str) -> String {
    m.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn strings(m: &Map<String, Value>, key: &str) -> Vec<String> {
    match m.get(key) {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

fn boolean(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn number(m: &Map<String, Value>, key: &str) -> f64 {
    m.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn integer(m: &Map<String, Value>, key: &str) -> i64 {
    m.get(key).and_then(Value::as_i64).unwrap_or(0)
}

/// A JSON value as gnostic's `Any`: YAML text (JSON itself when the YAML writer fails, which is
/// also valid YAML).
fn any(v: &Value) -> Any {
    let yaml = serde_saphyr::to_string(v).unwrap_or_else(|_| v.to_string());
    Any { yaml }
}

fn anys(m: &Map<String, Value>, key: &str) -> Vec<Any> {
    m.get(key).and_then(Value::as_array).map(|a| a.iter().map(any).collect()).unwrap_or_default()
}

/// Every `x-` key of an object, in order.
fn extensions(m: &Map<String, Value>) -> Vec<NamedAny> {
    m.iter()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny { name: k.clone(), value: Some(any(v)) })
        .collect()
}

fn named<T>(v: Option<&Value>, f: impl Fn(&str, &Value) -> T) -> Vec<T> {
    v.and_then(Value::as_object).map(|m| m.iter().map(|(k, v)| f(k, v)).collect()).unwrap_or_default()
}

fn document(v: &Value) -> Document {
    let m = obj(v);
    Document {
        swagger: string(m, "swagger"),
        info: m.get("info").map(|i| {
            let i = obj(i);
            Info {
                title: string(i, "title"),
                version: string(i, "version"),
                description: string(i, "description"),
                terms_of_service: string(i, "termsOfService"),
                vendor_extension: extensions(i),
            }
        }),
        host: string(m, "host"),
        base_path: string(m, "basePath"),
        schemes: strings(m, "schemes"),
        consumes: strings(m, "consumes"),
        produces: strings(m, "produces"),
        paths: m.get("paths").map(|p| Paths {
            vendor_extension: extensions(obj(p)),
            path: obj(p)
                .iter()
                .filter(|(k, _)| k.starts_with('/'))
                .map(|(k, v)| NamedPathItem { name: k.clone(), value: Some(path_item(v)) })
                .collect(),
        }),
        definitions: m.get("definitions").map(|d| Definitions {
            additional_properties: named(Some(d), |k, v| NamedSchema { name: k.to_string(), value: Some(schema(v)) }),
        }),
        parameters: m.get("parameters").map(|p| ParameterDefinitions {
            additional_properties: named(Some(p), |k, v| NamedParameter {
                name: k.to_string(),
                value: match parameters_item(v).oneof {
                    Some(ParametersItemOneof::Parameter(p)) => Some(p),
                    _ => None,
                },
            }),
        }),
        responses: m.get("responses").map(|r| ResponseDefinitions {
            additional_properties: named(Some(r), |k, v| NamedResponse {
                name: k.to_string(),
                value: Some(response(v)),
            }),
        }),
        security: security(m),
        security_definitions: m.get("securityDefinitions").map(|s| SecurityDefinitions {
            additional_properties: named(Some(s), |k, v| {
                let d = obj(v);
                let oneof = if string(d, "type") == "basic" {
                    SecurityDefinitionsOneof::BasicAuthenticationSecurity(BasicAuthenticationSecurity {
                        r#type: string(d, "type"),
                        description: string(d, "description"),
                        vendor_extension: extensions(d),
                    })
                } else {
                    SecurityDefinitionsOneof::ApiKeySecurity(ApiKeySecurity {
                        r#type: string(d, "type"),
                        name: string(d, "name"),
                        r#in: string(d, "in"),
                        description: string(d, "description"),
                        vendor_extension: extensions(d),
                    })
                };
                NamedSecurityDefinitionsItem {
                    name: k.to_string(),
                    value: Some(SecurityDefinitionsItem { oneof: Some(oneof) }),
                }
            }),
        }),
        tags: m
            .get("tags")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|t| {
                        let t = obj(t);
                        Tag {
                            name: string(t, "name"),
                            description: string(t, "description"),
                            external_docs: t.get("externalDocs").map(external_docs),
                            vendor_extension: extensions(t),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default(),
        external_docs: m.get("externalDocs").map(external_docs),
        vendor_extension: extensions(m),
    }
}

fn security(m: &Map<String, Value>) -> Vec<SecurityRequirement> {
    m.get("security")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|req| SecurityRequirement {
                    additional_properties: named(Some(req), |k, v| NamedStringArray {
                        name: k.to_string(),
                        value: Some(StringArray {
                            value: v
                                .as_array()
                                .map(|s| s.iter().filter_map(Value::as_str).map(str::to_string).collect())
                                .unwrap_or_default(),
                        }),
                    }),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn external_docs(v: &Value) -> ExternalDocs {
    let m = obj(v);
    ExternalDocs { description: string(m, "description"), url: string(m, "url"), vendor_extension: extensions(m) }
}

fn path_item(v: &Value) -> PathItem {
    let m = obj(v);
    let op = |verb: &str| m.get(verb).map(operation);
    PathItem {
        xref: string(m, "$ref"),
        get: op("get"),
        put: op("put"),
        post: op("post"),
        delete: op("delete"),
        options: op("options"),
        head: op("head"),
        patch: op("patch"),
        parameters: parameters(m),
        vendor_extension: extensions(m),
    }
}

fn parameters(m: &Map<String, Value>) -> Vec<ParametersItem> {
    m.get("parameters").and_then(Value::as_array).map(|a| a.iter().map(parameters_item).collect()).unwrap_or_default()
}

fn operation(v: &Value) -> Operation {
    let m = obj(v);
    Operation {
        tags: strings(m, "tags"),
        summary: string(m, "summary"),
        description: string(m, "description"),
        external_docs: m.get("externalDocs").map(external_docs),
        operation_id: string(m, "operationId"),
        produces: strings(m, "produces"),
        consumes: strings(m, "consumes"),
        parameters: parameters(m),
        responses: m.get("responses").map(|r| Responses {
            response_code: obj(r)
                .iter()
                .filter(|(k, _)| !k.starts_with("x-"))
                .map(|(k, v)| NamedResponseValue {
                    name: k.clone(),
                    value: Some(ResponseValue {
                        oneof: Some(match v.get("$ref").and_then(Value::as_str) {
                            Some(r) => ResponseValueOneof::JsonReference(JsonReference {
                                xref: r.to_string(),
                                description: string(obj(v), "description"),
                            }),
                            None => ResponseValueOneof::Response(response(v)),
                        }),
                    }),
                })
                .collect(),
            vendor_extension: extensions(obj(r)),
        }),
        schemes: strings(m, "schemes"),
        deprecated: boolean(m, "deprecated"),
        security: security(m),
        vendor_extension: extensions(m),
    }
}

fn response(v: &Value) -> Response {
    let m = obj(v);
    Response {
        description: string(m, "description"),
        schema: m.get("schema").map(|s| SchemaItem { schema: Some(schema(s)) }),
        vendor_extension: extensions(m),
    }
}

/// A gnostic message with JSON Schema's primitive validation fields (type, format, items,
/// limits, enum, …) read from the JSON object `$m`: `PrimitivesItems` and the non-body
/// parameter sub-schemas share them. `$items` builds the `items` field (boxed in
/// `PrimitivesItems`); `$extra` fields are the message's own.
macro_rules! primitive_schema {
    ($ty:ident, $m:expr, items: $items:expr $(, $extra:ident: $val:expr)*) => {{
        let m = $m;
        $ty {
            r#type: string(m, "type"),
            format: string(m, "format"),
            items: $items,
            collection_format: string(m, "collectionFormat"),
            default: m.get("default").map(any),
            maximum: number(m, "maximum"),
            exclusive_maximum: boolean(m, "exclusiveMaximum"),
            minimum: number(m, "minimum"),
            exclusive_minimum: boolean(m, "exclusiveMinimum"),
            max_length: integer(m, "maxLength"),
            min_length: integer(m, "minLength"),
            pattern: string(m, "pattern"),
            max_items: integer(m, "maxItems"),
            min_items: integer(m, "minItems"),
            unique_items: boolean(m, "uniqueItems"),
            r#enum: anys(m, "enum"),
            multiple_of: number(m, "multipleOf"),
            vendor_extension: extensions(m),
            $($extra: $val,)*
        }
    }};
}

/// gnostic's non-body parameter sub-schemas (query/formData share one message shape,
/// path/header another without `allowEmptyValue`) built from the JSON parameter `$m`; `$extra`
/// fields are the shape's own.
macro_rules! non_body_sub_schema {
    ($ty:ident, $m:expr $(, $extra:ident: $val:expr)*) => {{
        let m = $m;
        primitive_schema!(
            $ty,
            m,
            items: m.get("items").map(primitives_items),
            required: boolean(m, "required"),
            r#in: string(m, "in"),
            description: string(m, "description"),
            name: string(m, "name")
            $(, $extra: $val)*
        )
    }};
}

fn parameters_item(v: &Value) -> ParametersItem {
    let m = obj(v);
    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
        return ParametersItem {
            oneof: Some(ParametersItemOneof::JsonReference(JsonReference {
                xref: r.to_string(),
                description: string(m, "description"),
            })),
        };
    }
    let parameter = match m.get("in").and_then(Value::as_str).unwrap_or_default() {
        "body" => ParameterOneof::BodyParameter(BodyParameter {
            description: string(m, "description"),
            name: string(m, "name"),
            r#in: string(m, "in"),
            required: boolean(m, "required"),
            schema: m.get("schema").map(schema),
            vendor_extension: extensions(m),
        }),
        kind @ ("query" | "formData") => {
            let p = non_body_sub_schema!(QueryParameterSubSchema, m, allow_empty_value: boolean(m, "allowEmptyValue"));
            ParameterOneof::NonBodyParameter(NonBodyParameter {
                oneof: Some(if kind == "query" {
                    NonBodyParameterOneof::QueryParameterSubSchema(p)
                } else {
                    NonBodyParameterOneof::FormDataParameterSubSchema(p)
                }),
            })
        }
        kind => {
            let p = non_body_sub_schema!(PathParameterSubSchema, m);
            ParameterOneof::NonBodyParameter(NonBodyParameter {
                oneof: Some(if kind == "header" {
                    NonBodyParameterOneof::HeaderParameterSubSchema(p)
                } else {
                    NonBodyParameterOneof::PathParameterSubSchema(p)
                }),
            })
        }
    };
    ParametersItem { oneof: Some(ParametersItemOneof::Parameter(Parameter { oneof: Some(parameter) })) }
}

fn primitives_items(v: &Value) -> PrimitivesItems {
    let m = obj(v);
    primitive_schema!(PrimitivesItems, m, items: m.get("items").map(|i| Box::new(primitives_items(i))))
}

/// One JSON schema. Keywords Swagger 2.0 lacks (`oneOf`, `anyOf`, `not`, `nullable`) have no
/// field and are dropped, as in Kubernetes' own v2 document.
fn schema(v: &Value) -> Schema {
    let m = obj(v);
    Schema {
        xref: string(m, "$ref"),
        format: string(m, "format"),
        title: string(m, "title"),
        description: string(m, "description"),
        default: m.get("default").map(any),
        multiple_of: number(m, "multipleOf"),
        maximum: number(m, "maximum"),
        exclusive_maximum: boolean(m, "exclusiveMaximum"),
        minimum: number(m, "minimum"),
        exclusive_minimum: boolean(m, "exclusiveMinimum"),
        max_length: integer(m, "maxLength"),
        min_length: integer(m, "minLength"),
        pattern: string(m, "pattern"),
        max_items: integer(m, "maxItems"),
        min_items: integer(m, "minItems"),
        unique_items: boolean(m, "uniqueItems"),
        max_properties: integer(m, "maxProperties"),
        min_properties: integer(m, "minProperties"),
        required: strings(m, "required"),
        r#enum: anys(m, "enum"),
        additional_properties: match m.get("additionalProperties") {
            Some(Value::Bool(b)) => {
                Some(AdditionalPropertiesItem { oneof: Some(AdditionalPropertiesOneof::Boolean(*b)) })
            }
            Some(s @ Value::Object(_)) => {
                Some(AdditionalPropertiesItem { oneof: Some(AdditionalPropertiesOneof::Schema(Box::new(schema(s)))) })
            }
            _ => None,
        },
        r#type: m.get("type").map(|_| TypeItem { value: strings(m, "type") }),
        items: match m.get("items") {
            Some(Value::Array(a)) => Some(ItemsItem { schema: a.iter().map(schema).collect() }),
            Some(s @ Value::Object(_)) => Some(ItemsItem { schema: vec![schema(s)] }),
            _ => None,
        },
        all_of: m.get("allOf").and_then(Value::as_array).map(|a| a.iter().map(schema).collect()).unwrap_or_default(),
        properties: m.get("properties").map(|p| Properties {
            additional_properties: named(Some(p), |k, v| NamedSchema { name: k.to_string(), value: Some(schema(v)) }),
        }),
        discriminator: string(m, "discriminator"),
        read_only: boolean(m, "readOnly"),
        xml: m.get("xml").map(|x| {
            let x = obj(x);
            Xml {
                name: string(x, "name"),
                namespace: string(x, "namespace"),
                prefix: string(x, "prefix"),
                attribute: boolean(x, "attribute"),
                wrapped: boolean(x, "wrapped"),
                vendor_extension: extensions(x),
            }
        }),
        external_docs: m.get("externalDocs").map(external_docs),
        example: m.get("example").map(any),
        vendor_extension: extensions(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The JSON form of a decoded schema, vendor extensions parsed back from their YAML.
    fn schema_json(s: &Schema) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        if !s.xref.is_empty() {
            put("$ref", json!(s.xref));
        }
        if !s.description.is_empty() {
            put("description", json!(s.description));
        }
        if !s.format.is_empty() {
            put("format", json!(s.format));
        }
        if let Some(t) = &s.r#type {
            put("type", if t.value.len() == 1 { json!(t.value[0]) } else { json!(t.value) });
        }
        if !s.required.is_empty() {
            put("required", json!(s.required));
        }
        if !s.r#enum.is_empty() {
            put("enum", Value::Array(s.r#enum.iter().map(|a| serde_saphyr::from_str(&a.yaml).unwrap()).collect()));
        }
        if let Some(i) = &s.items {
            put("items", schema_json(&i.schema[0]));
        }
        if let Some(a) = &s.additional_properties {
            put(
                "additionalProperties",
                match &a.oneof {
                    Some(AdditionalPropertiesOneof::Schema(s)) => schema_json(s),
                    Some(AdditionalPropertiesOneof::Boolean(b)) => json!(b),
                    None => Value::Null,
                },
            );
        }
        if !s.all_of.is_empty() {
            put("allOf", Value::Array(s.all_of.iter().map(schema_json).collect()));
        }
        if let Some(p) = &s.properties {
            let props: Map<String, Value> = p
                .additional_properties
                .iter()
                .map(|n| (n.name.clone(), schema_json(n.value.as_ref().unwrap())))
                .collect();
            put("properties", Value::Object(props));
        }
        for e in &s.vendor_extension {
            let v: Value = serde_saphyr::from_str(&e.value.as_ref().unwrap().yaml).unwrap();
            put(&e.name, v);
        }
        Value::Object(m)
    }

    /// Sorts object keys so that documents compare regardless of key order.
    fn canonical(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<_> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), canonical(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }

    #[test]
    fn a_schema_with_every_kind_of_field_survives_encode_and_decode() {
        let doc = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "definitions": {
                "a.B": {
                    "description": "B is a thing.\n\tWith \"quotes\", a tab and: colons.",
                    "type": "object",
                    "required": ["spec"],
                    "properties": {
                        "spec": {"$ref": "#/definitions/a.Spec", "description": "the spec"},
                        "list": {"type": "array", "items": {"type": "string"},
                                 "x-kubernetes-patch-strategy": "merge", "x-kubernetes-list-type": "set"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "open": {"type": "object", "additionalProperties": true},
                        "mode": {"type": "string", "enum": ["On", "Off", "true", "1"]},
                        "ref": {"allOf": [{"$ref": "#/definitions/a.Spec"}]},
                        "empty": {"type": "object", "properties": {}}
                    },
                    "x-kubernetes-group-version-kind": [{"group": "", "kind": "B", "version": "v1"}]
                }
            }
        });
        let decoded = decode(&encode(&doc)).unwrap();
        assert_eq!(decoded.swagger, "2.0");
        assert_eq!(decoded.info.as_ref().unwrap().version, "v1.33.0");
        let defs = decoded.definitions.unwrap().additional_properties;
        assert_eq!(defs.len(), 1);
        assert_eq!(defs[0].name, "a.B");
        assert_eq!(canonical(&schema_json(defs[0].value.as_ref().unwrap())), canonical(&doc["definitions"]["a.B"]));
    }

    #[test]
    fn parameters_are_split_by_location_and_references_stay_references() {
        let doc = json!({
            "swagger": "2.0",
            "paths": {
                "/apis/apps/v1/namespaces/{namespace}/deployments/{name}": {
                    "parameters": [{"name": "name", "in": "path", "required": true, "type": "string"}],
                    "patch": {
                        "operationId": "patchDeployment",
                        "parameters": [
                            {"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/Patch"}},
                            {"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true},
                            {"$ref": "#/parameters/dryRun"}
                        ],
                        "responses": {"200": {"description": "OK", "schema": {"$ref": "#/definitions/D"}}},
                        "x-kubernetes-group-version-kind": {"group": "apps", "kind": "Deployment", "version": "v1"}
                    }
                }
            },
            "security": [{"BearerToken": []}],
            "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}}
        });
        let d = decode(&encode(&doc)).unwrap();
        let path = &d.paths.unwrap().path[0];
        assert_eq!(path.name, "/apis/apps/v1/namespaces/{namespace}/deployments/{name}");
        let item = path.value.as_ref().unwrap();
        let Some(ParametersItemOneof::Parameter(Parameter {
            oneof:
                Some(ParameterOneof::NonBodyParameter(NonBodyParameter {
                    oneof: Some(NonBodyParameterOneof::PathParameterSubSchema(p)),
                })),
        })) = &item.parameters[0].oneof
        else {
            panic!("a path parameter: {:?}", item.parameters[0]);
        };
        assert!(p.required && p.name == "name");
        let patch = item.patch.as_ref().unwrap();
        assert!(matches!(
            &patch.parameters[0].oneof,
            Some(ParametersItemOneof::Parameter(Parameter { oneof: Some(ParameterOneof::BodyParameter(b)) }))
                if b.schema.as_ref().unwrap().xref == "#/definitions/Patch"
        ));
        assert!(matches!(
            &patch.parameters[1].oneof,
            Some(ParametersItemOneof::Parameter(Parameter { oneof: Some(ParameterOneof::NonBodyParameter(NonBodyParameter {
                oneof: Some(NonBodyParameterOneof::QueryParameterSubSchema(q)) })) }))
                if q.name == "fieldValidation" && q.unique_items
        ));
        assert!(
            matches!(&patch.parameters[2].oneof, Some(ParametersItemOneof::JsonReference(r)) if r.xref == "#/parameters/dryRun")
        );
        let gvk: Value = serde_saphyr::from_str(&patch.vendor_extension[0].value.as_ref().unwrap().yaml).unwrap();
        assert_eq!(gvk, json!({"group": "apps", "kind": "Deployment", "version": "v1"}));
        let ok = &patch.responses.as_ref().unwrap().response_code[0];
        assert_eq!(ok.name, "200");
        assert_eq!(d.security[0].additional_properties[0].name, "BearerToken");
        let sec = &d.security_definitions.unwrap().additional_properties[0];
        assert!(matches!(
            &sec.value.as_ref().unwrap().oneof,
            Some(SecurityDefinitionsOneof::ApiKeySecurity(k)) if k.name == "authorization" && k.r#in == "header"
        ));
    }
}
