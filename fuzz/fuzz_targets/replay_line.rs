//! cargo-fuzz target `replay_line`: the body is `funnel_testkit::fuzz::replay_line`
//! (`crates/testkit/src/fuzz/replay_line.rs`), shared with the stable replay test
//! `tests/it/fuzz_bodies.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_testkit::fuzz::replay_line::run(data));
