//! cargo-fuzz target `tower_path`: the body is `funnel_testkit::fuzz::tower::path`
//! (`crates/testkit/src/fuzz/tower/path.rs`), shared with the stable replay test
//! `crates/funnel-tower/tests/fuzz_replay.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_testkit::fuzz::tower::path::run(data));
