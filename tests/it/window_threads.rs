//! The single-key window counters under contention, on a frozen clock: four threads together
//! get exactly the limit in each window, and the sliding counter exactly what its estimate
//! leaves once the previous window's count is weighed in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::window::{Counter, FixedWindowQuota, SlidingWindowQuota};
use funnel::Decision;

const THREADS: usize = 4;

/// Every thread makes `attempts` requests of `n` units at once; returns the units admitted.
fn contend(attempts: u64, n: u64, check: impl Fn(u64) -> Decision + Sync) -> u64 {
    let admitted = AtomicU64::new(0);
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for _ in 0..THREADS {
            let (admitted, barrier, check) = (&admitted, &barrier, &check);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..attempts {
                    if check(n).is_allowed() {
                        // Relaxed: read after the scope joins.
                        admitted.fetch_add(n, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    admitted.into_inner()
}

#[test]
fn a_fixed_window_admits_exactly_its_limit_per_window_under_contention() {
    let clock = ManualClock::new();
    let w = Counter::with_clock(FixedWindowQuota::per_second(10_000).unwrap(), clock.clone());
    for window in 0..4 {
        assert_eq!(
            contend(5_000, 1, |n| w.check_n(n)),
            10_000,
            "window {window}"
        );
        assert_eq!(w.peek().remaining(), 0);
        clock.advance(Duration::from_secs(1));
    }
    // Requests of 3 units: 3,333 of them fill 9,999; the last unit stays free.
    assert_eq!(contend(1_000, 3, |n| w.check_n(n)), 9_999);
    assert_eq!(w.peek().remaining(), 1);
}

#[test]
fn a_sliding_window_admits_exactly_what_its_estimate_leaves_under_contention() {
    let clock = ManualClock::new();
    let w = Counter::with_clock(
        SlidingWindowQuota::per_period(10_000, Duration::from_secs(10)).unwrap(),
        clock.clone(),
    );
    assert_eq!(contend(5_000, 1, |n| w.check_n(n)), 10_000);
    // 2.5 s into the next window the previous 10,000 weigh 7,500: 2,500 more fit.
    clock.advance(Duration::from_millis(12_500));
    assert_eq!(contend(5_000, 1, |n| w.check_n(n)), 2_500);
    // 5 s later: 10,000 * 0.25 + 2,500 = 5,000 in use, 5,000 more fit.
    clock.advance(Duration::from_secs(5));
    assert_eq!(contend(5_000, 1, |n| w.check_n(n)), 5_000);
    assert_eq!(w.peek().remaining(), 0);
}
