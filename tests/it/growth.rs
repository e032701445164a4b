//! A growable table (`Builder::max_capacity`): it starts small, doubles while keys in debt fill
//! it, keeps every key's debt across the moves, stops at its maximum, and its resident memory
//! follows its size.
//!
//! The exactness test is the one that matters: on a frozen clock a key admits exactly its limit,
//! however often it is asked, so across threads that race the growths (the moves of keys to
//! their new buckets, the barrier, the helpers completing half-done moves) every key must end
//! with exactly `limit` admissions: one more means a debt lost in a move, one fewer a debt
//! counted twice or a request charged to the wrong key.

use std::collections::HashMap;
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::{Error, Limiter, Outcome, Quota, WhenFull};
use funnel_testkit::Rng;

/// 1 per hour, bursts of 3: on a frozen clock, three admissions per key and never a fourth.
fn quota() -> Quota {
    Quota::per_hour(1).unwrap().with_limit(3).unwrap()
}

fn growable(initial: usize, max: usize) -> Limiter<u64, ManualClock> {
    Limiter::builder(quota())
        .capacity(initial)
        .max_capacity(max)
        .clock(ManualClock::new())
        .seed(0x5EED)
        .build()
        .unwrap()
}

#[test]
fn a_growable_table_starts_small_and_doubles_while_keys_in_debt_fill_it() {
    let limiter = growable(1_024, 1 << 20);
    // 1,024 keys: 147 buckets of seven slots, rounded up to a power of two.
    assert_eq!(limiter.capacity(), 256 * 7);
    // 2^20 keys: 149,797 buckets, rounded up to 2^18.
    assert_eq!(limiter.max_capacity(), (1 << 18) * 7);
    let mut sizes = vec![limiter.capacity()];
    for key in 0..20_000u64 {
        assert!(limiter.check(&key).is_allowed());
        if limiter.capacity() != *sizes.last().unwrap() {
            sizes.push(limiter.capacity());
        }
    }
    // Every size is twice the one before, and a growth started each time.
    assert!(sizes.windows(2).all(|w| w[1] == 2 * w[0]), "{sizes:?}");
    assert_eq!(limiter.stats().growths, sizes.len() as u64 - 1);
    assert!(sizes.len() >= 5, "{sizes:?}");
    // A table grows only when keys in debt fill a key's candidates: about 70% of its slots.
    let held = limiter.stats().keys as f64 / limiter.capacity() as f64;
    assert!(held > 0.3, "{held} of the slots hold a key");
    limiter.check_invariants().unwrap();
}

#[test]
fn every_key_keeps_its_debt_through_every_growth_on_one_thread() {
    let limiter = growable(1_000, 200_000);
    let start = limiter.capacity();
    let keys = 100_000u64;
    for key in 0..keys {
        assert!(limiter.check(&key).is_allowed(), "first request of {key}");
    }
    let stats = limiter.stats();
    assert!(limiter.capacity() > start, "{} slots", limiter.capacity());
    assert!(stats.growths >= 6, "{stats:?}");
    assert_eq!(stats.keys, keys as usize, "{stats:?}");
    assert_eq!(stats.forced_evictions, 0, "{stats:?}");
    limiter.check_invariants().unwrap();
    // Every key still owes its first request: two more pass, the third does not.
    for key in 0..keys {
        assert!(limiter.check(&key).is_allowed(), "second request of {key}");
        assert!(limiter.check(&key).is_allowed(), "third request of {key}");
        let d = limiter.check(&key);
        assert_eq!(d.outcome(), Outcome::Limited, "fourth request of {key}");
        assert_eq!(d.remaining(), 0);
    }
    limiter.check_invariants().unwrap();
}

#[test]
fn no_key_loses_or_doubles_its_debt_while_threads_race_the_growths() {
    race_the_growths(4);
}

/// Sixteen threads on two cores: a helper is preempted in the middle of its chunk of the
/// migration while the others create keys. Before creators kept a reserve for the keys still to
/// move (`grow/mod.rs`, `MIGRATION_FILL_TWENTIETHS`) they could fill the new level, and the
/// preempted helper's next move found no slot and evicted a key in debt.
#[test]
fn no_key_loses_its_debt_when_more_threads_than_cores_race_the_growths() {
    race_the_growths(16);
}

/// `threads` threads ask for 60,000 keys five times each, in their own orders, through five or
/// six growths: every key is admitted exactly its limit, no key is evicted, and the table ends with
/// every key bound once.
fn race_the_growths(threads: usize) {
    const KEYS: u64 = 60_000;
    const ASKS: usize = 5; // per key and thread: more than the limit of 3
    for seed in 0..3u64 {
        let limiter = growable(1_000, 1 << 20);
        let barrier = Barrier::new(threads);
        let admitted: Vec<HashMap<u64, u32>> = thread::scope(|s| {
            let handles: Vec<_> = (0..threads as u64)
                .map(|t| {
                    let (limiter, barrier) = (&limiter, &barrier);
                    s.spawn(move || {
                        // Each thread asks for every key ASKS times, in its own order, so new
                        // keys (which trigger growths) and keys being moved interleave.
                        let mut rng = Rng::new(seed * 31 + t);
                        let mut order: Vec<u64> = (0..KEYS)
                            .flat_map(|k| std::iter::repeat_n(k, ASKS))
                            .collect();
                        rng.shuffle(&mut order);
                        let mut mine = HashMap::new();
                        barrier.wait();
                        for key in order {
                            if limiter.check(&key).is_allowed() {
                                *mine.entry(key).or_insert(0) += 1;
                            }
                        }
                        mine
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let stats = limiter.stats();
        // The table's own account first: a key bound twice shows here by name.
        limiter.check_invariants().unwrap();
        let mut total: HashMap<u64, u32> = HashMap::new();
        for part in admitted {
            for (k, n) in part {
                *total.entry(k).or_insert(0) += n;
            }
        }
        for key in 0..KEYS {
            assert_eq!(
                total.get(&key).copied().unwrap_or(0),
                3,
                "seed {seed}: key {key} admitted a wrong number of times; {stats:?}"
            );
        }
        assert!(stats.growths >= 5, "seed {seed}: {stats:?}");
        assert!(stats.moved_keys > 0, "seed {seed}: {stats:?}");
        assert_eq!(stats.forced_evictions, 0, "seed {seed}: {stats:?}");
        assert_eq!(stats.keys, KEYS as usize, "seed {seed}: {stats:?}");
    }
}

#[test]
fn a_growable_table_stops_at_its_maximum_and_then_evicts_as_a_fixed_one() {
    for when_full in [WhenFull::Evict, WhenFull::Deny, WhenFull::Allow] {
        let limiter = Limiter::<u64>::builder(quota())
            .capacity(100)
            .max_capacity(1_000)
            .when_full(when_full)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let max = limiter.max_capacity();
        assert_eq!(max, 256 * 7, "1,000 keys: 143 buckets, rounded up to 256");
        for key in 0..5_000u64 {
            let _ = limiter.check(&key);
            assert!(limiter.capacity() <= max);
        }
        let stats = limiter.stats();
        assert_eq!(limiter.capacity(), max, "{when_full:?}");
        let full = stats.forced_evictions + stats.turned_away + stats.admitted_untracked;
        assert!(full > 0, "{when_full:?}: {stats:?}");
        match when_full {
            WhenFull::Evict => assert_eq!(full, stats.forced_evictions),
            WhenFull::Deny => assert_eq!(full, stats.turned_away),
            _ => assert_eq!(full, stats.admitted_untracked),
        }
        assert!(stats.keys <= max);
        limiter.check_invariants().unwrap();
    }
}

#[test]
fn keys_whose_funnel_has_recovered_are_dropped_not_moved() {
    let limiter = growable(100, 100_000);
    let clock = limiter.clock().clone();
    // A first wave of keys, then two hours: all of them have recovered.
    for key in 0..500u64 {
        let _ = limiter.check(&key);
    }
    clock.advance(Duration::from_secs(7200));
    // A second wave makes the table grow again and again; the first wave's keys are absent
    // now, so the growths drop them instead of carrying them.
    for key in 1_000..20_000u64 {
        let _ = limiter.check(&key);
    }
    let stats = limiter.stats();
    assert!(stats.dropped_keys > 0, "{stats:?}");
    limiter.check_invariants().unwrap();
    // And the first wave starts afresh.
    assert_eq!(limiter.check(&7).remaining(), 2);
}

#[test]
fn resident_memory_follows_the_size_in_use_not_the_maximum() {
    let limiter = growable(1_000, 10_000_000);
    let small = limiter.memory_bytes();
    assert!(small < 128 * 1024, "{small} bytes for 1,000 keys");
    assert!(limiter.max_capacity() >= 10_000_000);
    for key in 0..50_000u64 {
        let _ = limiter.check(&key);
    }
    let grown = limiter.memory_bytes();
    assert!(
        grown > small && grown < 4 << 20,
        "{grown} bytes for 50,000 keys"
    );
    // The bound the docs state: 128 bytes per bucket in use, seven slots a bucket, plus the
    // creation locks and their move counts (five bytes per bucket of the largest size, at
    // most 80 KiB) and the counters.
    assert!(grown <= limiter.capacity() / 7 * 128 + (80 << 10) + 2048);
}

#[test]
fn a_maximum_below_the_initial_capacity_is_a_typed_error() {
    let built = Limiter::<u64>::builder(quota())
        .capacity(10_000)
        .max_capacity(1_000)
        .build();
    assert_eq!(
        built.err(),
        Some(Error::MaxCapacityBelowCapacity {
            capacity: 10_000,
            max_capacity: 1_000
        })
    );
    assert_eq!(
        Limiter::<u64>::builder(quota())
            .max_capacity(0)
            .build()
            .err(),
        Some(Error::ZeroCapacity)
    );
    let e = Limiter::<u64>::builder(quota())
        .max_capacity(usize::MAX)
        .build()
        .err();
    assert!(matches!(e, Some(Error::CapacityTooLarge { .. })), "{e:?}");
}

#[test]
fn the_clock_of_a_growable_limiter_is_the_one_it_was_given() {
    let limiter = growable(10, 1_000);
    let before = limiter.now();
    limiter.clock().advance(Duration::from_secs(1));
    assert_eq!(limiter.now().as_nanos() - before.as_nanos(), 1_000_000_000);
}
