//! The funnel arithmetic (GCRA on a theoretical arrival time), pure integers, no atomics.
//!
//! A funnel of limit `L` leaking one unit every `T` is one number, its theoretical arrival time
//! `TAT`: its fill level is `(TAT - now) / T` units. A request of `n` units computes
//! `new = max(TAT, now) + n * T` and is allowed iff `new - T * L <= now`; only then is
//! `TAT = new` written. `TAT <= now` is a funnel that has fully drained ("recovered"): it is
//! indistinguishable from a key never seen, which is what lets the keyed table evict lazily.
//!
//! [`Quota::decide_at`] is this step made public, for backends that keep arrival times
//! elsewhere; it lives here, with the arithmetic, so that `quota` depends on neither this
//! module nor [`Decision`].

use crate::clock::Timestamp;
use crate::decision::Decision;
use crate::quota::Quota;

/// Decides a request of `n` units at `now` on a funnel whose stored arrival time is `tat`
/// (`0`, or any value `<= now`, is a fresh funnel). Returns the decision and, when the funnel
/// must change, the arrival time to store; `None` means write nothing (a denial or a peek).
///
/// Requires `now <= MAX_TIME_NANOS` and `tat <= MAX_TAT` (the [`Timestamp`]
/// type and the packed word guarantee both); then no operation below can overflow:
/// `n * T <= T * L <= 2^60`, and `max(tat, now) + n * T < 2^63`.
#[inline(always)]
pub(crate) fn decide(tat: u64, now: u64, quota: &Quota, n: u64) -> (Decision, Option<u64>) {
    let Quota { t, limit, tau } = *quota;
    // A quota's limit is at least 1 (`Quota::from_parts`); the `max` says so to the compiler,
    // which then drops this test from every one-unit request.
    if n > limit.max(1) {
        // Can never fit; redis-cell answers "limited, retry -1" and writes nothing.
        let reset = tat.saturating_sub(now);
        return (Decision::over_limit(quota, reset), None);
    }
    let base = if tat > now { tat } else { now };
    let new = base + n * t;
    if new <= now + tau {
        let write = if n == 0 { None } else { Some(new) };
        (Decision::allowed(quota, new - now), write)
    } else {
        // Denied implies tat > now (a fresh funnel admits any n <= limit), so both
        // differences are positive; saturating keeps that true even if a caller breaks it.
        let retry = new.saturating_sub(tau).saturating_sub(now);
        let reset = tat.saturating_sub(now);
        (Decision::limited(quota, reset, retry), None)
    }
}

/// The funnel arithmetic itself, for backends that keep a funnel's state elsewhere.
impl Quota {
    /// Decides a request of `n` units at `now` on a funnel whose stored theoretical arrival
    /// time is `tat` ([`Timestamp::ZERO`], or anything not after `now`, is an empty funnel):
    /// the same pure step every [`Limiter`](crate::Limiter) and [`Funnel`](crate::Funnel)
    /// decision takes. Returns the decision and, when the request is charged, the arrival
    /// time to store; `None` means store nothing (a denial or a peek).
    ///
    /// A backend that keeps arrival times elsewhere (a Redis script, a database) can store
    /// them there and still answer with the very [`Decision`] the in-process limiter gives.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use funnel::{Quota, Timestamp};
    ///
    /// let quota = Quota::per_second(1)?.with_limit(2)?; // 1 per second, 2 at once
    /// let now = Timestamp::from_nanos(10_000_000_000)?;
    /// let (d, tat) = quota.decide_at(Timestamp::ZERO, now, 1);
    /// assert!(d.is_allowed());
    /// let (d, tat) = quota.decide_at(tat.unwrap(), now, 1);
    /// assert!(d.is_allowed());
    /// let (d, write) = quota.decide_at(tat.unwrap(), now, 1);
    /// assert!(!d.is_allowed());
    /// assert_eq!(write, None);
    /// assert_eq!(d.retry_after(), Some(Duration::from_secs(1)));
    /// # Ok::<(), funnel::Error>(())
    /// ```
    pub fn decide_at(
        &self,
        tat: Timestamp,
        now: Timestamp,
        n: u64,
    ) -> (Decision, Option<Timestamp>) {
        let (decision, write) = decide(tat.as_nanos(), now.as_nanos(), self, n);
        // A written TAT is at most `now + tolerance`; beyond `Timestamp::MAX` it saturates
        // (the arithmetic itself never overflows, see `decide` above).
        let write = write.map(|t| Timestamp::from_nanos(t).unwrap_or(Timestamp::MAX));
        (decision, write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;

    fn q(b: u64, c: u64, p: u64) -> Quota {
        Quota::from_cl_throttle_period(b, c, Duration::from_secs(p)).unwrap()
    }

    #[test]
    fn a_fresh_funnel_admits_exactly_its_limit_then_limits() {
        let quota = q(15, 30, 60);
        let mut tat = 0;
        for i in 0..16 {
            let (d, w) = decide(tat, 0, &quota, 1);
            assert!(d.is_allowed(), "request {i}");
            assert_eq!(d.remaining(), 15 - i);
            tat = w.unwrap();
        }
        let (d, w) = decide(tat, 0, &quota, 1);
        assert_eq!(d.to_cl_throttle(), [1, 16, 0, 2, 32]);
        assert_eq!(w, None);
    }

    #[test]
    fn a_peek_writes_nothing_even_when_allowed() {
        let (d, w) = decide(0, 5 * S, &q(4, 1, 1), 0);
        assert_eq!(d.to_cl_throttle(), [0, 5, 5, -1, 0]);
        assert_eq!(w, None);
    }

    #[test]
    fn a_cost_above_the_limit_never_passes_and_writes_nothing() {
        let (d, w) = decide(0, 0, &q(4, 1, 1), 6);
        assert!(d.cost_exceeds_limit());
        assert_eq!(d.to_cl_throttle(), [1, 5, 5, -1, 0]);
        assert_eq!(w, None);
        let (d, _) = decide(0, 0, &q(4, 1, 1), u64::MAX);
        assert!(d.cost_exceeds_limit());
    }

    #[test]
    fn time_going_backwards_only_makes_the_funnel_stricter() {
        let quota = q(0, 1, 10);
        let (_, w) = decide(0, 100 * S, &quota, 1);
        let tat = w.unwrap();
        // Ask again "earlier" than the first request: still limited.
        let (d, w) = decide(tat, 50 * S, &quota, 1);
        assert!(!d.is_allowed());
        assert_eq!(w, None);
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.retry_after(), Some(Duration::from_secs(60)));
    }

    #[test]
    fn the_extremes_of_time_and_tolerance_do_not_overflow() {
        use crate::state::{MAX_TAT, MAX_TIME_NANOS, MAX_TOLERANCE_NANOS};
        let quota = Quota::per_period(1, Duration::from_nanos(MAX_TOLERANCE_NANOS)).unwrap();
        let (d, w) = decide(0, MAX_TIME_NANOS, &quota, 1);
        assert!(d.is_allowed());
        assert_eq!(w, Some(MAX_TIME_NANOS + MAX_TOLERANCE_NANOS));
        let (d, w) = decide(MAX_TAT, 0, &quota, 1);
        assert!(!d.is_allowed());
        assert_eq!(w, None);
    }
}
