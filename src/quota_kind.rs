//! What a keyed [`Limiter`](crate::Limiter) needs of its algorithm, and the three it has: the
//! funnel ([`Quota`], GCRA on an arrival time), the fixed window counter
//! ([`FixedWindowQuota`](crate::window::FixedWindowQuota)) and the sliding window counter
//! ([`SlidingWindowQuota`](crate::window::SlidingWindowQuota)). The quota's type chooses the
//! algorithm, so `Limiter<K, C, Q>` is one type per algorithm, monomorphised: the funnel's hot
//! path is the same code it would be without the others.
//!
//! An algorithm is a state in at most 62 bits (a keyed slot's payload, `state.rs`; `0` is an
//! absent key) and two pure functions: a step, `decide(state, now, n) -> (Decision, Option<new
//! state>)` (`None`: write nothing, as a denial or a peek), and `expiry(state)`, the time from
//! which the state answers as an absent key does, which is when a table may give its slot to
//! another key (lazy eviction), and which orders the victims of a full table (the earliest to
//! expire goes first). The window quotas implement both in `window/fixed.rs` and
//! `window/sliding.rs`.

use crate::decision::Decision;
use crate::gcra;
use crate::quota::Quota;

/// The kind of quota a keyed limiter decides under, which chooses its algorithm: [`Quota`]
/// (the funnel, the default), [`FixedWindowQuota`](crate::window::FixedWindowQuota) or
/// [`SlidingWindowQuota`](crate::window::SlidingWindowQuota). Sealed: the table relies on each
/// one's state fitting its slots, which the crate checks for these three.
pub trait QuotaKind: sealed::Step + Copy + Send + Sync + std::fmt::Debug + 'static {}

/// A window quota: the kinds a single-key [`window::Counter`](crate::window::Counter) takes.
pub trait WindowQuota: QuotaKind {}

impl QuotaKind for Quota {}

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
}
