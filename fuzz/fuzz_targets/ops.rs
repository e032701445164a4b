//! cargo-fuzz target `ops`: the body is `funnel_testkit::fuzz::ops`
//! (`crates/testkit/src/fuzz/ops.rs`), shared with the stable replay test
//! `tests/it/fuzz_bodies.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_testkit::fuzz::ops::run(data));
