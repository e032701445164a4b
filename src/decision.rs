//! [`Decision`]: everything a proxy needs for its response, and CL.THROTTLE's five integers.

use std::time::Duration;

use crate::quota::Quota;

/// Why a request passed or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The request fit in the funnel and was charged.
    Allowed,
    /// The request did not fit now; it will after [`Decision::retry_after`].
    Limited,
    /// The request costs more than the limit and can never pass (CL.THROTTLE's retry of -1).
    CostExceedsLimit,
    /// A new key found the table full and the limiter was built with
    /// [`WhenFull::Deny`](crate::WhenFull::Deny); [`Decision::retry_after`] is when the
    /// least indebted candidate slot recovers.
    TurnedAway,
    /// A new key found the table full and the limiter was built with
    /// [`WhenFull::Allow`](crate::WhenFull::Allow): let through as a fresh funnel would, but
    /// not recorded.
    AllowedUntracked,
}

/// The answer to one request: allowed or not, and the numbers for `RateLimit` / `Retry-After`
/// headers, all taken from the same atomic snapshot of the funnel.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::{clock::ManualClock, Funnel, Quota};
///
/// let clock = ManualClock::new();
/// // 30 per minute, bursts of up to 16 (CL.THROTTLE's `15 30 60`).
/// let funnel = Funnel::with_clock(Quota::per_minute(30)?.with_limit(16)?, clock.clone());
/// let d = funnel.check();
/// assert!(d.is_allowed());
/// assert_eq!((d.limit(), d.remaining()), (16, 15));
/// assert_eq!(d.reset_after(), Duration::from_secs(2));
/// assert_eq!(d.to_cl_throttle(), [0, 16, 15, -1, 2]);
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "a decision does nothing unless its outcome is read"]
pub struct Decision {
    /// The limit in the low 61 bits (a quota's limit is at most `2^60`: its tolerance
    /// `T * limit` is, and `T >= 1`), the [`Outcome`] in the top three (`OUTCOME_SHIFT`).
    /// Packing keeps a decision at 32 bytes (four words) instead of 40.
    limit_and_outcome: u64,
    /// Emission interval of the quota used, ns (below `2^63`), with [`WINDOW`] set on a window
    /// counter's decisions; read through [`t`](Decision::t).
    t: u64,
    /// `TAT' - now`, ns, where `TAT'` is the funnel after this request (unchanged unless
    /// allowed); for `TurnedAway`, the same as `retry_after`.
    reset_after: u64,
    /// ns until the same request would pass; 0 unless `Limited` or `TurnedAway`.
    retry_after: u64,
}

const OUTCOME_SHIFT: u32 = 61;
const LIMIT_MASK: u64 = (1 << OUTCOME_SHIFT) - 1;
/// In `t`: the decision is a window counter's. Its `t` is then not an emission interval but
/// the one that encodes the units in use (`window::decision`), which redis-cell's microsecond
/// rounding would misreport, so [`Decision::to_cl_throttle`] gives the exact remaining units.
/// A funnel's `t` is at most `2^60` and a window's below `2^63` (`window::decision` clamps
/// it), so the top bit is free.
const WINDOW: u64 = 1 << 63;

const _: () = assert!(
    Quota::MAX_TOLERANCE_NANOS <= LIMIT_MASK,
    "any quota's limit fits below the outcome bits"
);
const _: () = assert!(std::mem::size_of::<Decision>() == 32);

impl Outcome {
    /// The three bits stored in a [`Decision`]. Allowed outcomes are the codes whose low two
    /// bits are 0, so `is_allowed` is one mask.
    #[inline]
    const fn code(self) -> u64 {
        match self {
            Outcome::Allowed => 0,
            Outcome::Limited => 1,
            Outcome::CostExceedsLimit => 2,
            Outcome::TurnedAway => 3,
            Outcome::AllowedUntracked => 4,
        }
    }

    #[inline]
    const fn from_code(code: u64) -> Outcome {
        match code {
            0 => Outcome::Allowed,
            1 => Outcome::Limited,
            2 => Outcome::CostExceedsLimit,
            3 => Outcome::TurnedAway,
            _ => Outcome::AllowedUntracked,
        }
    }
}

impl Decision {
    /// The request was charged; the funnel is back to a full burst after `reset_after` ns.
    #[inline]
    pub(crate) fn allowed(quota: &Quota, reset_after: u64) -> Self {
        Self::with_outcome(Outcome::Allowed, quota, reset_after, 0)
    }

    /// The request did not fit: it would after `retry_after` ns; nothing was charged, and the
    /// funnel is back to a full burst after `reset_after` ns.
    #[inline]
    pub(crate) fn limited(quota: &Quota, reset_after: u64, retry_after: u64) -> Self {
        Self::with_outcome(Outcome::Limited, quota, reset_after, retry_after)
    }

    /// The request costs more than the quota's limit and can never pass.
    #[inline]
    pub(crate) fn over_limit(quota: &Quota, reset_after: u64) -> Self {
        Self::with_outcome(Outcome::CostExceedsLimit, quota, reset_after, 0)
    }

    /// This decision of a fresh key's request, as let through untracked by a full table
    /// ([`WhenFull::Allow`](crate::WhenFull::Allow)): the same numbers, the outcome
    /// [`Outcome::AllowedUntracked`].
    #[inline]
    pub(crate) fn untracked(self) -> Self {
        self.relabel(Outcome::AllowedUntracked)
    }

    /// This decision of a fresh key's request, turned away by a full table
    /// ([`WhenFull::Deny`](crate::WhenFull::Deny)): the same limit, nothing remaining, a retry
    /// (and reset) `retry_after` ns from now, when the least indebted candidate frees its slot.
    #[inline]
    pub(crate) fn turned_away_for(self, retry_after: u64) -> Self {
        Decision {
            reset_after: retry_after,
            retry_after,
            ..self.relabel(Outcome::TurnedAway)
        }
    }

    /// This decision as a window counter's (see [`WINDOW`]).
    #[inline]
    pub(crate) fn of_window(self) -> Self {
        Decision {
            t: self.t | WINDOW,
            ..self
        }
    }

    /// The emission interval, without the [`WINDOW`] flag.
    #[inline]
    fn t(&self) -> u64 {
        self.t & !WINDOW
    }

    fn relabel(self, outcome: Outcome) -> Self {
        Decision {
            limit_and_outcome: (self.limit_and_outcome & LIMIT_MASK)
                | (outcome.code() << OUTCOME_SHIFT),
            ..self
        }
    }

    /// The common constructor: the quota gives the limit and the emission interval.
    #[inline]
    pub(crate) fn with_outcome(
        outcome: Outcome,
        quota: &Quota,
        reset_after: u64,
        retry_after: u64,
    ) -> Self {
        let limit = quota.limit;
        debug_assert!(limit <= LIMIT_MASK, "a quota's limit is at most 2^60");
        Decision {
            limit_and_outcome: (limit & LIMIT_MASK) | (outcome.code() << OUTCOME_SHIFT),
            t: quota.t,
            reset_after,
            retry_after,
        }
    }

    /// Why the request passed or not.
    #[inline]
    pub fn outcome(&self) -> Outcome {
        Outcome::from_code(self.limit_and_outcome >> OUTCOME_SHIFT)
    }

    /// True when the request may pass ([`Outcome::Allowed`] or [`Outcome::AllowedUntracked`]).
    #[inline]
    pub fn is_allowed(&self) -> bool {
        (self.limit_and_outcome >> OUTCOME_SHIFT) & 3 == 0
    }

    /// True when the request costs more than the limit and can never pass.
    #[inline]
    pub fn cost_exceeds_limit(&self) -> bool {
        self.outcome() == Outcome::CostExceedsLimit
    }

    /// The burst capacity (CL.THROTTLE's `max_burst + 1`, `X-RateLimit-Limit`).
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit_and_outcome & LIMIT_MASK
    }

    /// How many unit requests would pass right now, after this one: `floor((T * limit -
    /// (TAT' - now)) / T)`, clamped at 0. Exact to the nanosecond (see
    /// [`to_cl_throttle`](Self::to_cl_throttle) for redis-cell's microsecond rounding).
    #[inline]
    pub fn remaining(&self) -> u64 {
        if self.outcome() == Outcome::TurnedAway {
            return 0;
        }
        let t = self.t();
        let tau = t * self.limit();
        tau.saturating_sub(self.reset_after) / t
    }

    /// How long until this same request could pass, when it was limited or turned away;
    /// `None` when it was allowed or can never pass.
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        match self.outcome() {
            Outcome::Limited | Outcome::TurnedAway => Some(Duration::from_nanos(self.retry_after)),
            _ => None,
        }
    }

    /// How long until the funnel is completely empty again (full quota back).
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after)
    }

    /// CL.THROTTLE's reply: `[limited, limit, remaining, retry_after_s, reset_after_s]`, with
    /// redis-cell's rounding, so a proxy moving off Redis sends byte-identical headers.
    ///
    /// * seconds are truncated, then 1 is added when the fraction holds at least a whole
    ///   millisecond (3.333 s gives 4, 2.0009 s gives 2);
    /// * `retry_after_s` is -1 when allowed or when the cost exceeds the limit;
    /// * `remaining` divides whole microseconds as redis-cell does: when the emission interval
    ///   is not a whole number of microseconds it is above [`remaining`](Self::remaining), by up
    ///   to almost double when `T` is between 1 and 2 µs (`k 999 500250 1` reports 1997 of a
    ///   limit of 1000); below 1 µs per action, where redis-cell answers `i64::MAX`, the exact
    ///   value is given. Use [`remaining`](Self::remaining) for headers. A window counter's
    ///   decision (redis-cell has none) gives the exact [`remaining`](Self::remaining).
    pub fn to_cl_throttle(&self) -> [i64; 5] {
        let limited = i64::from(!self.is_allowed());
        let retry = match self.retry_after() {
            Some(_) => cl_seconds(self.retry_after),
            None => -1,
        };
        [
            limited,
            saturating_i64(self.limit()),
            saturating_i64(self.cl_remaining()),
            retry,
            cl_seconds(self.reset_after),
        ]
    }

    fn cl_remaining(&self) -> u64 {
        if self.outcome() == Outcome::TurnedAway {
            return 0;
        }
        let t = self.t();
        let tau = t * self.limit();
        if self.t & WINDOW != 0 || t < 1_000 || self.reset_after >= tau {
            return self.remaining();
        }
        ((tau - self.reset_after) / 1_000) / (t / 1_000)
    }
}

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decision")
            .field("outcome", &self.outcome())
            .field("limit", &self.limit())
            .field("t", &self.t())
            .field("reset_after", &self.reset_after)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

/// redis-cell's seconds: truncate, plus one when the remainder holds a whole millisecond.
fn cl_seconds(nanos: u64) -> i64 {
    let secs = nanos / 1_000_000_000;
    let round_up = (nanos % 1_000_000_000) / 1_000_000 > 0;
    saturating_i64(secs + u64::from(round_up))
}

fn saturating_i64(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up_only_from_a_whole_millisecond() {
        assert_eq!(cl_seconds(3_333_333_333), 4);
        assert_eq!(cl_seconds(2_000_900_000), 2);
        assert_eq!(cl_seconds(500_000), 0);
        assert_eq!(cl_seconds(1_000_000), 1);
        assert_eq!(cl_seconds(0), 0);
        assert_eq!(cl_seconds(2_000_000_000), 2);
    }

    #[test]
    fn microsecond_remaining_can_exceed_the_exact_one() {
        // next = 2_000_000 ns, T = 1_000_500 ns: exact floor 1, redis-cell's 2000 us / 1000 us = 2.
        let d = Decision::allowed(&Quota::view(1_000_500, 2), 1_000);
        assert_eq!(d.remaining(), 1);
        assert_eq!(d.to_cl_throttle()[2], 2);
    }

    #[test]
    fn every_outcome_round_trips_through_its_bits_beside_the_largest_limit() {
        for outcome in [
            Outcome::Allowed,
            Outcome::Limited,
            Outcome::CostExceedsLimit,
            Outcome::TurnedAway,
            Outcome::AllowedUntracked,
        ] {
            for limit in [1, 2, 1 << 40, Quota::MAX_TOLERANCE_NANOS] {
                let d = Decision::with_outcome(outcome, &Quota::view(1, limit), 0, 0);
                assert_eq!((d.outcome(), d.limit()), (outcome, limit));
                assert_eq!(
                    d.is_allowed(),
                    matches!(outcome, Outcome::Allowed | Outcome::AllowedUntracked)
                );
            }
        }
    }

    #[test]
    fn turned_away_reports_nothing_remaining_and_a_retry() {
        let fresh = Decision::allowed(&Quota::view(1_000_000_000, 5), 1_000_000_000);
        let d = fresh.turned_away_for(3_000_000_000);
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(d.to_cl_throttle(), [1, 5, 0, 3, 3]);
    }
}
