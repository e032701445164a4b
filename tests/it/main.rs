//! funnel's integration tests, one module per topic, in one test binary. Two stay binaries of
//! their own, `resident.rs` and `flood.rs`: they read the process's resident memory, which
//! other tests' allocations would move.
//!
//! The CL.THROTTLE answers (`cl_throttle`), bad quotas (`bad_quotas`), time at its edges
//! (`time_edges`), replay lines (`replay_lines`); the public API (`public_api`, `limiter`,
//! `single_key`, `check_all`, `settle`, `live_limiter`, `batch`); contention
//! (`funnel_threads`, `limiter_threads`, `check_all_threads`, `refund_stress`,
//! `window_threads`, `live_reconfig`, `recent_clock`); the table (`growth`, `cuckoo`); window
//! counters (`window_keyed`, `sliding_vs_log`); saved states (`persist`); and the fuzz bodies
//! on stable (`fuzz_bodies`).

mod bad_quotas;
mod batch;
mod check_all;
mod check_all_threads;
mod cl_throttle;
mod cuckoo;
mod funnel_threads;
mod fuzz_bodies;
mod growth;
mod limiter;
mod limiter_threads;
mod live_limiter;
mod live_reconfig;
mod persist;
mod public_api;
mod recent_clock;
mod refund_stress;
mod replay_lines;
mod settle;
mod single_key;
mod sliding_vs_log;
mod time_edges;
mod window_keyed;
mod window_threads;
