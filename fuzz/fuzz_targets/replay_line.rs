//! cargo-fuzz target `replay_line`: the body is `tests/fuzz_bodies/replay_line.rs`, shared with the stable
//! replay test `tests/fuzz_replay.rs`.

#![no_main]

#[path = "../../tests/fuzz_bodies/replay_line.rs"]
mod body;
#[path = "../../tests/fuzz_bodies/common.rs"]
mod common;
#[path = "../../tests/support/model.rs"]
mod model;

libfuzzer_sys::fuzz_target!(|data: &[u8]| body::run(data));
