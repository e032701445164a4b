//! [`Limiter`]: the keyed limiter, a thin layer over the table that hashes keys and reads the
//! clock.

use std::borrow::Borrow;
use std::hash::Hash;
use std::marker::PhantomData;

use crate::clock::{Clock, QuantaClock, Timestamp};
use crate::decision::Decision;
use crate::error::Error;
use crate::hasher::KeyHash;
use crate::quota::Quota;
use crate::quota_kind::QuotaKind;
use crate::table::{Home, Stats, Table, Updated, WhenFull};
use crate::window::{FixedWindowQuota, SlidingWindowQuota};

mod persist;

/// The capacity of [`Limiter::new`]: 65,536 keys (65,541 slots, a 1.2 MB table).
pub const DEFAULT_CAPACITY: usize = 1 << 16;

/// The initial capacity of a growable table when [`Builder::capacity`] is not given.
const DEFAULT_GROWABLE_START: usize = 1 << 10;

/// A keyed funnel limiter with bounded memory: each key (client IP, token, `user:action`) gets
/// its own funnel in one `AtomicU64`, inside a table whose size is fixed when it is built.
///
/// * Keys are stored as 64-bit fingerprints of a randomly seeded [`ahash`] hash, so a slot is
///   about 18 bytes whatever the key type, and attackers cannot aim keys at a bucket. Two keys whose
///   fingerprints collide share one funnel (stricter, never looser); with `n` keys tracked the
///   odds that any pair collides are about `n² / 2^65` (3 in 100 million at a million keys).
/// * A funnel that has fully drained is the same as an absent one, so its slot is reused by
///   new keys with no timers or sweeper thread; when a new key finds no such slot,
///   [`WhenFull`] decides (by default the least indebted funnel is evicted).
/// * Updating a present key is lock-free: one CAS when allowed, loads only when denied.
///
/// # Examples
///
/// ```
/// use funnel::{Limiter, Quota};
///
/// // 30 requests per minute per client, bursts of up to 16.
/// let limiter = Limiter::<str>::new(Quota::per_minute(30)?.with_limit(16)?);
/// let d = limiter.check("203.0.113.7");
/// assert!(d.is_allowed());
/// assert_eq!(d.remaining(), 15);
/// assert!(limiter.check("198.51.100.1").is_allowed()); // another key, its own funnel
/// # Ok::<(), funnel::Error>(())
/// ```
///
/// Keys can be any `Hash` type, sized or not:
///
/// ```
/// use std::net::IpAddr;
/// use funnel::{Limiter, Quota};
///
/// let by_ip = Limiter::<IpAddr>::new(Quota::per_second(100)?);
/// let ip: IpAddr = "2001:db8::1".parse().unwrap();
/// assert!(by_ip.check(&ip).is_allowed());
///
/// let by_id = Limiter::<u64>::new(Quota::per_minute(10)?);
/// assert!(by_id.check_n(&42, 3).is_allowed());
/// # Ok::<(), funnel::Error>(())
/// ```
pub struct Limiter<K: ?Sized, C = QuantaClock, Q = Quota> {
    table: Table,
    /// This limiter's identity among the limiters of the process, recorded by reservations.
    id: u64,
    quota: Q,
    when_full: WhenFull,
    hasher: KeyHash,
    clock: C,
    _key: PhantomData<fn(&K)>,
}

/// A keyed fixed window counter: [`Limiter`] with a
/// [`FixedWindowQuota`] in each slot (`funnel::window` has its rules and ranges).
///
/// # Examples
///
/// ```
/// use funnel::{window::FixedWindowQuota, FixedWindowLimiter, Limiter};
///
/// let per_minute: FixedWindowLimiter<str> =
///     Limiter::<str>::builder(FixedWindowQuota::per_minute(100)?).build()?;
/// assert_eq!(per_minute.check("alice").remaining(), 99);
/// # Ok::<(), funnel::Error>(())
/// ```
pub type FixedWindowLimiter<K, C = QuantaClock> = Limiter<K, C, FixedWindowQuota>;

/// A keyed sliding window counter: [`Limiter`] with a [`SlidingWindowQuota`] in each slot
/// (`funnel::window` has its rules and ranges).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::{clock::ManualClock, window::SlidingWindowQuota, Limiter};
///
/// let clock = ManualClock::new();
/// let q = SlidingWindowQuota::per_period(4, Duration::from_secs(10))?;
/// let limiter = Limiter::<u64>::builder(q).clock(clock.clone()).build()?;
/// assert!((0..4).all(|_| limiter.check(&7).is_allowed()));
/// // 2.5 s into the next window, the previous window's 4 weigh 4 * 7.5 / 10 = 3.
/// clock.advance(Duration::from_millis(12_500));
/// assert!(limiter.check(&7).is_allowed());
/// assert!(!limiter.check(&7).is_allowed());
/// # Ok::<(), funnel::Error>(())
/// ```
pub type SlidingWindowLimiter<K, C = QuantaClock> = Limiter<K, C, SlidingWindowQuota>;

impl<K: Hash + ?Sized> Limiter<K, QuantaClock> {
    /// A funnel limiter for up to [`DEFAULT_CAPACITY`] keys on the default clock, evicting the
    /// least indebted funnel when full.
    pub fn new(quota: Quota) -> Self {
        Builder::new(quota)
            .build()
            .expect("the default capacity is valid and small") // 1.2 MB; only OOM could fail
    }

    /// A builder, to set the capacity, clock, hasher seed or [`WhenFull`] policy. The quota's
    /// type chooses the algorithm: a [`Quota`] builds a funnel limiter, a [`FixedWindowQuota`]
    /// a fixed window counter, a [`SlidingWindowQuota`] a sliding window counter.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{window::FixedWindowQuota, Limiter, Quota};
    ///
    /// let funnels = Limiter::<str>::builder(Quota::per_second(10)?).capacity(1_000).build()?;
    /// let windows = Limiter::<str>::builder(FixedWindowQuota::per_minute(100)?).build()?;
    /// assert_eq!(funnels.check("k").remaining(), 9);
    /// assert_eq!(windows.check("k").remaining(), 99);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    pub fn builder<M: QuotaKind>(quota: M) -> Builder<K, QuantaClock, M> {
        Builder::new(quota)
    }
}

impl<K: Hash + ?Sized, C: Clock, Q: QuotaKind> Limiter<K, C, Q> {
    /// A request of `n` units for `key` under `quota`, now. The key's bucket lines start
    /// loading before the clock is read: the read (`rdtsc` on x86_64) holds back the loads
    /// that follow it, so issued first they overlap it. The lookup then uses the buckets
    /// `start_loading` indexed, without hinting them again (`docs/design/arithmetic-and-time.md`, "Reading the time", says
    /// why). A clock that [`reads_memory`](Clock::reads_memory) has no read to
    /// overlap, so its decisions skip the hints.
    #[inline(always)]
    pub(crate) fn decide_now<M: QuotaKind>(&self, key: &K, quota: &M, n: u64) -> Decision {
        let home = self.table.home(self.hasher.hash(key));
        if self.clock.reads_memory() {
            self.table
                .decide(&home, self.clock.now().as_nanos(), quota, n)
        } else {
            let probe = self.table.start_loading(&home);
            let now = self.clock.now();
            self.table.decide_loaded(probe, now.as_nanos(), quota, n)
        }
    }

    /// A request of `n` units for `key` under `quota` at the caller's `now`: the `*_at`
    /// decisions and the batch (the decisions that read the clock go through
    /// [`decide_now`](Self::decide_now)).
    #[inline(always)]
    pub(crate) fn decide_at<M: QuotaKind>(
        &self,
        key: &K,
        quota: &M,
        n: u64,
        now: Timestamp,
    ) -> Decision {
        let home = self.table.home(self.hasher.hash(key));
        self.table.decide(&home, now.as_nanos(), quota, n)
    }

    /// [`check_batch_at`](Self::check_batch_at) under `quota`: the limiter's own, or a
    /// [`LiveLimiter`](crate::LiveLimiter)'s current one.
    pub(crate) fn decide_batch_at<B: Borrow<K>, M: QuotaKind>(
        &self,
        keys: &[B],
        quota: &M,
        now: Timestamp,
        out: &mut Vec<Decision>,
    ) {
        /// How far ahead the batch hashes keys and prefetches their buckets: enough decisions
        /// in between to cover a memory miss, few enough that the lines are still cached when
        /// their turn comes.
        const AHEAD: usize = 32;
        /// Below this many bytes in use the table stays in the CPU's caches, and looking ahead
        /// only costs.
        const CACHED: usize = 1 << 20;
        let home = |key: &B| self.table.home(self.hasher.hash(key.borrow()));
        out.reserve(keys.len());
        if self.table.memory_bytes() < CACHED {
            // A loop of pushes rather than `extend` over a map, whose compiled loop read `now`
            // through the closure and kept the vector's length in memory.
            for key in keys {
                out.push(self.decide_at(key.borrow(), quota, 1, now));
            }
            return;
        }
        let mut ahead = [Home::default(); AHEAD];
        for (slot, key) in ahead.iter_mut().zip(keys) {
            *slot = home(key);
            self.table.prefetch(slot);
        }
        for i in 0..keys.len() {
            // At the table's size now: it may have grown since this home was computed.
            let current = self.table.rehome(&ahead[i % AHEAD]);
            if let Some(next) = keys.get(i + AHEAD) {
                let next = home(next);
                self.table.prefetch(&next);
                ahead[i % AHEAD] = next;
            }
            let decision = self.table.decide(&current, now.as_nanos(), quota, 1);
            out.push(decision);
        }
    }

    /// Empties `key`'s funnel (its full quota is back); false if the key was not tracked.
    pub fn reset(&self, key: &K) -> bool {
        let home = self.table.home(self.hasher.hash(key));
        self.table.reset(&home)
    }

    /// The current time on the limiter's clock, for the `*_at` variants.
    #[inline]
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

/// The funnel's own operations: a per-call quota (as CL.THROTTLE takes one), refunds, and
/// raising a key to a known arrival time. A window counter's state is not an arrival time, so
/// these are the funnel's only.
impl<K: Hash + ?Sized, C: Clock> Limiter<K, C> {
    /// The general read-modify-write of `key`'s arrival time at `now`: see `Table::update`.
    /// Public operations other than decisions (refunds, raising a key to a known arrival time)
    /// are built on it.
    pub(crate) fn update_at(
        &self,
        key: &K,
        now: Timestamp,
        f: impl FnMut(u64) -> Option<u64>,
    ) -> Updated {
        let home = self.table.home(self.hasher.hash(key));
        self.table.update(&home, now.as_nanos(), &self.quota, f)
    }

    /// The fingerprint of `key` a reservation records.
    pub(crate) fn fingerprint(&self, key: &K) -> u64 {
        self.hasher.hash(key)
    }

    /// `key`'s arrival time, `0` when it is untracked: a report (see `Table::arrival_time`).
    pub(crate) fn arrival_time(&self, key: &K) -> u64 {
        let home = self.table.home(self.hasher.hash(key));
        self.table.arrival_time(&home)
    }

    /// A refund of `n` units of `quota`, at `now`.
    pub(crate) fn refund_under(&self, key: &K, quota: &Quota, n: u64, now: Timestamp) -> bool {
        let back = n.saturating_mul(quota.t);
        let at = now.as_nanos();
        let updated = self.update_at(key, now, |tat| {
            (tat > at && back > 0).then(|| tat.saturating_sub(back).max(at))
        });
        matches!(updated, Updated::Written(..))
    }

    /// Raises `key`'s theoretical arrival time to at least `tat`, creating the key if needed
    /// (subject to [`WhenFull`]): for a cache of arrival times learned elsewhere, such as a
    /// Redis backend's denials. Never lowers a funnel; false when nothing was written (the key
    /// already owed as much, or the table was full).
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{Limiter, Quota, Timestamp};
    ///
    /// let cache = Limiter::<str>::new(Quota::per_second(1)?);
    /// let now = Timestamp::from_nanos(1_000_000_000)?;
    /// let later = Timestamp::from_nanos(3_000_000_000)?;
    /// assert!(cache.raise_at("k", later, now));
    /// assert!(!cache.raise_at("k", now, now)); // never lowers
    /// assert_eq!(cache.peek_at("k", now).reset_after().as_secs(), 2);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    pub fn raise_at(&self, key: &K, tat: Timestamp, now: Timestamp) -> bool {
        let tat = tat.as_nanos();
        let updated = self.update_at(key, now, |current| (tat > current).then_some(tat));
        matches!(updated, Updated::Written(..))
    }
}

impl<K: ?Sized, C, Q> Limiter<K, C, Q> {
    /// Keys tracked: slots holding a key, including keys whose funnel has recovered but whose
    /// slot no new key has needed yet. Approximate under concurrent updates; never above
    /// [`capacity`](Self::capacity).
    pub fn len(&self) -> usize {
        self.table.stats().keys
    }

    /// True when no key was ever tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many keys the table can hold now: the requested capacity rounded up to a whole
    /// bucket of seven slots; for a growable table, the slots of its current size.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// The most keys the table can ever hold: [`capacity`](Self::capacity) for a fixed table,
    /// the slots of its largest size for a growable one.
    pub fn max_capacity(&self) -> usize {
        self.table.max_capacity()
    }

    /// Bytes of memory the table occupies: its buckets in use, with their locks, and its
    /// counters. Fixed at build time for a fixed table; for a growable one, that of its current
    /// size plus its creation locks and their move counts (five bytes per bucket of its
    /// largest size, at most 80 KiB; the rest of its maximum is reserved address space, never
    /// touched).
    pub fn memory_bytes(&self) -> usize {
        self.table.memory_bytes()
    }

    /// Counters: keys, evictions, keys turned away or let through untracked.
    pub fn stats(&self) -> Stats {
        self.table.stats()
    }

    /// The quota of [`check`](Self::check) and [`check_n`](Self::check_n).
    pub fn quota(&self) -> &Q {
        &self.quota
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// This limiter's identity, recorded by its reservations.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Checks internal invariants (no key bound twice, counters consistent); call only while
    /// no other thread uses the limiter. For tests and fuzzing: only with the cargo feature
    /// `invariants`.
    #[cfg(feature = "invariants")]
    pub fn check_invariants(&self) -> Result<(), String> {
        self.table.check_invariants()
    }
}

impl<K: ?Sized, C, Q: std::fmt::Debug> std::fmt::Debug for Limiter<K, C, Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("quota", &self.quota)
            .field("capacity", &self.capacity())
            .field("when_full", &self.when_full)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Limiter`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::{clock::ManualClock, Limiter, Quota, WhenFull};
///
/// let clock = ManualClock::new();
/// let limiter = Limiter::<u64>::builder(Quota::per_second(2)?)
///     .capacity(1_000_000)
///     .clock(clock.clone())
///     .seed(7)
///     .when_full(WhenFull::Evict)
///     .build()?;
/// assert!(limiter.check(&1).is_allowed());
/// assert!(limiter.check(&1).is_allowed());
/// assert!(!limiter.check(&1).is_allowed());
/// clock.advance(Duration::from_millis(500));
/// assert!(limiter.check(&1).is_allowed());
/// # Ok::<(), funnel::Error>(())
/// ```
#[must_use]
pub struct Builder<K: ?Sized, C = QuantaClock, Q = Quota> {
    quota: Q,
    /// The fixed capacity, or the initial one of a growable table; `None`: the default.
    capacity: Option<usize>,
    /// `Some`: the table grows up to this many keys.
    max_capacity: Option<usize>,
    clock: C,
    seed: Option<u64>,
    when_full: WhenFull,
    /// `None`: the default (huge pages for a fixed table of 8 MiB or more).
    huge_pages: Option<bool>,
    /// A saved state to load (`restore`, `limiter/persist.rs`).
    restore: Option<(crate::snapshot::Snapshot, KeyHash)>,
    _key: PhantomData<fn(&K)>,
}

/// The settings so far; the seed is shown only as set or not (it keeps keys from being aimed).
impl<K: ?Sized, C, Q: std::fmt::Debug> std::fmt::Debug for Builder<K, C, Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("quota", &self.quota)
            .field("capacity", &self.capacity)
            .field("max_capacity", &self.max_capacity)
            .field("seeded", &self.seed.is_some())
            .field("when_full", &self.when_full)
            .field("huge_pages", &self.huge_pages)
            .finish_non_exhaustive()
    }
}

impl<K: ?Sized, Q> Builder<K, QuantaClock, Q> {
    fn new(quota: Q) -> Self {
        Builder {
            quota,
            capacity: None,
            max_capacity: None,
            clock: QuantaClock::new(),
            seed: None,
            when_full: WhenFull::default(),
            huge_pages: None,
            restore: None,
            _key: PhantomData,
        }
    }
}

impl<K: ?Sized, C: Clock, Q: QuotaKind> Builder<K, C, Q> {
    /// Room for at least `keys` keys, rounded up to a whole bucket of seven slots; a 128-byte
    /// bucket per seven slots (18.3 bytes a slot). Without
    /// [`max_capacity`](Self::max_capacity) the table keeps this size for its whole life (the
    /// default: [`DEFAULT_CAPACITY`]); with it, this is the size the table starts at (the
    /// default: 1,024 keys).
    ///
    /// Sizing a fixed table: about 1.25× the keys you expect to be in debt at the same
    /// moment. Keys whose funnel has recovered need no slot, but a new key has only 14
    /// candidate slots: when they are all in debt it moves one of their keys to that key's
    /// other bucket, and the table starts evicting (or applies [`WhenFull`]) once about 90% of
    /// its slots hold funnels in debt (`docs/design/table.md`, "Two-choice placement").
    pub fn capacity(mut self, keys: usize) -> Self {
        self.capacity = Some(keys);
        self
    }

    /// Lets the table grow, up to room for `keys` keys: it starts at
    /// [`capacity`](Self::capacity) and doubles whenever a new key finds its candidate slots
    /// all held by funnels in debt, until it reaches this size; from then on [`WhenFull`]
    /// applies as in a fixed table. Both sizes round up to a power of two of buckets (seven
    /// slots each).
    ///
    /// Memory: the maximum is reserved as address space when the limiter is built, but only
    /// the buckets in use are touched, so resident memory is that of the current size
    /// ([`memory_bytes`](Limiter::memory_bytes)), at most `128 B × 2^ceil(log2(keys / 7))`
    /// plus the creation locks and their move counts (at most 80 KiB).
    /// Updates stay lock-free while the table grows; keys whose buckets change move in
    /// chunks, carried by the requests that take the slow path. While keys move, a new key waits
    /// (helping the move) once the new size is three quarters full, so the keys still to move
    /// keep room; a move that still finds its key no slot after many tries evicts the least
    /// indebted candidate, counted in [`Stats::forced_evictions`] (a last resort, so that a
    /// move always ends).
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{Limiter, Quota};
    ///
    /// let limiter = Limiter::<u64>::builder(Quota::per_minute(1)?)
    ///     .capacity(1_000)
    ///     .max_capacity(1_000_000)
    ///     .build()?;
    /// let start = limiter.capacity();
    /// for key in 0..10_000 {
    ///     assert!(limiter.check(&key).is_allowed()); // every key is new: one request fits
    /// }
    /// assert!(limiter.capacity() > start);
    /// assert!(limiter.stats().growths >= 1);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    pub fn max_capacity(mut self, keys: usize) -> Self {
        self.max_capacity = Some(keys);
        self
    }

    /// The clock for decisions that do not take a `now`.
    pub fn clock<C2: Clock>(self, clock: C2) -> Builder<K, C2, Q> {
        Builder {
            quota: self.quota,
            capacity: self.capacity,
            max_capacity: self.max_capacity,
            clock,
            seed: self.seed,
            when_full: self.when_full,
            huge_pages: self.huge_pages,
            restore: self.restore,
            _key: PhantomData,
        }
    }

    /// Seeds the key hasher, for reproducible tests and simulations. Without it the seed is
    /// random per limiter, which is what keeps attackers from aiming keys at one bucket: do not
    /// seed a limiter that faces untrusted keys with a guessable value.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// What a new key does when the table has no free or recovered slot for it.
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// Whether to ask Linux to back the table with transparent huge pages
    /// (`madvise(MADV_HUGEPAGE)` before the table is first touched). By default a fixed table
    /// (no [`max_capacity`](Self::max_capacity)) of 8 MiB or more asks (about 460,000 slots
    /// and up), a smaller one or a growable one does not; `huge_pages(true)` asks for any
    /// table, `huge_pages(false)` for none. [`Stats::huge_pages`](crate::Stats::huge_pages)
    /// says whether the kernel took the advice. It takes effect where
    /// `/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` (the usual default) or
    /// `always`, and while the kernel has huge pages to give; elsewhere than Linux it does
    /// nothing.
    ///
    /// Why: a table larger than what the CPU's TLB covers with 4 KiB pages (a few MiB) takes a
    /// page walk on most lookups of keys spread over it; huge pages cover it with a few TLB
    /// entries (docs/design/table.md). A
    /// fixed table is touched whole when it is built, so the kernel finds its huge pages then,
    /// and its resident memory is the same either way. The first build in a process may take
    /// longer while the kernel makes huge pages by compacting memory (its
    /// `/sys/kernel/mm/transparent_hugepage/defrag` setting). A table under 32 MiB may get
    /// memory the allocator has used before (glibc's dynamic mmap threshold), already on small
    /// pages: the kernel then moves it to huge pages only in the background, if at all, and
    /// `Stats::huge_pages` says only that the advice was taken.
    ///
    /// A growable table touches its pages as it grows, in the requests that move keys, and
    /// with huge pages such a request may wait for the kernel to find and zero a 2 MiB page:
    /// the slowest request of a growth waits longer even where most requests gain; its resident
    /// memory also rounds up to 2 MiB. Hence off by default there; ask for it where lookups
    /// matter more than the slowest request while the table grows.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{Limiter, Quota};
    ///
    /// let quota = Quota::per_second(10)?;
    /// // A fixed table of 18 MB: huge pages by default.
    /// let fixed = Limiter::<u64>::builder(quota).capacity(1_000_000).build()?;
    /// // A growable one: only when asked.
    /// let growable = Limiter::<u64>::builder(quota)
    ///     .capacity(1_000)
    ///     .max_capacity(1_000_000)
    ///     .huge_pages(true)
    ///     .build()?;
    /// assert!(fixed.check(&7).is_allowed() && growable.check(&7).is_allowed());
    /// // Whether the kernel took the advice (on Linux, where it has transparent huge pages).
    /// println!("huge pages: {} {}", fixed.stats().huge_pages, growable.stats().huge_pages);
    /// # Ok::<(), funnel::Error>(())
    /// ```
    pub fn huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = Some(on);
        self
    }

    /// The hasher of [`seed`](Self::seed), if one was given.
    fn seeded(&self) -> Option<KeyHash> {
        self.seed.map(|seed| {
            let mut s = seed;
            let mut next = || splitmix64(&mut s);
            KeyHash::with_seeds(next(), next(), next(), next())
        })
    }

    /// Allocates the table.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroCapacity`], [`Error::CapacityTooLarge`],
    /// [`Error::MaxCapacityBelowCapacity`], [`Error::OutOfMemory`]; with
    /// [`restore`](Self::restore), [`Error::SeedConflict`].
    pub fn build(self) -> Result<Limiter<K, C, Q>, Error> {
        let seeded = self.seeded();
        let hasher = match &self.restore {
            Some((_, restored))
                if seeded
                    .as_ref()
                    .is_some_and(|h| h.seeds() != restored.seeds()) =>
            {
                return Err(Error::SeedConflict);
            }
            Some((_, restored)) => restored.clone(),
            None => seeded.unwrap_or_else(KeyHash::random),
        };
        let limiter = Limiter {
            id: next_id(),
            table: match self.max_capacity {
                None => Table::with_capacity(
                    self.capacity.unwrap_or(DEFAULT_CAPACITY),
                    self.when_full,
                    self.huge_pages,
                )?,
                // A growable table only when asked: it touches its pages in the requests that
                // grow it, where a huge page's fault can take milliseconds (`huge_pages`).
                Some(max) => Table::growable(
                    self.capacity.unwrap_or(DEFAULT_GROWABLE_START.min(max)),
                    max,
                    self.when_full,
                    self.huge_pages.unwrap_or(false),
                )?,
            },
            quota: self.quota,
            when_full: self.when_full,
            hasher,
            clock: self.clock,
            _key: PhantomData,
        };
        if let Some((snapshot, _)) = self.restore {
            persist::load(&limiter, snapshot);
        }
        Ok(limiter)
    }
}

/// A new limiter identity: distinct for every limiter built in the process (a `u64` counter
/// does not wrap in practice).
fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    // Relaxed: only the counter's own atomicity matters (each limiter gets a distinct value);
    // it publishes nothing else.
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
