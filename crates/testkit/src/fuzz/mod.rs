//! The fuzz bodies: each takes the fuzzer's bytes, drives the code under test and checks it
//! against a reference (the model, a plain reading of the documented rules). The cargo-fuzz
//! targets call them, and each crate's stable replay test runs them over the committed corpus
//! and seeded random inputs. funnel's (feature `fuzz`, targets in `fuzz/`, replayed by
//! `tests/it/fuzz_bodies.rs`):
//!
//! * [`ops`]: random operations on a keyed limiter, against the model;
//! * [`state`]: the packed funnel word and the arithmetic at their edges;
//! * [`replay_line`]: random replay lines, against an independent parser and the model;
//! * [`snapshot`]: saved limiter states, whole, damaged or arbitrary, read and restored.
//!
//! funnel-tower's, in `tower` (feature `fuzz-tower`: targets in `crates/funnel-tower/fuzz/`).

pub mod common;
pub mod ops;
pub mod replay_line;
pub mod snapshot;
pub mod state;
#[cfg(feature = "fuzz-tower")]
pub mod tower;
