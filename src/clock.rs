//! Time: [`Timestamp`] (nanoseconds since a clock's origin), the [`Clock`] trait, the default
//! [`QuantaClock`], [`RecentClock`] (a cached time for hot loops), [`StdClock`], and
//! [`ManualClock`] for tests and simulations.
//!
//! **Resolution** is one nanosecond. **Range** is [`Timestamp::MAX`], about 109 years after the
//! clock's origin, so no limiter wraps around in any realistic uptime; a clock that ever got past
//! it would stay at `MAX`.
//!
//! **One origin per process.** Every [`QuantaClock`] (the default clock of every limiter) counts
//! from the same origin, the moment the process built its first one; every [`StdClock`] likewise.
//! So a [`Timestamp`] read from one limiter means the same instant to every other limiter on
//! the same kind of clock: an event loop may read the time once and pass it to the `*_at`
//! calls of all its limiters, or to [`check_all`](crate::check_all). A [`ManualClock`] moves
//! only when told; share one (clones share their time) among the limiters it drives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::error::Error;
use crate::state::MAX_TIME_NANOS;

mod recent;
pub use recent::RecentClock;

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

    /// Whether [`now`](Self::now) is a load of a time kept in memory, as [`RecentClock`] and
    /// [`ManualClock`] are: a keyed decision then reads it before it looks the key up. `false`
    /// (the default) for a clock that reads a counter (a TSC, the operating system's clock):
    /// a keyed decision starts loading the key's slots first, so the clock read and the
    /// memory loads overlap.
    #[inline]
    fn reads_memory(&self) -> bool {
        false
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> Timestamp {
        (**self).now()
    }

    #[inline]
    fn reads_memory(&self) -> bool {
        (**self).reads_memory()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> Timestamp {
        (**self).now()
    }

    #[inline]
    fn reads_memory(&self) -> bool {
        (**self).reads_memory()
    }
}

/// The default clock: [`quanta`]'s TSC-based clock (cheaper to read than `Instant::now()`),
/// counted from one origin shared by every `QuantaClock` of the process: when the first one
/// was built. Times read from any two of them (so from any two limiters on the default clock)
/// agree.
///
/// quanta decides whether the TSC can be trusted (an invariant TSC) and calibrates it against
/// the operating system's monotonic clock. Where it chose the TSC on x86_64, this clock then
/// reads the TSC itself, inline, and scales it with quanta's calibration (one multiply), rather
/// than through quanta's out-of-line `raw()` call: the same counter and the same calibration
/// (the two agree to the nanosecond). Read alone, both cost the `rdtsc`; inside a keyed
/// decision the inline read is cheaper, as the call and quanta's 128-bit conversion go
/// (docs/design/arithmetic-and-time.md, "Reading the time"). Elsewhere it reads through quanta.
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
/// // A clock built later counts from the same origin.
/// assert!(QuantaClock::new().now() >= a);
/// ```
#[derive(Clone, Debug)]
pub struct QuantaClock {
    clock: quanta::Clock,
    /// quanta's raw reading at the process's origin ([`QUANTA_ORIGIN`]).
    origin: u64,
    /// Nanoseconds per raw unit times 2^64 when the raw units are ticks of a TSC read inline
    /// (see [`tsc_scale`]), 0 when reads go through quanta.
    tsc_scale: u64,
}

/// quanta's raw reading when the process built its first [`QuantaClock`]: every one counts
/// from it. quanta's raw units are the same for every `quanta::Clock` of a process (one TSC
/// and one calibration, or the operating system's monotonic clock), so one reading serves all.
static QUANTA_ORIGIN: OnceLock<u64> = OnceLock::new();

impl QuantaClock {
    /// A clock on the process's origin (the first `QuantaClock` built; see the module docs).
    pub fn new() -> QuantaClock {
        let clock = quanta::Clock::new();
        let origin = *QUANTA_ORIGIN.get_or_init(|| clock.raw());
        let tsc_scale = tsc_scale(&clock);
        QuantaClock {
            clock,
            origin,
            tsc_scale,
        }
    }
}

/// quanta's calibration as one 64-bit multiplier (nanoseconds per raw unit times 2^64), when
/// quanta reads a TSC that ticks faster than 1 GHz on x86_64; `0` otherwise.
///
/// quanta converts `d` raw units into `(d * factor) >> shift` nanoseconds. Its raw units are
/// nanoseconds already (a factor of exactly 1) when it fell back to the operating system's
/// clock, and TSC ticks when it chose the TSC; a TSC faster than 1 GHz (every x86_64 TSC in
/// practice) gives less than a nanosecond a tick. Asking quanta to convert `2^32` and `2^63`
/// units reads that factor back: below `2^32` (no overflow is possible at that size) means
/// under 1 ns a unit, hence the TSC, and then `2^63` units convert without overflow too,
/// giving the multiplier to 63 bits. `(ticks * scale) >> 64` then differs from quanta's own
/// conversion by less than 1 ns for any span below `2^63` ticks.
fn tsc_scale(clock: &quanta::Clock) -> u64 {
    if !cfg!(target_arch = "x86_64") || clock.delta_as_nanos(0, 1 << 32) >= 1 << 32 {
        return 0;
    }
    clock.delta_as_nanos(0, 1 << 63) << 1
}

impl Default for QuantaClock {
    fn default() -> Self {
        QuantaClock::new()
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now(&self) -> Timestamp {
        #[cfg(target_arch = "x86_64")]
        if self.tsc_scale != 0 {
            // SAFETY: `rdtsc` has no memory operands and no preconditions on x86_64, where
            // every CPU has it. The one way it can fail, an operating system that disabled it
            // for user space (CR4.TSD), would fault quanta's own reads just the same, and this
            // branch is taken only where quanta chose to read the TSC (`tsc_scale`).
            #[allow(unsafe_code)]
            let raw = unsafe { core::arch::x86_64::_rdtsc() };
            // A counter that stepped back (another core's TSC) gives 0, as quanta's
            // `delta_as_nanos` does, rather than a negative span.
            let ticks = raw.saturating_sub(self.origin);
            let nanos = (u128::from(ticks) * u128::from(self.tsc_scale)) >> 64;
            // Below 2^64: `tsc_scale < 2^64` makes `nanos < ticks`.
            return Timestamp::saturating_from_nanos(nanos as u64);
        }
        // delta_as_nanos returns 0 rather than a negative span if the raw counter stepped back.
        Timestamp::saturating_from_nanos(self.clock.delta_as_nanos(self.origin, self.clock.raw()))
    }
}

/// A clock on [`std::time::Instant`]: monotonic by the operating system's guarantee, slower to
/// read than [`QuantaClock`]. Every `StdClock` of a process counts from one origin, when the
/// first one was built, so their times agree.
///
/// # Examples
///
/// ```
/// use funnel::clock::{Clock, StdClock};
///
/// let clock = StdClock::new();
/// let a = clock.now();
/// assert!(StdClock::new().now() >= a);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    origin: std::time::Instant,
}

/// When the process built its first [`StdClock`]: every one counts from it.
static STD_ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();

impl StdClock {
    /// A clock on the process's origin (the first `StdClock` built).
    pub fn new() -> StdClock {
        StdClock {
            origin: *STD_ORIGIN.get_or_init(std::time::Instant::now),
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

    /// One load.
    #[inline]
    fn reads_memory(&self) -> bool {
        true
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
    fn the_inline_tsc_read_agrees_with_quanta_to_the_nanosecond() {
        let q = QuantaClock::new();
        if cfg!(target_arch = "x86_64") && q.clock.delta_as_nanos(0, 1 << 32) < 1 << 32 {
            assert_ne!(q.tsc_scale, 0, "quanta reads the TSC, so should this clock");
        }
        // Far enough from the origin that a scale off by one part in a million shows.
        std::thread::sleep(Duration::from_millis(20));
        for _ in 0..10_000 {
            let before = q.clock.delta_as_nanos(q.origin, q.clock.raw());
            let now = q.now().as_nanos();
            let after = q.clock.delta_as_nanos(q.origin, q.clock.raw());
            // Each conversion rounds down, quanta's and ours differently: 1 ns either way.
            assert!(
                before <= now + 1 && now <= after + 1,
                "{before} <= {now} <= {after}"
            );
        }
    }

    #[test]
    fn clocks_built_at_different_times_agree() {
        let (q1, s1) = (QuantaClock::new(), StdClock::new());
        std::thread::sleep(Duration::from_millis(20));
        let (q2, s2) = (QuantaClock::new(), StdClock::new());
        // Read the later clock first: with separate origins it would be 20 ms behind.
        let (b, a) = (q2.now(), q1.now());
        assert!(b <= a, "{b:?} <= {a:?}");
        assert!(a.as_nanos() - b.as_nanos() < 5_000_000, "{a:?} - {b:?}");
        let (b, a) = (s2.now(), s1.now());
        assert!(
            b <= a && a.as_nanos() - b.as_nanos() < 5_000_000,
            "{a:?} - {b:?}"
        );
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
