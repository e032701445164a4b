//! `check_batch_at` against `check_at` called key by key: two limiters built alike (same seed,
//! so the same buckets), one fed batches, the other single calls, must give identical decisions
//! and end in identical states, whatever the table's pressure, policy, key type or batch size.

use funnel_testkit::rng;

use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::{Limiter, Quota, Timestamp, WhenFull};
use rng::Rng;

fn pair<K: std::hash::Hash + ?Sized>(
    capacity: usize,
    when_full: WhenFull,
    seed: u64,
) -> [Limiter<K, ManualClock>; 2] {
    let quota = Quota::new(2, 1, Duration::from_millis(10)).unwrap();
    std::array::from_fn(|_| {
        Limiter::builder(quota)
            .capacity(capacity)
            .when_full(when_full)
            .clock(ManualClock::new())
            .seed(seed)
            .build()
            .unwrap()
    })
}

#[test]
fn a_batch_decides_exactly_as_single_checks_in_order() {
    for seed in 0..24u64 {
        let mut rng = Rng::new(seed);
        let when_full = [WhenFull::Evict, WhenFull::Deny, WhenFull::Allow][seed as usize % 3];
        // From a roomy table to one far too small, so evictions happen inside batches.
        let capacity = [7, 20, 100, 5_000][seed as usize % 4];
        let [batched, single] = pair::<u64>(capacity, when_full, seed);
        let key_space = 1 + rng.below(300);
        let mut now = 0u64;
        let mut out = Vec::new();
        for round in 0..40 {
            now += rng.below(15_000_000);
            let at = Timestamp::from_nanos(now).unwrap();
            // Batch sizes around the look-ahead distance and far above it, repeats included.
            let len = rng.below(40) as usize;
            let keys: Vec<u64> = (0..len).map(|_| rng.below(key_space)).collect();
            out.clear();
            batched.check_batch_at(&keys, at, &mut out);
            assert_eq!(out.len(), keys.len());
            for (i, key) in keys.iter().enumerate() {
                let expected = single.check_at(key, at);
                assert_eq!(
                    out[i], expected,
                    "seed {seed}, round {round}, key #{i} ({key})"
                );
            }
            assert_eq!(
                batched.stats(),
                single.stats(),
                "seed {seed}, round {round}"
            );
        }
        for key in 0..key_space {
            let at = Timestamp::from_nanos(now).unwrap();
            assert_eq!(batched.peek_at(&key, at), single.peek_at(&key, at));
        }
        batched.check_invariants().unwrap();
    }
}

#[test]
fn a_batch_takes_borrowed_and_owned_keys_and_appends() {
    let [limiter, _] = pair::<str>(1_000, WhenFull::Evict, 1);
    let now = Timestamp::ZERO;
    let mut out = Vec::new();
    limiter.check_batch_at(&["a", "b", "a", "a"], now, &mut out);
    let owned = vec![String::from("b"), String::from("c")];
    limiter.check_batch_at(&owned, now, &mut out);
    let allowed: Vec<bool> = out.iter().map(|d| d.is_allowed()).collect();
    assert_eq!(allowed, [true, true, true, true, true, true]);
    let mut more = Vec::new();
    limiter.check_batch_at(&["a", "b", "c", "c"], now, &mut more);
    let allowed: Vec<bool> = more.iter().map(|d| d.is_allowed()).collect();
    assert_eq!(allowed, [false, true, true, true]); // limit 3: "a" was at 3, "b" at 2, "c" at 1
    limiter.check_batch_at::<&str>(&[], now, &mut more);
    assert_eq!(more.len(), 4);
}
