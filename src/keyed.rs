//! The calls of a keyed limiter, written once for both types that decide: [`Limiter`] under
//! its own quota and [`WithQuota`], the same limiter under another quota. Each type says which
//! limiter and which quota a call uses (`limiter_and_quota`); the calls below are the same
//! code for both, so their names, signatures and answers cannot drift apart. The decision
//! itself is `Limiter::decide_now` / `decide_at` (`limiter.rs`), which hash the key and run
//! the table's protocol (`table/`).

use std::borrow::Borrow;
use std::hash::Hash;

use crate::clock::{Clock, Timestamp};
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::quota::Quota;
use crate::quota_kind::QuotaKind;
use crate::settle::Reservation;
use crate::with_quota::WithQuota;

/// The decisions every keyed limiter makes, whatever its algorithm.
macro_rules! decision_calls {
    () => {
        /// One unit request for `key`, now.
        #[inline(always)]
        pub fn check(&self, key: &K) -> Decision {
            let (limiter, quota) = self.limiter_and_quota();
            limiter.decide_now(key, quota, 1)
        }

        /// A request of `n` units for `key`, now. `n = 0` is a peek.
        #[inline(always)]
        pub fn check_n(&self, key: &K, n: u64) -> Decision {
            let (limiter, quota) = self.limiter_and_quota();
            limiter.decide_now(key, quota, n)
        }

        /// [`check`](Self::check) at the caller's `now` (no clock read).
        #[inline(always)]
        pub fn check_at(&self, key: &K, now: Timestamp) -> Decision {
            let (limiter, quota) = self.limiter_and_quota();
            limiter.decide_at(key, quota, 1, now)
        }

        /// [`check_n`](Self::check_n) at the caller's `now`.
        #[inline(always)]
        pub fn check_n_at(&self, key: &K, n: u64, now: Timestamp) -> Decision {
            let (limiter, quota) = self.limiter_and_quota();
            limiter.decide_at(key, quota, n, now)
        }

        /// One unit request for each of `keys`, in order, now (one clock read for the batch),
        /// appending one decision per key to `out`. See [`check_batch_at`](Self::check_batch_at).
        pub fn check_batch<B: Borrow<K>>(&self, keys: &[B], out: &mut Vec<Decision>) {
            self.check_batch_at(keys, self.limiter_and_quota().0.now(), out);
        }

        /// One unit request for each of `keys`, in order, at the caller's `now`, appending one
        /// decision per key to `out`: the same decisions as [`check_at`](Self::check_at) called
        /// for each key in turn, but faster when the table is larger than the CPU caches. While
        /// deciding one key the batch hashes the keys a few places ahead and starts loading their
        /// buckets, so the cache misses of different keys overlap instead of queueing.
        ///
        /// For callers that hold many keys at once: an event loop draining a socket batch, a log
        /// replayer, a gateway checking every request of a pipeline. Longer batches go faster on
        /// a table larger than the caches, since the look-ahead starts again with each call. On a
        /// table that fits the caches the batch decides key by key.
        ///
        /// # Examples
        ///
        /// ```
        /// use funnel::{Limiter, Quota};
        ///
        /// let limiter = Limiter::<str>::new(Quota::per_second(1)?);
        /// let mut decisions = Vec::new();
        /// limiter.check_batch_at(&["a", "b", "a"], limiter.now(), &mut decisions);
        /// let allowed: Vec<bool> = decisions.iter().map(|d| d.is_allowed()).collect();
        /// assert_eq!(allowed, [true, true, false]);
        /// # Ok::<(), funnel::Error>(())
        /// ```
        pub fn check_batch_at<B: Borrow<K>>(
            &self,
            keys: &[B],
            now: Timestamp,
            out: &mut Vec<Decision>,
        ) {
            let (limiter, quota) = self.limiter_and_quota();
            limiter.decide_batch_at(keys, quota, now, out);
        }

        /// `key`'s state now, charging nothing and creating nothing: the answer of a request of
        /// no units ([`check_n`](Self::check_n) with `n = 0`).
        ///
        /// A funnel key in debt beyond its tolerance (charged past its limit by
        /// [`settle`](Limiter::settle), or kept as time through a quota change) answers a peek
        /// **limited**, with a retry one emission interval shorter than a unit request's: the time
        /// until the debt is back within the tolerance, where a unit request also needs room for
        /// its own unit.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use funnel::{clock::ManualClock, Limiter, Quota};
        ///
        /// let limiter = Limiter::<str>::builder(Quota::per_second(10)?).clock(ManualClock::new()).build()?;
        /// let r = limiter.reserve("k", 1);
        /// limiter.settle("k", r, 15)?; // 15 units of a limit of 10: 5 beyond the tolerance
        /// let peek = limiter.peek("k");
        /// assert!(!peek.is_allowed());
        /// assert_eq!(peek.retry_after(), Some(Duration::from_millis(500)));
        /// assert_eq!(limiter.check("k").retry_after(), Some(Duration::from_millis(600)));
        /// # Ok::<(), funnel::Error>(())
        /// ```
        #[inline]
        pub fn peek(&self, key: &K) -> Decision {
            self.check_n(key, 0)
        }

        /// `key`'s state at the caller's `now`, charging nothing.
        #[inline]
        pub fn peek_at(&self, key: &K, now: Timestamp) -> Decision {
            self.check_n_at(key, 0, now)
        }
    };
}

/// The funnel's own calls: refunds and settle-later reservations (a window counter's state is
/// not an arrival time, so these are the funnel's only).
macro_rules! funnel_calls {
    () => {
        /// Gives back `n` units charged to `key`, now: its funnel's
        /// arrival time moves back by `n` emission intervals, but never below now, so a refund
        /// never leaves a funnel emptier than a fresh one. False when there was nothing to give
        /// back (the key is untracked or its funnel already empty). Use it to undo a charge for a
        /// request that was not served.
        ///
        /// # Examples
        ///
        /// ```
        /// use funnel::{clock::ManualClock, Limiter, Quota};
        ///
        /// let limiter = Limiter::<str>::builder(Quota::per_second(2)?)
        ///     .clock(ManualClock::new())
        ///     .build()?;
        /// assert!(limiter.check("k").is_allowed());
        /// assert!(limiter.check("k").is_allowed());
        /// assert!(!limiter.check("k").is_allowed());
        /// assert!(limiter.refund("k", 1)); // the second request was not served after all
        /// assert!(limiter.check("k").is_allowed());
        /// # Ok::<(), funnel::Error>(())
        /// ```
        pub fn refund(&self, key: &K, n: u64) -> bool {
            let (limiter, quota) = self.limiter_and_quota();
            limiter.refund_under(key, quota, n, limiter.now())
        }

        /// [`refund`](Self::refund) at the caller's `now`. Units charged under another quota go
        /// back through [`with_quota`](Limiter::with_quota)`(quota).refund_at(..)`.
        pub fn refund_at(&self, key: &K, n: u64, now: Timestamp) -> bool {
            let (limiter, quota) = self.limiter_and_quota();
            limiter.refund_under(key, quota, n, now)
        }

        /// Charges an estimate of `estimate` units to `key` now, as
        /// [`check_n`](Self::check_n) does; settle it with the actual cost by
        /// [`settle`](Limiter::settle) once known. Under another quota:
        /// [`with_quota`](Limiter::with_quota)`(quota).reserve(..)`.
        pub fn reserve(&self, key: &K, estimate: u64) -> Reservation {
            let (limiter, quota) = self.limiter_and_quota();
            limiter.reserve_under(key, quota, estimate, limiter.now())
        }

        /// [`reserve`](Self::reserve) at the caller's `now`.
        pub fn reserve_at(&self, key: &K, estimate: u64, now: Timestamp) -> Reservation {
            let (limiter, quota) = self.limiter_and_quota();
            limiter.reserve_under(key, quota, estimate, now)
        }
    };
}

impl<K: ?Sized, C, Q> Limiter<K, C, Q> {
    /// The limiter and the quota of the calls: its own.
    #[inline(always)]
    fn limiter_and_quota(&self) -> (&Self, &Q) {
        (self, self.quota())
    }
}

impl<'a, K: ?Sized, C> WithQuota<'a, K, C> {
    /// The limiter and the quota of the calls: the view's.
    #[inline(always)]
    fn limiter_and_quota(&self) -> (&'a Limiter<K, C>, &Quota) {
        (self.limiter(), self.quota())
    }
}

impl<K: Hash + ?Sized, C: Clock, Q: QuotaKind> Limiter<K, C, Q> {
    decision_calls!();
}

impl<K: Hash + ?Sized, C: Clock> Limiter<K, C> {
    funnel_calls!();
}

impl<K: Hash + ?Sized, C: Clock> WithQuota<'_, K, C> {
    decision_calls!();
    funnel_calls!();
}
