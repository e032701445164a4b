//! Refunds under contention, on a frozen clock: threads charge a few hot keys and give back
//! parts of their own charges while the others charge and refund the same keys. Every refund
//! of units a thread still holds finds them (the funnel holds at least every thread's
//! outstanding charges), and each key ends holding exactly the units admitted minus the units
//! refunded: a refund that lost a concurrent charge, or gave back more than it was asked, would
//! show in the key's remaining units. Then refunds far larger than the funnels race each other:
//! every funnel stops at fresh, never below.

use funnel_testkit::rng;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;

use funnel::clock::ManualClock;
use funnel::{Limiter, Quota, Timestamp};
use rng::Rng;

const THREADS: u64 = 4;
const KEYS: u64 = 3;
const LIMIT: u64 = 50;
/// The emission interval of `LIMIT` per second.
const T: u64 = 1_000_000_000 / LIMIT;
/// Where the frozen clock stands: far from zero, so that a funnel left below fresh (an
/// arrival time before now) shows in a peek at time zero.
const NOW: u64 = 10_000_000_000;

fn limiter(seed: u64) -> Limiter<u64, ManualClock> {
    Limiter::builder(Quota::per_second(LIMIT).unwrap())
        .capacity(64)
        .clock(ManualClock::starting_at(
            Timestamp::from_nanos(NOW).unwrap(),
        ))
        .seed(seed)
        .build()
        .unwrap()
}

/// `key`'s arrival time: a peek's reset time is `TAT - now`, so a peek at time zero reads it
/// exactly, below now included.
fn arrival_time(limiter: &Limiter<u64, ManualClock>, key: u64) -> u64 {
    limiter
        .peek_at(&key, Timestamp::ZERO)
        .reset_after()
        .as_nanos() as u64
}

/// Per key: units admitted, units refunded (counted by the threads), requests denied.
#[derive(Default)]
struct Counts {
    admitted: AtomicU64,
    refunded: AtomicU64,
    denied: AtomicU64,
}

/// Each thread does `ops` operations on random hot keys: three times in five a charge of 1 to 3
/// units, otherwise a refund of 1 to 3 of the units it still holds on the key (if any). The
/// charges outweigh the refunds, so the keys sit at their limit: charges are denied there and
/// refunds make room again.
fn charge_and_refund(limiter: &Limiter<u64, ManualClock>, ops: u64, seed: u64) -> Vec<Counts> {
    let counts: Vec<Counts> = (0..KEYS).map(|_| Counts::default()).collect();
    let barrier = Barrier::new(THREADS as usize);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (counts, barrier) = (&counts, &barrier);
            s.spawn(move || {
                let mut rng = Rng::new(seed * 1_000 + t);
                let mut mine = [0u64; KEYS as usize];
                barrier.wait();
                for _ in 0..ops {
                    let key = rng.below(KEYS);
                    let held = &mut mine[key as usize];
                    let c = &counts[key as usize];
                    if *held == 0 || rng.chance(3, 5) {
                        let n = rng.between(1, 3);
                        // Relaxed (every counter here): read only after the scope joins.
                        if limiter.check_n(&key, n).is_allowed() {
                            *held += n;
                            c.admitted.fetch_add(n, Ordering::Relaxed);
                        } else {
                            c.denied.fetch_add(1, Ordering::Relaxed);
                        }
                    } else {
                        let n = rng.between(1, (*held).min(3));
                        assert!(
                            limiter.refund(&key, n),
                            "seed {seed}: a refund of {n} of the {held} units this thread \
                             holds on key {key} found nothing to give back"
                        );
                        *held -= n;
                        c.refunded.fetch_add(n, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    counts
}

#[test]
fn charges_and_refunds_under_contention_leave_exactly_the_admitted_minus_the_refunded_units() {
    for seed in 0..4 {
        let limiter = limiter(seed);
        let counts = charge_and_refund(&limiter, 50_000, seed);
        for (key, c) in (0..KEYS).zip(&counts) {
            let admitted = c.admitted.load(Ordering::Relaxed);
            let refunded = c.refunded.load(Ordering::Relaxed);
            let denied = c.denied.load(Ordering::Relaxed);
            let held = admitted - refunded;
            assert!(held <= LIMIT, "seed {seed}, key {key}: {held} units held");
            assert_eq!(
                arrival_time(&limiter, key),
                NOW + held * T,
                "seed {seed}, key {key}: admitted {admitted}, refunded {refunded}"
            );
            assert_eq!(limiter.peek(&key).remaining(), LIMIT - held);
            // The race the test is for happened: the keys sat at their limit (denials) while
            // refunds made room again.
            assert!(
                denied > 2_000,
                "seed {seed}, key {key}: only {denied} denied"
            );
            assert!(
                refunded > 5_000,
                "seed {seed}, key {key}: {refunded} refunded"
            );
        }
        limiter.check_invariants().unwrap();
    }
}

#[test]
fn concurrent_refunds_larger_than_the_funnel_stop_at_a_fresh_funnel() {
    let limiter = limiter(9);
    for key in 0..KEYS {
        assert!(limiter.check_n(&key, LIMIT).is_allowed());
    }
    let barrier = Barrier::new(THREADS as usize);
    let gave_back = AtomicU64::new(0);
    thread::scope(|s| {
        for _ in 0..THREADS {
            let (limiter, barrier, gave_back) = (&limiter, &barrier, &gave_back);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..1_000 {
                    for key in 0..KEYS {
                        // A charge, then a refund larger than the whole funnel, which may
                        // land before or after the other threads' charges.
                        let _ = limiter.check(&key);
                        if limiter.refund(&key, 2 * LIMIT) {
                            // Relaxed: read after the join.
                            gave_back.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    assert!(gave_back.into_inner() >= KEYS);
    for key in 0..KEYS {
        // Fresh, not below: the arrival time is now, exactly.
        assert_eq!(arrival_time(&limiter, key), NOW, "key {key}");
        assert_eq!(limiter.peek(&key).remaining(), LIMIT);
        assert!(limiter.check_n(&key, LIMIT).is_allowed());
        assert!(!limiter.check(&key).is_allowed());
    }
}
