//! Settle-later costs: charge an estimate now, settle the actual cost when it is known (the
//! size of a response, the tokens a model used), more or less than the estimate.
//!
//! The rules (`docs/design/policies.md`, "Settle-later costs"):
//! * **settling less** gives back the unused part of the estimate, but only the part that has
//!   not already leaked away since the reservation, and never beyond a fresh funnel;
//! * **settling more** charges the extra units whatever the funnel holds: it is a debt that must
//!   not be lost, so it may push the arrival time beyond the tolerance, and later requests of
//!   the key wait until it drains.

use std::hash::Hash;

use crate::clock::{Clock, Timestamp};
use crate::decision::{Decision, Outcome};
use crate::error::Error;
use crate::limiter::Limiter;
use crate::quota::Quota;
use crate::table::Updated;

/// An estimate charged by [`Limiter::reserve`], to be settled with the actual cost by
/// [`Limiter::settle`]. A plain value (it holds no borrow of the limiter or the key), so it can
/// travel with a request across an `await`.
///
/// It is bound to what it reserved: it records the key's fingerprint and the limiter's
/// identity, and settling it on another key or another limiter is an
/// [`Error::ReservationMismatch`] that changes nothing. Settling consumes it, and it is neither
/// `Clone` nor `Copy`, so a reservation settles once:
///
/// ```compile_fail,E0382
/// use funnel::{Limiter, Quota};
///
/// let limiter = Limiter::<str>::new(Quota::per_second(10)?);
/// let r = limiter.reserve("k", 4);
/// limiter.settle("k", r, 1)?;
/// limiter.settle("k", r, 1)?; // error[E0382]: use of moved value: `r`
/// # Ok::<(), funnel::Error>(())
/// ```
///
/// # Examples
///
/// ```
/// use funnel::{clock::ManualClock, Limiter, Quota, Settled};
///
/// // 1,000 tokens per minute per user, all at once if need be.
/// let limiter = Limiter::<str>::builder(Quota::per_minute(1_000)?)
///     .clock(ManualClock::new())
///     .build()?;
/// let r = limiter.reserve("user:7", 300); // the prompt's estimate
/// assert!(r.is_allowed());
/// assert_eq!(r.decision().remaining(), 700);
/// // ... the model answered with 120 tokens in all:
/// assert_eq!(limiter.settle("user:7", r, 120)?, Settled::Refunded);
/// assert_eq!(limiter.peek("user:7").remaining(), 880);
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reservation should be settled with the actual cost"]
pub struct Reservation {
    decision: Decision,
    quota: Quota,
    /// The reserved key's fingerprint under the limiter's hasher.
    key: u64,
    /// The identity of the limiter that made it.
    limiter: u64,
    /// Units actually stored by the reservation (0 unless `Allowed`).
    charged: u64,
    /// When the reservation was made, ns.
    at: u64,
}

impl Reservation {
    /// The reservation's decision, for the response headers.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// True when the estimate was admitted: serve the request, then settle it.
    pub fn is_allowed(&self) -> bool {
        self.decision.is_allowed()
    }

    /// Units the reservation charged: the estimate when admitted and recorded, 0 when denied
    /// or let through untracked.
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// The quota it was charged under; settling uses the same.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }
}

/// What [`Limiter::settle`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "`Lost` means the extra units were not recorded"]
#[non_exhaustive]
pub enum Settled {
    /// The actual cost was what the reservation charged: nothing to do.
    Exact,
    /// Unused units were given back (fewer than `charged - actual` when part of the estimate
    /// had already leaked away, or the funnel reached fresh).
    Refunded,
    /// Units were to be given back, but none were left: the estimate had leaked away, or the
    /// key was no longer tracked.
    NothingToRefund,
    /// The extra units were charged, even beyond the limit.
    Charged,
    /// The extra units could not be recorded: the key was no longer tracked and the table was
    /// full with [`WhenFull::Deny`](crate::WhenFull::Deny) or
    /// [`WhenFull::Allow`](crate::WhenFull::Allow).
    Lost,
}

impl<K: Hash + ?Sized, C: Clock> Limiter<K, C> {
    /// A reservation of `estimate` units of `quota` at `now`.
    pub(crate) fn reserve_under(
        &self,
        key: &K,
        quota: &Quota,
        estimate: u64,
        now: Timestamp,
    ) -> Reservation {
        let decision = self.decide_at(key, quota, estimate, now);
        let charged = if decision.outcome() == Outcome::Allowed {
            estimate
        } else {
            0
        };
        Reservation {
            decision,
            quota: *quota,
            key: self.fingerprint(key),
            limiter: self.id(),
            charged,
            at: now.as_nanos(),
        }
    }

    /// Settles `reservation` with the `actual` cost, now: gives back the unused part or charges
    /// the extra (see [`Settled`] and the module rules), under the quota it was reserved under.
    /// Settling consumes the reservation; settling a denied one charges `actual` as a debt (the
    /// caller says it was used).
    ///
    /// # Errors
    ///
    /// [`Error::ReservationMismatch`] when `reservation` was made by another limiter or for
    /// another key; nothing is changed.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{clock::ManualClock, Limiter, Quota, Settled};
    ///
    /// let limiter = Limiter::<u64>::builder(Quota::per_second(10)?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let r = limiter.reserve(&1, 4);
    /// assert_eq!(limiter.settle(&1, r, 25)?, Settled::Charged); // 21 more: a debt
    /// let d = limiter.check(&1);
    /// assert!(!d.is_allowed());
    /// assert_eq!(d.retry_after(), Some(std::time::Duration::from_millis(1_600)));
    /// # Ok::<(), funnel::Error>(())
    /// ```
    pub fn settle(&self, key: &K, reservation: Reservation, actual: u64) -> Result<Settled, Error> {
        self.settle_at(key, reservation, actual, self.now())
    }

    /// [`settle`](Self::settle) at the caller's `now`.
    pub fn settle_at(
        &self,
        key: &K,
        reservation: Reservation,
        actual: u64,
        now: Timestamp,
    ) -> Result<Settled, Error> {
        if reservation.limiter != self.id() {
            return Err(Error::ReservationMismatch {
                another_limiter: true,
            });
        }
        if reservation.key != self.fingerprint(key) {
            return Err(Error::ReservationMismatch {
                another_limiter: false,
            });
        }
        Ok(self.settle_checked(key, &reservation, actual, now))
    }

    /// [`settle_at`](Self::settle_at) of a reservation known to be this limiter's and `key`'s.
    fn settle_checked(
        &self,
        key: &K,
        reservation: &Reservation,
        actual: u64,
        now: Timestamp,
    ) -> Settled {
        let t = reservation.quota.t;
        let at = now.as_nanos();
        let charged = reservation.charged;
        if actual > charged {
            let extra = (actual - charged).saturating_mul(t);
            // A debt: charged whatever the funnel holds (the table clamps at its largest TAT).
            return match self.update_at(key, now, |tat| Some(tat.max(at).saturating_add(extra))) {
                Updated::Written(..) | Updated::Unchanged(_) => Settled::Charged,
                Updated::Full => Settled::Lost,
            };
        }
        if actual == charged {
            return Settled::Exact;
        }
        // Give back only what has not leaked: the reservation's own units end at `top`, the
        // arrival time it wrote, and those below `now` are gone.
        let top = reservation.at + reservation.decision.reset_after().as_nanos() as u64;
        let back = ((charged - actual).saturating_mul(t)).min(top.saturating_sub(at));
        if back == 0 {
            return Settled::NothingToRefund;
        }
        match self.update_at(key, now, |tat| {
            (tat > at).then(|| tat.saturating_sub(back).max(at))
        }) {
            Updated::Written(..) => Settled::Refunded,
            Updated::Unchanged(_) | Updated::Full => Settled::NothingToRefund,
        }
    }
}
