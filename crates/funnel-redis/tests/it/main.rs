//! funnel-redis's integration tests, one module per topic, in one test binary, each against
//! real `redis-server` processes started on free loopback ports. The tests whose timing
//! bounds must measure the limiter alone are a binary of their own, `failures/`.
//!
//! Redis's decisions (`decisions`, `check_all`), the deny cache (`deny_cache`), errors of
//! their own type (`errors`), Redis losing its data (`data_loss`), the ways a deployment
//! reaches Redis (`deployments`, `cluster`, `tls`), the redis-cell backend and funnel's CL.THROTTLE
//! against the real module (`cell`, `cell_conformance`), and the fuzz body on stable
//! (`fuzz_bodies`).

mod common;

mod cell;
mod cell_conformance;
mod check_all;
mod cluster;
mod data_loss;
mod decisions;
mod deny_cache;
mod deployments;
mod errors;
mod fuzz_bodies;
mod tls;
