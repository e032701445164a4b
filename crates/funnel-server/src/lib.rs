//! # funnel-server
//!
//! Envoy's rate-limit service (`envoy.service.ratelimit.v3.RateLimitService`) on funnel:
//! the service any Envoy-based gateway calls, reading envoyproxy/ratelimit's YAML, deciding
//! with funnel's GCRA (or fixed/sliding windows), charging the descriptors of one request all
//! or nothing, in process or shared by a fleet through Redis. The binary is `funnel-server`;
//! the README has the Envoy side and the configuration.
//!
//! ## Where a decision happens
//!
//! [`decide`]: a request is checked ([`limits`]), each descriptor matched to a rule
//! ([`rules`]), the counted ones charged together ([`store`], [`funnel::check_all`]), and the
//! response built. [`grpc`] and [`http`] are thin doors onto it; [`reload`] swaps the
//! [`rules`] while requests flow; [`config`] reads the YAML; [`xds`] takes it from an xDS
//! server instead.

pub mod clock;
pub mod config;
pub mod decide;
pub mod fleet;
pub mod fuzz;
pub mod grpc;
pub mod http;
pub mod json;
pub mod limits;
pub mod metrics;
pub mod proto;
pub mod reload;
pub mod rules;
pub mod server;
pub mod store;
pub mod xds;
