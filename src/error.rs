//! [`Error`]: every way a funnel quota, a time or a limiter configuration can be wrong, each
//! variant saying what was wrong and what the bounds are. The window counters' quotas, whose
//! bounds come from their packed words, have their own error type, [`WindowError`], which
//! converts into [`Error::Window`].

use std::fmt;
use std::time::Duration;

use crate::window::WindowError;

/// What went wrong when building a [`Quota`](crate::Quota), a
/// [`Timestamp`](crate::Timestamp) or a [`Limiter`](crate::Limiter). A window quota
/// ([`FixedWindowQuota`](crate::window::FixedWindowQuota),
/// [`SlidingWindowQuota`](crate::window::SlidingWindowQuota)) reports a [`WindowError`]
/// instead, which converts into [`Error::Window`], so `?` takes both in one function.
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
/// let err = Quota::new(15, 0, Duration::from_secs(60)).unwrap_err();
/// assert_eq!(err, Error::ZeroCount);
/// assert!(err.to_string().contains("count"));
///
/// // A window quota's error converts, so one `?` serves both kinds of quota.
/// use funnel::window::{FixedWindowQuota, WindowError};
/// fn quotas(per_minute: u64) -> Result<(Quota, FixedWindowQuota), Error> {
///     Ok((Quota::per_second(10)?, FixedWindowQuota::new(per_minute, Duration::from_secs(60))?))
/// }
/// assert!(quotas(600).is_ok());
/// assert_eq!(quotas(0).unwrap_err(), Error::Window(WindowError::ZeroLimit));
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
    /// The limit (burst capacity) was zero; the smallest limit is 1 (`max_burst` 0).
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
    /// A window quota was invalid (converted from [`WindowError`] by `?`).
    Window(WindowError),
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
            Error::Window(e) => write!(f, "window quota: {e}"),
        }
    }
}

/// No `source`: `Error::Window`'s message already includes its window error's, and error
/// reports that print the chain would show it twice; match the variant to get at it.
impl std::error::Error for Error {}

impl From<WindowError> for Error {
    fn from(e: WindowError) -> Error {
        Error::Window(e)
    }
}
