//! [`RecentClock`]: a time one upkeep thread refreshes, read with one relaxed load.
//!
//! One process-wide cell ([`RECENT`]) holds the latest time on [`QuantaClock`]'s origin; one
//! upkeep thread stores [`QuantaClock::now`] into it, then sleeps for the interval. Every
//! [`RecentClock`] of the process reads that cell, so there is at most one upkeep thread however
//! many limiters use the clock. The handles share one [`Upkeep`] (reference counted); the last
//! handle to drop stops and joins the thread. The next handle built starts a new one.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Clock, QuantaClock, Timestamp};

/// A [`Clock`] that reads a recent time rather than the hardware counter: `now()` is one
/// relaxed load of a time that one upkeep thread per process refreshes every interval.
///
/// Use it where the clock read is a large share of a decision: a loop deciding tens of millions
/// of requests a second on the same core. The decision then costs about what the same decision
/// with the time handed in (`check_at`) costs. Beside a network round trip (an HTTP request, a
/// Redis call) the exact clock's read is noise, and [`QuantaClock`] (the default) is the better
/// choice: it needs no thread and is never stale.
///
/// # One upkeep thread per process
///
/// Every handle, however built, reads the same time; the first one built starts the upkeep
/// thread (named `funnel-recent`), the others join it, and the last one dropped stops it. The
/// thread ticks at the finest interval any handle has asked for while it runs
/// ([`RecentClock::interval`]). Handles are cheap to clone and may be given to any number of
/// limiters.
///
/// # Staleness, and what it means for a limit
///
/// A time read from this clock is the time of the upkeep thread's last tick: never later than
/// the real time (the [`QuantaClock`] time read after it), and earlier by at most the
/// *staleness bound* `S`: the interval plus however late the operating system wakes the
/// upkeep thread (nothing, on an idle core; more on an oversubscribed machine). Times read are
/// on [`QuantaClock`]'s origin, so they mix with `QuantaClock` times and with the `*_at` calls,
/// and they never go backwards for any reader.
///
/// A limiter deciding on stale times sees time pass as the real clock does, only later. Over
/// any real interval of length `D`, the times its decisions see span at most `D + S`, so it
/// admits at most what the exact limiter admits over `D + S`: for a quota of `count` per
/// `period`, at most `count * S / period` requests more than the exact limit (rounded up to a
/// whole request), and never more than that. With the default interval of one millisecond and
/// an upkeep thread woken on time, a quota of 1,000 per second admits at most one request more
/// than exact over any interval, and a quota of 100 per second (or anything slower) at most one
/// more too. A stale time never admits a request earlier than the exact clock would by more
/// than `S`: a denied client's retry simply waits up to `S` longer.
///
/// # The default interval
///
/// [`RecentClock::DEFAULT_INTERVAL`] is one millisecond: below a request's worth of time for
/// any quota slower than 1,000 per second per key (so at most one request over the exact
/// limit), as fine as a 1,000 Hz kernel tick (what a thread's sleep is rounded to on many
/// systems), and a thousand wake-ups a second, a negligible share of one core. A finer interval
/// costs that share again per halving; a coarser one admits more per tick.
///
/// # Examples
///
/// Any limiter takes it as its clock:
///
/// ```
/// use funnel::clock::RecentClock;
/// use funnel::window::{FixedWindowQuota, SlidingWindowQuota};
/// use funnel::{Funnel, Limiter, LiveLimiter, Quota};
///
/// let clock = RecentClock::shared()?;
/// let quota = Quota::per_second(100)?.with_limit(10)?;
///
/// let keyed = Limiter::<u64>::builder(quota).clock(clock.clone()).build()?;
/// assert!(keyed.check(&7).is_allowed());
///
/// let single = Funnel::with_clock(quota, clock.clone());
/// assert!(single.check().is_allowed());
///
/// let live = LiveLimiter::new(Limiter::<str>::builder(quota).clock(clock.clone()).build()?);
/// assert!(live.current().check("user:42").is_allowed());
///
/// let fixed = Limiter::<str>::builder(FixedWindowQuota::per_second(10)?)
///     .clock(clock.clone())
///     .build()?;
/// assert!(fixed.check("user:42").is_allowed());
/// let sliding = Limiter::<str>::builder(SlidingWindowQuota::per_minute(600)?)
///     .clock(clock)
///     .build()?;
/// assert!(sliding.check("user:42").is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Its times are [`QuantaClock`]'s, a little earlier:
///
/// ```
/// use std::time::Duration;
/// use funnel::clock::{Clock, QuantaClock, RecentClock};
///
/// let recent = RecentClock::with_interval(Duration::from_millis(2))?;
/// assert!(recent.interval() <= Duration::from_millis(2));
/// let (stale, exact) = (recent.now(), QuantaClock::new().now());
/// assert!(stale <= exact);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct RecentClock {
    /// Keeps the upkeep thread running; `now` does not go through it.
    upkeep: Arc<Upkeep>,
}

/// A cache line of its own (two, for CPUs that fetch lines in pairs): readers on every core
/// keep it in their caches between ticks, so nothing else written often may share it.
#[repr(align(128))]
struct Padded(AtomicU64);

/// The process's recent time, nanoseconds on [`QuantaClock`]'s origin. Only ever raised
/// (`fetch_max`), so no reader sees it go back, not even while an upkeep thread that is
/// stopping and one just started both write.
static RECENT: Padded = Padded(AtomicU64::new(0));

/// The running upkeep thread, if a handle holds it.
static UPKEEP: Mutex<Weak<Upkeep>> = Mutex::new(Weak::new());

/// The upkeep thread, owned by the handles; dropping the last one stops it.
struct Upkeep {
    control: Arc<Control>,
    thread: Option<JoinHandle<()>>,
}

/// What the handles tell the upkeep thread.
struct Control {
    stop: AtomicBool,
    /// Nanoseconds between ticks: the finest interval asked for (only ever lowered).
    interval_nanos: AtomicU64,
}

impl RecentClock {
    /// The interval of [`RecentClock::shared`]: one millisecond (see the type's docs for why).
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(1);
    /// The finest interval accepted: a thread's sleep is not finer than this on common systems.
    pub const MIN_INTERVAL: Duration = Duration::from_micros(10);
    /// The coarsest interval accepted: a time staler than this has no place in a rate limit.
    pub const MAX_INTERVAL: Duration = Duration::from_secs(1);

    /// A handle on the process's recent clock, starting its upkeep thread at
    /// [`RecentClock::DEFAULT_INTERVAL`] if none runs (a running one keeps its interval if
    /// finer).
    ///
    /// # Errors
    ///
    /// The operating system's error if it refused to start the thread.
    pub fn shared() -> io::Result<RecentClock> {
        RecentClock::with_interval(RecentClock::DEFAULT_INTERVAL)
    }

    /// A handle on the process's recent clock, ticking at least every `interval`: starts the
    /// upkeep thread if none runs, or makes the running one tick that often if it ticked less
    /// often. The thread keeps the finest interval asked for until it stops.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for an interval outside
    /// [`MIN_INTERVAL`](RecentClock::MIN_INTERVAL)..=[`MAX_INTERVAL`](RecentClock::MAX_INTERVAL);
    /// the operating system's error if it refused to start the thread.
    pub fn with_interval(interval: Duration) -> io::Result<RecentClock> {
        if !(RecentClock::MIN_INTERVAL..=RecentClock::MAX_INTERVAL).contains(&interval) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a recent clock's interval must be between {:?} and {:?}, got {interval:?}",
                    RecentClock::MIN_INTERVAL,
                    RecentClock::MAX_INTERVAL
                ),
            ));
        }
        // In range, so below 2^64 ns.
        let nanos = interval.as_nanos() as u64;
        // The lock is held only here, never by a reader or the upkeep thread; a panic while it
        // was held left nothing half-done that matters (a `Weak`), so a poisoned lock is used.
        let mut running = UPKEEP.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(upkeep) = running.upgrade() {
            // Relaxed: the interval is the only data; the unpark makes the thread reread it.
            let before = upkeep
                .control
                .interval_nanos
                .fetch_min(nanos, Ordering::Relaxed);
            if nanos < before {
                if let Some(t) = &upkeep.thread {
                    t.thread().unpark();
                }
            }
            return Ok(RecentClock { upkeep });
        }
        // A fresh time before the first handle returns: a reader may call `now` at once.
        tick(&QuantaClock::new());
        let control = Arc::new(Control {
            stop: AtomicBool::new(false),
            interval_nanos: AtomicU64::new(nanos),
        });
        let thread = std::thread::Builder::new()
            .name("funnel-recent".into())
            .spawn({
                let control = Arc::clone(&control);
                move || keep_up(&control)
            })?;
        let upkeep = Arc::new(Upkeep {
            control,
            thread: Some(thread),
        });
        *running = Arc::downgrade(&upkeep);
        Ok(RecentClock { upkeep })
    }

    /// The interval the upkeep thread ticks at now (the finest asked for since it started).
    pub fn interval(&self) -> Duration {
        // Relaxed: a report of one value.
        Duration::from_nanos(self.upkeep.control.interval_nanos.load(Ordering::Relaxed))
    }
}

/// Raises the recent time to `clock`'s now.
fn tick(clock: &QuantaClock) {
    // Relaxed: the time is the only data the cell carries; readers need no other memory
    // published with it. `fetch_max` keeps it monotonic in its modification order, which every
    // reader follows (read-read coherence), so no reader sees it go back.
    RECENT
        .0
        .fetch_max(clock.now().as_nanos(), Ordering::Relaxed);
}

/// The upkeep thread: a tick, then a sleep of the interval, until told to stop.
fn keep_up(control: &Control) {
    let clock = QuantaClock::new();
    loop {
        tick(&clock);
        // Relaxed: a flag with no data behind it. The stopping handle stores it before it
        // unparks this thread, and an unpark synchronises with the park it ends, so a thread
        // parked or about to park sees it on waking.
        if control.stop.load(Ordering::Relaxed) {
            return;
        }
        let nanos = control.interval_nanos.load(Ordering::Relaxed);
        // A wake-up before the timeout (an unpark, or a spurious one) only ticks early.
        std::thread::park_timeout(Duration::from_nanos(nanos));
    }
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        // Relaxed: see `keep_up`.
        self.control.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            // The thread only loops on atomics; it cannot panic, and if it somehow had, there
            // is nothing to do about it while dropping.
            let _ = t.join();
        }
    }
}

impl Clock for RecentClock {
    /// The time of the upkeep thread's last tick.
    #[inline]
    fn now(&self) -> Timestamp {
        // Relaxed: see `tick`. Stored from `QuantaClock::now`, so already in range.
        Timestamp(RECENT.0.load(Ordering::Relaxed))
    }

    /// One load: nothing for a decision to overlap with it.
    #[inline]
    fn reads_memory(&self) -> bool {
        true
    }
}

impl std::fmt::Debug for RecentClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecentClock")
            .field("interval", &self.interval())
            .field("now", &self.now())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::{Limiter, Quota};

    /// The tests below watch the process's one upkeep thread, so they run one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Threads of this process named as the upkeep thread (Linux only; `None` elsewhere).
    fn upkeep_threads() -> Option<usize> {
        let tasks = std::fs::read_dir("/proc/self/task").ok()?;
        Some(
            tasks
                .flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim_end() == "funnel-recent")
                })
                .count(),
        )
    }

    #[test]
    fn handles_share_one_upkeep_thread_which_stops_with_the_last() {
        let _serial = serial();
        let a = RecentClock::shared().unwrap();
        let b = RecentClock::with_interval(Duration::from_millis(5)).unwrap();
        let c = b.clone();
        // The thread names itself once it runs: wait for that.
        std::thread::sleep(Duration::from_millis(20));
        if let Some(n) = upkeep_threads() {
            assert_eq!(n, 1, "one upkeep thread for three handles");
        }
        // The finest interval asked for wins.
        assert_eq!(c.interval(), RecentClock::DEFAULT_INTERVAL);
        drop((a, b));
        // `c` still holds the thread: the time moves.
        let t0 = c.now();
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.now() > t0, "the clock advances while a handle lives");
        drop(c);
        assert!(UPKEEP.lock().unwrap().upgrade().is_none());
        // Joined; the kernel may list the exited thread a moment longer.
        let gone = (0..100).any(|_| {
            let n = upkeep_threads();
            std::thread::sleep(Duration::from_millis(10));
            n.is_none_or(|n| n == 0)
        });
        assert!(gone, "the last handle's drop stopped the thread");
        // Nothing raises the time any more.
        let stopped = RECENT.0.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(RECENT.0.load(Ordering::Relaxed), stopped);
        // A new handle starts a new thread, with a fresh time at once.
        let d = RecentClock::with_interval(Duration::from_millis(3)).unwrap();
        assert_eq!(d.interval(), Duration::from_millis(3));
        assert!(d.now().as_nanos() >= stopped + 20_000_000);
        std::thread::sleep(Duration::from_millis(20));
        if let Some(n) = upkeep_threads() {
            assert_eq!(n, 1);
        }
    }

    #[test]
    fn intervals_out_of_range_are_errors() {
        for d in [
            Duration::ZERO,
            Duration::from_micros(9),
            Duration::from_millis(1001),
        ] {
            let e = RecentClock::with_interval(d).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{d:?}");
        }
    }

    #[test]
    fn a_recent_time_trails_the_real_time_and_follows_it() {
        let _serial = serial();
        let recent = RecentClock::shared().unwrap();
        let exact = QuantaClock::new();
        let mut last = recent.now();
        let start = exact.now();
        let mut advanced = 0;
        while exact.now().as_nanos() - start.as_nanos() < 50_000_000 {
            let r = recent.now();
            let e = exact.now();
            assert!(r <= e, "{r:?} <= {e:?}");
            assert!(r >= last, "never back: {r:?} >= {last:?}");
            advanced += u32::from(r > last);
            last = r;
            std::thread::sleep(Duration::from_micros(200));
        }
        // 50 ms at a 1 ms tick: some ticks were seen, however loaded the machine.
        assert!(advanced >= 5, "{advanced} ticks seen");
    }

    /// The bound in the docs, as a model: decisions on a time floored to whole ticks (the
    /// recent clock with a known tick) admit, over every interval of real time, at most
    /// `limit + (D + tick) / T` (rounded down), where the exact clock admits `limit + D / T`;
    /// and the bound is reached, so it is the right one.
    #[test]
    fn over_every_real_interval_a_tick_adds_at_most_one_ticks_worth() {
        let (limit, t_ns, tick) = (5u64, 1_000_000u64, 3_500_000u64);
        let quota = Quota::per_second(1_000).unwrap().with_limit(limit).unwrap();
        let stale = ManualClock::new();
        let exact = ManualClock::new();
        let on_stale = Limiter::<u64>::builder(quota)
            .clock(stale.clone())
            .build()
            .unwrap();
        let on_exact = Limiter::<u64>::builder(quota)
            .clock(exact.clone())
            .build()
            .unwrap();
        // Requests at pseudo-random real times, mostly 0 to 400 µs apart, with a pause of
        // 20 to 23.5 ms one time in 64 (after which the funnel is full again, and a burst late
        // in a tick gets the next tick's units at once).
        let (mut real, mut seed) = (tick * 10, 0x9E37_79B9_7F4A_7C15u64);
        let (mut stale_ok, mut exact_ok) = (Vec::new(), Vec::new());
        for _ in 0..3_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            real += if seed % 64 == 0 {
                20_000_000 + seed % tick
            } else {
                seed % 400_000
            };
            exact.set(Timestamp(real));
            stale.set(Timestamp(real / tick * tick));
            if on_stale.check(&1).is_allowed() {
                stale_ok.push(real);
            }
            if on_exact.check(&1).is_allowed() {
                exact_ok.push(real);
            }
        }
        let worst_excess = |ok: &[u64], slack: u64| {
            let mut worst = i64::MIN;
            for i in 0..ok.len() {
                for j in i..ok.len() {
                    let admitted = (j - i + 1) as i64;
                    let bound = (limit + (ok[j] - ok[i] + slack) / t_ns) as i64;
                    worst = worst.max(admitted - bound);
                }
            }
            worst
        };
        assert!(
            worst_excess(&exact_ok, 0) <= 0,
            "the exact clock keeps the limit"
        );
        assert!(
            worst_excess(&stale_ok, tick) <= 0,
            "a tick adds at most a tick's worth"
        );
        assert!(
            worst_excess(&stale_ok, 0) > 0,
            "the stale clock does exceed the exact bound: the test can see an excess"
        );
    }
}
