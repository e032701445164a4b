//! The Envoy v3 messages and the `RateLimitService` server and client, and the xDS messages
//! with the `AggregatedDiscoveryService` client and server, generated at build time from
//! `proto/` (see `build.rs`): `envoy.*`, `google.rpc` (the status a NACK carries) and
//! `ratelimit.*` (the configuration resource served over xDS).

// Generated code: its own style, and more than the server uses (the client serves the tests).
#![allow(missing_docs, dead_code, unused_imports, clippy::all, clippy::pedantic)]

// The packages (`envoy.*`, `google.rpc`, `ratelimit.*`), nested as the protobuf packages
// nest, in the module tree the generator writes beside them.
include!(concat!(env!("OUT_DIR"), "/protos.rs"));

/// The encoded `FileDescriptorSet` of `proto/`, for proto3 JSON (`POST /json`).
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

pub use envoy::config::core::v3::HeaderValue;
pub use envoy::extensions::common::ratelimit::v3::{rate_limit_descriptor, RateLimitDescriptor};
pub use envoy::r#type::v3::RateLimitUnit;
pub use envoy::service::ratelimit::v3::{
    rate_limit_response, rate_limit_service_client, rate_limit_service_server, RateLimitRequest,
    RateLimitResponse,
};
