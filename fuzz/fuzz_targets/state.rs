//! cargo-fuzz target `state`: the body is `funnel_testkit::fuzz::state`
//! (`crates/testkit/src/fuzz/state.rs`), shared with the stable replay test
//! `tests/it/fuzz_bodies.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_testkit::fuzz::state::run(data));
