//! Window algorithms in one word: a fixed window counter ([`FixedWindowQuota`]) and a sliding
//! window counter ([`SlidingWindowQuota`], the previous window's count weighted by how much of
//! it still overlaps the sliding window), each a packed `u64`, each with the same
//! [`Decision`](crate::Decision) as the funnel. [`Counter`] is one such word for a single key;
//! a keyed [`Limiter`](crate::Limiter) built with a window quota holds one per key.
//!
//! Every algorithm is a pure step function over its word, `decide(word, now, quota, n) ->
//! (Decision, Option<new word>)`, plus `expiry(word, quota)`, the time from which the word says
//! the same as an absent one (so a table can evict it lazily, as it does recovered funnels);
//! the single-key [`Counter`] runs the step in a CAS loop, as [`Funnel`](crate::Funnel) does.
//! `docs/design/policies.md`, "Window algorithms", states the layouts, the ranges and how they compare
//! with an exact sliding log.

mod counter;
pub(crate) mod fixed;
mod limits;
mod report;
pub(crate) mod sliding;

pub use crate::quota_kind::WindowQuota;
pub use counter::Counter;
pub use fixed::FixedWindowQuota;
pub use sliding::SlidingWindowQuota;
