//! The local deny cache: a denial from Redis tells us the key's arrival time; until the
//! request would fit again, the key stays denied (in Redis an arrival time only grows), so
//! further requests for it are answered here with no round trip.
//!
//! The cache is a bounded funnel [`Limiter`] table (evicting when full) holding arrival
//! times in the server's time frame. It reads the server's time as `local + offset`, where
//! `local` is this process's monotonic clock (a wall-clock step here moves nothing) and
//! `offset` is learned from each reply: the server's time at the reply minus our clock when the
//! request was sent. That is an upper bound of the true offset (the server read its clock after
//! we sent), so the cache never reads the server's time as earlier than it is, and never
//! denies longer than Redis would, as long as Redis keeps what it decided.
//!
//! With [`Backend::Cell`](crate::Backend::Cell) no server time comes back; the cache then
//! works in the local frame (offset 0) with the earliest arrival time the reply's whole
//! seconds allow, `sent + R_lo` (see `cell.rs`), which is a lower bound for the same reason.
//!
//! Where the cache and Redis can differ (the crate documentation repeats this for users):
//! the cache denies what Redis would now allow when Redis's arrival time moved back without
//! this instance seeing it: a reset or `DEL` of the key elsewhere, Redis losing its data (a
//! restart without persistence, a failover to a replica that missed the last writes, eviction
//! under `maxmemory`), or the server's clock stepping forward. Each lasts at most until the
//! cached arrival time passes (the key's `retry_after` when it was cached, at most the quota's
//! tolerance), or until [`invalidate`](crate::RedisLimiter::invalidate) or
//! [`invalidate_all`](crate::RedisLimiter::invalidate_all), which the limiter calls by itself
//! when it sees Redis lose its data (`marker.rs`). It never admits anything.

use std::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Instant;

use funnel::{Decision, Limiter, Outcome, Quota, Timestamp, WhenFull};

use crate::error::Error;

/// This process's monotonic clock as a [`Timestamp`]: ns since the limiter was built, plus
/// one second so that no local time is [`Timestamp::ZERO`] (an empty funnel).
pub(crate) struct Monotonic {
    start: Instant,
}

impl Monotonic {
    pub(crate) fn new() -> Monotonic {
        Monotonic {
            start: Instant::now(),
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        let ns = self.start.elapsed().as_nanos() + 1_000_000_000;
        Timestamp::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)).unwrap_or(Timestamp::MAX)
    }
}

pub(crate) struct DenyCache {
    quota: Quota,
    capacity: usize,
    /// Behind a lock only so that `invalidate_all` can swap in an empty table; every other use
    /// takes the read side.
    table: RwLock<Limiter<str>>,
    /// An upper bound of (server clock − local clock), ns, from the last reply (0 with
    /// `CL.THROTTLE`, whose arrival times are kept in the local frame).
    offset_ns: AtomicI64,
    /// Invalidations so far. A reply to a request sent before an invalidation is not
    /// remembered (`remember`): its denial may be what the invalidation removed.
    invalidations: AtomicU64,
}

impl DenyCache {
    pub(crate) fn new(quota: Quota, capacity: usize) -> Result<DenyCache, Error> {
        Ok(DenyCache {
            quota,
            capacity,
            table: RwLock::new(Self::table(quota, capacity)?),
            offset_ns: AtomicI64::new(0),
            invalidations: AtomicU64::new(0),
        })
    }

    fn table(quota: Quota, capacity: usize) -> Result<Limiter<str>, Error> {
        Ok(Limiter::<str>::builder(quota)
            .capacity(capacity)
            .when_full(WhenFull::Evict)
            .build()?)
    }

    /// The cache's answer at local time `local`: a denial when the cached arrival time still
    /// denies `n` units at an upper bound of the server's time; `None` sends the request to
    /// Redis.
    pub(crate) fn denial(&self, key: &str, n: u64, local: Timestamp) -> Option<Decision> {
        // Relaxed: any offset ever stored is an upper bound (see `learn`).
        let offset = self.offset_ns.load(Ordering::Relaxed);
        let now = Timestamp::from_nanos(local.as_nanos().saturating_add_signed(offset)).ok()?;
        let table = self.table.read().unwrap_or_else(|p| p.into_inner());
        let debt = table.peek_at(key, now).reset_after();
        if debt.is_zero() {
            return None;
        }
        let tat = now.saturating_add(debt);
        let (decision, _) = self.quota.decide_at(tat, now, n);
        (decision.outcome() == Outcome::Limited).then_some(decision)
    }

    /// Records the offset learned from a reply: the server's time `server_now` at the reply,
    /// the local time `sent` when the request left.
    pub(crate) fn learn_offset(&self, server_now: Timestamp, sent: Timestamp) {
        let offset = i128::from(server_now.as_nanos()) - i128::from(sent.as_nanos());
        let offset = i64::try_from(offset).unwrap_or(if offset < 0 { i64::MIN } else { i64::MAX });
        // Relaxed: a hint; every value stored is an upper bound, so any one read will do.
        self.offset_ns.store(offset, Ordering::Relaxed);
    }

    /// The invalidations so far, read when a request is sent and handed back to `remember`
    /// with its reply.
    pub(crate) fn epoch(&self) -> u64 {
        // Relaxed: compared after the SeqCst fence in `remember`, which orders what matters.
        self.invalidations.load(Ordering::Relaxed)
    }

    /// Remembers that `key` is denied until its arrival time `tat` (in the cache's frame), as
    /// of `now` (same frame), from the reply to a request sent at `epoch`. If an invalidation
    /// happened since the request was sent, the entry is removed again: the denial may be the
    /// one the invalidation (a `reset`, say) took away.
    pub(crate) fn remember(&self, key: &str, tat: Timestamp, now: Timestamp, epoch: u64) {
        let table = self.table.read().unwrap_or_else(|p| p.into_inner());
        table.raise_at(key, tat, now);
        // SeqCst fence, paired with the one in `invalidate` (the two are in one total order):
        // if ours comes first, our raise (before it) is seen by the invalidation's reset
        // (after its fence), which clears the entry; if theirs comes first, the count we read
        // after ours includes its increment (before it), and we clear the entry here.
        fence(Ordering::SeqCst);
        if self.invalidations.load(Ordering::Relaxed) != epoch {
            table.reset(key);
        }
    }

    pub(crate) fn invalidate(&self, key: &str) {
        // Relaxed increment, then the SeqCst fence `remember` pairs with (see there).
        self.invalidations.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let table = self.table.read().unwrap_or_else(|p| p.into_inner());
        table.reset(key);
    }

    pub(crate) fn invalidate_all(&self) {
        // As `invalidate`: a reply to a request sent before it is not remembered.
        self.invalidations.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if let Ok(fresh) = Self::table(self.quota, self.capacity) {
            *self.table.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        }
    }
}
