//! Time: [`Timestamp`] (nanoseconds since a clock's origin), the [`Clock`] trait, the default
//! [`QuantaClock`], [`StdClock`], and [`ManualClock`] for tests and simulations.
//!
//! **Resolution** is one nanosecond. **Range** is [`Timestamp::MAX`], about 109 years after the
//! clock's origin (a limiter's clock starts at 0 when it is built), so no limiter wraps around in
//! any realistic uptime; a clock that ever got past it would stay at `MAX`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::state::MAX_TIME_NANOS;

/// A point in time: nanoseconds since a clock's origin, at most [`Timestamp::MAX`].
///
/// Every decision has a variant taking a `Timestamp` (`check_at`, `check_n_at`, ...), so an
/// event loop that reads the time once per iteration pays for no second clock read.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::Timestamp;
///
/// let t = Timestamp::from_nanos(1_500)?;
/// assert_eq!(t.as_nanos(), 1_500);
/// assert_eq!(Timestamp::from_duration(Duration::from_secs(2))?.as_nanos(), 2_000_000_000);
/// assert!(Timestamp::from_nanos(u64::MAX).is_err());
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The clock's origin.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The latest representable time: `3 * 2^60 - 32` ns, about 109.6 years after the origin.
    pub const MAX: Timestamp = Timestamp(MAX_TIME_NANOS);

    /// The time `nanos` nanoseconds after the origin.
    ///
    /// # Errors
    ///
    /// [`Error::TimeOutOfRange`] beyond [`Timestamp::MAX`].
    #[inline]
    pub fn from_nanos(nanos: u64) -> Result<Timestamp, Error> {
        if nanos <= MAX_TIME_NANOS {
            Ok(Timestamp(nanos))
        } else {
            Err(Error::TimeOutOfRange {
                nanos: u128::from(nanos),
                max_nanos: MAX_TIME_NANOS,
            })
        }
    }

    /// The time `since_origin` after the origin.
    ///
    /// # Errors
    ///
    /// [`Error::TimeOutOfRange`] beyond [`Timestamp::MAX`].
    pub fn from_duration(since_origin: Duration) -> Result<Timestamp, Error> {
        let nanos = since_origin.as_nanos();
        u64::try_from(nanos)
            .ok()
            .and_then(|n| Timestamp::from_nanos(n).ok())
            .ok_or(Error::TimeOutOfRange {
                nanos,
                max_nanos: MAX_TIME_NANOS,
            })
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// This time plus `d`, saturating at [`Timestamp::MAX`].
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(nanos).min(MAX_TIME_NANOS))
    }

    /// Clamps raw nanoseconds from a clock into range.
    #[inline]
    pub(crate) fn saturating_from_nanos(nanos: u64) -> Timestamp {
        Timestamp(nanos.min(MAX_TIME_NANOS))
    }
}

/// A monotonic source of [`Timestamp`]s.
///
/// Implementations must be cheap and should never go backwards; if one does, the limiter stays
/// safe (a `now` earlier than a funnel's state can only make it stricter) but may deny early.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// The default clock.
pub type DefaultClock = QuantaClock;

/// The default clock: [`quanta`]'s TSC-based clock (about 10 ns a read here against about
/// 30–50 ns for `Instant::now()`), counted from when the clock was built.
///
/// On hosts whose cores' TSCs are not synchronised quanta can step back slightly between
/// cores; the arithmetic turns that into a stricter decision, never a looser one. Use
/// [`StdClock`] where that matters more than speed.
///
/// # Examples
///
/// ```
/// use funnel::clock::{Clock, QuantaClock};
///
/// let clock = QuantaClock::new();
/// let a = clock.now();
/// assert!(clock.now() >= a);
/// ```
#[derive(Clone, Debug)]
pub struct QuantaClock {
    clock: quanta::Clock,
    origin: u64,
}

impl QuantaClock {
    /// A clock whose origin is now.
    pub fn new() -> QuantaClock {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        QuantaClock { clock, origin }
    }
}

impl Default for QuantaClock {
    fn default() -> Self {
        QuantaClock::new()
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> Timestamp {
        // delta_as_nanos returns 0 rather than a negative span if the raw counter stepped back.
        Timestamp::saturating_from_nanos(self.clock.delta_as_nanos(self.origin, self.clock.raw()))
    }
}

/// A clock on [`std::time::Instant`]: monotonic by the operating system's guarantee, slower to
/// read than [`QuantaClock`].
///
/// # Examples
///
/// ```
/// use funnel::clock::{Clock, StdClock};
///
/// let clock = StdClock::new();
/// assert!(clock.now().as_nanos() < 1_000_000_000);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    origin: std::time::Instant,
}

impl StdClock {
    /// A clock whose origin is now.
    pub fn new() -> StdClock {
        StdClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        StdClock::new()
    }
}

impl Clock for StdClock {
    #[inline]
    fn now(&self) -> Timestamp {
        let nanos = self.origin.elapsed().as_nanos();
        Timestamp::saturating_from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to: for tests, simulations and offline replays. Clones
/// share one time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::clock::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(shared.now().as_nanos(), 1_500_000_000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at its origin, [`Timestamp::ZERO`].
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// A clock starting at `start`.
    pub fn starting_at(start: Timestamp) -> ManualClock {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(start.as_nanos())),
        }
    }

    /// Moves every clone of this clock forward by `d`, saturating at [`Timestamp::MAX`].
    pub fn advance(&self, d: Duration) {
        // Relaxed: the clock's value is the only data; readers need no other memory from it.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(Timestamp(n).saturating_add(d).as_nanos())
            });
    }

    /// Sets every clone of this clock to `t` (which may move it backwards, to test that).
    pub fn set(&self, t: Timestamp) {
        self.nanos.store(t.as_nanos(), Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Timestamp {
        // Relaxed: see `advance`.
        Timestamp(self.nanos.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_saturates_instead_of_wrapping() {
        let c = ManualClock::new();
        c.advance(Duration::MAX);
        assert_eq!(c.now(), Timestamp::MAX);
        c.advance(Duration::from_secs(1));
        assert_eq!(c.now(), Timestamp::MAX);
    }

    #[test]
    fn timestamps_beyond_range_are_errors() {
        assert!(Timestamp::from_nanos(MAX_TIME_NANOS).is_ok());
        assert_eq!(
            Timestamp::from_nanos(MAX_TIME_NANOS + 1),
            Err(Error::TimeOutOfRange {
                nanos: u128::from(MAX_TIME_NANOS) + 1,
                max_nanos: MAX_TIME_NANOS,
            })
        );
        assert!(Timestamp::from_duration(Duration::MAX).is_err());
    }

    #[test]
    fn real_clocks_move_forward() {
        let q = QuantaClock::new();
        let s = StdClock::new();
        let (a, b) = (q.now(), s.now());
        std::thread::sleep(Duration::from_millis(2));
        assert!(q.now().as_nanos() >= a.as_nanos() + 1_000_000);
        assert!(s.now().as_nanos() >= b.as_nanos() + 1_000_000);
    }
}
