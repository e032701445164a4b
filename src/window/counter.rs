//! [`Counter`]: a single window counter in one `AtomicU64`, of the algorithm its quota's type
//! names: [`FixedWindowQuota`](super::FixedWindowQuota) or
//! [`SlidingWindowQuota`](super::SlidingWindowQuota).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::{Clock, QuantaClock, Timestamp};
use crate::decision::Decision;
use crate::quota_kind::WindowQuota;

/// A single window counter in one `AtomicU64`, shared by any number of threads; the quota's
/// type chooses the algorithm, as it does for a keyed [`Limiter`](crate::Limiter).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::{clock::ManualClock, window::{Counter, FixedWindowQuota, SlidingWindowQuota}};
///
/// let clock = ManualClock::new();
/// let fixed = Counter::with_clock(FixedWindowQuota::per_period(3, Duration::from_secs(10))?, clock.clone());
/// assert!((0..3).all(|_| fixed.check().is_allowed()));
/// clock.advance(Duration::from_secs(4));
/// let d = fixed.check();
/// assert!(!d.is_allowed());
/// assert_eq!(d.retry_after(), Some(Duration::from_secs(6))); // the next window
/// assert_eq!(d.reset_after(), Duration::from_secs(6));
/// clock.advance(Duration::from_secs(6));
/// assert_eq!(fixed.check().remaining(), 2);
///
/// let sliding = Counter::with_clock(SlidingWindowQuota::per_period(4, Duration::from_secs(10))?, clock.clone());
/// assert!((0..4).all(|_| sliding.check().is_allowed()));
/// // 2.5 s into the next window, the previous window's 4 weigh 4 * 7.5 / 10 = 3.
/// clock.advance(Duration::from_millis(12_500));
/// let d = sliding.check();
/// assert!(d.is_allowed());
/// assert_eq!(d.remaining(), 0);
/// let d = sliding.check();
/// assert_eq!(d.retry_after(), Some(Duration::from_millis(2_500))); // weight down to 2
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Debug)]
pub struct Counter<Q, C = QuantaClock> {
    word: AtomicU64,
    quota: Q,
    clock: C,
}

impl<Q: WindowQuota> Counter<Q, QuantaClock> {
    /// A fresh counter on the default clock.
    pub fn new(quota: Q) -> Self {
        Counter::with_clock(quota, QuantaClock::new())
    }
}

impl<Q: WindowQuota, C: Clock> Counter<Q, C> {
    /// A fresh counter on `clock`.
    pub fn with_clock(quota: Q, clock: C) -> Self {
        Counter {
            word: AtomicU64::new(0),
            quota,
            clock,
        }
    }

    /// One unit request, now.
    #[inline]
    pub fn check(&self) -> Decision {
        self.check_n_at(1, self.clock.now())
    }

    /// A request of `n` units, now; `n = 0` is a peek.
    #[inline]
    pub fn check_n(&self, n: u64) -> Decision {
        self.check_n_at(n, self.clock.now())
    }

    /// One unit request at the caller's `now` (no clock read).
    #[inline]
    pub fn check_at(&self, now: Timestamp) -> Decision {
        self.check_n_at(1, now)
    }

    /// A request of `n` units at the caller's `now`.
    #[inline]
    pub fn check_n_at(&self, n: u64, now: Timestamp) -> Decision {
        let now = now.as_nanos();
        update(&self.word, |w| self.quota.decide(w, now, n))
    }

    /// The counter's state now, charging nothing.
    #[inline]
    pub fn peek(&self) -> Decision {
        self.check_n(0)
    }

    /// [`peek`](Self::peek) at the caller's `now`.
    #[inline]
    pub fn peek_at(&self, now: Timestamp) -> Decision {
        self.check_n_at(0, now)
    }

    /// Empties the counter: the whole limit is available again.
    pub fn reset(&self) {
        // Relaxed: as the decisions (`update`). A racing request either lands before (and is
        // forgotten) or after (and is counted in the empty counter).
        self.word.store(0, Ordering::Relaxed);
    }

    /// The current time on the counter's clock, for the `*_at` variants.
    #[inline]
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

impl<Q, C> Counter<Q, C> {
    /// The quota.
    pub fn quota(&self) -> &Q {
        &self.quota
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// The counter's update: decides with `step` on `word`'s value and, when the step asks for a
/// write, stores the new value if `word` still holds the one decided on; otherwise decides
/// again on the value found. `step(value)` returns the decision and the value to store
/// (`None`: nothing to write, as for a denial or a peek, which then costs one load). The same
/// loop as [`Funnel`](crate::Funnel)'s, which keeps its own so that its denial, the path a
/// flood takes, compiles to the shortest loop.
#[inline(always)]
fn update(word: &AtomicU64, step: impl Fn(u64) -> (Decision, Option<u64>)) -> Decision {
    // Relaxed throughout: the word publishes no other memory, and every decision is linearised
    // by the word's own modification order (the CAS fails if anyone wrote since our load, so an
    // admission is always decided on the value it replaces).
    let mut current = word.load(Ordering::Relaxed);
    loop {
        let (decision, write) = step(current);
        let Some(new) = write else { return decision };
        match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return decision,
            Err(found) => current = found,
        }
    }
}
