//! [`Error`]: every way a quota (funnel or window), a time, a limiter configuration or a
//! reservation's settlement can be wrong, each variant saying what was wrong and what the
//! bounds are. It depends on nothing else in the crate.

use std::fmt;
use std::time::Duration;

/// What went wrong when building a [`Quota`](crate::Quota), a window quota
/// ([`FixedWindowQuota`](crate::window::FixedWindowQuota),
/// [`SlidingWindowQuota`](crate::window::SlidingWindowQuota)), a
/// [`Timestamp`](crate::Timestamp) or a [`Limiter`](crate::Limiter), or when settling a
/// [`Reservation`](crate::Reservation) on a key or a limiter it was not made for. One type for
/// all of them, so one `?` serves every constructor.
///
/// Decisions themselves never fail: a cost that can never pass is an ordinary
/// [`Decision`](crate::Decision) whose [`cost_exceeds_limit`](crate::Decision::cost_exceeds_limit)
/// is true.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::{Error, Quota};
///
/// let err = Quota::per_period(0, Duration::from_secs(60)).unwrap_err();
/// assert_eq!(err, Error::ZeroCount);
/// assert!(err.to_string().contains("count"));
///
/// // Window quotas report the same type, so one `?` serves both kinds of quota.
/// use funnel::window::FixedWindowQuota;
/// fn quotas(per_minute: u64) -> Result<(Quota, FixedWindowQuota), Error> {
///     Ok((Quota::per_second(10)?, FixedWindowQuota::per_minute(per_minute)?))
/// }
/// assert!(quotas(600).is_ok());
/// assert_eq!(quotas(0).unwrap_err(), Error::ZeroLimit);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `count` (actions per period) was zero: a funnel that never leaks is not a rate.
    ZeroCount,
    /// The period was zero.
    ZeroPeriod,
    /// `period / count` is under one nanosecond, the clock's resolution.
    EmissionIntervalTooSmall {
        /// The period asked for.
        period: Duration,
        /// The count asked for.
        count: u64,
    },
    /// `max_burst + 1` does not fit in a `u64`.
    BurstTooLarge {
        /// The max_burst asked for.
        max_burst: u64,
    },
    /// The limit (a funnel's burst capacity, or a window's units per window) was zero; the
    /// smallest limit is 1 (`max_burst` 0).
    ZeroLimit,
    /// The tolerance `emission interval * limit` (how far ahead of now a funnel may be filled)
    /// exceeds the largest representable span.
    ToleranceTooLarge {
        /// `emission interval * limit` in nanoseconds, as an exact 128-bit product.
        tolerance_nanos: u128,
        /// The largest tolerance accepted, [`Quota::MAX_TOLERANCE_NANOS`](crate::Quota::MAX_TOLERANCE_NANOS)
        /// (about 36.5 years).
        max_nanos: u64,
    },
    /// A CL.THROTTLE-style argument was negative (`max_burst`, `count`, `period` or `quantity`).
    Negative {
        /// Which argument.
        argument: &'static str,
        /// Its value.
        value: i64,
    },
    /// A timestamp lies beyond [`Timestamp::MAX`](crate::Timestamp::MAX) (about 109 years after
    /// the clock's origin).
    TimeOutOfRange {
        /// The time asked for, in nanoseconds since the clock's origin.
        nanos: u128,
        /// The latest time accepted, [`Timestamp::MAX`](crate::Timestamp::MAX) in nanoseconds.
        max_nanos: u64,
    },
    /// A limiter's capacity or maximum capacity was zero.
    ZeroCapacity,
    /// A limiter's capacity is above the largest supported table.
    CapacityTooLarge {
        /// The capacity asked for, in keys.
        requested: usize,
        /// The largest capacity accepted, in keys.
        max: usize,
    },
    /// A growable limiter's maximum capacity is below its initial capacity.
    MaxCapacityBelowCapacity {
        /// The initial capacity asked for, in keys.
        capacity: usize,
        /// The maximum capacity asked for, in keys.
        max_capacity: usize,
    },
    /// The table's memory could not be allocated.
    OutOfMemory {
        /// Bytes the table needed.
        bytes: usize,
    },
    /// A window quota's limit does not fit its packed word's count field (22 bits for a fixed
    /// window, 15 for a sliding one).
    WindowLimitTooLarge {
        /// The limit asked for.
        limit: u64,
        /// The largest limit accepted.
        max: u64,
    },
    /// A window is shorter than its packed word's window index allows over the clock's range
    /// (4 ms for a fixed window, 1 s for a sliding one).
    WindowTooShort {
        /// The window asked for.
        window: Duration,
        /// The shortest window accepted.
        min: Duration,
    },
    /// A window quota's `window * limit` exceeds 2^62 ns (the decision's arithmetic bound).
    WindowTooLong {
        /// The window asked for.
        window: Duration,
        /// The limit asked for.
        limit: u64,
    },
    /// A [`Reservation`](crate::Reservation) was settled on a key or a limiter it was not made
    /// for. Nothing was changed; settle it on the key and limiter that made it.
    ReservationMismatch {
        /// True when the reservation came from another limiter; false when it came from this
        /// limiter for another key.
        another_limiter: bool,
    },
    /// The builder was given a seed ([`Builder::seed`](crate::Builder::seed)) after a saved
    /// state ([`Builder::restore`](crate::Builder::restore)) holding another one: the saved
    /// fingerprints would match no key.
    SeedConflict,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ZeroCount => f.write_str("count must be at least 1 action per period"),
            Error::ZeroPeriod => f.write_str("period must be longer than zero"),
            Error::EmissionIntervalTooSmall { period, count } => write!(
                f,
                "{count} actions per {period:?} is under 1 ns per action; \
                 count must be at most the period in nanoseconds ({})",
                period.as_nanos()
            ),
            Error::BurstTooLarge { max_burst } => {
                write!(
                    f,
                    "max_burst {max_burst} is too large: max_burst + 1 must fit in a u64"
                )
            }
            Error::ZeroLimit => f.write_str("limit must be at least 1 (max_burst 0)"),
            Error::WindowLimitTooLarge { limit, max } => {
                write!(f, "a window's limit of {limit} exceeds the largest, {max}")
            }
            Error::WindowTooShort { window, min } => write!(
                f,
                "a window of {window:?} is shorter than the shortest, {min:?}"
            ),
            Error::WindowTooLong { window, limit } => write!(
                f,
                "a window of {window:?} times a limit of {limit} exceeds 2^62 ns"
            ),
            Error::ReservationMismatch { another_limiter } => {
                let whose = if *another_limiter {
                    "was made by another limiter"
                } else {
                    "is for another key"
                };
                write!(f, "the reservation {whose}; nothing was settled")
            }
            Error::ToleranceTooLarge {
                tolerance_nanos,
                max_nanos,
            } => write!(
                f,
                "emission interval * limit is {tolerance_nanos} ns, above the maximum of \
                 {max_nanos} ns (about 36.5 years): lower the limit or the period"
            ),
            Error::Negative { argument, value } => {
                write!(f, "{argument} must not be negative (got {value})")
            }
            Error::TimeOutOfRange { nanos, max_nanos } => write!(
                f,
                "time {nanos} ns is beyond the supported range of 0..={max_nanos} ns (about 109 years)"
            ),
            Error::ZeroCapacity => {
                f.write_str("capacity and max_capacity must each be at least 1 key")
            }
            Error::CapacityTooLarge { requested, max } => {
                write!(
                    f,
                    "capacity of {requested} keys is above the maximum of {max}"
                )
            }
            Error::MaxCapacityBelowCapacity {
                capacity,
                max_capacity,
            } => write!(
                f,
                "max_capacity of {max_capacity} keys is below the initial capacity of {capacity}"
            ),
            Error::OutOfMemory { bytes } => {
                write!(
                    f,
                    "could not allocate {bytes} bytes for the limiter's table"
                )
            }
            Error::SeedConflict => f.write_str(
                "the builder's seed differs from the one of the saved state it restores",
            ),
        }
    }
}

impl std::error::Error for Error {}
