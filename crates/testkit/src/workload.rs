//! What the benches share: the quotas, the key sets and access streams every competitor is
//! given, a thread harness for `iter_custom`, and a resident-memory probe.
//!
//! Honesty rules (the project's benchmark rules, BENCHMARKS.md "What is measured"): every competitor in a
//! group reads the same pre-generated keys in the same order, on the same number of threads,
//! with the same quota, and reads the same kind of clock (quanta) once per decision.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

pub use crate::memory::rss_bytes;
pub use crate::rng::mix;

/// A uniform index in `0..n` from 64 random bits (Lemire's multiply-shift, no modulo bias
/// worth measuring at these sizes).
#[inline]
fn uniform(r: u64, n: usize) -> usize {
    ((u128::from(r) * n as u128) >> 64) as usize
}

// ----------------------------------------------------------------------------------------------
// Quotas. The same parameters are given to every competitor, in its own spelling.
// ----------------------------------------------------------------------------------------------

/// The keyed benches' "mostly-allowing" quota: 1 per second with a burst of 2^30 (about 34
/// years of tolerance). Every decision in a run is allowed and writes, and every key that has
/// been seen stays *in debt* (its arrival time ahead of now) for the whole run, because the
/// benches insert each key with a request of an hour's worth of units.
///
/// Why not 1e9 per second (1 ns emission interval), the usual "never limit" quota? Because
/// under it a key's funnel has fully recovered 1 ns after each request, and funnel treats a
/// recovered funnel as absent: its slot is free for the next new key (that is the design, and
/// costs nothing in correctness). A lookup benchmark would then measure funnel re-creating
/// keys, not finding them; `benches/paths.rs` measures that regime as `recovered`.
pub const KEYED_PERIOD: Duration = Duration::from_secs(1);
/// Burst of the keyed quota (see [`KEYED_PERIOD`]).
pub const KEYED_BURST: u32 = 1 << 30;

/// funnel's spelling of the keyed quota.
pub fn funnel_keyed_quota() -> funnel::Quota {
    funnel::Quota::per_period(1, KEYED_PERIOD)
        .and_then(|q| q.with_limit(u64::from(KEYED_BURST)))
        .expect("valid quota")
}

/// governor's spelling of the keyed quota.
pub fn governor_keyed_quota() -> governor::Quota {
    governor::Quota::with_period(KEYED_PERIOD)
        .expect("non-zero period")
        .allow_burst(NonZeroU32::new(KEYED_BURST).expect("non-zero"))
}

/// The mutex-map's spelling of the keyed quota: (capacity in units, emission interval in ns).
pub fn mutex_map_keyed_quota() -> (u64, u64) {
    (u64::from(KEYED_BURST), KEYED_PERIOD.as_nanos() as u64)
}

/// A quota under which nothing is ever limited in a benchmark run *and* every funnel recovers
/// 1 ns after each request: 1e9 per second, bursts of 1e9 (the baselines' "high" quota).
pub fn funnel_recovering_quota() -> funnel::Quota {
    funnel::Quota::per_second(1_000_000_000).expect("valid quota")
}

// ----------------------------------------------------------------------------------------------
// Keys and access streams.
// ----------------------------------------------------------------------------------------------

/// `n` distinct pseudo-random `u64` keys (`mix(seed + i)`).
pub fn u64_keys(n: usize, seed: u64) -> Vec<u64> {
    (0..n as u64).map(|i| mix(seed.wrapping_add(i))).collect()
}

/// `n` distinct `String` keys shaped like real ones: `user:<id>`, 6 to 12 bytes at 1M keys.
pub fn string_keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user:{i}")).collect()
}

/// `len` (a power of two) indices drawn uniformly from `0..n`.
fn uniform_indices(n: usize, len: usize, seed: u64) -> Vec<u32> {
    assert!(len.is_power_of_two() && n <= u32::MAX as usize);
    (0..len as u64)
        .map(|i| uniform(mix(seed ^ mix(i)), n) as u32)
        .collect()
}

/// A pre-generated sequence of key accesses, read cyclically. Thread `t` of `threads` starts
/// at `t * len / threads`, so two threads do not walk the same keys in lockstep (on the hot
/// key they share the one key, as they must).
pub trait Stream: Sync {
    /// The key type a competitor is asked about.
    type Key: ?Sized;
    /// The key at position `i` (taken modulo the stream's length).
    fn key(&self, i: usize) -> &Self::Key;
    /// Distinct keys in the stream.
    fn distinct(&self) -> usize;
    /// Length of the cycle (never zero).
    fn len(&self) -> usize;
    /// Always false: a stream has at least one access.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Where thread `t` of `threads` starts.
    fn start(&self, t: usize, threads: usize) -> usize {
        t * (self.len() / threads)
    }
}

/// `u64` keys, stored directly in access order (no indirection the competitors would share).
pub struct U64Stream {
    /// The distinct keys, for prefilling.
    pub keys: Vec<u64>,
    order: Vec<u64>,
    mask: usize,
}

impl U64Stream {
    /// `n` distinct random keys, accessed uniformly at random in a cycle of `len` accesses
    /// (just the key, repeated, when `n == 1`).
    pub fn new(n: usize, len: usize, seed: u64) -> Self {
        let keys = u64_keys(n, seed);
        let len = if n == 1 { 1 } else { len };
        let order = uniform_indices(n, len, seed ^ 0xACCE55)
            .into_iter()
            .map(|i| keys[i as usize])
            .collect();
        U64Stream {
            keys,
            order,
            mask: len - 1,
        }
    }
}

impl Stream for U64Stream {
    type Key = u64;
    #[inline(always)]
    fn key(&self, i: usize) -> &u64 {
        &self.order[i & self.mask]
    }
    fn distinct(&self) -> usize {
        self.keys.len()
    }
    fn len(&self) -> usize {
        self.order.len()
    }
}

/// `String` keys, accessed through an index (every competitor pays the same pointer chase to
/// the key's bytes, as a server reading a key out of a request would).
pub struct StringStream {
    /// The distinct keys, for prefilling.
    pub keys: Vec<String>,
    order: Vec<u32>,
    mask: usize,
}

impl StringStream {
    /// `n` distinct `user:<id>` keys, accessed uniformly at random in a cycle of `len`.
    pub fn new(n: usize, len: usize, seed: u64) -> Self {
        let keys = string_keys(n);
        let len = if n == 1 { 1 } else { len };
        let order = uniform_indices(n, len, seed ^ 0xACCE55);
        StringStream {
            keys,
            order,
            mask: len - 1,
        }
    }
}

impl Stream for StringStream {
    type Key = String;
    #[inline(always)]
    fn key(&self, i: usize) -> &String {
        &self.keys[self.order[i & self.mask] as usize]
    }
    fn distinct(&self) -> usize {
        self.keys.len()
    }
    fn len(&self) -> usize {
        self.order.len()
    }
}

// ----------------------------------------------------------------------------------------------
// Threads.
// ----------------------------------------------------------------------------------------------

/// Which clock times the benches: wall time (the default, criterion's own), or with
/// `FUNNEL_BENCH_CLOCK=cpu` each bench thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which
/// leaves out the time the thread spent descheduled. Use the latter on a machine shared with
/// other work: it removes time-slicing from the figures, though not the cache pollution other
/// processes cause, and for multi-thread runs it cannot see contention lost while one of the
/// threads was off its CPU (so read 2-thread figures from quiet wall-time runs where possible).
pub fn cpu_clock() -> bool {
    static CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CPU.get_or_init(|| std::env::var("FUNNEL_BENCH_CLOCK").is_ok_and(|v| v == "cpu"))
}

/// A point on the bench clock (see [`cpu_clock`]).
#[derive(Clone, Copy)]
pub struct Stamp(Duration);

impl Stamp {
    /// Now, on the bench clock of the calling thread.
    #[inline]
    pub fn now() -> Stamp {
        if cpu_clock() {
            Stamp(thread_cpu_time())
        } else {
            Stamp(wall_since_start())
        }
    }

    /// Time from `self` to `later`.
    pub fn until(self, later: Stamp) -> Duration {
        later.0.saturating_sub(self.0)
    }
}

fn wall_since_start() -> Duration {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(target_os = "linux")]
fn thread_cpu_time() -> Duration {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock_id: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Safety: `clock_gettime` is the C library's (std links it on Linux); `ts` is a valid,
    // writable `struct timespec` (two 64-bit fields on the 64-bit Linux targets we bench on),
    // and the call writes nothing else.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu_time() -> Duration {
    panic!("FUNNEL_BENCH_CLOCK=cpu is only implemented on Linux")
}

/// Times `iters` calls of `op` on the calling thread with the bench clock; for `iter_custom`.
#[inline]
pub fn time_loop<R>(iters: u64, mut op: impl FnMut() -> R) -> Duration {
    let start = Stamp::now();
    for _ in 0..iters {
        black_box(op());
    }
    start.until(Stamp::now())
}

/// Runs `op(t, i)` for `i` in `0..iters` on each of `threads` fresh threads, all released at
/// once by a [`Barrier`], and returns the time from the first thread's start to the last
/// thread's end (thread start-up and join are outside it); with the CPU clock, the longest
/// CPU time any one thread took. For `iter_custom`: with `Throughput::Elements(threads)`,
/// criterion then reports aggregate decisions per second.
///
/// `op` returns something to [`black_box`], so the decision cannot be optimised away.
pub fn run_threads<R, F>(threads: usize, iters: u64, op: F) -> Duration
where
    F: Fn(usize, u64) -> R + Sync,
{
    let barrier = Barrier::new(threads);
    let spans: Vec<(Stamp, Stamp)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, op) = (&barrier, &op);
                s.spawn(move || {
                    barrier.wait();
                    let start = Stamp::now();
                    for i in 0..iters {
                        black_box(op(t, i));
                    }
                    (start, Stamp::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect()
    });
    if cpu_clock() {
        spans
            .iter()
            .map(|(a, b)| a.until(*b))
            .max()
            .expect("at least one thread")
    } else {
        let first = spans
            .iter()
            .map(|s| s.0 .0)
            .min()
            .expect("at least one thread");
        let last = spans
            .iter()
            .map(|s| s.1 .0)
            .max()
            .expect("at least one thread");
        last.saturating_sub(first)
    }
}

// ----------------------------------------------------------------------------------------------
// Memory.
// ----------------------------------------------------------------------------------------------

/// True when criterion was asked for its quick smoke run (`-- --test`) or a listing.
pub fn quick_mode() -> bool {
    std::env::args().any(|a| a == "--test" || a == "--list")
}

/// Warm-up, measurement and sample count for groups: short, so that `cargo bench` stays
/// reasonable on a 2-core machine.
pub fn configure<M: criterion::measurement::Measurement>(g: &mut criterion::BenchmarkGroup<'_, M>) {
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
}
