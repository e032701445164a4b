//! cargo-fuzz target `tower_key`: the body is `funnel_tower::fuzzing::key`
//! (`crates/funnel-tower/src/fuzzing/key.rs`), shared with the stable replay test
//! `crates/funnel-tower/tests/fuzz_replay.rs`.

#![no_main]

/// Counts each thread's allocations, for the body's check that reading a key allocates
/// nothing.
#[global_allocator]
static ALLOC: funnel_testkit::alloc::CountingAlloc = funnel_testkit::alloc::CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    funnel_tower::fuzzing::key::run(data, funnel_testkit::alloc::allocated_bytes)
});
