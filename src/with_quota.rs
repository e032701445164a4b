//! [`WithQuota`]: a keyed funnel limiter seen under another quota for the calls made through
//! it. One vocabulary for "this call uses another quota": the view has the limiter's own
//! calls (written once for both, `keyed.rs`), so a per-call quota (as CL.THROTTLE takes one)
//! or a per-key override is `limiter.with_quota(q).check(key)`, whatever the operation.

use std::hash::Hash;

use crate::clock::{Clock, QuantaClock};
use crate::limiter::Limiter;
use crate::multi::CheckAllEntry;
use crate::quota::Quota;

/// A [`Limiter`] deciding under another [`Quota`]: made by [`Limiter::with_quota`] and
/// [`LiveLimiter::current`](crate::LiveLimiter::current). It has the limiter's calls, the same
/// code under the view's quota. It borrows the limiter and
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
pub struct WithQuota<'a, K: ?Sized, C = QuantaClock> {
    limiter: &'a Limiter<K, C>,
    quota: Quota,
}

impl<'a, K: ?Sized, C> WithQuota<'a, K, C> {
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
    /// An entry charging `n` units to `key` under the view's quota, for
    /// [`check_all`](crate::check_all): [`Limiter::cost`].
    pub fn cost(&self, key: &'a K, n: u64) -> CheckAllEntry<'a, K, C> {
        self.limiter.cost(key, n).under(self.quota)
    }
}

impl<K: Hash + ?Sized, C: Clock> Limiter<K, C> {
    /// A view of this limiter deciding under `quota` instead of its own, with the same
    /// calls ([`check`](WithQuota::check), [`peek`](WithQuota::peek),
    /// [`refund`](WithQuota::refund), [`reserve`](WithQuota::reserve),
    /// [`cost`](WithQuota::cost), ...): a per-call quota, as CL.THROTTLE takes its parameters
    /// on every call, or a per-key override. The funnel's state is only its arrival time, so
    /// quotas may change between calls without losing the key's debt.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{Limiter, Quota};
    ///
    /// let limiter = Limiter::<str>::new(Quota::per_second(10)?);
    /// let premium = Quota::per_second(10)?.with_limit(100)?;
    /// let quota_for = |key: &str| if key.starts_with("vip:") { premium } else { *limiter.quota() };
    /// assert_eq!(limiter.with_quota(quota_for("vip:ada")).check("vip:ada").remaining(), 99);
    /// assert_eq!(limiter.with_quota(quota_for("bob")).check("bob").remaining(), 9);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    #[inline(always)]
    pub fn with_quota(&self, quota: Quota) -> WithQuota<'_, K, C> {
        WithQuota {
            limiter: self,
            quota,
        }
    }
}
