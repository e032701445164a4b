//! Configuration over xDS, as Envoy Gateway serves it to envoyproxy/ratelimit
//! (`CONFIG_TYPE=GRPC_XDS_SOTW`): a state-of-the-world subscription on the Aggregated
//! Discovery Service to `ratelimit.config.ratelimit.v3.RateLimitConfig` resources.
//!
//! [`resource`] reads a response's resources through the file loader, [`client`] holds the
//! stream (ACK, NACK, reconnection), [`settings`] the options and their text forms.

pub mod client;
pub mod resource;
pub mod settings;

pub use client::{subscribe, Progress};
pub use settings::{Backoff, Tls, XdsOptions};
