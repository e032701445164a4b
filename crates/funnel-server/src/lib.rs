//! # funnel-server
//!
//! Envoy's rate-limit service (`envoy.service.ratelimit.v3.RateLimitService`) on funnel:
//! the service any Envoy-based gateway calls, reading envoyproxy/ratelimit's YAML, deciding
//! with funnel's GCRA (or fixed/sliding windows), charging the descriptors of one request all
//! or nothing, in process or shared by a fleet through Redis. The binary is `funnel-server`;
//! the README has the Envoy side, the configuration and the environment variables.
//!
//! The library is the binary's body: [`run`] with its [`Options`] serves until SIGTERM.
//!
//! ## Where a decision happens
//!
//! `decide`: a request is checked (`limits`), each descriptor matched to a rule (`rules`),
//! the counted ones charged together (`store`, [`funnel::check_all`]), and the response
//! built. `grpc` and `http` are thin doors onto it; `reload` swaps the rules while requests
//! flow; `config` reads the YAML; `stats` counts, and `metrics`, `statsd` and `debug` report
//! (`statsd` in DogStatsD too: `dogstatsd` writes its lines, `mogrifier` its names and tags).
//! `answers` holds envoyproxy/ratelimit's answer switches (shadow and quota modes, limit
//! headers, per-descriptor charging) and `dynamic_metadata` the response's metadata;
//! `grpc_listener` is the gRPC listener (TCP or a Unix socket) and `grpc_tls` its TLS;
//! `forward_auth` serves nginx, Caddy and Traefik; `xds` takes the configuration from an xDS
//! server instead of files.

mod answers;
mod cli;
mod clock;
mod config;
mod connection_age;
mod debug;
mod decide;
mod dogstatsd;
mod dynamic_metadata;
mod environment;
mod error;
mod fleet;
mod forward_auth;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod go;
mod grpc;
mod grpc_listener;
mod grpc_tls;
mod http;
mod json;
mod limits;
mod metrics;
mod mogrifier;
mod proto;
mod reload;
mod rules;
mod server;
mod stats;
mod statsd;
mod store;
mod xds;

pub use answers::{Answers, LimitHeaders};
pub use cli::main;
pub use error::Error;
pub use fleet::{HashTag, RedisType};
pub use funnel_redis::OnFailure;
pub use grpc_tls::{GrpcTls, TlsError, TlsSetting};
pub use mogrifier::{Mogrifier, MogrifierError};
pub use rules::RedisSettings;
pub use server::{run, Options, Source};
pub use statsd::{Dialect, Statsd};
pub use xds::{Backoff, Tls, XdsOptions};
