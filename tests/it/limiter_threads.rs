//! Many keys, many threads, one frozen clock: the keyed limiter's counts are exact.
//!
//! Four threads walk 500 keys, each thread in its own shuffled order, several rounds per phase,
//! so every key is hit by every thread while the others are busy with other keys (and now and
//! then the same one). Between phases a [`ManualClock`] moves by `k` emission intervals.
//!
//! * **Room for every key** (no forced eviction): each key admits exactly its limit in the first
//!   phase and exactly `min(k, limit)` more after the clock moves by `k` intervals, for `u64`
//!   and `str` keys.
//! * **A tiny table** (64 keys in 16 slots, evicting all the time): a key is never stricter than
//!   an unbounded limiter, and gains over it at most what it owed when it was evicted, at most
//!   `limit` units per forced eviction; the table's invariants hold at every phase boundary.
//!   Single-threaded, the same bound is checked per key and exactly: against the reference
//!   model (`funnel_testkit::model`) fed the same requests, a key is admitted beyond it at most the
//!   debt it owed at its evictions, one emission interval per extra request.

use funnel_testkit::model;
use funnel_testkit::rng;

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::{Clock, Limiter, Quota, WhenFull};
use rng::Rng;

const THREADS: usize = 4;
const KEYS: usize = 500;
/// Rounds over its keys each thread makes per phase: 12 attempts per key and phase, more than
/// twice the limit, so every key is refused in every phase.
const ROUNDS: usize = 3;
/// Limit 5, 3 per second: T = 333,333,333 ns, not a round number of anything.
const LIMIT: u64 = 5;
const T: u64 = 333_333_333;
/// Emission intervals the clock moves before each phase after the first: nothing, less than
/// the limit, exactly the limit (full recovery) and more than it.
const STEPS: [u64; 5] = [0, 1, 3, 5, 8];

fn quota() -> Quota {
    let q = Quota::per_second(3).unwrap().with_limit(LIMIT).unwrap();
    assert_eq!(
        (q.limit(), q.emission_interval()),
        (LIMIT, Duration::from_nanos(T))
    );
    q
}

fn limiter<K: Hash + ?Sized>(capacity: usize, seed: u64) -> (Limiter<K, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(quota())
        .capacity(capacity)
        .clock(clock.clone())
        .seed(seed)
        .when_full(WhenFull::Evict)
        .build()
        .unwrap();
    (limiter, clock)
}

/// `0..n` in an order of its own for every seed (Fisher–Yates).
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    Rng::new(seed).shuffle(&mut order);
    order
}

/// One phase: every thread makes `ROUNDS` passes over all keys in its own order, one request
/// per key per pass, all threads released together. Returns the requests admitted per key.
fn phase<K: Hash + ?Sized + Sync>(
    limiter: &Limiter<K, ManualClock>,
    keys: &[&K],
    seed: u64,
) -> Vec<u64> {
    let admitted: Vec<AtomicU64> = keys.iter().map(|_| AtomicU64::new(0)).collect();
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (admitted, barrier) = (&admitted, &barrier);
            let order = shuffled(keys.len(), seed.wrapping_mul(THREADS as u64) + t as u64);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..ROUNDS {
                    for &i in &order {
                        if limiter.check(keys[i]).is_allowed() {
                            // Relaxed: read only after the scope joins every thread.
                            admitted[i].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    admitted.into_iter().map(AtomicU64::into_inner).collect()
}

/// What an unbounded limiter admits per key in the phase after the clock moved `step`
/// intervals (every phase ends with the funnel full, since every key is refused in each).
fn expected(first: bool, step: u64) -> u64 {
    if first {
        LIMIT
    } else {
        step.min(LIMIT)
    }
}

/// Room for every key: each admits exactly its limit, then exactly what leaked back.
fn every_key_admits_exactly_its_quota<K: Hash + ?Sized + Sync>(keys: &[&K], seed: u64) {
    let (limiter, clock) = limiter::<K>(8 * keys.len(), seed);
    let phases = std::iter::once(None).chain(STEPS.iter().map(Some));
    for (p, step) in phases.enumerate() {
        if let Some(step) = step {
            clock.advance(Duration::from_nanos(step * T));
        }
        let want = expected(step.is_none(), step.copied().unwrap_or(0));
        let got = phase(&limiter, keys, seed * 100 + p as u64);
        for (i, n) in got.iter().enumerate() {
            assert_eq!(
                *n, want,
                "seed {seed}, phase {p} (+{step:?} T): key #{i} admitted {n}, not {want}"
            );
        }
    }
    let stats = limiter.stats();
    assert_eq!(
        stats.forced_evictions, 0,
        "the table has room for every key"
    );
    assert_eq!(
        stats.recovered_evictions, 0,
        "no new key arrived after the first phase"
    );
    assert_eq!(limiter.len(), keys.len());
    limiter.check_invariants().unwrap();
}

#[test]
fn every_u64_key_admits_exactly_its_limit_and_then_exactly_what_leaked_back() {
    let keys: Vec<u64> = (0..KEYS as u64).map(|i| i * 7_919 + 3).collect();
    let keys: Vec<&u64> = keys.iter().collect();
    for seed in 1..=20 {
        every_key_admits_exactly_its_quota::<u64>(&keys, seed);
    }
}

#[test]
fn every_str_key_admits_exactly_its_limit_and_then_exactly_what_leaked_back() {
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user:{i}:login")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    for seed in 1..=20 {
        every_key_admits_exactly_its_quota::<str>(&keys, seed);
    }
}

/// A table far too small: 64 keys, 21 slots, every pass evicts. Per key and phase the limiter
/// admits at least what an unbounded one would (eviction never makes a key stricter), and over
/// the whole run all keys together gain at most `limit` units per forced eviction (a funnel's
/// debt is at most its tolerance), and nothing at all without one.
#[test]
fn under_constant_eviction_a_key_gains_at_most_the_debt_it_lost() {
    const TINY_KEYS: usize = 64;
    let keys: Vec<u64> = (0..TINY_KEYS as u64).collect();
    let keys: Vec<&u64> = keys.iter().collect();
    for seed in 1..=16 {
        let (limiter, clock) = limiter::<u64>(16, seed);
        assert_eq!(limiter.capacity(), 21); // three buckets of seven
        let mut admitted = vec![0u64; TINY_KEYS];
        let mut unbounded = 0u64;
        let phases = std::iter::once(None).chain(STEPS.iter().map(Some));
        for (p, step) in phases.enumerate() {
            if let Some(step) = step {
                clock.advance(Duration::from_nanos(step * T));
            }
            let floor = expected(step.is_none(), step.copied().unwrap_or(0));
            unbounded += floor;
            let got = phase(&limiter, &keys, seed * 100 + p as u64);
            for (i, n) in got.iter().enumerate() {
                assert!(
                    *n >= floor,
                    "seed {seed}, phase {p}: key #{i} admitted {n}, under {floor}"
                );
                admitted[i] += n;
            }
            limiter.check_invariants().unwrap();
            assert!(limiter.len() <= limiter.capacity());

            let forced = limiter.stats().forced_evictions;
            let gained: u64 = admitted.iter().map(|a| a - unbounded).sum();
            assert!(
                gained <= LIMIT * forced,
                "seed {seed}, phase {p}: keys gained {gained} units over an unbounded limiter \
                 with only {forced} forced evictions (at most {LIMIT} each)"
            );
            for (i, a) in admitted.iter().enumerate() {
                assert!(
                    *a <= unbounded + LIMIT * forced,
                    "seed {seed}: key #{i} admitted {a}, more than {unbounded} + its lost debt"
                );
            }
        }
        let stats = limiter.stats();
        assert!(
            stats.forced_evictions > 0,
            "64 keys in 16 slots must evict: {stats:?}"
        );
        assert_eq!(stats.keys, limiter.capacity());
        let gained: u64 = admitted.iter().map(|a| a - unbounded).sum();
        eprintln!(
            "seed {seed}: {} forced and {} recovered evictions; keys gained {gained} units over an \
             unbounded limiter (bound {})",
            stats.forced_evictions,
            stats.recovered_evictions,
            LIMIT * stats.forced_evictions
        );
    }
}

/// Single-threaded and exact, per key: 64 keys through 16 slots in random order, each request
/// checked against the reference model fed the same requests. After every request, every key
/// is peeked: a key whose debt vanished was evicted and lost that debt. A key may be admitted
/// where the model refuses only while it has lost debt left to spend, one emission interval per
/// extra request; it is never refused where the model admits.
#[test]
fn an_evicted_key_gains_at_most_the_debt_it_owed_when_evicted() {
    const TINY_KEYS: u64 = 64;
    let q = model::ModelQuota::cl(LIMIT as i128 - 1, 3, 1);
    assert_eq!((q.t, q.limit), (T as i128, LIMIT as i128));
    for seed in 1..=4 {
        let (limiter, clock) = limiter::<u64>(16, seed);
        let mut rng = Rng::new(seed);
        let mut shadow: Vec<Option<i128>> = vec![None; TINY_KEYS as usize];
        // Debt lost at evictions and not yet spent on extra admissions, ns.
        let mut credit = vec![0i128; TINY_KEYS as usize];
        let owed = |key: u64| limiter.peek(&key).reset_after().as_nanos() as i128;
        let mut extra = 0;
        for step in [0, 0, 1, 3, 5, 8, 0, 2] {
            clock.advance(Duration::from_nanos(step * T));
            let now = clock.now().as_nanos() as i128;
            let mut debts: Vec<i128> = (0..TINY_KEYS).map(owed).collect();
            for _ in 0..400 {
                let key = rng.below(TINY_KEYS);
                let k = key as usize;
                let (reply, after) = model::throttle(shadow[k], now, q, 1);
                shadow[k] = after;
                let allowed = limiter.check(&key).is_allowed();
                let model_allowed = reply[0] == 0;
                assert!(
                    allowed || !model_allowed,
                    "seed {seed}: key {key} refused where the model admits"
                );
                if allowed && !model_allowed {
                    credit[k] -= T as i128;
                    extra += 1;
                    assert!(
                        credit[k] >= 0,
                        "seed {seed}: key {key} admitted beyond the debt it lost"
                    );
                }
                for (other, debt) in debts.iter_mut().enumerate() {
                    let now_owed = owed(other as u64);
                    if other != k && now_owed < *debt {
                        assert_eq!(now_owed, 0, "a debt only vanishes whole, at an eviction");
                        credit[other] += *debt;
                    }
                    *debt = now_owed;
                }
            }
            limiter.check_invariants().unwrap();
        }
        let stats = limiter.stats();
        assert!(
            stats.forced_evictions > 0 && extra > 0,
            "seed {seed}: nothing was tested: {stats:?}"
        );
        eprintln!(
            "seed {seed}: {} forced evictions, {extra} requests admitted on lost debt",
            stats.forced_evictions
        );
    }
}
