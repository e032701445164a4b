//! Reserve-then-settle: an estimate charged now, settled with the actual cost later. Single
//! thread behaviour on a manual clock, then contention on one hot key with a frozen clock, where
//! the funnel must end holding exactly the sum of the actual costs.

use funnel_testkit::rng;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::{Limiter, Quota, Settled, WhenFull};
use rng::Rng;

const S: u64 = 1_000_000_000;

fn limiter(per_second: u64) -> (Limiter<str, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(Quota::per_second(per_second).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    (limiter, clock)
}

/// Units the key's funnel holds now, from its reset time (whole units only here).
fn held(limiter: &Limiter<str, ManualClock>, key: &str, t: u64) -> u64 {
    let ns = limiter.peek(key).reset_after().as_nanos() as u64;
    assert_eq!(ns % t, 0, "a partial unit");
    ns / t
}

#[test]
fn settling_less_gives_back_exactly_the_unused_units_on_a_frozen_clock() {
    let (limiter, _) = limiter(10);
    let r = limiter.reserve("k", 6);
    assert_eq!((r.is_allowed(), r.charged()), (true, 6));
    assert_eq!(limiter.settle("k", r, 2), Ok(Settled::Refunded));
    assert_eq!(limiter.peek("k").remaining(), 8);
    let r = limiter.reserve("k", 8);
    assert_eq!(limiter.settle("k", r, 8), Ok(Settled::Exact));
    assert_eq!(limiter.peek("k").remaining(), 0);
}

#[test]
fn settling_more_is_a_debt_beyond_the_limit_that_later_requests_wait_for() {
    let (limiter, clock) = limiter(10); // T = 100 ms, limit 10
    let r = limiter.reserve("k", 5);
    assert_eq!(limiter.settle("k", r, 30), Ok(Settled::Charged));
    assert_eq!(held(&limiter, "k", S / 10), 30);
    let d = limiter.check("k");
    assert!(!d.is_allowed());
    // 30 units held, room for 10: the next one fits once 21 have leaked.
    assert_eq!(d.retry_after(), Some(Duration::from_millis(2_100)));
    clock.advance(Duration::from_millis(2_099));
    assert!(!limiter.check("k").is_allowed());
    clock.advance(Duration::from_millis(1));
    assert!(limiter.check("k").is_allowed());
}

#[test]
fn a_settle_down_gives_back_only_what_has_not_leaked_away() {
    let (limiter, clock) = limiter(1); // T = 1 s
    let quota = Quota::per_second(1).unwrap().with_limit(10).unwrap();
    let now = |c: &ManualClock| funnel::Clock::now(c);
    let r = limiter.with_quota(quota).reserve_at("k", 10, now(&clock));
    assert!(r.is_allowed());
    clock.advance(Duration::from_secs(5)); // 5 of the 10 units have leaked
                                           // Another request takes a unit on top of the 5 still held.
    assert!(limiter.with_quota(quota).check_n("k", 1).is_allowed());
    // The estimate was 10, nothing was used: only the 5 unleaked units come back, so the other
    // request's unit stays charged (a plain refund of 10 would have taken it too).
    assert_eq!(
        limiter.settle_at("k", r, 0, now(&clock)),
        Ok(Settled::Refunded)
    );
    assert_eq!(limiter.with_quota(quota).check_n("k", 0).remaining(), 9);
    // Once the estimate has leaked completely, nothing is left to give back.
    let r = limiter.with_quota(quota).reserve_at("j", 3, now(&clock));
    clock.advance(Duration::from_secs(3));
    assert_eq!(
        limiter.settle_at("j", r, 1, now(&clock)),
        Ok(Settled::NothingToRefund)
    );
}

#[test]
fn a_denied_reservation_charges_nothing_and_settles_its_actual_as_a_debt() {
    let (limiter, _) = limiter(2);
    let r = limiter.reserve("k", 3);
    assert!(!r.is_allowed());
    assert_eq!(r.charged(), 0);
    assert!(r.decision().cost_exceeds_limit());
    assert_eq!(limiter.peek("k").remaining(), 2);
    // Settled with what it charged (nothing): nothing to do. Settled with 1 used after all
    // (a second reservation, as one settles once): a debt.
    assert_eq!(limiter.settle("k", r, 0), Ok(Settled::Exact));
    let r = limiter.reserve("k", 3);
    assert_eq!(limiter.settle("k", r, 1), Ok(Settled::Charged));
    assert_eq!(limiter.peek("k").remaining(), 1);
}

#[test]
fn a_debt_for_an_untracked_key_in_a_full_table_is_reported_lost() {
    let clock = ManualClock::new();
    let limiter = Limiter::<u64>::builder(Quota::per_minute(1).unwrap())
        .capacity(8)
        .clock(clock)
        .when_full(WhenFull::Deny)
        .build()
        .unwrap();
    let mut k = 0;
    // Fill every slot with a funnel in debt.
    while limiter.check(&k).is_allowed() {
        k += 1;
    }
    let r = limiter.reserve(&k, 1);
    assert!(!r.is_allowed());
    assert_eq!(limiter.settle(&k, r, 1), Ok(Settled::Lost));
    // A tracked key's debt is kept.
    let r = limiter.reserve(&0, 0);
    assert_eq!(limiter.settle(&0, r, 5), Ok(Settled::Charged));
}

/// Four threads reserve random estimates on one hot key and settle each admitted one with a
/// random actual cost: at most the estimate (`up = false`) or up to twice it. The clock is
/// frozen, so every settle-down gives back exactly its unused units and every settle-up charges
/// exactly its extra: the funnel ends holding exactly the sum of the actual costs.
fn contend(up: bool, seed: u64) -> (u64, u64) {
    const THREADS: u64 = 4;
    const LIMIT: u64 = 1_000;
    let (limiter, _) = limiter(LIMIT);
    let actual_total = AtomicU64::new(0);
    let admitted = AtomicU64::new(0);
    let barrier = Barrier::new(THREADS as usize);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (limiter, actual_total, admitted, barrier) =
                (&limiter, &actual_total, &admitted, &barrier);
            s.spawn(move || {
                let mut rng = Rng::new(seed * 100 + t);
                barrier.wait();
                for _ in 0..2_000 {
                    let estimate = rng.between(1, 4);
                    let r = limiter.reserve("hot", estimate);
                    if !r.is_allowed() {
                        continue;
                    }
                    let actual = rng.between(0, if up { 2 * estimate } else { estimate });
                    let settled = limiter.settle("hot", r, actual).unwrap();
                    let want = match actual.cmp(&estimate) {
                        std::cmp::Ordering::Less => Settled::Refunded,
                        std::cmp::Ordering::Equal => Settled::Exact,
                        std::cmp::Ordering::Greater => Settled::Charged,
                    };
                    assert_eq!(settled, want);
                    // Relaxed: read only after the scope joins every thread.
                    actual_total.fetch_add(actual, Ordering::Relaxed);
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let total = actual_total.into_inner();
    assert_eq!(held(&limiter, "hot", S / LIMIT), total, "seed {seed}");
    (total, admitted.into_inner())
}

#[test]
fn settle_downs_under_contention_leave_exactly_the_actual_costs() {
    for seed in 0..3 {
        let (total, admitted) = contend(false, seed);
        assert!(total <= 1_000, "seed {seed}: {total} units used of 1,000");
        // Refunds made room: more reservations passed than the limit holds estimates.
        assert!(admitted > 400, "seed {seed}: only {admitted} admitted");
    }
}

#[test]
fn settle_ups_under_contention_keep_every_debt() {
    for seed in 0..3 {
        let (total, _) = contend(true, seed);
        assert!(total > 0, "seed {seed}");
    }
}
