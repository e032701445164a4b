//! What a keyed [`Limiter`](crate::Limiter) needs of its algorithm, and the three it has: the
//! funnel ([`Quota`], GCRA on an arrival time), the fixed window counter
//! ([`FixedWindowQuota`]) and the sliding window counter ([`SlidingWindowQuota`]). The quota's
//! type chooses the algorithm, so `Limiter<K, C, Q>` is one type per algorithm, monomorphised:
//! the funnel's hot path is the same code it would be without the others.
//!
//! An algorithm is a state in at most 62 bits (a keyed slot's payload, `state.rs`; `0` is an
//! absent key) and two pure functions: a step, `decide(state, now, n) -> (Decision, Option<new
//! state>)` (`None`: write nothing, as a denial or a peek), and `expiry(state)`, the time from
//! which the state answers as an absent key does, which is when a table may give its slot to
//! another key (lazy eviction), and which orders the victims of a full table (the earliest to
//! expire goes first).

use crate::decision::Decision;
use crate::gcra;
use crate::quota::Quota;
use crate::window::{fixed, sliding, FixedWindowQuota, SlidingWindowQuota};

/// A quota that chooses a keyed limiter's algorithm: [`Quota`] (the funnel, the default),
/// [`FixedWindowQuota`] or [`SlidingWindowQuota`]. Sealed: the table relies on each one's state
/// fitting its slots, which the crate checks for these three.
pub trait Meter: sealed::Step + Copy + Send + Sync + std::fmt::Debug + 'static {}

impl Meter for Quota {}
impl Meter for FixedWindowQuota {}
impl Meter for SlidingWindowQuota {}

pub(crate) mod sealed {
    use super::*;

    /// The two pure functions of an algorithm over its state (`0`: an absent key).
    pub trait Step {
        /// Decides a request of `n` units at `now` on `state`.
        fn decide(&self, state: u64, now: u64, n: u64) -> (Decision, Option<u64>);
        /// The time from which `state` answers as an absent key does.
        fn expiry(&self, state: u64) -> u64;
    }

    impl Step for Quota {
        #[inline(always)]
        fn decide(&self, tat: u64, now: u64, n: u64) -> (Decision, Option<u64>) {
            gcra::decide(tat, now, self, n)
        }

        /// A funnel has recovered when its arrival time has passed.
        #[inline(always)]
        fn expiry(&self, tat: u64) -> u64 {
            tat
        }
    }

    impl Step for FixedWindowQuota {
        #[inline(always)]
        fn decide(&self, word: u64, now: u64, n: u64) -> (Decision, Option<u64>) {
            fixed::decide(word, now, self, n)
        }

        #[inline(always)]
        fn expiry(&self, word: u64) -> u64 {
            fixed::expiry(word, self)
        }
    }

    impl Step for SlidingWindowQuota {
        #[inline(always)]
        fn decide(&self, word: u64, now: u64, n: u64) -> (Decision, Option<u64>) {
            sliding::decide(word, now, self, n)
        }

        #[inline(always)]
        fn expiry(&self, word: u64) -> u64 {
            sliding::expiry(word, self)
        }
    }
}
