//! cargo-fuzz target `tower_spec`: the body is `funnel_testkit::fuzz::tower::spec`
//! (`crates/testkit/src/fuzz/tower/spec.rs`), shared with the stable replay test
//! `crates/funnel-tower/tests/fuzz_replay.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_testkit::fuzz::tower::spec::run(data));
