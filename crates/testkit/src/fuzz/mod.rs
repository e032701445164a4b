//! The fuzz bodies: each takes the fuzzer's bytes, drives the engine and checks it against the
//! reference model. The cargo-fuzz targets in `fuzz/` call them, and `tests/it/fuzz_bodies.rs`
//! runs them on stable over the committed corpus and seeded random inputs.
//!
//! * [`ops`]: random operations on a keyed limiter, against the model;
//! * [`state`]: the packed funnel word and the arithmetic at their edges;
//! * [`replay_line`]: random replay lines, against an independent parser and the model;
//! * [`snapshot`]: saved limiter states, whole, damaged or arbitrary, read and restored.

pub mod common;
pub mod ops;
pub mod replay_line;
pub mod snapshot;
pub mod state;
