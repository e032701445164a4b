//! Live reconfiguration: a quota that can be replaced while other threads decide under it,
//! with no lock and no allocation on the read path.
//!
//! [`LiveQuota`] is a two-slot seqlock: a writer fills the slot readers are not using and then
//! publishes it by bumping a version; a reader loads the version, the slot it names and the
//! version again, and retries only if a replacement *completed* meanwhile. A stalled writer
//! never blocks readers (they keep reading the published slot), so reads are lock-free. The
//! argument and the orderings are in `docs/DESIGN.md`, "Live reconfiguration".

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Mutex;

#[cfg(funnel_loom)]
use loom::sync::atomic::fence;
#[cfg(not(funnel_loom))]
use std::sync::atomic::fence;

use crate::clock::{Clock, DefaultClock, Timestamp};
use crate::decision::Decision;
use crate::error::Error;
use crate::limiter::Limiter;
use crate::multi::Cost;
use crate::quota::Quota;
use crate::settle::{Reservation, Settled};
use crate::sync::{AtomicU64, Ordering};
use crate::with_quota::WithQuota;

/// A [`Quota`] that can be replaced at any time while other threads read it.
///
/// # Examples
///
/// ```
/// use funnel::{LiveQuota, Quota};
///
/// let quota = LiveQuota::new(Quota::per_second(10)?);
/// assert_eq!(quota.load().limit(), 10);
/// quota.store(Quota::per_second(50)?); // e.g. from a config reload, while traffic flows
/// assert_eq!(quota.load().limit(), 50);
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Debug)]
pub struct LiveQuota {
    /// Completed replacements; slot `version & 1` holds the current quota.
    version: AtomicU64,
    /// Two slots of `[t, limit]` (the tolerance is recomputed: `t * limit` was validated).
    slots: [[AtomicU64; 2]; 2],
    /// Serialises writers (replacements are rare); readers never take it.
    writer: Mutex<()>,
}

impl LiveQuota {
    /// A cell holding `quota`.
    pub fn new(quota: Quota) -> LiveQuota {
        let slot = |q: &Quota| [AtomicU64::new(q.t), AtomicU64::new(q.limit)];
        LiveQuota {
            version: AtomicU64::new(0),
            slots: [slot(&quota), slot(&quota)],
            writer: Mutex::new(()),
        }
    }

    /// The current quota. Lock-free: retries only when a [`store`](Self::store) completed
    /// during the read.
    #[inline]
    pub fn load(&self) -> Quota {
        loop {
            // Acquire: pairs with the Release publication in `store`, so the slot's words
            // written before it are visible below.
            let v = self.version.load(Ordering::Acquire);
            let [t, limit] = &self.slots[(v & 1) as usize];
            // Relaxed: ordered by the version loads around them (the fence below).
            let (t, limit) = (t.load(Ordering::Relaxed), limit.load(Ordering::Relaxed));
            // Acquire fence: if either load above read a word of a later store (which rewrites
            // this slot only after publishing the next version and its Release fence), that
            // fence synchronises with this one and the version re-load sees the change.
            fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) == v {
                return Quota {
                    t,
                    limit,
                    tau: t * limit,
                };
            }
        }
    }

    /// Replaces the quota. Readers see the old or the new one, never a mix; decisions already
    /// under way finish under the quota they loaded.
    pub fn store(&self, quota: Quota) {
        // A poisoned lock only means another writer panicked between publications, which
        // leaves the cell consistent (each publication is a single version store).
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        // Relaxed: writers are serialised by the lock, which orders their accesses.
        let v = self.version.load(Ordering::Relaxed);
        let [t, limit] = &self.slots[((v + 1) & 1) as usize];
        // Release fence: readers still reading this slot under version `v - 1` must notice.
        // Any of them whose load sees the stores below synchronises with this fence through
        // its Acquire fence, and so sees version `v` (published before this fence) on re-load.
        fence(Ordering::Release);
        t.store(quota.t, Ordering::Relaxed);
        limit.store(quota.limit, Ordering::Relaxed);
        // Release: publishes the slot's words to readers' Acquire version load.
        self.version.store(v + 1, Ordering::Release);
    }
}

/// A keyed [`Limiter`] whose default quota can be replaced while traffic flows. It has the
/// limiter's method names and signatures, deciding under the current quota, plus
/// [`set_quota`](Self::set_quota) and [`quota`](Self::quota); a per-key override is
/// `live.with_quota(f(key, live.quota())).check(key)` (no second lookup).
///
/// **The rule for existing debt:** a key's state is its arrival time, which a new quota keeps
/// and reads as it is: debt is kept *as time*. A key that needed 3 s to drain under the old
/// quota needs 3 s under the new one, worth `3 s / T'` of its units. A key whose debt exceeds
/// the new tolerance is not clamped: it is denied until it has drained below it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::{clock::ManualClock, LiveLimiter, Limiter, Quota};
///
/// let limiter = Limiter::<str>::builder(Quota::per_second(2)?).clock(ManualClock::new()).build()?;
/// let live = LiveLimiter::new(limiter);
/// assert!(live.check("k").is_allowed());
/// assert!(live.check("k").is_allowed());
/// assert!(!live.check("k").is_allowed());
/// live.set_quota(Quota::per_second(4)?); // 4 per second now, T = 250 ms
/// // The key's debt, 1 s of drain, is kept as time: all 4 new units, so it waits one interval.
/// assert_eq!(live.check("k").retry_after(), Some(Duration::from_millis(250)));
/// assert_eq!(live.check("fresh").remaining(), 3);
/// // A premium key gets a quota of its own, from the key and the current quota.
/// fn quota_for(key: &str, current: Quota) -> Quota {
///     if key.starts_with("vip:") { current.with_limit(100).unwrap_or(current) } else { current }
/// }
/// let key = "vip:ada";
/// assert_eq!(live.with_quota(quota_for(key, live.quota())).check(key).remaining(), 99);
/// # Ok::<(), funnel::Error>(())
/// ```
pub struct LiveLimiter<K: ?Sized, C = DefaultClock> {
    limiter: Limiter<K, C>,
    quota: LiveQuota,
}

/// As [`Limiter`]'s: no bound on the key or the clock.
impl<K: ?Sized, C> std::fmt::Debug for LiveLimiter<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveLimiter")
            .field("limiter", &self.limiter)
            .field("quota", &self.quota)
            .finish()
    }
}

impl<K: Hash + ?Sized, C: Clock> LiveLimiter<K, C> {
    /// Wraps `limiter`, starting from its quota.
    pub fn new(limiter: Limiter<K, C>) -> Self {
        let quota = LiveQuota::new(*limiter.quota());
        LiveLimiter { limiter, quota }
    }

    /// The limiter under the current quota, for one call.
    #[inline(always)]
    fn current(&self) -> WithQuota<'_, K, C> {
        self.limiter.with_quota(self.quota.load())
    }

    /// A view deciding under `quota` instead of the current one: [`Limiter::with_quota`].
    /// A per-key override is `live.with_quota(f(key, live.quota())).check(key)`.
    #[inline(always)]
    pub fn with_quota(&self, quota: Quota) -> WithQuota<'_, K, C> {
        self.limiter.with_quota(quota)
    }

    /// One unit request for `key`, now, under the current quota.
    #[inline]
    pub fn check(&self, key: &K) -> Decision {
        self.current().check(key)
    }

    /// A request of `n` units for `key`, now, under the current quota.
    #[inline]
    pub fn check_n(&self, key: &K, n: u64) -> Decision {
        self.current().check_n(key, n)
    }

    /// One unit request for `key` at the caller's `now`, under the current quota.
    #[inline]
    pub fn check_at(&self, key: &K, now: Timestamp) -> Decision {
        self.current().check_at(key, now)
    }

    /// A request of `n` units for `key` at the caller's `now`, under the current quota.
    #[inline]
    pub fn check_n_at(&self, key: &K, n: u64, now: Timestamp) -> Decision {
        self.current().check_n_at(key, n, now)
    }

    /// One unit request for each of `keys`, in order, now (one clock read for the batch), under
    /// the current quota: [`Limiter::check_batch`] with this limiter's quota.
    pub fn check_batch<B: Borrow<K>>(&self, keys: &[B], out: &mut Vec<Decision>) {
        self.check_batch_at(keys, self.limiter.now(), out);
    }

    /// [`check_batch`](Self::check_batch) at the caller's `now`: the same decisions as
    /// [`check_at`](Self::check_at) called for each key in turn under the quota current when
    /// the batch starts (read once for the whole batch). See [`Limiter::check_batch_at`].
    pub fn check_batch_at<B: Borrow<K>>(
        &self,
        keys: &[B],
        now: Timestamp,
        out: &mut Vec<Decision>,
    ) {
        self.limiter
            .decide_batch_at(keys, &self.quota.load(), now, out);
    }

    /// `key`'s state now under the current quota, charging nothing and creating nothing (see
    /// [`Limiter::peek`] for what a key in debt beyond the tolerance answers).
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{clock::ManualClock, LiveLimiter, Limiter, Quota};
    ///
    /// let limiter = Limiter::<str>::builder(Quota::per_second(2)?).clock(ManualClock::new()).build()?;
    /// let live = LiveLimiter::new(limiter);
    /// assert!(live.check("k").is_allowed()); // 500 ms of debt
    /// live.set_quota(Quota::per_second(4)?.with_limit(8)?);
    /// // The same 500 ms read under the new quota: 2 of its 8 units.
    /// assert_eq!(live.peek("k").limit(), 8);
    /// assert_eq!(live.peek("k").remaining(), 6);
    /// // The limiter's own peek still reads it under the quota it was built with.
    /// assert_eq!(live.limiter().peek("k").remaining(), 1);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    #[inline]
    pub fn peek(&self, key: &K) -> Decision {
        self.current().peek(key)
    }

    /// [`peek`](Self::peek) at the caller's `now`.
    #[inline]
    pub fn peek_at(&self, key: &K, now: Timestamp) -> Decision {
        self.current().peek_at(key, now)
    }

    /// Gives back `n` units of the **current** quota to `key`, now: its arrival time moves
    /// back by `n` of the current emission intervals, never below now (never emptier than a
    /// fresh funnel). False when there was nothing to give back. As [`Limiter::refund`], meant
    /// for a charge just made: for a charge made under another quota (before a quota change, or
    /// a per-key override), `live.with_quota(q).refund(key, n)` gives back exactly the time it
    /// took, since debt is kept as time.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{clock::ManualClock, LiveLimiter, Limiter, Quota};
    ///
    /// let limiter = Limiter::<str>::builder(Quota::per_second(1)?).clock(ManualClock::new()).build()?;
    /// let live = LiveLimiter::new(limiter);
    /// live.set_quota(Quota::per_second(4)?.with_limit(2)?); // T = 250 ms, 2 at once
    /// assert!(live.check("k").is_allowed());
    /// assert!(live.check("k").is_allowed());
    /// assert!(!live.check("k").is_allowed());
    /// assert!(live.refund("k", 1)); // 250 ms back: one unit of the live quota
    /// assert_eq!(live.peek("k").remaining(), 1);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    pub fn refund(&self, key: &K, n: u64) -> bool {
        self.current().refund(key, n)
    }

    /// [`refund`](Self::refund) at the caller's `now`.
    pub fn refund_at(&self, key: &K, n: u64, now: Timestamp) -> bool {
        self.current().refund_at(key, n, now)
    }

    /// Charges an estimate of `estimate` units to `key` now under the current quota, as
    /// [`Limiter::reserve`]; settle it with [`settle`](Self::settle).
    ///
    /// A reservation remembers the quota it was charged under and is settled under that same
    /// quota even if the live quota changes in between: the unused part goes back as exactly
    /// the time it took, and the extra is charged at the rate of the estimate.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{clock::ManualClock, LiveLimiter, Limiter, Quota, Settled};
    ///
    /// let limiter = Limiter::<str>::builder(Quota::per_minute(100)?).clock(ManualClock::new()).build()?;
    /// let live = LiveLimiter::new(limiter);
    /// live.set_quota(Quota::per_minute(1_000)?); // 1,000 tokens a minute now
    /// let r = live.reserve("user:7", 300);
    /// assert_eq!(r.decision().remaining(), 700);
    /// assert_eq!(r.quota().limit(), 1_000);
    /// assert_eq!(live.settle("user:7", r, 120)?, Settled::Refunded);
    /// assert_eq!(live.peek("user:7").remaining(), 880);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    pub fn reserve(&self, key: &K, estimate: u64) -> Reservation {
        self.current().reserve(key, estimate)
    }

    /// [`reserve`](Self::reserve) at the caller's `now`.
    pub fn reserve_at(&self, key: &K, estimate: u64, now: Timestamp) -> Reservation {
        self.current().reserve_at(key, estimate, now)
    }

    /// Settles `reservation` with the `actual` cost, now, under the quota it was reserved
    /// under (see [`reserve`](Self::reserve)): [`Limiter::settle`].
    ///
    /// # Errors
    ///
    /// [`Error::ReservationMismatch`] when `reservation`
    /// was made by another limiter or for another key; nothing is changed.
    pub fn settle(&self, key: &K, reservation: Reservation, actual: u64) -> Result<Settled, Error> {
        self.limiter.settle(key, reservation, actual)
    }

    /// [`settle`](Self::settle) at the caller's `now`.
    ///
    /// # Errors
    ///
    /// As [`settle`](Self::settle).
    pub fn settle_at(
        &self,
        key: &K,
        reservation: Reservation,
        actual: u64,
        now: Timestamp,
    ) -> Result<Settled, Error> {
        self.limiter.settle_at(key, reservation, actual, now)
    }

    /// An entry charging `n` units to `key` under the current quota, for
    /// [`check_all`](crate::check_all).
    pub fn cost<'a>(&'a self, key: &'a K, n: u64) -> Cost<'a, K, C> {
        self.limiter.cost(key, n).under(self.quota.load())
    }

    /// Empties `key`'s funnel: [`Limiter::reset`].
    pub fn reset(&self, key: &K) -> bool {
        self.limiter.reset(key)
    }

    /// The current time on the limiter's clock, for the `*_at` variants.
    #[inline]
    pub fn now(&self) -> Timestamp {
        self.limiter.now()
    }

    /// Replaces the default quota; see the type's rule for existing debt.
    pub fn set_quota(&self, quota: Quota) {
        self.quota.store(quota);
    }

    /// The current default quota.
    pub fn quota(&self) -> Quota {
        self.quota.load()
    }

    /// The wrapped limiter, for what does not depend on the quota (statistics, capacity).
    ///
    /// Its own quota-taking shortcuts ([`Limiter::check`], [`Limiter::peek`],
    /// [`Limiter::refund`], [`Limiter::reserve`], [`Limiter::cost`]) use the quota it was
    /// **built** with, not the live one: call this type's methods of the same names instead.
    pub fn limiter(&self) -> &Limiter<K, C> {
        &self.limiter
    }
}
