//! [`Funnel`]: one funnel in one `AtomicU64`, for a single key (a whole service, one upstream).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::{Clock, QuantaClock, Timestamp};
use crate::decision::Decision;
use crate::gcra;
use crate::quota::Quota;

/// A single funnel, shared by any number of threads.
///
/// Its whole state is one `AtomicU64` holding the theoretical arrival time. An allowed request
/// costs one successful compare-and-swap; a denied one is a single load and writes nothing, so
/// a flood of denials does not bounce the cache line between cores.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::{clock::ManualClock, Funnel, Quota};
///
/// let clock = ManualClock::new();
/// // One per second, bursts of up to 3.
/// let funnel = Funnel::with_clock(Quota::per_second(1)?.with_limit(3)?, clock.clone());
/// assert!((0..3).all(|_| funnel.check().is_allowed()));
/// let denied = funnel.check();
/// assert!(!denied.is_allowed());
/// assert_eq!(denied.retry_after(), Some(Duration::from_secs(1)));
/// clock.advance(Duration::from_secs(1));
/// assert!(funnel.check().is_allowed());
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Debug)]
pub struct Funnel<C = QuantaClock> {
    tat: AtomicU64,
    quota: Quota,
    clock: C,
}

impl Funnel<QuantaClock> {
    /// A fresh funnel on the default clock.
    pub fn new(quota: Quota) -> Self {
        Funnel::with_clock(quota, QuantaClock::new())
    }
}

impl<C: Clock> Funnel<C> {
    /// A fresh funnel on `clock`.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Funnel {
            tat: AtomicU64::new(0),
            quota,
            clock,
        }
    }

    /// One unit request, now.
    #[inline]
    pub fn check(&self) -> Decision {
        self.check_n_at(1, self.clock.now())
    }

    /// A request of `n` units, now. `n = 0` is a peek: it reports and writes nothing.
    #[inline]
    pub fn check_n(&self, n: u64) -> Decision {
        self.check_n_at(n, self.clock.now())
    }

    /// One unit request at the caller's `now`.
    #[inline]
    pub fn check_at(&self, now: Timestamp) -> Decision {
        self.check_n_at(1, now)
    }

    /// A request of `n` units at the caller's `now`.
    #[inline]
    pub fn check_n_at(&self, n: u64, now: Timestamp) -> Decision {
        let now = now.as_nanos();
        // Relaxed throughout: the word publishes no other memory, and every decision is
        // linearised by the word's own modification order (the CAS fails if anyone wrote
        // since our load). The window counters run the same loop through `window::update`,
        // which says why this one is written out.
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let (decision, write) = gcra::decide(tat, now, &self.quota, n);
            let Some(new) = write else { return decision };
            match self
                .tat
                .compare_exchange_weak(tat, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return decision,
                Err(current) => tat = current,
            }
        }
    }

    /// The funnel's state now, without charging anything.
    #[inline]
    pub fn peek(&self) -> Decision {
        self.check_n(0)
    }

    /// [`peek`](Self::peek) at the caller's `now`.
    #[inline]
    pub fn peek_at(&self, now: Timestamp) -> Decision {
        self.check_n_at(0, now)
    }

    /// Empties the funnel: the full quota is available again.
    pub fn reset(&self) {
        // Relaxed: see check_n_at. A racing request either lands before (and is forgotten)
        // or after (and is charged to the empty funnel).
        self.tat.store(0, Ordering::Relaxed);
    }

    /// The quota.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The current time on the funnel's clock, for the `*_at` variants.
    #[inline]
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
}
