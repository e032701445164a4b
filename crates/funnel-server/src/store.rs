//! Where a rule's counts live in process: one funnel keyed table per rule, GCRA or window, on
//! the server's Unix clock, and the [`Charge`] entries that put them under one
//! [`funnel::check_all`].
//!
//! A GCRA entry rolls back exactly (funnel's refund). A window entry cannot: funnel's window
//! counters have no refund. So window entries are charged after every GCRA entry of a request
//! (a denial by a window then rolls the GCRA charges back), and a request with two or more
//! window entries is checked on all of them before any is charged (see `decide.rs`); only a
//! race between that check and the charge can leave a window charged for a request another
//! window denied, a charge that makes later answers stricter, never laxer.

use std::time::Duration;

use funnel::window::{FixedWindowQuota, SlidingWindowQuota};
use funnel::{Charge, Decision, Limiter, Quota, QuotaKind, Stats, Timestamp};

use crate::clock::UnixClock;
use crate::config::{Algorithm, RateLimit, Unit};

/// A GCRA rule's table.
pub type GcraTable = Limiter<str, UnixClock>;
/// A fixed window rule's table.
pub type FixedTable = Limiter<str, UnixClock, FixedWindowQuota>;
/// A sliding window rule's table.
pub type SlidingTable = Limiter<str, UnixClock, SlidingWindowQuota>;

/// The keys a table starts with room for; it grows up to its maximum.
const START_KEYS: usize = 1_024;

/// One rule's keyed counts.
pub enum Table {
    /// funnel's GCRA.
    Gcra(GcraTable),
    /// Fixed windows aligned on Unix time.
    Fixed(FixedTable),
    /// Sliding window counters.
    Sliding(SlidingTable),
}

/// A keyed table of `quota` (or its error, as text) on `clock`, starting with room for
/// [`START_KEYS`] and growing to at most `max_keys`, evicting the least indebted when full.
fn keyed_table<Q: QuotaKind>(
    quota: Result<Q, funnel::Error>,
    max_keys: usize,
    clock: UnixClock,
) -> Result<Limiter<str, UnixClock, Q>, String> {
    Limiter::<str>::builder(quota.map_err(|e| e.to_string())?)
        .capacity(START_KEYS.min(max_keys))
        .max_capacity(max_keys)
        .clock(clock)
        .build()
        .map_err(|e| e.to_string())
}

/// The GCRA quota of `requests_per_unit` per `unit` with at most `burst` at once.
pub fn gcra_quota(requests_per_unit: u32, unit: Unit, burst: u32) -> Result<Quota, funnel::Error> {
    Quota::per_period(u64::from(requests_per_unit), unit.duration())?.with_limit(u64::from(burst))
}

impl Table {
    /// A table for `limit` (whose `requests_per_unit` is at least 1), holding at most
    /// `max_keys` keys, evicting the least indebted when full.
    pub fn build(limit: &RateLimit, max_keys: usize, clock: UnixClock) -> Result<Table, String> {
        let rpu = limit.requests_per_unit;
        let (count, period) = (u64::from(rpu), limit.unit.duration());
        Ok(match limit.algorithm {
            Algorithm::Gcra => {
                let quota = gcra_quota(rpu, limit.unit, limit.burst.unwrap_or(rpu));
                Table::Gcra(keyed_table(quota, max_keys, clock)?)
            }
            Algorithm::FixedWindow => {
                let quota = FixedWindowQuota::per_period(count, period);
                Table::Fixed(keyed_table(quota, max_keys, clock)?)
            }
            Algorithm::SlidingWindow => {
                let quota = SlidingWindowQuota::per_period(count, period);
                Table::Sliding(keyed_table(quota, max_keys, clock)?)
            }
        })
    }

    /// The table's counters (keys held, evictions).
    pub fn stats(&self) -> Stats {
        match self {
            Table::Gcra(t) => t.stats(),
            Table::Fixed(t) => t.stats(),
            Table::Sliding(t) => t.stats(),
        }
    }

    /// The most keys the table can hold.
    pub fn max_keys(&self) -> usize {
        match self {
            Table::Gcra(t) => t.max_capacity(),
            Table::Fixed(t) => t.max_capacity(),
            Table::Sliding(t) => t.max_capacity(),
        }
    }

    /// True for a window table (charged last, never rolled back).
    pub fn is_window(&self) -> bool {
        !matches!(self, Table::Gcra(_))
    }

    /// What `n` units for `key` would get at `now`, charging nothing.
    pub fn estimate(&self, key: &str, n: u64, now: Timestamp, quota: Option<Quota>) -> Decision {
        match self {
            Table::Gcra(t) => t
                .with_quota(quota.unwrap_or(*t.quota()))
                .cost(key, n)
                .peek(now),
            Table::Fixed(t) => t.check_n_at(key, 0, now),
            Table::Sliding(t) => t.check_n_at(key, 0, now),
        }
    }

    /// Gives `n` units back to `key` (GCRA only; a window has no refund): true when done.
    pub fn refund(&self, key: &str, n: u64, now: Timestamp, quota: Option<Quota>) -> bool {
        match self {
            Table::Gcra(t) => t
                .with_quota(quota.unwrap_or(*t.quota()))
                .refund_at(key, n, now),
            Table::Fixed(_) | Table::Sliding(_) => false,
        }
    }
}

/// `n` units for one key of one table: an entry of [`funnel::check_all`].
pub struct Entry<'a> {
    /// The table.
    pub table: &'a Table,
    /// The key in it.
    pub key: &'a str,
    /// The units.
    pub n: u64,
    /// A quota sent with the request instead of the table's (GCRA tables only).
    pub quota: Option<Quota>,
}

impl Charge for Entry<'_> {
    fn charge(&self, now: Timestamp) -> Decision {
        match self.table {
            Table::Gcra(t) => t
                .with_quota(self.quota.unwrap_or(*t.quota()))
                .cost(self.key, self.n)
                .charge(now),
            Table::Fixed(t) => t.check_n_at(self.key, self.n, now),
            Table::Sliding(t) => t.check_n_at(self.key, self.n, now),
        }
    }

    fn undo(&self, charged: &Decision, now: Timestamp) -> Decision {
        match self.table {
            Table::Gcra(t) => t
                .with_quota(self.quota.unwrap_or(*t.quota()))
                .cost(self.key, self.n)
                .undo(charged, now),
            // No refund for windows: the module's comment says why this stays sound.
            Table::Fixed(_) | Table::Sliding(_) => self.peek(now),
        }
    }

    fn peek(&self, now: Timestamp) -> Decision {
        self.table.estimate(self.key, self.n, now, self.quota)
    }
}

/// The duration a status reports until its limit resets: the wait for a denied request, the
/// time until the whole quota is back for an allowed one.
pub fn until_reset(d: &Decision) -> Duration {
    d.retry_after().unwrap_or_else(|| d.reset_after())
}
