//! [`Quota`]: a funnel's size and leak rate, validated once so the hot path never overflows.

use std::time::Duration;

use crate::error::Error;
use crate::state::MAX_TOLERANCE_NANOS;

/// A funnel's parameters: a **limit** (burst capacity: how many actions a fresh funnel admits at
/// once) and a leak rate of `count` actions per `period`.
///
/// Internally a quota is an **emission interval** `T = period / count` (whole nanoseconds,
/// truncated as redis-cell does) and a **tolerance** `T * limit`: how far ahead of now a funnel
/// may be filled. Every constructor checks that both are representable, so deciding never
/// overflows.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::Quota;
///
/// // 10 requests per second, up to 20 at once.
/// let q = Quota::per_second(10)?.with_limit(20)?;
/// assert_eq!(q.limit(), 20);
/// assert_eq!(q.emission_interval(), Duration::from_millis(100));
///
/// // 30 actions per minute, up to 30 at once (the limit defaults to the count).
/// let q = Quota::per_minute(30)?;
/// assert_eq!((q.limit(), q.emission_interval()), (30, Duration::from_secs(2)));
///
/// // Any period: one action per 250 ms, one at a time.
/// let q = Quota::per_period(1, Duration::from_millis(250))?;
/// assert_eq!(q.emission_interval(), Duration::from_millis(250));
///
/// // CL.THROTTLE user123 15 30 60, whose limit is max_burst + 1, through its named door.
/// let q = Quota::from_cl_throttle(15, 30, 60)?;
/// assert_eq!((q.limit(), q.max_burst()), (16, 15));
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    /// Emission interval `T`, ns, `>= 1`.
    pub(crate) t: u64,
    /// Burst capacity, `>= 1`.
    pub(crate) limit: u64,
    /// `t * limit`, `<= MAX_TOLERANCE_NANOS`.
    pub(crate) tau: u64,
}

impl Quota {
    /// The largest tolerance (`emission interval * limit`, how far ahead of now a funnel may
    /// be filled) a quota may have: 2^60 ns, about 36.5 years.
    pub const MAX_TOLERANCE_NANOS: u64 = MAX_TOLERANCE_NANOS;

    /// A quota seen only through its emission interval and limit, for building a
    /// [`Decision`](crate::Decision) whose numbers come from elsewhere (a window's state, a
    /// placeholder). Its tolerance saturates; it never decides.
    #[inline]
    pub(crate) const fn view(t: u64, limit: u64) -> Quota {
        Quota {
            t,
            limit,
            tau: t.saturating_mul(limit),
        }
    }

    /// `count` actions per `period`, with bursts of up to `max_burst + 1` actions at once:
    /// CL.THROTTLE's `<max_burst> <count> <period>`, with any `Duration` as the period. For
    /// quotas that are not CL.THROTTLE's, [`per_period`](Self::per_period) and
    /// [`with_limit`](Self::with_limit) say the limit itself.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCount`], [`Error::ZeroPeriod`], [`Error::EmissionIntervalTooSmall`] when
    /// `period / count` is under 1 ns, [`Error::BurstTooLarge`] when `max_burst + 1` overflows,
    /// [`Error::ToleranceTooLarge`] when `T * limit` exceeds 2^60 ns (36.5 years).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use funnel::Quota;
    ///
    /// // CL.THROTTLE k 0 4 1, with the period as a Duration: 4 per second, one at a time.
    /// let q = Quota::from_cl_throttle_period(0, 1, Duration::from_millis(250))?;
    /// assert_eq!(q, Quota::per_second(4)?.with_limit(1)?);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    pub fn from_cl_throttle_period(
        max_burst: u64,
        count: u64,
        period: Duration,
    ) -> Result<Quota, Error> {
        let limit = max_burst
            .checked_add(1)
            .ok_or(Error::BurstTooLarge { max_burst })?;
        Self::with_count(limit, count, period)
    }

    /// The same quota as `CL.THROTTLE <key> <max_burst> <count> <period_secs>`, from the signed
    /// integers the command takes. Negative arguments, which redis-cell silently accepts as
    /// "always limited", are an error here.
    ///
    /// # Errors
    ///
    /// [`Error::Negative`] for a negative argument, then as
    /// [`from_cl_throttle_period`](Self::from_cl_throttle_period).
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{Error, Quota};
    ///
    /// assert_eq!(Quota::from_cl_throttle(15, 30, 60)?.limit(), 16);
    /// assert_eq!(
    ///     Quota::from_cl_throttle(-1, 30, 60),
    ///     Err(Error::Negative { argument: "max_burst", value: -1 })
    /// );
    /// # Ok::<(), funnel::Error>(())
    /// ```
    pub fn from_cl_throttle(max_burst: i64, count: i64, period_secs: i64) -> Result<Quota, Error> {
        let non_negative = |argument, value: i64| {
            u64::try_from(value).map_err(|_| Error::Negative { argument, value })
        };
        let max_burst = non_negative("max_burst", max_burst)?;
        let count = non_negative("count", count)?;
        let period = non_negative("period", period_secs)?;
        Quota::from_cl_throttle_period(max_burst, count, Duration::from_secs(period))
    }

    /// `count` actions per second, with bursts of up to `count` (governor's `per_second`).
    ///
    /// # Errors
    ///
    /// As [`per_period`](Self::per_period); `count` 0 is [`Error::ZeroCount`].
    pub fn per_second(count: u64) -> Result<Quota, Error> {
        Self::with_count(count, count, Duration::from_secs(1))
    }

    /// `count` actions per minute, with bursts of up to `count`.
    ///
    /// # Errors
    ///
    /// As [`per_period`](Self::per_period).
    pub fn per_minute(count: u64) -> Result<Quota, Error> {
        Self::with_count(count, count, Duration::from_secs(60))
    }

    /// `count` actions per hour, with bursts of up to `count`.
    ///
    /// # Errors
    ///
    /// As [`per_period`](Self::per_period).
    pub fn per_hour(count: u64) -> Result<Quota, Error> {
        Self::with_count(count, count, Duration::from_secs(3600))
    }

    /// `count` actions per `period`, with bursts of up to `count`.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCount`], [`Error::ZeroPeriod`], [`Error::EmissionIntervalTooSmall`] when
    /// `period / count` is under 1 ns, [`Error::ToleranceTooLarge`] when `period` (the
    /// tolerance, `T * count`) exceeds 2^60 ns (36.5 years).
    pub fn per_period(count: u64, period: Duration) -> Result<Quota, Error> {
        Self::with_count(count, count, period)
    }

    /// The same leak rate with a burst capacity of `limit` actions.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::Quota;
    ///
    /// // 10 per second, bursts of up to 20.
    /// let q = Quota::per_second(10)?.with_limit(20)?;
    /// assert_eq!((q.limit(), q.emission_interval().as_millis()), (20, 100));
    /// # Ok::<(), funnel::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::ZeroLimit`], or [`Error::ToleranceTooLarge`] when `T * limit` is too large.
    pub fn with_limit(self, limit: u64) -> Result<Quota, Error> {
        Self::from_parts(self.t, limit)
    }

    /// The burst capacity: how many unit actions a fresh funnel admits at once.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// CL.THROTTLE's `max_burst`: `limit - 1`.
    pub fn max_burst(&self) -> u64 {
        self.limit - 1
    }

    /// The emission interval `T`: one unit of capacity leaks back every `T`.
    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.t)
    }

    /// The tolerance `T * limit`: how long a full funnel takes to drain completely.
    pub fn tolerance(&self) -> Duration {
        Duration::from_nanos(self.tau)
    }

    fn with_count(limit: u64, count: u64, period: Duration) -> Result<Quota, Error> {
        if count == 0 {
            return Err(Error::ZeroCount);
        }
        if period.is_zero() {
            return Err(Error::ZeroPeriod);
        }
        let t = period.as_nanos() / u128::from(count);
        if t == 0 {
            return Err(Error::EmissionIntervalTooSmall { period, count });
        }
        let t = u64::try_from(t).map_err(|_| Error::ToleranceTooLarge {
            tolerance_nanos: t.saturating_mul(u128::from(limit)),
            max_nanos: MAX_TOLERANCE_NANOS,
        })?;
        Self::from_parts(t, limit)
    }

    fn from_parts(t: u64, limit: u64) -> Result<Quota, Error> {
        if limit == 0 {
            return Err(Error::ZeroLimit);
        }
        let tau = u128::from(t) * u128::from(limit);
        if tau > u128::from(MAX_TOLERANCE_NANOS) {
            return Err(Error::ToleranceTooLarge {
                tolerance_nanos: tau,
                max_nanos: MAX_TOLERANCE_NANOS,
            });
        }
        Ok(Quota {
            t,
            limit,
            // Cannot truncate: checked against MAX_TOLERANCE_NANOS just above.
            tau: tau as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cl_throttle_parameters_give_limit_and_interval() {
        let q = Quota::from_cl_throttle_period(15, 30, Duration::from_secs(60)).unwrap();
        assert_eq!((q.t, q.limit, q.tau), (2_000_000_000, 16, 32_000_000_000));
        // 0 3 10: T = 3.333... s truncated to the nanosecond.
        let q = Quota::from_cl_throttle(0, 3, 10).unwrap();
        assert_eq!(q.t, 3_333_333_333);
    }

    #[test]
    fn zero_and_tiny_rates_are_typed_errors() {
        let s = Duration::from_secs(1);
        assert_eq!(
            Quota::from_cl_throttle_period(1, 0, s),
            Err(Error::ZeroCount)
        );
        assert_eq!(
            Quota::from_cl_throttle_period(1, 1, Duration::ZERO),
            Err(Error::ZeroPeriod)
        );
        assert_eq!(
            Quota::from_cl_throttle_period(1, 2_000_000_000, s),
            Err(Error::EmissionIntervalTooSmall {
                period: s,
                count: 2_000_000_000
            })
        );
        assert_eq!(
            Quota::from_cl_throttle_period(1, 1_000_000_000, s)
                .unwrap()
                .t,
            1
        );
        assert_eq!(Quota::per_second(0), Err(Error::ZeroCount));
        assert_eq!(
            Quota::per_second(5).unwrap().with_limit(0),
            Err(Error::ZeroLimit)
        );
    }

    #[test]
    fn huge_values_are_errors_not_wraps() {
        let s = Duration::from_secs(1);
        assert_eq!(
            Quota::from_cl_throttle_period(u64::MAX, 1, s),
            Err(Error::BurstTooLarge {
                max_burst: u64::MAX
            })
        );
        assert!(matches!(
            Quota::from_cl_throttle_period(u64::MAX - 1, 1, s),
            Err(Error::ToleranceTooLarge { .. })
        ));
        assert!(matches!(
            Quota::from_cl_throttle(i64::MAX, 1, 1),
            Err(Error::BurstTooLarge { .. }) | Err(Error::ToleranceTooLarge { .. })
        ));
        assert!(matches!(
            Quota::from_cl_throttle(10, 1, i64::MAX),
            Err(Error::ToleranceTooLarge { .. })
        ));
        assert!(matches!(
            Quota::from_cl_throttle_period(0, 1, Duration::MAX),
            Err(Error::ToleranceTooLarge { .. })
        ));
        assert_eq!(
            Quota::from_cl_throttle(1, i64::MIN, 1),
            Err(Error::Negative {
                argument: "count",
                value: i64::MIN
            })
        );
        assert_eq!(
            Quota::from_cl_throttle(1, 1, -5),
            Err(Error::Negative {
                argument: "period",
                value: -5
            })
        );
    }

    #[test]
    fn the_tolerance_bound_is_inclusive() {
        let q = Quota::from_cl_throttle_period(0, 1, Duration::from_nanos(MAX_TOLERANCE_NANOS))
            .unwrap();
        assert_eq!(q.tau, MAX_TOLERANCE_NANOS);
        assert!(Quota::from_cl_throttle_period(
            0,
            1,
            Duration::from_nanos(MAX_TOLERANCE_NANOS + 1)
        )
        .is_err());
    }
}
