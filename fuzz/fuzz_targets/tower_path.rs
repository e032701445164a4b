//! cargo-fuzz target `tower_path`: the body is `funnel_tower::fuzzing::path`
//! (`crates/funnel-tower/src/fuzzing/path.rs`), shared with the stable replay test
//! `crates/funnel-tower/tests/fuzz_replay.rs`.

#![no_main]

/// Counts each thread's allocations, for the body's check that reading a key allocates
/// nothing.
#[global_allocator]
static ALLOC: funnel_tower::fuzzing::CountingAlloc = funnel_tower::fuzzing::CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_tower::fuzzing::path::run(data));
