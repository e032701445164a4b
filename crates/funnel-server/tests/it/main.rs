//! funnel-server's integration tests, one module per topic, in one test binary. Each test
//! starts the `funnel-server` binary as a process of its own on free loopback ports
//! (`common`), so the tests share nothing but this process.
//!
//! The answers of envoyproxy/ratelimit (`answers`, `grpc`); its configuration features
//! (`configuration`), environment (`environment`) and migration guide (`migration`);
//! configuration over xDS (`xds`); an independent Envoy client (`envoy_data_plane`); running
//! the server (`operate`, `metrics`, `dogstatsd`, `nodelay`); gRPC over TLS and on a Unix
//! socket (`grpc_tls`); fleet mode on Redis (`fleet`); the
//! forward-auth endpoint, directly and behind nginx and Caddy (`forward_auth`,
//! `forward_auth_proxies`); and the fuzz bodies on stable (`fuzz_bodies`).

mod common;

mod answers;
mod configuration;
mod dogstatsd;
mod environment;
mod envoy_data_plane;
mod fleet;
mod forward_auth;
mod forward_auth_proxies;
mod fuzz_bodies;
mod grpc;
mod grpc_tls;
mod metrics;
mod migration;
mod nodelay;
mod operate;
mod xds;
