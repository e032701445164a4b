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
    let quota = Quota::per_period(1, Duration::from_millis(10))
        .unwrap()
        .with_limit(3)
        .unwrap();
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
            // Batches shorter and longer than the look-ahead distance, repeats included (these
            // tables are under the size where the look-ahead starts: see the next test).
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

/// Past 1 MiB a batch looks ahead: it hashes keys 32 places ahead and keeps their homes in a
/// ring until their turn (`Limiter::check_batch_at`). Here fixed and growable tables past that
/// size, each fed more keys in debt than it has room for in batches of thousands of keys, must
/// decide as single calls in order do and end every batch with the same counters: while they
/// evict, turn keys away or let them through untracked, and, for the growable ones, while they
/// double inside a batch (which leaves the homes already in the ring computed for the size
/// before) and then fill at their largest size.
#[test]
fn past_the_look_ahead_a_batch_decides_exactly_as_single_checks_in_order() {
    // Limit 2, one unit a second back: every key charged in this test stays in debt.
    let quota = Quota::per_second(1).unwrap().with_limit(2).unwrap();
    let build = |growable: bool, when_full: WhenFull| {
        let builder = Limiter::<u64>::builder(quota)
            .when_full(when_full)
            .clock(ManualClock::new())
            .seed(7);
        let builder = if growable {
            builder.capacity(1_024).max_capacity(100_000)
        } else {
            builder.capacity(70_000)
        };
        builder.build().unwrap()
    };
    let policies = [WhenFull::Evict, WhenFull::Deny, WhenFull::Allow];
    let cases = policies
        .map(|when_full| (false, when_full))
        .into_iter()
        .chain(policies.map(|when_full| (true, when_full)));
    for (seed, (growable, when_full)) in cases.enumerate() {
        let case = format!("growable {growable}, {when_full:?}");
        // (keys, rounds, the longest batch): the growable table's largest size holds about
        // 200,000 keys.
        let (key_space, rounds, longest) = if growable {
            (400_000, 150, 8_000)
        } else {
            (100_000, 80, 4_000)
        };
        let (batched, single) = (build(growable, when_full), build(growable, when_full));
        let mut rng = Rng::new(seed as u64);
        let mut out = Vec::new();
        // The table's growths when its batches first looked ahead.
        let mut looked_ahead = None;
        for round in 0..rounds {
            let at = Timestamp::from_nanos(round * 1_000_000).unwrap();
            if looked_ahead.is_none() && batched.memory_bytes() >= 1 << 20 {
                looked_ahead = Some(batched.stats().growths);
            }
            let len = rng.below(longest) as usize;
            let keys: Vec<u64> = (0..len).map(|_| rng.below(key_space)).collect();
            out.clear();
            batched.check_batch_at(&keys, at, &mut out);
            let expected: Vec<_> = keys.iter().map(|key| single.check_at(key, at)).collect();
            assert_eq!(out, expected, "{case}, round {round}");
            assert_eq!(batched.stats(), single.stats(), "{case}, round {round}");
        }
        let Some(growths) = looked_ahead else {
            panic!("{case}: the batches never looked ahead");
        };
        let stats = batched.stats();
        assert!(
            !growable || stats.growths > growths,
            "{case}: grew while its batches looked ahead, {stats:?}"
        );
        let full = match when_full {
            WhenFull::Evict => stats.forced_evictions,
            WhenFull::Deny => stats.turned_away,
            _ => stats.admitted_untracked,
        };
        assert!(full > 0, "{case}: the table was full, {stats:?}");
        let at = Timestamp::from_nanos(rounds * 1_000_000).unwrap();
        for key in 0..key_space {
            assert_eq!(
                batched.peek_at(&key, at),
                single.peek_at(&key, at),
                "{case}, key {key}"
            );
        }
        batched.check_invariants().unwrap();
        single.check_invariants().unwrap();
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
