//! `LiveLimiter`'s operations other than decisions (peeks, refunds, reserve-then-settle) under
//! the live quota or a key's own, never under the quota the wrapped limiter was built with;
//! and refunds racing a quota change.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::{Clock, Limiter, LiveLimiter, Quota, Settled, Timestamp};

const MS: u64 = 1_000_000;

/// Built with 1 per second (T = 1 s, limit 1), then switched to 4 per second with a limit of 8
/// (T = 250 ms): any answer under the built quota is visibly different.
fn live() -> LiveLimiter<str, ManualClock> {
    let limiter = Limiter::builder(Quota::per_second(1).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let live = LiveLimiter::new(limiter);
    live.set_quota(live_quota());
    live
}

fn live_quota() -> Quota {
    Quota::per_second(4).unwrap().with_limit(8).unwrap()
}

/// A premium key's own quota: the live one with ten times the limit.
fn premium(key: &str, q: Quota) -> Quota {
    if key.starts_with("vip:") {
        q.with_limit(10 * q.limit()).unwrap()
    } else {
        q
    }
}

#[test]
fn a_peek_answers_under_the_live_quota_and_charges_nothing() {
    let live = live();
    assert!(live.current().check_n("k", 3).is_allowed());
    let d = live.current().peek("k");
    assert_eq!((d.limit(), d.remaining()), (8, 5));
    assert_eq!(d.reset_after(), Duration::from_millis(750));
    assert_eq!(live.current().peek("k"), d, "a peek charged something");
    assert_eq!(live.current().peek("absent").remaining(), 8);
    assert_eq!(live.limiter().len(), 1, "a peek created a key");
    let now = live.limiter().now();
    assert_eq!(live.current().peek_at("k", now), d);
    let vip = "vip:ada";
    assert_eq!(
        live.limiter()
            .with_quota(premium(vip, *live.current().quota()))
            .peek(vip)
            .remaining(),
        80
    );
}

#[test]
fn a_refund_gives_back_units_of_the_live_quota_not_of_the_built_one() {
    let live = live();
    assert!(live.current().check_n("k", 8).is_allowed());
    assert!(!live.current().check("k").is_allowed());
    assert!(live.current().refund("k", 2)); // 2 × 250 ms, not 2 × 1 s
    assert_eq!(live.current().peek("k").remaining(), 2);
    assert_eq!(
        live.current().peek("k").reset_after(),
        Duration::from_millis(1_500)
    );
    // What the audit found: the wrapped limiter's own refund uses the built quota, 1 s a unit.
    assert!(live.limiter().refund("k", 1));
    assert_eq!(
        live.current().peek("k").reset_after(),
        Duration::from_millis(500)
    );
    // Never below a fresh funnel.
    assert!(live.current().refund("k", 100));
    assert_eq!(live.current().peek("k").remaining(), 8);
    assert!(!live.current().refund("k", 1), "nothing left to give back");
    assert!(!live.current().refund("absent", 1));
}

#[test]
fn a_premium_key_refunds_and_reserves_under_its_own_quota() {
    let live = live();
    let vip = "vip:ada";
    let own = || {
        live.limiter()
            .with_quota(premium(vip, *live.current().quota()))
    };
    assert!(own().check_n(vip, 80).is_allowed());
    assert!(!own().check_n(vip, 1).is_allowed());
    assert!(own().refund(vip, 5));
    assert_eq!(own().peek(vip).remaining(), 5);
    let r = own().reserve(vip, 5);
    assert!(r.is_allowed());
    assert_eq!(r.quota().limit(), 80);
    assert_eq!(live.limiter().settle(vip, r, 2), Ok(Settled::Refunded));
    assert_eq!(own().peek(vip).remaining(), 3);
    // The same key under the default quota would have been over its limit all along.
    assert!(!live.current().peek("vip:ada").is_allowed());
}

#[test]
fn a_reservation_is_settled_under_the_quota_it_was_reserved_under_after_a_change() {
    let live = live();
    let r = live.current().reserve("k", 6); // 6 × 250 ms = 1.5 s
    assert!(r.is_allowed());
    assert_eq!(*r.quota(), live_quota());
    assert_eq!(r.decision().remaining(), 2);
    // The quota changes while the request is served: 10 per second, limit 20, T = 100 ms.
    live.set_quota(Quota::per_second(10).unwrap().with_limit(20).unwrap());
    // 1.5 s of debt is 15 units now.
    assert_eq!(live.current().peek("k").remaining(), 5);
    // Settling 2 gives back the 4 unused units as the 1 s they took, not as 4 × 100 ms.
    assert_eq!(live.limiter().settle("k", r, 2), Ok(Settled::Refunded));
    assert_eq!(
        live.current().peek("k").reset_after(),
        Duration::from_millis(500)
    );
    assert_eq!(live.current().peek("k").remaining(), 15);
    // Settling more charges the extra at the reservation's rate too.
    let r = live.current().reserve("j", 1); // 100 ms
    live.set_quota(live_quota()); // 250 ms a unit from now on
    assert_eq!(live.limiter().settle("j", r, 4), Ok(Settled::Charged)); // 3 more at 100 ms
    assert_eq!(
        live.current().peek("j").reset_after(),
        Duration::from_millis(400)
    );
    let now = live.limiter().now();
    let r = live.current().reserve_at("j", 1, now); // 250 ms
    assert_eq!(live.limiter().settle_at("j", r, 1, now), Ok(Settled::Exact));
    assert_eq!(
        live.current().peek("j").reset_after(),
        Duration::from_millis(650)
    );
}

#[test]
fn a_refund_at_the_charges_own_quota_gives_back_exactly_its_time_across_a_change() {
    let live = live();
    let charged_under = *live.current().quota();
    let now = live.limiter().now();
    assert!(live
        .limiter()
        .with_quota(charged_under)
        .check_n_at("k", 4, now)
        .is_allowed());
    live.set_quota(Quota::per_second(1).unwrap().with_limit(2).unwrap());
    // 2 units of the quota charged under: 500 ms of the 1 s charged.
    assert!(live
        .limiter()
        .with_quota(charged_under)
        .refund_at("k", 2, now));
    assert_eq!(
        live.current().peek("k").reset_after(),
        Duration::from_millis(500)
    );
    // 1 unit of the live quota is a whole second: more than is left.
    assert!(live.current().refund("k", 1));
    assert_eq!(live.current().peek("k").reset_after(), Duration::ZERO);
}

/// Four threads each charge and refund their own keys and a shared hot key while a writer
/// switches the quota between two with the same emission interval and different limits, on a
/// frozen clock: refunds are in units of the live quota, whose interval never changes here, so
/// every key ends holding exactly what was admitted minus what was refunded, whatever limit
/// each decision saw.
#[test]
fn refunds_under_a_changing_limit_leave_exactly_the_admitted_minus_the_refunded_units() {
    const THREADS: u64 = 4;
    let base = Quota::per_second(1_000).unwrap(); // T = 1 ms
    let (narrow, wide) = (base.with_limit(40).unwrap(), base.with_limit(60).unwrap());
    let clock = ManualClock::starting_at(Timestamp::from_nanos(5_000 * MS).unwrap());
    let live = LiveLimiter::new(
        Limiter::<str>::builder(narrow)
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let held = AtomicU64::new(0);
    let barrier = Barrier::new(THREADS as usize + 1);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (live, held, barrier) = (&live, &held, &barrier);
            s.spawn(move || {
                let mut mine = 0u64;
                barrier.wait();
                for i in 0..20_000u64 {
                    if (i + t) % 3 == 2 && mine > 0 {
                        assert!(live.current().refund("hot", 1));
                        mine -= 1;
                    } else if live.current().check("hot").is_allowed() {
                        mine += 1;
                    }
                }
                // Relaxed: read after the scope joins.
                held.fetch_add(mine, Ordering::Relaxed);
            });
        }
        barrier.wait();
        for i in 0..2_000 {
            live.set_quota(if i % 2 == 0 { wide } else { narrow });
            thread::yield_now();
        }
    });
    let held = held.into_inner();
    assert!(held <= 60);
    assert_eq!(
        live.current().peek_at("hot", Timestamp::ZERO).reset_after(),
        Duration::from_nanos(clock.now().as_nanos() + held * MS)
    );
}

#[test]
fn live_limiter_has_the_default_clock_and_check_at() {
    // `LiveLimiter<str>` names the default clock, as `Limiter<str>` does.
    let live: LiveLimiter<str> = LiveLimiter::new(Limiter::new(Quota::per_second(1).unwrap()));
    let now = live.limiter().now();
    assert!(live.current().check_at("a", now).is_allowed());
    assert!(!live.current().check_at("a", now).is_allowed());
    assert!(live.current().check_at("b", now).is_allowed());
}

/// A key and a clock without `Debug`.
#[derive(Hash)]
struct Opaque(u64);
struct Stopped;
impl Clock for Stopped {
    fn now(&self) -> Timestamp {
        Timestamp::ZERO
    }
}

#[test]
fn live_limiter_debug_needs_no_debug_key_or_clock() {
    let live = LiveLimiter::new(
        Limiter::<Opaque>::builder(Quota::per_second(1).unwrap())
            .clock(Stopped)
            .build()
            .unwrap(),
    );
    assert!(live.current().check(&Opaque(1)).is_allowed());
    // This line compiles only if `LiveLimiter`'s `Debug` asks nothing of `Opaque` and `Stopped`.
    assert!(format!("{live:?}").starts_with("LiveLimiter"));
}

#[test]
fn live_limiter_batches_decide_as_its_single_calls_under_the_current_quota() {
    // A small table (decided key by key) and one past the caches' threshold (look-ahead).
    for capacity in [1_000, 200_000] {
        let live = |clock: &ManualClock| -> LiveLimiter<u64, ManualClock> {
            LiveLimiter::new(
                Limiter::builder(Quota::per_second(2).unwrap())
                    .capacity(capacity)
                    .clock(clock.clone())
                    .seed(9)
                    .build()
                    .unwrap(),
            )
        };
        let clock = ManualClock::new();
        let (batched, single) = (live(&clock), live(&clock));
        let keys: Vec<u64> = (0..5_000u64).map(|i| (i * 7_919) % 1_500).collect();
        let mut out = Vec::new();
        for round in 0..3u64 {
            if round == 1 {
                // The live quota changes between batches; the batch takes the new one.
                let q = Quota::per_second(5).unwrap();
                batched.set_quota(q);
                single.set_quota(q);
            }
            let now = Timestamp::from_nanos(round * 100 * MS).unwrap();
            out.clear();
            batched.current().check_batch_at(&keys, now, &mut out);
            let expected: Vec<_> = keys
                .iter()
                .map(|k| single.current().check_at(k, now))
                .collect();
            assert_eq!(out, expected, "capacity {capacity}, round {round}");
            assert!(out.iter().any(|d| !d.is_allowed()), "some keys are limited");
        }
    }
}
