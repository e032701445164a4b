//! cargo-fuzz target `tower_spec`: the body is `funnel_tower::fuzzing::spec`
//! (`crates/funnel-tower/src/fuzzing/spec.rs`), shared with the stable replay test
//! `crates/funnel-tower/tests/fuzz_replay.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_tower::fuzzing::spec::run(data));
