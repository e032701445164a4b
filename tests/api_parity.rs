//! The calls users expect on every limiter type: the single-key counters (`Funnel`,
//! `FixedWindow`, `SlidingWindow`) all take the caller's time, peek at it, reset and show their
//! clock; `LiveLimiter` has the default clock and `check_at` as `Limiter` does.

use std::time::Duration;

use funnel::clock::{Clock, ManualClock};
use funnel::window::{FixedWindow, FixedWindowQuota, SlidingWindow, SlidingWindowQuota};
use funnel::{Funnel, Limiter, LiveLimiter, Quota, Timestamp};

const MS: u64 = 1_000_000;

#[test]
fn single_key_counters_take_the_callers_time_peek_and_reset() {
    let clock = ManualClock::new();
    let f = Funnel::with_clock(Quota::per_second(2).unwrap(), clock.clone());
    let fixed = FixedWindow::with_clock(FixedWindowQuota::per_second(2).unwrap(), clock.clone());
    let sliding =
        SlidingWindow::with_clock(SlidingWindowQuota::per_second(2).unwrap(), clock.clone());
    // The clock they read is the one they were given.
    clock.advance(Duration::from_millis(5));
    assert_eq!(f.clock().now(), clock.now());
    assert_eq!(fixed.clock().now(), clock.now());
    assert_eq!(sliding.clock().now(), clock.now());
    // Two requests at the caller's time use the limit; a peek there charges nothing.
    let now = Timestamp::from_nanos(10 * MS).unwrap();
    for (name, check, peek, reset) in [
        (
            "funnel",
            &(|t| f.check_at(t)) as &dyn Fn(Timestamp) -> funnel::Decision,
            &(|t| f.peek_at(t)) as &dyn Fn(Timestamp) -> funnel::Decision,
            &(|| f.reset()) as &dyn Fn(),
        ),
        (
            "fixed",
            &|t| fixed.check_at(t),
            &|t| fixed.peek_at(t),
            &|| fixed.reset(),
        ),
        (
            "sliding",
            &|t| sliding.check_at(t),
            &|t| sliding.peek_at(t),
            &|| sliding.reset(),
        ),
    ] {
        assert_eq!(peek(now).remaining(), 2, "{name}");
        assert!(check(now).is_allowed(), "{name}");
        assert!(check(now).is_allowed(), "{name}");
        assert_eq!(peek(now).remaining(), 0, "{name}");
        assert!(!check(now).is_allowed(), "{name}");
        reset();
        assert_eq!(peek(now).remaining(), 2, "{name}: reset empties it");
        assert!(check(now).is_allowed(), "{name}");
    }
}

#[test]
fn live_limiter_has_the_default_clock_and_check_at() {
    // `LiveLimiter<str>` names the default clock, as `Limiter<str>` does.
    let live: LiveLimiter<str> = LiveLimiter::new(Limiter::new(Quota::per_second(1).unwrap()));
    let now = live.limiter().now();
    assert!(live.check_at("a", now).is_allowed());
    assert!(!live.check_at("a", now).is_allowed());
    assert!(live.check_at("b", now).is_allowed());
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
    assert!(live.check(&Opaque(1)).is_allowed());
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
            batched.check_batch_at(&keys, now, &mut out);
            let expected: Vec<_> = keys.iter().map(|k| single.check_at(k, now)).collect();
            assert_eq!(out, expected, "capacity {capacity}, round {round}");
            assert!(out.iter().any(|d| !d.is_allowed()), "some keys are limited");
        }
    }
}
