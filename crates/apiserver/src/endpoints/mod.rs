//! The HTTP endpoints (k8s.io/apiserver `pkg/endpoints`): [`request`] parsing, content
//! [`negotiation`], the resource [`handlers`] (get/list/create/update/patch/delete, watch), discovery,
//! OpenAPI and the streaming and proxy subresources.
//! Every response is rendered by [`responsewriters`].

pub mod discovery;
pub mod handlers;
pub mod negotiation;
pub mod nonresource;
pub mod openapi;
mod openapi_v2_proto;
pub mod patch;
pub mod protobuf;
pub mod proxy;
pub mod request;
pub mod responsewriters;
pub mod streams;
pub mod table;
pub mod watch;
