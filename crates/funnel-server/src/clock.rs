//! The server's clock: Unix time, read through the monotonic clock.
//!
//! Fixed and sliding windows start at multiples of their length on this clock, so a minute
//! window runs from one Unix minute to the next, as envoyproxy/ratelimit's windows do. The
//! time is taken once from the wall clock at start and advanced by `Instant` after that, so a
//! step of the wall clock never moves a key's debt.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use funnel::{Clock, Timestamp};

/// Unix time in nanoseconds, monotonic from the server's start.
#[derive(Clone, Copy, Debug)]
pub struct UnixClock {
    origin: Timestamp,
    start: Instant,
}

impl UnixClock {
    /// A clock reading the wall clock now and the monotonic clock from then on.
    pub fn new() -> UnixClock {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        UnixClock {
            origin: Timestamp::ZERO.saturating_add(since_epoch),
            start: Instant::now(),
        }
    }
}

impl Default for UnixClock {
    fn default() -> Self {
        UnixClock::new()
    }
}

impl Clock for UnixClock {
    #[inline]
    fn now(&self) -> Timestamp {
        self.origin.saturating_add(self.start.elapsed())
    }
}
