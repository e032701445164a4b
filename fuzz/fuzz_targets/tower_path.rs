//! cargo-fuzz target `tower_path`: the body is `funnel_tower::fuzzing::path`
//! (`crates/funnel-tower/src/fuzzing/path.rs`), shared with the stable replay test
//! `crates/funnel-tower/tests/fuzz_replay.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_tower::fuzzing::path::run(data));
