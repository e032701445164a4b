//! What a single-key window counter holds and does, whichever its algorithm: the word, the
//! quota whose step decides on it, and the clock. [`FixedWindow`](super::FixedWindow) and
//! [`SlidingWindow`](super::SlidingWindow) are this with their quota type; each documents its
//! methods for its own algorithm.

use std::sync::atomic::{AtomicU64, Ordering};

use super::update;
use crate::clock::{Clock, Timestamp};
use crate::decision::Decision;
use crate::meter::sealed::Step;

pub(crate) struct Counter<Q, C> {
    word: AtomicU64,
    quota: Q,
    clock: C,
}

impl<Q: Step, C: Clock> Counter<Q, C> {
    pub(crate) fn new(quota: Q, clock: C) -> Self {
        Counter {
            word: AtomicU64::new(0),
            quota,
            clock,
        }
    }

    /// A request of `n` units, now; `n = 0` is a peek.
    #[inline]
    pub(crate) fn check_n(&self, n: u64) -> Decision {
        self.check_n_at(n, self.clock.now())
    }

    /// A request of `n` units at the caller's `now`.
    #[inline]
    pub(crate) fn check_n_at(&self, n: u64, now: Timestamp) -> Decision {
        let now = now.as_nanos();
        update(&self.word, |w| self.quota.decide(w, now, n))
    }

    pub(crate) fn reset(&self) {
        // Relaxed: as the decisions (`update`). A racing request either lands before (and is
        // forgotten) or after (and is counted in the empty counter).
        self.word.store(0, Ordering::Relaxed);
    }
}

impl<Q, C> Counter<Q, C> {
    pub(crate) fn quota(&self) -> &Q {
        &self.quota
    }

    pub(crate) fn clock(&self) -> &C {
        &self.clock
    }
}

impl<Q: std::fmt::Debug, C: std::fmt::Debug> Counter<Q, C> {
    /// `Debug` as the public type `name` shows it: its word, quota and clock.
    pub(crate) fn fmt_as(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("word", &self.word)
            .field("quota", &self.quota)
            .field("clock", &self.clock)
            .finish()
    }
}
