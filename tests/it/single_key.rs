//! The single-key limiters, [`funnel::Funnel`] and [`funnel::window::Counter`] of either
//! window algorithm: each takes the caller's time, peeks at it, resets and shows its clock.

use std::time::Duration;

use funnel::clock::{Clock, ManualClock};
use funnel::window::{Counter, FixedWindowQuota, SlidingWindowQuota};
use funnel::{Funnel, Quota, Timestamp};

const MS: u64 = 1_000_000;

#[test]
fn single_key_counters_take_the_callers_time_peek_and_reset() {
    let clock = ManualClock::new();
    let f = Funnel::with_clock(Quota::per_second(2).unwrap(), clock.clone());
    let fixed = Counter::with_clock(FixedWindowQuota::per_second(2).unwrap(), clock.clone());
    let sliding = Counter::with_clock(SlidingWindowQuota::per_second(2).unwrap(), clock.clone());
    // The clock they read is the one they were given, as `now()` says.
    clock.advance(Duration::from_millis(5));
    let t = clock.now();
    assert_eq!((f.now(), f.clock().now()), (t, t));
    assert_eq!((fixed.now(), fixed.clock().now()), (t, t));
    assert_eq!((sliding.now(), sliding.clock().now()), (t, t));
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
