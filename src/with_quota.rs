//! [`WithQuota`]: a keyed funnel limiter seen under another quota for the calls made through
//! it. One vocabulary for "this call uses another quota": the view has the limiter's own
//! method names and signatures, so a per-call quota (as CL.THROTTLE takes one) or a per-key
//! override is `limiter.with_quota(q).check(key)`, whatever the operation.

use std::hash::Hash;

use crate::clock::{Clock, DefaultClock, Timestamp};
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::multi::Cost;
use crate::quota::Quota;
use crate::settle::Reservation;

/// A [`Limiter`] deciding under another [`Quota`]: made by [`Limiter::with_quota`] and
/// [`LiveLimiter::with_quota`](crate::LiveLimiter::with_quota). It borrows the limiter and
/// costs nothing to make; the keys' funnels are the limiter's own, so what is charged through
/// the view is charged to the limiter.
///
/// A key's state is its arrival time, which any quota reads: debt is kept as time, so a key
/// charged under one quota and checked under another keeps what it owes.
///
/// # Examples
///
/// ```
/// use funnel::{clock::ManualClock, Limiter, Quota};
///
/// let limiter = Limiter::<str>::builder(Quota::per_second(10)?).clock(ManualClock::new()).build()?;
/// // CL.THROTTLE style: the quota comes with the call.
/// let strict = limiter.with_quota(Quota::per_second(10)?.with_limit(2)?);
/// assert!(strict.check("k").is_allowed());
/// assert!(strict.check("k").is_allowed());
/// assert!(!strict.check("k").is_allowed());
/// assert!(strict.refund("k", 1)); // 100 ms back, one unit of the view's quota
/// assert_eq!(strict.peek("k").remaining(), 1);
/// // The limiter's own quota reads the same funnel: 100 ms of debt, 9 of 10 left.
/// assert_eq!(limiter.peek("k").remaining(), 9);
/// # Ok::<(), funnel::Error>(())
/// ```
pub struct WithQuota<'a, K: ?Sized, C = DefaultClock> {
    limiter: &'a Limiter<K, C>,
    quota: Quota,
}

impl<'a, K: ?Sized, C> WithQuota<'a, K, C> {
    #[inline(always)]
    pub(crate) fn new(limiter: &'a Limiter<K, C>, quota: Quota) -> Self {
        WithQuota { limiter, quota }
    }

    /// The quota the view decides under.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The limiter seen.
    pub fn limiter(&self) -> &'a Limiter<K, C> {
        self.limiter
    }
}

impl<'a, K: ?Sized, C> Clone for WithQuota<'a, K, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<'a, K: ?Sized, C> Copy for WithQuota<'a, K, C> {}

impl<'a, K: ?Sized, C> std::fmt::Debug for WithQuota<'a, K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithQuota")
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

impl<'a, K: Hash + ?Sized, C: Clock> WithQuota<'a, K, C> {
    /// One unit request for `key`, now, under the view's quota: [`Limiter::check`].
    #[inline(always)]
    pub fn check(&self, key: &K) -> Decision {
        self.limiter.decide_now(key, &self.quota, 1)
    }

    /// A request of `n` units for `key`, now: [`Limiter::check_n`].
    #[inline(always)]
    pub fn check_n(&self, key: &K, n: u64) -> Decision {
        self.limiter.decide_now(key, &self.quota, n)
    }

    /// [`check`](Self::check) at the caller's `now`: [`Limiter::check_at`].
    #[inline(always)]
    pub fn check_at(&self, key: &K, now: Timestamp) -> Decision {
        self.limiter.decide_at(key, &self.quota, 1, now)
    }

    /// [`check_n`](Self::check_n) at the caller's `now`: [`Limiter::check_n_at`].
    #[inline(always)]
    pub fn check_n_at(&self, key: &K, n: u64, now: Timestamp) -> Decision {
        self.limiter.decide_at(key, &self.quota, n, now)
    }

    /// `key`'s state now under the view's quota, charging nothing: [`Limiter::peek`] (which
    /// says what a key in debt beyond the tolerance answers).
    #[inline]
    pub fn peek(&self, key: &K) -> Decision {
        self.check_n(key, 0)
    }

    /// [`peek`](Self::peek) at the caller's `now`.
    #[inline]
    pub fn peek_at(&self, key: &K, now: Timestamp) -> Decision {
        self.check_n_at(key, 0, now)
    }

    /// Gives back `n` units of the view's quota to `key`, now: [`Limiter::refund`]. Pass the
    /// quota a charge was made under to give back exactly the time it took.
    pub fn refund(&self, key: &K, n: u64) -> bool {
        self.limiter
            .refund_under(key, &self.quota, n, self.limiter.now())
    }

    /// [`refund`](Self::refund) at the caller's `now`.
    pub fn refund_at(&self, key: &K, n: u64, now: Timestamp) -> bool {
        self.limiter.refund_under(key, &self.quota, n, now)
    }

    /// Charges an estimate under the view's quota, now: [`Limiter::reserve`]. The reservation
    /// remembers the quota and settles under it ([`Limiter::settle`]).
    pub fn reserve(&self, key: &K, estimate: u64) -> Reservation {
        self.limiter
            .reserve_under(key, &self.quota, estimate, self.limiter.now())
    }

    /// [`reserve`](Self::reserve) at the caller's `now`.
    pub fn reserve_at(&self, key: &K, estimate: u64, now: Timestamp) -> Reservation {
        self.limiter.reserve_under(key, &self.quota, estimate, now)
    }

    /// An entry charging `n` units to `key` under the view's quota, for
    /// [`check_all`](crate::check_all): [`Limiter::cost`].
    pub fn cost(&self, key: &'a K, n: u64) -> Cost<'a, K, C> {
        self.limiter.cost(key, n).under(self.quota)
    }
}
