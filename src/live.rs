//! Live reconfiguration: a quota that can be replaced while other threads decide under it,
//! with no lock and no allocation on the read path.
//!
//! [`LiveQuota`] is a two-slot seqlock: a writer fills the slot readers are not using and then
//! publishes it by bumping a version; a reader loads the version, the slot it names and the
//! version again, and retries only if a replacement *completed* meanwhile. A stalled writer
//! never blocks readers (they keep reading the published slot), so reads are lock-free. The
//! argument and the orderings are in `docs/design/policies.md`, "Live reconfiguration".

use std::hash::Hash;
use std::sync::Mutex;

#[cfg(funnel_loom)]
use loom::sync::atomic::fence;
#[cfg(not(funnel_loom))]
use std::sync::atomic::fence;

use crate::clock::{Clock, QuantaClock};
use crate::limiter::Limiter;
use crate::quota::Quota;
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

/// A keyed [`Limiter`] whose default quota can be replaced while traffic flows.
/// [`current`](Self::current) hands out the limiter under the current quota, a
/// [`WithQuota`] view with all of the limiter's calls; [`set_quota`](Self::set_quota) replaces
/// it. A per-key override is `live.limiter().with_quota(f(key, *live.current().quota()))`.
///
/// **The rule for existing debt:** a key's state is its arrival time, which a new quota keeps
/// and reads as it is: debt is kept *as time*. A key that needed 3 s to drain under the old
/// quota needs 3 s under the new one, worth `3 s / T'` of its units. A key whose debt exceeds
/// the new tolerance is not clamped: it is denied until it has drained below it.
///
/// A reservation remembers the quota it was charged under and is settled under that same
/// quota ([`Limiter::settle`], through [`limiter`](Self::limiter)) even if the live quota
/// changes in between: the unused part goes back as exactly the time it took.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::{clock::ManualClock, LiveLimiter, Limiter, Quota};
///
/// let limiter = Limiter::<str>::builder(Quota::per_second(2)?).clock(ManualClock::new()).build()?;
/// let live = LiveLimiter::new(limiter);
/// assert!(live.current().check("k").is_allowed());
/// assert!(live.current().check("k").is_allowed());
/// assert!(!live.current().check("k").is_allowed());
/// live.set_quota(Quota::per_second(4)?); // 4 per second now, T = 250 ms
/// // The key's debt, 1 s of drain, is kept as time: all 4 new units, so it waits one interval.
/// assert_eq!(live.current().check("k").retry_after(), Some(Duration::from_millis(250)));
/// assert_eq!(live.current().check("fresh").remaining(), 3);
/// // A premium key gets a quota of its own, from the key and the current quota.
/// fn quota_for(key: &str, current: Quota) -> Quota {
///     if key.starts_with("vip:") { current.with_limit(100).unwrap_or(current) } else { current }
/// }
/// let key = "vip:ada";
/// let quota = quota_for(key, *live.current().quota());
/// assert_eq!(live.limiter().with_quota(quota).check(key).remaining(), 99);
/// // The limiter's own calls still decide under the quota it was built with.
/// assert_eq!(live.limiter().peek("fresh").remaining(), 1);
/// # Ok::<(), funnel::Error>(())
/// ```
pub struct LiveLimiter<K: ?Sized, C = QuantaClock> {
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

    /// The limiter under the current quota: every call of [`Limiter`] (check, peek, refund,
    /// reserve, cost, batches), deciding under the quota loaded here. Load it once per
    /// request: a view keeps the quota it loaded, so a request's calls agree even if the quota
    /// is replaced meanwhile.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{clock::ManualClock, LiveLimiter, Limiter, Quota};
    ///
    /// let limiter = Limiter::<str>::builder(Quota::per_second(1)?).clock(ManualClock::new()).build()?;
    /// let live = LiveLimiter::new(limiter);
    /// live.set_quota(Quota::per_second(4)?.with_limit(2)?); // T = 250 ms, 2 at once
    /// let now = live.current();
    /// assert!(now.check("k").is_allowed());
    /// assert!(now.check("k").is_allowed());
    /// assert!(!now.check("k").is_allowed());
    /// assert!(now.refund("k", 1)); // 250 ms back: one unit of the live quota
    /// assert_eq!(now.peek("k").remaining(), 1);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    #[inline(always)]
    pub fn current(&self) -> WithQuota<'_, K, C> {
        self.limiter.with_quota(self.quota.load())
    }

    /// Replaces the default quota; see the type's rule for existing debt.
    pub fn set_quota(&self, quota: Quota) {
        self.quota.store(quota);
    }

    /// The wrapped limiter, for what does not depend on the quota (settling a reservation,
    /// resetting a key, statistics, capacity, the clock).
    ///
    /// Its own decisions ([`Limiter::check`], [`Limiter::peek`], [`Limiter::refund`],
    /// [`Limiter::reserve`], [`Limiter::cost`]) use the quota it was **built** with, not the
    /// live one: decide through [`current`](Self::current) instead.
    pub fn limiter(&self) -> &Limiter<K, C> {
        &self.limiter
    }
}
