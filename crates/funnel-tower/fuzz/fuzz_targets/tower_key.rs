//! cargo-fuzz target `tower_key`: the body is `funnel_testkit::fuzz::tower::key`
//! (`crates/testkit/src/fuzz/tower/key.rs`), shared with the stable replay test
//! `crates/funnel-tower/tests/fuzz_replay.rs`.

#![no_main]

use funnel_testkit::alloc::{allocated_bytes, CountingAlloc};
use funnel_testkit::fuzz::tower::key;

/// Counts each thread's allocations, for the body's check that reading a key allocates
/// nothing.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| key::run(data, allocated_bytes));
