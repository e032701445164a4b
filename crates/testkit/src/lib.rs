//! What funnel's tests, benches and comparison harness share, so that each exists once:
//!
//! * [`rng`]: one seeded PRNG (SplitMix64) and its mixing function;
//! * [`model`]: the plain reference model of CL.THROTTLE the engine is checked against;
//! * [`memory`]: the resident-memory probe; [`alloc`]: a global allocator counting each
//!   thread's allocated bytes, for checks that a path allocates nothing;
//! * [`mutex_map`]: the `Mutex<HashMap>` funnel limiter, the design most services start with,
//!   as a competitor;
//! * `fuzz` (feature `fuzz`): the fuzz bodies that drive a crate through its public API, with
//!   the reference readings they compare against (funnel's; funnel-tower's under `fuzz-tower`),
//!   for the cargo-fuzz targets and their stable replay tests;
//! * [`corpus`]: the stable replay of fuzz bodies (committed inputs, then seeded random ones),
//!   for every crate's replay test;
//! * [`redis_server`] (feature `redis`): the one `redis-server` launcher (and a cluster of
//!   them) for funnel-redis's tests, the lab's `attack` and the harness's Redis rows, and the
//!   Redis-backed tests' skip when `redis-server` is not installed;
//! * [`redis_reply`] (feature `redis`): a plain reading of a Redis reply, the reference of
//!   funnel-redis's fuzz body;
//! * [`redis_cell`] (feature `redis`): where the redis-cell module's library is (built by
//!   `.ci/redis-cell.sh`), and a server with it loaded, for the `CL.THROTTLE` tests and rows;
//! * [`certificates`]: a CA and the server and client certificates it signs, made with the
//!   `openssl` program, for the TLS tests;
//! * [`skip`]: a test that needs a tool from outside Cargo skipped visibly, with a count at
//!   exit, under one switch (`FUNNEL_REQUIRE_TOOLS=1`) that makes a missing tool fail;
//! * [`zipf`]: the Zipf sampler (YCSB's) of the harness's and `icount`'s Zipf key streams;
//! * `workload` (feature `bench`): the criterion benches' quotas, key streams and threads.
//!
//! Not published; not part of the library. It depends on no crate it tests but funnel itself,
//! and funnel-tower for that crate's fuzz bodies only (feature `fuzz-tower`): the crates' other
//! test support lives in their `tests/it/common`.

pub mod alloc;
pub mod certificates;
pub mod corpus;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod memory;
pub mod model;
pub mod mutex_map;
#[cfg(feature = "redis")]
pub mod redis_cell;
#[cfg(feature = "redis")]
pub mod redis_reply;
#[cfg(feature = "redis")]
pub mod redis_server;
pub mod rng;
pub mod skip;
#[cfg(feature = "bench")]
pub mod workload;
pub mod zipf;

pub use rng::{mix, Rng};
pub use zipf::Zipf;
