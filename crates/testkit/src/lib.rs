//! What funnel's tests, benches and comparison harness share, so that each exists once:
//!
//! * [`rng`]: one seeded PRNG (SplitMix64) and its mixing function;
//! * [`model`]: the plain reference model of CL.THROTTLE the engine is checked against;
//! * [`memory`]: the resident-memory probe;
//! * [`mutex_map`]: the `Mutex<HashMap>` funnel limiter, the design most services start with,
//!   as a competitor;
//! * `fuzz` (feature `fuzz`): the fuzz bodies, for the cargo-fuzz targets and their stable
//!   replay test;
//! * [`redis_server`] (feature `redis`): the one `redis-server` launcher (and a cluster of
//!   them) for funnel-redis's tests and example and the harness's Redis rows;
//! * [`redis_limiter`] (feature `redis`): a funnel-redis limiter with a generous timeout, for
//!   funnel-redis's tests;
//! * `tower` (feature `tower`): funnel-tower's HTTP test support: a loopback server around a
//!   layer, a client, and the RateLimit header fields parsed;
//! * [`zipf`]: the Zipf sampler (YCSB's) of the harness's and `icount`'s Zipf key streams;
//! * `workload` (feature `bench`): the criterion benches' quotas, key streams and threads.
//!
//! Not published; not part of the library.

#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod memory;
pub mod model;
pub mod mutex_map;
#[cfg(feature = "redis")]
pub mod redis_limiter;
#[cfg(feature = "redis")]
pub mod redis_server;
pub mod rng;
#[cfg(feature = "tower")]
pub mod tower;
#[cfg(feature = "bench")]
pub mod workload;
pub mod zipf;

pub use rng::{mix, Rng};
pub use zipf::Zipf;
