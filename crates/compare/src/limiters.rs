//! The in-process competitors behind two small traits, so one timed loop drives them all.
//!
//! * [`Limit`]: a decision on the limiter's own clock (the real-clock and manual-clock policies);
//! * [`LimitAt`]: a decision at a time the caller supplies (the attack mix replays a trace with
//!   timestamps): funnel's `check_at`, the `Mutex<HashMap>` funnel's `now_ns` argument, and for
//!   governor, which has no such call, a governor `Clock` that reads the trace's time from a
//!   thread-local the loop sets just before each call.

use std::cell::Cell;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::num::NonZeroU32;
use std::time::Duration;

use funnel::clock::{Clock as FunnelClock, ManualClock, QuantaClock, RecentClock};
use funnel::{Funnel, Limiter, Stats, Timestamp};
use governor::clock::{Clock as GovClock, FakeRelativeClock, QuantaUpkeepClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::RateLimiter;

use funnel_testkit::mutex_map::MutexMapLimiter;

/// A limiter deciding one unit request for a key, now (its own clock).
///
/// Every competitor's methods here are `#[inline(always)]`, so that each decision is inlined
/// into the timed loop, as a caller's own code would have it (funnel's `check` is
/// `#[inline(always)]`; governor's `check_key` is generic, so the caller's crate compiles it and
/// may inline it). With plain `#[inline]` the compiler kept the wrapper out of line inside the
/// timed threads' closures: a call per decision, which no caller's own loop pays. governor's
/// keyed decision is the exception, kept out of line on purpose (`governor_check`).
pub trait Limit<K>: Sync {
    fn check(&self, key: &K) -> bool;
    /// Decides every key of `keys` in order; how many were allowed. One call per key unless
    /// the competitor has a batch API ([`Batched`]).
    #[inline(always)]
    fn check_slice(&self, keys: &[K]) -> u64 {
        keys.iter().map(|k| u64::from(self.check(k))).sum()
    }
    /// funnel's table counters and keys held; `None` for the others.
    fn funnel_stats(&self) -> Option<(usize, Stats)> {
        None
    }
    /// Keys the limiter holds, where it can tell.
    fn keys_held(&self) -> Option<usize> {
        None
    }
    /// funnel's table size in slots; `None` for the unbounded ones.
    fn slots(&self) -> Option<usize> {
        None
    }
    /// The size of a fixed structure that is not a table of keys (pingora's sketch).
    fn size_label(&self) -> Option<String> {
        None
    }
}

/// A limiter deciding one unit request for a key at the caller's time (ns since the trace's
/// origin).
pub trait LimitAt<K>: Sync {
    fn check_at(&self, key: &K, now_ns: u64) -> bool;
    fn funnel_stats(&self) -> Option<(usize, Stats)> {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// funnel

impl<K: Hash + Sync + Send, C: FunnelClock> Limit<K> for Limiter<K, C> {
    #[inline(always)]
    fn check(&self, key: &K) -> bool {
        Limiter::check(self, key).is_allowed()
    }
    fn funnel_stats(&self) -> Option<(usize, Stats)> {
        Some((self.len(), self.stats()))
    }
    fn keys_held(&self) -> Option<usize> {
        Some(self.len())
    }
    fn slots(&self) -> Option<usize> {
        Some(self.capacity())
    }
}

/// funnel driven through its batch API, `check_batch`: the timed loop's keys in batches of
/// [`BATCH`], one clock read per batch.
pub struct Batched<L>(pub L);

/// Keys per `check_batch` call.
pub const BATCH: usize = 32;

thread_local! {
    static DECISIONS: std::cell::RefCell<Vec<funnel::Decision>> =
        std::cell::RefCell::new(Vec::with_capacity(BATCH));
}

impl<K: Hash + Sync + Send, C: FunnelClock> Limit<K> for Batched<Limiter<K, C>> {
    #[inline(always)]
    fn check(&self, key: &K) -> bool {
        Limiter::check(&self.0, key).is_allowed()
    }
    fn check_slice(&self, keys: &[K]) -> u64 {
        DECISIONS.with(|out| {
            let mut out = out.borrow_mut();
            let mut allowed = 0;
            for batch in keys.chunks(BATCH) {
                out.clear();
                self.0.check_batch(batch, &mut out);
                allowed += out.iter().filter(|d| d.is_allowed()).count() as u64;
            }
            allowed
        })
    }
    fn funnel_stats(&self) -> Option<(usize, Stats)> {
        Some((self.0.len(), self.0.stats()))
    }
    fn keys_held(&self) -> Option<usize> {
        Some(self.0.len())
    }
    fn slots(&self) -> Option<usize> {
        Some(self.0.capacity())
    }
}

impl<K: Hash + Sync + Send, C: FunnelClock> LimitAt<K> for Limiter<K, C> {
    #[inline(always)]
    fn check_at(&self, key: &K, now_ns: u64) -> bool {
        let now = Timestamp::from_nanos(now_ns).unwrap_or(Timestamp::MAX);
        Limiter::check_at(self, key, now).is_allowed()
    }
    fn funnel_stats(&self) -> Option<(usize, Stats)> {
        Some((self.len(), self.stats()))
    }
}

/// funnel's single-key `Funnel`: the key is ignored, as by governor's direct limiter.
impl<K, C: FunnelClock> Limit<K> for Funnel<C> {
    #[inline(always)]
    fn check(&self, _key: &K) -> bool {
        Funnel::check(self).is_allowed()
    }
}

// ---------------------------------------------------------------------------------------------
// governor

/// governor keyed, DashMap store (governor's default keyed store) with hasher `S`, clock `C`.
///
/// The hasher is wrapped in [`ClockHasher`] so that each clock gets its own instantiation of
/// DashMap's lookup: see there.
pub type GovKeyed<K, S, C> = RateLimiter<
    K,
    DashMapStateStore<K, ClockHasher<S, C>>,
    C,
    NoOpMiddleware<<C as GovClock>::Instant>,
>;

/// A hasher builder `S` tagged with the clock `C` of the governor limiter it serves; it hashes
/// exactly as `S` does.
///
/// Why: DashMap's lookup (`DashMap::_get`) is generic over the key, the value and the hasher,
/// not over governor's clock. With one instantiation shared by the limiters of every clock
/// policy the harness builds (real, recent, manual), the lookup has several callers and LLVM
/// keeps it out of line, where a program using governor with one clock gets it inlined into
/// `check_key`, and governor then runs more instructions per decision than in that program
/// (callgrind, on a minimal loop built with and without the harness's other instantiations).
/// Tagged, each clock's limiter has a lookup of its own, with one caller.
pub struct ClockHasher<S, C>(S, PhantomData<fn() -> C>);

impl<S, C> ClockHasher<S, C> {
    pub fn new(s: S) -> ClockHasher<S, C> {
        ClockHasher(s, PhantomData)
    }
}

impl<S: Clone, C> Clone for ClockHasher<S, C> {
    fn clone(&self) -> Self {
        ClockHasher(self.0.clone(), PhantomData)
    }
}

/// A fresh `S` (randomly keyed, for the two hashers here), as governor's store asks for.
impl<S: Default, C> Default for ClockHasher<S, C> {
    fn default() -> Self {
        ClockHasher::new(S::default())
    }
}

impl<S: BuildHasher, C> BuildHasher for ClockHasher<S, C> {
    type Hasher = S::Hasher;
    #[inline(always)]
    fn build_hasher(&self) -> S::Hasher {
        self.0.build_hasher()
    }
}

/// governor's default hasher (SipHash, randomly keyed) for a limiter on clock `C`.
pub fn sip<C>() -> ClockHasher<std::hash::RandomState, C> {
    ClockHasher::new(std::hash::RandomState::new())
}

/// ahash for a limiter on clock `C`.
pub fn ahash_for<C>() -> ClockHasher<ahash::RandomState, C> {
    ClockHasher::new(ahash::RandomState::new())
}

/// governor's keyed decision, out of line: the one caller of `check_key` for these types, as a
/// program's request path is, so that LLVM compiles `check_key` (with DashMap's lookup inlined
/// into it) as it does in such a program, rather than inlined into each of the harness's loops
/// with the lookup left out of line.
#[inline(never)]
fn governor_check<K, S, C>(lim: &GovKeyed<K, S, C>, key: &K) -> bool
where
    K: Hash + Eq + Clone + Send + Sync,
    S: BuildHasher + Clone + Send + Sync,
    C: GovClock + Sync,
{
    lim.check_key(key).is_ok()
}

/// governor direct (one state, no key).
pub type GovDirect<C> =
    RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as GovClock>::Instant>>;

impl<K, S, C> Limit<K> for GovKeyed<K, S, C>
where
    K: Hash + Eq + Clone + Send + Sync,
    S: BuildHasher + Clone + Send + Sync,
    C: GovClock + Sync,
{
    #[inline(always)]
    fn check(&self, key: &K) -> bool {
        governor_check(self, key)
    }
    fn keys_held(&self) -> Option<usize> {
        Some(self.len())
    }
}

impl<K, C: GovClock + Sync> Limit<K> for GovDirect<C> {
    #[inline(always)]
    fn check(&self, _key: &K) -> bool {
        RateLimiter::check(self).is_ok()
    }
}

thread_local! {
    /// The trace time of the request this thread is deciding (attack mix only).
    static TRACE_NOW: Cell<u64> = const { Cell::new(0) };
}

/// A governor clock that reads the current trace time of the calling thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceClock;

impl GovClock for TraceClock {
    type Instant = Nanos;
    #[inline(always)]
    fn now(&self) -> Nanos {
        Nanos::new(TRACE_NOW.with(Cell::get))
    }
}

impl<K, S> LimitAt<K> for GovKeyed<K, S, TraceClock>
where
    K: Hash + Eq + Clone + Send + Sync,
    S: BuildHasher + Clone + Send + Sync,
{
    #[inline(always)]
    fn check_at(&self, key: &K, now_ns: u64) -> bool {
        TRACE_NOW.with(|c| c.set(now_ns));
        governor_check(self, key)
    }
}

// ---------------------------------------------------------------------------------------------
// the Mutex<HashMap> funnel (funnel-testkit's `mutex_map`), with ahash like funnel

/// The design most services start with: a `HashMap` of funnels behind one `Mutex`, reading clock `C`.
pub struct MutexMap<K, C> {
    pub map: MutexMapLimiter<K, ahash::RandomState>,
    pub clock: C,
}

impl<K: Key0, C: FunnelClock> Limit<K> for MutexMap<K, C> {
    #[inline(always)]
    fn check(&self, key: &K) -> bool {
        self.map.check(key, self.clock.now().as_nanos())
    }
    fn keys_held(&self) -> Option<usize> {
        Some(self.map.len())
    }
}

impl<K: Key0, C: FunnelClock> LimitAt<K> for MutexMap<K, C> {
    #[inline(always)]
    fn check_at(&self, key: &K, now_ns: u64) -> bool {
        self.map.check(key, now_ns)
    }
}

/// What the `Mutex<HashMap>` funnel needs of a key.
pub trait Key0: Hash + Eq + Clone + Send + Sync {}
impl<K: Hash + Eq + Clone + Send + Sync> Key0 for K {}

// ---------------------------------------------------------------------------------------------
// pingora-limits' `Rate`: a count-min sketch per fixed interval, reading its own clock

/// pingora-limits' `Rate` used as a pingora user limits with it: a request is admitted while
/// `observe(key, 1)` (the key's estimated count in the current interval, this request
/// included) is within the limit. The sketch overestimates a key's count when keys share its
/// counters, so it may deny a request an exact counter admits, never the other way round
/// within an interval. It reads `Instant::now()` itself on every call, whatever the clock policy.
pub struct Pingora {
    pub rate: pingora_limits::rate::Rate,
    pub limit: isize,
    /// Columns per hash row of its sketch (pingora's default: 1,024).
    pub slots: usize,
}

/// Hash rows of pingora's sketch: its default.
pub const PINGORA_HASHES: usize = 4;
/// Columns per hash row at pingora's default size.
pub const PINGORA_SLOTS: usize = 1024;
/// The most columns the sized sketch gets (its two sketches then take 64 MiB).
pub const PINGORA_MAX_SLOTS: usize = 1 << 20;

impl Pingora {
    /// A fixed window of `interval` admitting `limit` per key, with `slots` columns per row.
    pub fn new(interval: Duration, limit: u64, slots: usize) -> Pingora {
        Pingora {
            rate: pingora_limits::rate::Rate::new_with_estimator_config(
                interval,
                PINGORA_HASHES,
                slots,
            ),
            limit: isize::try_from(limit).unwrap_or(isize::MAX),
            slots,
        }
    }

    /// The sketch sized to a key space: one column per key (at least pingora's default, at
    /// most [`PINGORA_MAX_SLOTS`]).
    pub fn slots_for(keys: u64) -> usize {
        usize::try_from(keys)
            .unwrap_or(usize::MAX)
            .clamp(PINGORA_SLOTS, PINGORA_MAX_SLOTS)
    }
}

impl<K: Hash + Sync> Limit<K> for Pingora {
    #[inline(always)]
    fn check(&self, key: &K) -> bool {
        self.rate.observe(key, 1) <= self.limit
    }
    fn size_label(&self) -> Option<String> {
        Some(format!(
            "sketch {PINGORA_HASHES} x {} counters, twice",
            crate::numbers::fmt_int(self.slots as u64)
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// quotas

/// The two quotas of workloads 1–5, the same for every competitor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaKind {
    /// 1,000 per second per key with a burst of 4,000,000,000: every decision is allowed and
    /// every one writes. A key's unit drains in 1 ms, so the keys of `hot-1` and `hot-1k`,
    /// visited every few microseconds, stay in debt; in the larger key spaces most keys have
    /// recovered by their next visit, and funnel treats a recovered key as absent (its slot
    /// may go to another key, and a growable table does not grow for it).
    Allow,
    /// 1 per hour per key, burst 1: after a key's first request (made in the prefill) every
    /// decision is denied and writes nothing.
    Deny,
}

/// Burst of the allowing quota: the largest round number governor's `NonZeroU32` burst takes.
pub const ALLOW_BURST: u32 = 4_000_000_000;
/// Rate of the allowing quota, per second.
pub const ALLOW_PER_SEC: u32 = 1_000;

impl QuotaKind {
    pub fn label(self) -> &'static str {
        match self {
            QuotaKind::Allow => "allow",
            QuotaKind::Deny => "deny",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            QuotaKind::Allow => {
                "1,000/s per key, burst 4,000,000,000 (every decision allowed, every one writes)"
            }
            QuotaKind::Deny => {
                "1/hour per key, burst 1 (every decision after a key's first is denied)"
            }
        }
    }

    pub fn funnel(self) -> funnel::Quota {
        match self {
            QuotaKind::Allow => funnel::Quota::per_second(u64::from(ALLOW_PER_SEC))
                .and_then(|q| q.with_limit(u64::from(ALLOW_BURST))),
            QuotaKind::Deny => funnel::Quota::per_hour(1),
        }
        .expect("the benchmark quotas are valid")
    }

    pub fn governor(self) -> governor::Quota {
        match self {
            QuotaKind::Allow => {
                governor::Quota::per_second(nz(ALLOW_PER_SEC)).allow_burst(nz(ALLOW_BURST))
            }
            QuotaKind::Deny => governor::Quota::per_hour(nz(1)),
        }
    }

    /// The `Mutex<HashMap>` funnel's (capacity, emission interval in ns).
    pub fn mutex_map(self) -> (u64, u64) {
        match self {
            QuotaKind::Allow => (
                u64::from(ALLOW_BURST),
                1_000_000_000 / u64::from(ALLOW_PER_SEC),
            ),
            QuotaKind::Deny => (1, 3_600_000_000_000),
        }
    }

    /// pingora's fixed window: (interval, limit per key per interval). `allow`: 4,000,000,000
    /// a second (every decision allowed, as the others); `deny`: 1 an hour.
    pub fn pingora(self) -> (Duration, u64) {
        match self {
            QuotaKind::Allow => (Duration::from_secs(1), u64::from(ALLOW_BURST)),
            QuotaKind::Deny => (Duration::from_secs(3600), 1),
        }
    }

    /// (limit, count, period in ms) for the Redis scripts.
    pub fn redis(self) -> (u64, u64, u64) {
        match self {
            QuotaKind::Allow => (u64::from(ALLOW_BURST), u64::from(ALLOW_PER_SEC), 1_000),
            QuotaKind::Deny => (1, 1, 3_600_000),
        }
    }
}

pub fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

// ---------------------------------------------------------------------------------------------
// construction, per clock policy

/// The clock every limiter reads in workloads 1–5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClockPolicy {
    /// Each limiter reads the TSC, calibrated by quanta, on every decision: funnel's default
    /// `QuantaClock` (which reads it inline), governor's default `QuantaClock` (through quanta),
    /// and funnel's `QuantaClock` for the `Mutex<HashMap>` funnel.
    Real,
    /// Each limiter reads its cheap clock, a time one upkeep thread refreshes every
    /// millisecond: funnel's `RecentClock`, governor's `QuantaUpkeepClock` (quanta's upkeep
    /// thread), funnel's `RecentClock` for the `Mutex<HashMap>` funnel.
    Recent,
    /// Each limiter reads a shared frozen counter (one relaxed atomic load): funnel's
    /// `ManualClock`, governor's `FakeRelativeClock`, a `ManualClock` for the `Mutex<HashMap>`.
    Manual,
}

impl ClockPolicy {
    pub fn label(self) -> &'static str {
        match self {
            ClockPolicy::Real => "real",
            ClockPolicy::Recent => "recent",
            ClockPolicy::Manual => "manual",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            ClockPolicy::Real => {
                "real clock for all: every decision reads the TSC, calibrated by quanta 0.12 \
                 (funnel's default QuantaClock, which reads it inline, governor's default \
                 QuantaClock, funnel's QuantaClock passed to the Mutex<HashMap> funnel)"
            }
            ClockPolicy::Recent => {
                "recent clock for all: every decision reads a time one upkeep thread refreshes \
                 every millisecond (funnel RecentClock, governor QuantaUpkeepClock, funnel \
                 RecentClock for the Mutex<HashMap> funnel); pingora-limits reads Instant::now"
            }
            ClockPolicy::Manual => {
                "manual clock for all: every decision reads one frozen shared counter \
                 (funnel ManualClock, governor FakeRelativeClock, funnel ManualClock for the \
                 Mutex<HashMap> funnel)"
            }
        }
    }
}

/// The upkeep interval of both cheap clocks: funnel's default for `RecentClock`.
pub const UPKEEP_INTERVAL: Duration = RecentClock::DEFAULT_INTERVAL;

/// The cheap clocks of the recent policy, started together and stopped together (each has one
/// upkeep thread, which runs while a clone lives).
#[derive(Clone)]
pub struct CheapClocks {
    pub funnel: RecentClock,
    pub governor: QuantaUpkeepClock,
}

impl CheapClocks {
    pub fn start() -> Result<CheapClocks, String> {
        Ok(CheapClocks {
            funnel: RecentClock::with_interval(UPKEEP_INTERVAL)
                .map_err(|e| format!("funnel's RecentClock: {e}"))?,
            governor: QuantaUpkeepClock::from_interval(UPKEEP_INTERVAL)
                .map_err(|e| format!("governor's QuantaUpkeepClock: {e}"))?,
        })
    }
}

/// funnel's clock under the manual policy: stopped at one second.
pub fn manual_clock() -> ManualClock {
    ManualClock::starting_at(Timestamp::from_duration(Duration::from_secs(1)).expect("1 s"))
}

pub fn funnel_real<K: Hash + ?Sized>(
    q: funnel::Quota,
    capacity: usize,
) -> Result<Limiter<K>, String> {
    Limiter::<K>::builder(q)
        .capacity(capacity)
        .build()
        .map_err(|e| format!("funnel: {e}"))
}

pub fn funnel_manual<K: Hash + ?Sized>(
    q: funnel::Quota,
    capacity: usize,
) -> Result<Limiter<K, ManualClock>, String> {
    Limiter::<K>::builder(q)
        .capacity(capacity)
        .clock(manual_clock())
        .build()
        .map_err(|e| format!("funnel: {e}"))
}

/// The initial capacity of the growable competitor: the smallest table the issue asks about.
pub const GROWN_START: usize = 1_024;

/// funnel with a growable table starting at [`GROWN_START`] keys, up to `max_capacity`, on
/// huge pages: the row compares a grown table with the fixed one of its workload (W3, W4), which
/// at those sizes (23 MB and 229 MB) is on huge pages by default, so that the two differ in
/// their structure only. A growable table's default is small pages (`Builder::huge_pages`:
/// with huge pages a request that grows it can wait milliseconds for the kernel).
pub fn funnel_grown_real<K: Hash + ?Sized>(
    q: funnel::Quota,
    max_capacity: usize,
) -> Result<Limiter<K>, String> {
    Limiter::<K>::builder(q)
        .capacity(GROWN_START)
        .max_capacity(max_capacity)
        .huge_pages(true)
        .build()
        .map_err(|e| format!("funnel (growable): {e}"))
}

/// [`funnel_grown_real`] on the manual clock.
pub fn funnel_grown_manual<K: Hash + ?Sized>(
    q: funnel::Quota,
    max_capacity: usize,
) -> Result<Limiter<K, ManualClock>, String> {
    Limiter::<K>::builder(q)
        .capacity(GROWN_START)
        .max_capacity(max_capacity)
        .huge_pages(true)
        .clock(manual_clock())
        .build()
        .map_err(|e| format!("funnel (growable): {e}"))
}

/// funnel on `clock` (the recent policy's `RecentClock`).
pub fn funnel_on<K: Hash + ?Sized, C: FunnelClock>(
    q: funnel::Quota,
    capacity: usize,
    clock: C,
) -> Result<Limiter<K, C>, String> {
    Limiter::<K>::builder(q)
        .capacity(capacity)
        .clock(clock)
        .build()
        .map_err(|e| format!("funnel: {e}"))
}

/// [`funnel_grown_real`] on `clock`.
pub fn funnel_grown_on<K: Hash + ?Sized, C: FunnelClock>(
    q: funnel::Quota,
    max_capacity: usize,
    clock: C,
) -> Result<Limiter<K, C>, String> {
    Limiter::<K>::builder(q)
        .capacity(GROWN_START)
        .max_capacity(max_capacity)
        .huge_pages(true)
        .clock(clock)
        .build()
        .map_err(|e| format!("funnel (growable): {e}"))
}

/// The `Mutex<HashMap>` funnel reading `clock`.
pub fn mutex_on<K: Key0, C: FunnelClock>(kind: QuotaKind, clock: C) -> MutexMap<K, C> {
    let (cap, t) = kind.mutex_map();
    MutexMap {
        map: MutexMapLimiter::new(cap, t),
        clock,
    }
}

pub fn mutex_real<K: Key0>(kind: QuotaKind) -> MutexMap<K, QuantaClock> {
    let (cap, t) = kind.mutex_map();
    MutexMap {
        map: MutexMapLimiter::new(cap, t),
        clock: QuantaClock::new(),
    }
}

pub fn mutex_manual<K: Key0>(kind: QuotaKind) -> MutexMap<K, ManualClock> {
    let (cap, t) = kind.mutex_map();
    MutexMap {
        map: MutexMapLimiter::new(cap, t),
        clock: manual_clock(),
    }
}

pub fn fake_clock() -> FakeRelativeClock {
    let c = FakeRelativeClock::default();
    c.advance(Duration::from_secs(1));
    c
}
