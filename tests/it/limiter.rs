//! The public keyed API, behaviour by behaviour: key types, `check` / `check_n` / `with_quota` and
//! their `*_at` variants, `peek`, `reset`, `len`, capacity rounding, the statistics, the three
//! [`WhenFull`] policies and the builder's errors.
//!
//! Every limiter here runs on a [`ManualClock`] (or the caller's time), so every number is exact.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::{Error, Limiter, Outcome, Quota, Stats, Timestamp, WhenFull, MAX_CAPACITY};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// 10 per second, bursts of 10: `T` = 100 ms, limit 10.
fn ten_per_second() -> Quota {
    Quota::per_second(10).unwrap()
}

fn at(nanos: u64) -> Timestamp {
    Timestamp::from_nanos(nanos).unwrap()
}

/// A limiter on a manual clock at its origin, seeded, with room for `capacity` keys.
fn limiter<K: std::hash::Hash + ?Sized>(
    capacity: usize,
    when_full: WhenFull,
) -> (Limiter<K, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(ten_per_second())
        .capacity(capacity)
        .clock(clock.clone())
        .seed(1)
        .when_full(when_full)
        .build()
        .unwrap();
    (limiter, clock)
}

/// Spends `limiter`'s whole quota for `key` now; the next request is limited.
fn exhaust<K: std::hash::Hash + ?Sized>(limiter: &Limiter<K, ManualClock>, key: &K) {
    let limit = limiter.quota().limit();
    assert!(limiter.check_n(key, limit).is_allowed());
    assert!(!limiter.check(key).is_allowed());
}

#[test]
fn every_key_type_gets_its_own_funnel() {
    let (by_str, _) = limiter::<str>(64, WhenFull::Evict);
    exhaust(&by_str, "alice");
    assert!(by_str.check("bob").is_allowed());
    let owned = String::from("alice");
    assert!(
        !by_str.check(&owned).is_allowed(),
        "a String and a &str of one text are one key"
    );

    let (by_id, _) = limiter::<u64>(64, WhenFull::Evict);
    exhaust(&by_id, &7);
    assert!(by_id.check(&8).is_allowed());

    let (by_ip, _) = limiter::<IpAddr>(64, WhenFull::Evict);
    let v4 = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7));
    let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    exhaust(&by_ip, &v4);
    assert!(by_ip.check(&v6).is_allowed());
    assert!(!by_ip.check(&"203.0.113.7".parse().unwrap()).is_allowed());

    let (by_bytes, _) = limiter::<[u8]>(64, WhenFull::Evict);
    exhaust(&by_bytes, b"token-1".as_slice());
    assert!(by_bytes.check(b"token-2").is_allowed());
    let received: Vec<u8> = "token-1".bytes().collect(); // e.g. a header value read off the wire
    assert!(!by_bytes.check(&received).is_allowed());

    for len in [by_str.len(), by_id.len(), by_ip.len(), by_bytes.len()] {
        assert_eq!(len, 2);
    }
}

#[test]
fn a_new_key_gets_the_full_burst_then_is_limited_until_one_interval_leaks() {
    let (limiter, clock) = limiter::<str>(64, WhenFull::Evict);
    for left in (0..10).rev() {
        let d = limiter.check("k");
        assert_eq!(d.outcome(), Outcome::Allowed);
        assert_eq!(d.remaining(), left);
    }
    let d = limiter.check("k");
    assert_eq!(d.outcome(), Outcome::Limited);
    assert_eq!(d.retry_after(), Some(Duration::from_millis(100)));
    assert_eq!(d.reset_after(), Duration::from_secs(1));
    assert_eq!(d.to_cl_throttle(), [1, 10, 0, 1, 1]);

    clock.advance(Duration::from_millis(99));
    assert_eq!(
        limiter.check("k").retry_after(),
        Some(Duration::from_millis(1))
    );
    clock.advance(Duration::from_millis(1));
    assert!(limiter.check("k").is_allowed());
    assert!(!limiter.check("k").is_allowed());
}

#[test]
fn check_n_charges_n_units_at_once_and_never_passes_a_cost_above_the_limit() {
    let (limiter, _) = limiter::<u64>(64, WhenFull::Evict);
    let d = limiter.check_n(&1, 4);
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 6);
    assert_eq!(d.reset_after(), Duration::from_millis(400));
    assert_eq!(limiter.check_n(&1, 7).outcome(), Outcome::Limited);
    assert_eq!(limiter.check_n(&1, 6).remaining(), 0);

    let d = limiter.check_n(&2, 11);
    assert!(d.cost_exceeds_limit());
    assert_eq!(d.retry_after(), None);
    assert_eq!(d.to_cl_throttle()[3], -1);
    assert_eq!(
        limiter.peek(&2).remaining(),
        10,
        "a cost above the limit charges nothing"
    );
    assert_eq!(limiter.len(), 1, "nor does it create the key");
}

#[test]
fn with_quota_takes_its_quota_per_call_and_the_key_keeps_its_debt_across_quota_changes() {
    let (limiter, _) = limiter::<str>(64, WhenFull::Evict);
    // 5 of 10 at 100 ms each: TAT = now + 500 ms.
    assert!(limiter.check_n("k", 5).is_allowed());

    // 1 per second, bursts of 2: the 500 ms of debt is half a unit of this quota.
    let slow = Quota::per_second(1).unwrap().with_limit(2).unwrap();
    let d = limiter.with_quota(slow).check_n("k", 1);
    assert!(d.is_allowed());
    assert_eq!(d.reset_after(), Duration::from_millis(1500));
    assert_eq!((d.limit(), d.remaining()), (2, 0));

    // A stricter quota sees all 1.5 s of debt: limited for 1.5 s, and nothing written.
    let strict = Quota::per_second(1).unwrap();
    let d = limiter.with_quota(strict).check_n("k", 1);
    assert_eq!(d.outcome(), Outcome::Limited);
    assert_eq!(d.retry_after(), Some(Duration::from_millis(1500)));

    // Back on the limiter's own quota: 1.5 s of debt is 15 of 10 units, so limited.
    let d = limiter.check("k");
    assert_eq!(d.outcome(), Outcome::Limited);
    assert_eq!(d.reset_after(), Duration::from_millis(1500));
    assert_eq!(d.retry_after(), Some(Duration::from_millis(600)));
}

#[test]
fn the_at_variants_decide_at_the_callers_time_not_the_clocks() {
    let (limiter, clock) = limiter::<u64>(64, WhenFull::Evict);
    clock.advance(Duration::from_secs(1_000)); // the clock is far ahead; the caller's time rules
    assert!(limiter.check_n_at(&1, 10, at(5 * S)).is_allowed());
    assert!(!limiter.check_at(&1, at(5 * S)).is_allowed());
    assert_eq!(limiter.peek_at(&1, at(5 * S + 300 * MS)).remaining(), 3);
    let d = limiter
        .with_quota(ten_per_second())
        .check_n_at(&1, 3, at(5 * S + 300 * MS));
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 0);
    // The same calls on the clock see the debt long gone.
    assert_eq!(limiter.peek(&1).remaining(), 10);
    assert_eq!(limiter.now(), at(1_000 * S));
}

#[test]
fn a_peek_charges_nothing_and_creates_nothing() {
    let (limiter, _) = limiter::<str>(64, WhenFull::Evict);
    let d = limiter.peek("absent");
    assert_eq!(d.outcome(), Outcome::Allowed);
    assert_eq!((d.remaining(), d.reset_after()), (10, Duration::ZERO));
    assert_eq!(limiter.len(), 0);
    assert!(limiter.is_empty());
    assert_eq!(limiter.check_n("absent", 0), d, "check_n of 0 is a peek");
    assert_eq!(limiter.len(), 0);

    assert!(limiter.check_n("present", 3).is_allowed());
    let before = limiter.peek("present");
    assert_eq!(before.remaining(), 7);
    for _ in 0..5 {
        assert_eq!(limiter.peek("present"), before);
    }
    assert_eq!(
        limiter.check_n("present", 7).remaining(),
        0,
        "the peeks took none of the 7 left"
    );
    assert_eq!(limiter.len(), 1);
}

#[test]
fn a_denied_request_writes_nothing() {
    let (limiter, clock) = limiter::<str>(64, WhenFull::Evict);
    assert!(limiter.check_n("k", 8).is_allowed());
    let before = limiter.peek("k");
    assert_eq!(limiter.check_n("k", 3).outcome(), Outcome::Limited);
    assert_eq!(
        limiter.check_n("k", 50).outcome(),
        Outcome::CostExceedsLimit
    );
    assert_eq!(limiter.peek("k"), before);
    assert_eq!(
        limiter.check_n("k", 2).remaining(),
        0,
        "the 2 units left are still there"
    );

    // A new key whose first request is denied is not created.
    let strict = Quota::per_second(1).unwrap();
    assert_eq!(
        limiter.with_quota(strict).check_n("new", 2).outcome(),
        Outcome::CostExceedsLimit
    );
    assert_eq!(limiter.len(), 1);
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.peek("k").remaining(), 10);
}

#[test]
fn reset_gives_the_full_quota_back_and_is_false_for_an_unknown_key() {
    let (limiter, _) = limiter::<str>(64, WhenFull::Evict);
    assert!(!limiter.reset("unknown"));
    assert_eq!(
        limiter.len(),
        0,
        "resetting an unknown key does not create it"
    );

    exhaust(&limiter, "k");
    assert!(limiter.reset("k"));
    let d = limiter.peek("k");
    assert_eq!((d.remaining(), d.reset_after()), (10, Duration::ZERO));
    assert_eq!(limiter.check_n("k", 10).remaining(), 0);
    assert!(
        limiter.reset("k"),
        "a reset key stays tracked until its slot is reused"
    );
    assert_eq!(limiter.len(), 1);
}

#[test]
fn len_counts_keys_holding_a_slot_including_recovered_ones() {
    let (limiter, clock) = limiter::<u64>(1_024, WhenFull::Evict);
    assert!(limiter.is_empty());
    for key in 0..100 {
        let _ = limiter.check(&key);
        let _ = limiter.check(&key); // a second request is an update, not a new key
    }
    assert_eq!(limiter.len(), 100);
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        limiter.len(),
        100,
        "recovered keys keep their slot until a new key needs it"
    );
    assert_eq!(limiter.stats().keys, limiter.len());
    limiter.check_invariants().unwrap();
}

#[test]
fn capacity_rounds_up_to_whole_seven_slot_buckets_only() {
    for (asked, got) in [
        (1, 7),
        (7, 7),
        (8, 14),
        (17, 21),
        (1_000, 1_001),
        (65_536, 65_541),
        (1_000_000, 1_000_006),
        (10_000_000, 10_000_004),
    ] {
        let l = Limiter::<u64>::builder(ten_per_second())
            .capacity(asked)
            .build()
            .unwrap();
        assert_eq!(l.capacity(), got, "capacity({asked})");
        assert!(
            l.memory_bytes() >= 128 * got / 7,
            "128 bytes per 7 slots at least"
        );
        assert!(l.memory_bytes() <= 128 * got / 7 + 4096, "and little more");
    }
    assert!(Limiter::<str>::new(ten_per_second()).capacity() >= funnel::DEFAULT_CAPACITY);
}

#[test]
fn the_builder_rejects_a_zero_capacity_and_one_above_the_maximum() {
    let build = |capacity| {
        Limiter::<u64>::builder(ten_per_second())
            .capacity(capacity)
            .build()
    };
    assert_eq!(build(0).unwrap_err(), Error::ZeroCapacity);
    assert_eq!(
        build(MAX_CAPACITY + 1).unwrap_err(),
        Error::CapacityTooLarge {
            requested: MAX_CAPACITY + 1,
            max: MAX_CAPACITY
        }
    );
    assert_eq!(
        build(usize::MAX).unwrap_err(),
        Error::CapacityTooLarge {
            requested: usize::MAX,
            max: MAX_CAPACITY
        }
    );
    assert!(build(0).unwrap_err().to_string().contains("capacity"));
}

/// Fills the smallest limiter (one bucket: every key has the same candidate slots) at time 0
/// with keys `1..=capacity`, key `k` owing `k` seconds (`10 k` units of 100 ms, under a quota
/// with bursts deep enough for them).
fn full_bucket(when_full: WhenFull) -> (Limiter<u64, ManualClock>, ManualClock, Quota) {
    let (limiter, clock) = limiter::<u64>(1, when_full);
    let slots = limiter.capacity() as u64;
    let deep = ten_per_second().with_limit(10 * slots).unwrap();
    for key in 1..=slots {
        assert!(limiter
            .with_quota(deep)
            .check_n(&key, 10 * key)
            .is_allowed());
    }
    assert_eq!(limiter.len(), limiter.capacity());
    (limiter, clock, deep)
}

#[test]
fn when_full_deny_turns_a_new_key_away_until_the_least_indebted_slot_recovers() {
    let (limiter, clock, _) = full_bucket(WhenFull::Deny);
    let d = limiter.check(&99);
    assert_eq!(d.outcome(), Outcome::TurnedAway);
    assert!(!d.is_allowed());
    assert_eq!(
        d.retry_after(),
        Some(Duration::from_secs(1)),
        "key 1 recovers first, at 1 s"
    );
    assert_eq!(d.remaining(), 0);
    assert_eq!(d.to_cl_throttle(), [1, 10, 0, 1, 1]);

    clock.advance(Duration::from_millis(750));
    assert_eq!(
        limiter.check(&99).retry_after(),
        Some(Duration::from_millis(250))
    );
    assert_eq!(limiter.len(), limiter.capacity());
    assert_eq!(limiter.stats().turned_away, 2);
    assert_eq!(limiter.stats().forced_evictions, 0);
    assert_eq!(
        limiter.peek(&1).reset_after(),
        Duration::from_millis(250),
        "nobody was evicted"
    );

    clock.advance(Duration::from_millis(250));
    let d = limiter.check(&99);
    assert_eq!(
        d.outcome(),
        Outcome::Allowed,
        "key 1 has recovered: its slot is free"
    );
    assert_eq!(limiter.stats().recovered_evictions, 1);
    assert_eq!(limiter.peek(&99).remaining(), 9);
    limiter.check_invariants().unwrap();
}

#[test]
fn when_full_allow_lets_a_new_key_through_untracked() {
    let (limiter, _, _) = full_bucket(WhenFull::Allow);
    for _ in 0..20 {
        let d = limiter.check(&99);
        assert_eq!(d.outcome(), Outcome::AllowedUntracked);
        assert!(d.is_allowed());
        assert_eq!(
            d.remaining(),
            9,
            "answered as a fresh funnel, and never recorded"
        );
    }
    assert_eq!(limiter.len(), limiter.capacity());
    assert_eq!(limiter.peek(&99).remaining(), 10);
    let stats = limiter.stats();
    assert_eq!(
        (
            stats.admitted_untracked,
            stats.forced_evictions,
            stats.turned_away
        ),
        (20, 0, 0)
    );
    assert_eq!(
        limiter.peek(&1).reset_after(),
        Duration::from_secs(1),
        "nobody was evicted"
    );
}

#[test]
fn when_full_evict_replaces_the_least_indebted_funnel_and_counts_it() {
    let (limiter, _, deep) = full_bucket(WhenFull::Evict);
    assert_eq!(limiter.check(&99).outcome(), Outcome::Allowed);
    assert_eq!(limiter.stats().forced_evictions, 1);
    assert_eq!(
        limiter.peek(&1).remaining(),
        10,
        "key 1, owing least, lost its slot"
    );
    for key in 2..=limiter.capacity() as u64 {
        let owed = Duration::from_secs(key);
        assert_eq!(
            limiter.peek(&key).reset_after(),
            owed,
            "key {key} kept its debt"
        );
        assert!(!limiter
            .with_quota(deep)
            .check_n(&key, deep.limit())
            .is_allowed());
    }
    assert_eq!(limiter.len(), limiter.capacity());
    limiter.check_invariants().unwrap();
}

#[test]
fn stats_count_keys_and_each_kind_of_eviction() {
    let (limiter, clock, _) = full_bucket(WhenFull::Evict);
    let s: Stats = limiter.stats();
    assert_eq!(s.keys, limiter.capacity());
    assert_eq!(
        (
            s.forced_evictions,
            s.recovered_evictions,
            s.turned_away,
            s.admitted_untracked
        ),
        (0, 0, 0, 0)
    );
    let _ = limiter.check(&10); // forced: evicts key 1
    clock.advance(Duration::from_secs(100)); // everyone recovers
    let _ = limiter.check(&11); // recovered
    let _ = limiter.check(&12); // recovered
    let stats = limiter.stats();
    assert_eq!(
        (
            stats.keys,
            stats.forced_evictions,
            stats.recovered_evictions,
            stats.turned_away,
            stats.admitted_untracked
        ),
        (limiter.capacity(), 1, 2, 0, 0)
    );
    assert!(format!("{limiter:?}").contains("forced_evictions: 1"));
}

/// Without `Builder::huge_pages`, a fixed table asks for huge pages from 8 MiB (65,536
/// buckets of 128 bytes, 458,752 slots) and a growable one never does, whatever its size.
#[test]
fn by_default_a_fixed_table_of_8_mib_or_more_asks_for_huge_pages_and_a_growable_one_does_not() {
    let kernel_has_them = cfg!(target_os = "linux")
        && std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
    let fixed = |slots: usize| {
        Limiter::<u64>::builder(ten_per_second())
            .capacity(slots)
            .build()
            .unwrap()
    };
    let below = fixed(458_752 - 7);
    assert_eq!(below.capacity() / 7 * 128, (8 << 20) - 128);
    assert!(!below.stats().huge_pages, "a table under 8 MiB was advised");
    let from = fixed(458_752);
    assert_eq!(from.capacity() / 7 * 128, 8 << 20);
    assert_eq!(from.stats().huge_pages, kernel_has_them, "a table of 8 MiB");
    let growable = Limiter::<u64>::builder(ten_per_second())
        .capacity(1_000_000)
        .max_capacity(2_000_000)
        .build()
        .unwrap();
    assert!(!growable.stats().huge_pages, "a growable table was advised");
    for limiter in [&below, &from, &growable] {
        assert!(limiter.check_at(&7, at(0)).is_allowed());
    }
}

/// `Stats::huge_pages` says whether the kernel took the advice `Builder::huge_pages` asks it:
/// never when it was not asked, and, on Linux, for a table of many pages, exactly when the
/// kernel has transparent huge pages (its `sysfs` directory exists), for a fixed table and a
/// growable one alike. The table works the same either way.
#[test]
fn stats_say_whether_the_kernel_took_the_huge_pages_advice() {
    let build = |huge: bool, growable: bool| {
        let builder = Limiter::<u64>::builder(ten_per_second())
            .capacity(if growable { 1_024 } else { 200_000 })
            .huge_pages(huge);
        let builder = if growable {
            builder.max_capacity(200_000)
        } else {
            builder
        };
        builder.build().unwrap()
    };
    let kernel_has_them = cfg!(target_os = "linux")
        && std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
    for growable in [false, true] {
        assert!(!build(false, growable).stats().huge_pages, "not asked for");
        let limiter = build(true, growable);
        assert_eq!(
            limiter.stats().huge_pages,
            kernel_has_them,
            "a table of {} bytes (growable: {growable})",
            limiter.memory_bytes()
        );
        assert!(limiter.check_at(&7, at(0)).is_allowed());
        assert_eq!(limiter.len(), 1);
    }
}
