//! The server's clock: Unix time, read through a monotonic clock.
//!
//! Fixed and sliding windows start at multiples of their length on this clock, so a minute
//! window runs from one Unix minute to the next, as envoyproxy/ratelimit's windows do. The
//! time is taken once from the wall clock at start and advanced by a monotonic clock after
//! that, so a step of the wall clock never moves a key's debt.
//!
//! The monotonic clock is `Instant` by default, read at every decision. With
//! `--recent-clock <interval>` it is funnel's [`RecentClock`]: one relaxed load of a time an
//! upkeep thread refreshes every `interval`, so a decision may see a time up to one interval
//! old and each limit may admit up to one interval's worth of its rate more than exact. Beside
//! a gRPC round trip the saving is negligible; it is there for deployments that measured it.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use funnel::clock::RecentClock;
use funnel::{Clock, Timestamp};

/// Unix time in nanoseconds, monotonic from the server's start.
#[derive(Clone, Debug)]
pub struct UnixClock {
    origin: Timestamp,
    source: Source,
}

#[derive(Clone, Debug)]
enum Source {
    /// `Instant::elapsed` since the start.
    Exact(Instant),
    /// The recent clock's reading, less its reading at the start (ns).
    Recent(RecentClock, u64),
}

impl UnixClock {
    /// A clock reading the wall clock now and `Instant` from then on.
    pub fn new() -> UnixClock {
        UnixClock {
            origin: Self::unix_now(),
            source: Source::Exact(Instant::now()),
        }
    }

    /// A clock reading the wall clock now and, from then on, the process's [`RecentClock`]
    /// refreshed at least every `interval`.
    ///
    /// # Errors
    ///
    /// An `interval` [`RecentClock::with_interval`] refuses, or no upkeep thread.
    pub fn recent(interval: Duration) -> std::io::Result<UnixClock> {
        let recent = RecentClock::with_interval(interval)?;
        let start = recent.now().as_nanos();
        Ok(UnixClock {
            origin: Self::unix_now(),
            source: Source::Recent(recent, start),
        })
    }

    fn unix_now() -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp::ZERO.saturating_add(since_epoch)
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
        let elapsed = match &self.source {
            Source::Exact(start) => start.elapsed(),
            Source::Recent(recent, start) => {
                Duration::from_nanos(recent.now().as_nanos().saturating_sub(*start))
            }
        };
        self.origin.saturating_add(elapsed)
    }
}
