//! The Envoy v3 messages and the `RateLimitService` server and client, and the xDS messages
//! with the `AggregatedDiscoveryService` client and server, generated at build time from
//! `proto/` (see `build.rs`).

// Generated code: its own style, and more than the server uses (the client serves the tests).
#![allow(missing_docs, dead_code, unused_imports, clippy::all, clippy::pedantic)]

/// `envoy.*` packages, nested as the protobuf packages are.
pub(crate) mod envoy {
    pub mod config {
        pub mod core {
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    pub mod extensions {
        pub mod common {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }
    pub mod r#type {
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
    pub mod service {
        pub mod discovery {
            pub mod v3 {
                tonic::include_proto!("envoy.service.discovery.v3");
            }
        }
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
    }
}

/// `google.rpc`: the status a NACK carries.
pub mod google {
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

/// `ratelimit.*`: the configuration resource served over xDS.
pub mod ratelimit {
    pub mod config {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("ratelimit.config.ratelimit.v3");
            }
        }
    }
}

/// The encoded `FileDescriptorSet` of `proto/`, for proto3 JSON (`POST /json`).
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

pub use envoy::config::core::v3::HeaderValue;
pub use envoy::extensions::common::ratelimit::v3::{rate_limit_descriptor, RateLimitDescriptor};
pub use envoy::r#type::v3::RateLimitUnit;
pub use envoy::service::ratelimit::v3::{
    rate_limit_response, rate_limit_service_client, rate_limit_service_server, RateLimitRequest,
    RateLimitResponse,
};
