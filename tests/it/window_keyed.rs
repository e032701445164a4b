//! Window counters inside the keyed table (`Limiter::builder` with a window quota):
//! per key, the same answers as the single-key counters (which are held to reference models in
//! `src/window/`), exact counts under contention, lazy eviction once a key's windows have
//! passed, and exactness while the table grows.

use std::collections::HashMap;
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::window::{Counter, FixedWindowQuota, SlidingWindowQuota};
use funnel::{Decision, Limiter, QuotaKind, Timestamp};
use funnel_testkit::Rng;

const S: u64 = 1_000_000_000;

/// Admissions per key of one thread: the fixed counter's, the sliding counter's.
type Admitted = (HashMap<u64, u32>, HashMap<u64, u32>);

/// Random traces over a few keys: each keyed decision equals the decision of that key's own
/// single-key counter, fed the same requests.
fn same_as_single_key<W>(
    keyed: impl Fn(u64, u64, Timestamp) -> Decision,
    single: impl Fn() -> W,
    decide: impl Fn(&W, u64, Timestamp) -> Decision,
    window: u64,
    seed: u64,
) -> usize {
    let mut rng = Rng::new(seed);
    let mut singles: HashMap<u64, W> = HashMap::new();
    let mut now = rng.below(10 * S);
    let mut denied = 0;
    for step in 0..3_000 {
        now += rng.below(window / 3);
        let key = rng.below(6);
        let n = rng.below(4);
        let at = Timestamp::from_nanos(now).unwrap();
        let got = keyed(key, n, at);
        let want = decide(singles.entry(key).or_insert_with(&single), n, at);
        assert_eq!(
            got, want,
            "seed {seed} step {step}: key {key} cost {n} at {now}"
        );
        denied += usize::from(!got.is_allowed());
    }
    denied
}

/// [`same_as_single_key`] over 20 seeds, for a keyed limiter of `quota` (5 units per
/// [`WINDOW`] s) against each key's own counter, `single(quota, a clock)`; then the table's
/// invariants.
fn each_key_answers_as_its_own_counter<Q: QuotaKind, W>(
    quota: Q,
    single: fn(Q, ManualClock) -> W,
    decide: impl Fn(&W, u64, Timestamp) -> Decision,
) {
    for seed in 0..20 {
        let limiter = Limiter::<u64>::builder(quota).capacity(64).build().unwrap();
        let denied = same_as_single_key(
            |key, n, at| limiter.check_n_at(&key, n, at),
            || single(quota, ManualClock::new()),
            &decide,
            WINDOW * S,
            seed,
        );
        assert!(denied > 100, "seed {seed}: only {denied} denials");
        limiter.check_invariants().unwrap();
    }
}

/// The window of [`each_key_answers_as_its_own_counter`], in seconds.
const WINDOW: u64 = 2;

#[test]
fn a_keyed_fixed_window_answers_as_each_keys_own_counter() {
    let q = FixedWindowQuota::per_period(5, Duration::from_secs(WINDOW)).unwrap();
    each_key_answers_as_its_own_counter(q, Counter::with_clock, Counter::check_n_at);
}

#[test]
fn a_keyed_sliding_window_answers_as_each_keys_own_counter() {
    let q = SlidingWindowQuota::per_period(5, Duration::from_secs(WINDOW)).unwrap();
    each_key_answers_as_its_own_counter(q, Counter::with_clock, Counter::check_n_at);
}

/// Four threads ask for 200 keys, six times each per window, on a frozen clock: every key
/// admits exactly its limit in each window, for both counters.
#[test]
fn threads_admit_exactly_the_limit_per_key_and_window() {
    const THREADS: usize = 4;
    const KEYS: u64 = 200;
    let fixed = FixedWindowQuota::per_period(3, Duration::from_secs(10)).unwrap();
    let sliding = SlidingWindowQuota::per_period(3, Duration::from_secs(10)).unwrap();
    let clock = ManualClock::new();
    let f = Limiter::<u64>::builder(fixed)
        .clock(clock.clone())
        .build()
        .unwrap();
    let s = Limiter::<u64>::builder(sliding)
        .clock(clock.clone())
        .build()
        .unwrap();
    for window in 0..3 {
        let barrier = Barrier::new(THREADS);
        let admitted: Vec<Admitted> = thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS as u64)
                .map(|t| {
                    let (f, s, barrier) = (&f, &s, &barrier);
                    scope.spawn(move || {
                        let mut rng = Rng::new(window * 10 + t);
                        let mut order: Vec<u64> =
                            (0..KEYS).flat_map(|k| std::iter::repeat_n(k, 6)).collect();
                        for i in (1..order.len()).rev() {
                            order.swap(i, rng.below(i as u64 + 1) as usize);
                        }
                        let (mut af, mut as_) = (HashMap::new(), HashMap::new());
                        barrier.wait();
                        for key in order {
                            if f.check(&key).is_allowed() {
                                *af.entry(key).or_insert(0) += 1;
                            }
                            if s.check(&key).is_allowed() {
                                *as_.entry(key).or_insert(0) += 1;
                            }
                        }
                        (af, as_)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for key in 0..KEYS {
            let sum = |pick: fn(&Admitted) -> &HashMap<u64, u32>| {
                admitted
                    .iter()
                    .map(|p| pick(p).get(&key).copied().unwrap_or(0))
                    .sum::<u32>()
            };
            assert_eq!(sum(|p| &p.0), 3, "fixed window {window}, key {key}");
            // The sliding counter's previous window weighs fully at the very start of the next
            // one: after a window that admitted 3 nothing passes; after one that admitted
            // nothing, 3 do again.
            let expected = if window % 2 == 0 { 3 } else { 0 };
            assert_eq!(
                sum(|p| &p.1),
                expected,
                "sliding window {window}, key {key}"
            );
        }
        f.check_invariants().unwrap();
        s.check_invariants().unwrap();
        // To the very start of the next window.
        clock.advance(Duration::from_secs(10));
    }
}

/// A small table and a stream of new keys: once a key's windows have passed its slot goes to
/// another key (lazily, as a recovered funnel's does), so the table keeps taking new keys
/// without evicting any that could still answer differently from an absent one.
#[test]
fn a_key_whose_windows_have_passed_gives_its_slot_to_a_new_key() {
    let q = FixedWindowQuota::per_second(1).unwrap();
    let clock = ManualClock::new();
    let limiter = Limiter::<u64>::builder(q)
        .capacity(70)
        .clock(clock.clone())
        .build()
        .unwrap();
    for round in 0..20u64 {
        for i in 0..40 {
            let key = round * 1_000 + i;
            assert!(limiter.check(&key).is_allowed(), "round {round}, key {key}");
            assert!(!limiter.check(&key).is_allowed());
        }
        clock.advance(Duration::from_secs(1));
    }
    let stats = limiter.stats();
    assert_eq!(stats.forced_evictions, 0, "{stats:?}");
    assert!(stats.recovered_evictions > 500, "{stats:?}");
    assert!(stats.keys <= limiter.capacity());
    limiter.check_invariants().unwrap();
}

#[test]
fn a_growable_sliding_window_table_keeps_every_count_through_its_growths() {
    let q = SlidingWindowQuota::per_minute(2).unwrap();
    let limiter = Limiter::<u64>::builder(q)
        .capacity(100)
        .max_capacity(1 << 20)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    for key in 0..30_000u64 {
        assert!(limiter.check(&key).is_allowed());
    }
    assert!(limiter.stats().growths >= 5, "{:?}", limiter.stats());
    for key in 0..30_000u64 {
        assert!(limiter.check(&key).is_allowed(), "second request of {key}");
        let d = limiter.check(&key);
        assert!(!d.is_allowed(), "third request of {key}: {d:?}");
        assert_eq!(d.remaining(), 0);
    }
    limiter.check_invariants().unwrap();
}

#[test]
fn a_reset_key_starts_a_fresh_window() {
    let q = FixedWindowQuota::per_minute(1).unwrap();
    let limiter = Limiter::<str>::builder(q)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(limiter.check("k").is_allowed());
    assert!(!limiter.check("k").is_allowed());
    assert!(limiter.reset("k"));
    assert!(limiter.check("k").is_allowed());
    assert_eq!(limiter.peek("k").remaining(), 0);
}

#[test]
fn a_window_decision_reports_its_exact_remaining_units_in_cl_throttle_form() {
    // 600 of 1,000 used 1 ms before the window's end: 400 remain, in both forms (the window's
    // encoding is not an emission interval, so redis-cell's microsecond rounding must not
    // apply to it).
    let clock = ManualClock::starting_at(Timestamp::from_nanos(999_000_000).unwrap());
    let quota = FixedWindowQuota::per_second(1_000).unwrap();
    let limiter = Limiter::<u64>::builder(quota).clock(clock).build().unwrap();
    let d = limiter.check_n(&1, 600);
    assert_eq!(d.remaining(), 400);
    assert_eq!(d.to_cl_throttle(), [0, 1_000, 400, -1, 1]);
    let d = limiter.check_n(&1, 399);
    assert_eq!((d.remaining(), d.to_cl_throttle()[2]), (1, 1));
}

#[test]
fn the_longest_sliding_window_decides_without_overflow() {
    // A window of 2^62 ns (the longest a limit of 1 allows): the first request's state is
    // fresh again after two windows, 2^63 ns.
    let quota = SlidingWindowQuota::per_period(1, Duration::from_nanos(1 << 62)).unwrap();
    let single = Counter::with_clock(quota, ManualClock::new());
    let keyed = Limiter::<u64>::builder(quota)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    for d in [single.check(), keyed.check(&1)] {
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.to_cl_throttle()[2], 0);
    }
    assert!(!single.check().is_allowed() && !keyed.check(&1).is_allowed());
}
