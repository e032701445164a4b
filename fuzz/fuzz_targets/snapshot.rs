//! cargo-fuzz target `snapshot`: the body is `funnel_testkit::fuzz::snapshot`
//! (`crates/testkit/src/fuzz/snapshot.rs`), shared with the stable replay test
//! `tests/it/fuzz_bodies.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_testkit::fuzz::snapshot::run(data));
