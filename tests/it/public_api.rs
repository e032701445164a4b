//! The 0.1 API as a new user writes it: the natural quota constructors, CL.THROTTLE's behind
//! its named doors, builders without a turbofish for the algorithm, the near-limit signal with
//! no trait to import, reservations bound to their key and limiter, and what a peek and a
//! zero-cost `check_all` entry answer on a key in debt beyond its tolerance.

use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::window::{FixedWindowQuota, SlidingWindowQuota};
use funnel::{
    check_all, Charge, Error, FixedWindowLimiter, Limiter, LiveLimiter, Outcome, Quota, Settled,
    SlidingWindowLimiter,
};

fn manual(quota: Quota) -> Limiter<str, ManualClock> {
    Limiter::<str>::builder(quota)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

/// The program of the issue's "How it will be checked", as one function using `?`.
fn program() -> Result<(), Error> {
    // 10 per second, bursts of 20.
    let per_second = Quota::per_second(10)?.with_limit(20)?;
    assert_eq!(per_second.limit(), 20);
    assert_eq!(per_second.emission_interval(), Duration::from_millis(100));

    // CL.THROTTLE's 15 30 60: limit 16, one unit every 2 s; the Duration door agrees.
    let cl = Quota::from_cl_throttle(15, 30, 60)?;
    assert_eq!((cl.limit(), cl.max_burst()), (16, 15));
    assert_eq!(cl.emission_interval(), Duration::from_secs(2));
    assert_eq!(
        Quota::from_cl_throttle_period(15, 30, Duration::from_secs(60))?,
        cl
    );
    assert_eq!(cl, Quota::per_minute(30)?.with_limit(16)?);

    // The window algorithm follows the quota's type.
    let windows = Limiter::<str>::builder(FixedWindowQuota::per_minute(100)?).build()?;
    let d = windows.check("alice");
    assert_eq!((d.limit(), d.remaining()), (100, 99));
    let fixed: FixedWindowLimiter<str> =
        Limiter::<str>::builder(FixedWindowQuota::per_second(3)?).build()?;
    assert!(fixed.check_n("k", 3).is_allowed());
    assert!(!fixed.check("k").is_allowed());
    let sliding: SlidingWindowLimiter<u64> =
        Limiter::<u64>::builder(SlidingWindowQuota::per_hour(5)?).build()?;
    assert_eq!(sliding.check(&1).remaining(), 4);

    // The near-limit signal is inherent on `Decision`.
    let limiter = Limiter::<str>::new(per_second);
    let near: Vec<bool> = (0..20)
        .map(|_| limiter.check("k").is_near_limit(80))
        .collect();
    // Requests 16..=20 leave 4, 3, 2, 1, 0 of 20: at least 80% in use.
    assert_eq!(near.iter().filter(|n| **n).count(), 5);
    assert!(near[15] && !near[14]);
    Ok(())
}

#[test]
fn the_issue_program_compiles_and_behaves_as_documented() {
    program().unwrap();
}

#[test]
fn window_quotas_report_the_one_error_type() {
    assert_eq!(FixedWindowQuota::per_minute(0), Err(Error::ZeroLimit));
    assert!(matches!(
        FixedWindowQuota::per_second(1 << 22),
        Err(Error::WindowLimitTooLarge { max: 4_194_303, .. })
    ));
    assert!(matches!(
        SlidingWindowQuota::per_period(10, Duration::from_millis(999)),
        Err(Error::WindowTooShort { .. })
    ));
    assert!(matches!(
        SlidingWindowQuota::per_second(1 << 15),
        Err(Error::WindowLimitTooLarge { max: 32_767, .. })
    ));
    let e = FixedWindowQuota::per_hour(0).unwrap_err();
    assert!(e.to_string().contains("limit"), "{e}");
}

/// The issue's report: a reservation of "a" settled on "b" forgave "b" what it never reserved.
#[test]
fn a_reservation_settled_on_another_key_is_refused_and_changes_nothing() {
    let l = manual(Quota::per_second(10).unwrap());
    let r = l.reserve("a", 8);
    assert!(r.is_allowed());
    assert!(l.check_n("b", 8).is_allowed());
    let (a, b) = (l.peek("a"), l.peek("b"));
    assert_eq!(
        l.settle("b", r, 0),
        Err(Error::ReservationMismatch {
            another_limiter: false
        })
    );
    assert_eq!(
        (l.peek("a"), l.peek("b")),
        (a, b),
        "a refused settle changed a key"
    );
    // "b" admits 2 more against its limit of 10, not 10 more.
    assert!(l.check_n("b", 2).is_allowed());
    assert!(!l.check("b").is_allowed());
    // Its own key settles a reservation: "a" still holds the refused one's 8 units.
    let r = l.reserve("a", 2);
    assert_eq!(l.settle("a", r, 0), Ok(Settled::Refunded));
    assert_eq!(l.peek("a").remaining(), 2);
}

#[test]
fn a_reservation_settled_on_another_limiter_is_refused_and_changes_nothing() {
    let quota = Quota::per_second(10).unwrap();
    let (first, second) = (manual(quota), manual(quota));
    let r = first.reserve("k", 8);
    assert!(second.check_n("k", 8).is_allowed());
    let (before_first, before_second) = (first.peek("k"), second.peek("k"));
    assert_eq!(
        second.settle("k", r, 0),
        Err(Error::ReservationMismatch {
            another_limiter: true
        })
    );
    assert_eq!(first.peek("k"), before_first);
    assert_eq!(second.peek("k"), before_second);
    assert!(
        !second.check_n("k", 3).is_allowed(),
        "second forgave 8 units"
    );
    // A settle-up from another limiter would have charged a debt: refused as well.
    let r = first.reserve("j", 1);
    assert!(second.settle("j", r, 1_000).is_err());
    assert_eq!(second.peek("j").remaining(), 10);
    let e = Error::ReservationMismatch {
        another_limiter: true,
    };
    assert!(e.to_string().contains("another limiter"), "{e}");
}

#[test]
fn a_live_limiter_binds_reservations_to_its_own_table() {
    let live = LiveLimiter::new(manual(Quota::per_second(10).unwrap()));
    let other = LiveLimiter::new(manual(Quota::per_second(10).unwrap()));
    let r = live.current().reserve("k", 5);
    assert_eq!(
        other.limiter().settle("k", r, 0),
        Err(Error::ReservationMismatch {
            another_limiter: true
        })
    );
    let r = live.current().reserve("k", 5);
    assert_eq!(
        live.limiter().settle("j", r, 0),
        Err(Error::ReservationMismatch {
            another_limiter: false
        })
    );
    assert_eq!(
        live.current().peek("k").remaining(),
        0,
        "both reservations still charged"
    );
    // The live limiter and the limiter it wraps are one table: either settles.
    let r = live.current().reserve("m", 5);
    assert_eq!(live.limiter().settle("m", r, 0), Ok(Settled::Refunded));
    let r = live
        .limiter()
        .with_quota(Quota::per_second(1).unwrap())
        .reserve("n", 1);
    assert_eq!(live.limiter().settle("n", r, 0), Ok(Settled::Refunded));
}

/// A key pushed 5 units past its limit of 10 (T = 100 ms): a peek answers limited, with a
/// retry one emission interval shorter than a unit request's.
#[test]
fn a_peek_of_a_key_in_debt_beyond_the_tolerance_is_limited_one_interval_sooner() {
    let l = manual(Quota::per_second(10).unwrap());
    let r = l.reserve("k", 1);
    assert_eq!(l.settle("k", r, 15), Ok(Settled::Charged));
    let peek = l.peek("k");
    assert_eq!(peek.outcome(), Outcome::Limited);
    assert_eq!(peek.remaining(), 0);
    assert_eq!(peek.retry_after(), Some(Duration::from_millis(500)));
    assert_eq!(peek.reset_after(), Duration::from_millis(1_500));
    let unit = l.check("k");
    assert_eq!(unit.outcome(), Outcome::Limited);
    assert_eq!(
        unit.retry_after(),
        Some(Duration::from_millis(600)),
        "one emission interval more than the peek's"
    );
    assert_eq!(l.peek("k"), peek, "neither the peek nor the denial charged");
    // Once back within the tolerance the peek is allowed and the unit request still waits T.
    l.clock().advance(Duration::from_millis(500));
    assert!(l.peek("k").is_allowed());
    assert_eq!(l.check("k").retry_after(), Some(Duration::from_millis(100)));
    // The same through a view of the same quota.
    let view = l.with_quota(*l.quota());
    assert!(view.peek("k").is_allowed());
}

/// On the same key, a zero-cost `check_all` entry denies the whole request, and the other
/// entries' charges are rolled back.
#[test]
fn a_zero_cost_entry_on_a_key_in_debt_beyond_the_tolerance_denies_the_whole_request() {
    let clock = ManualClock::new();
    let build = |q: Quota| {
        Limiter::<str>::builder(q)
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    let (users, routes) = (
        build(Quota::per_second(10).unwrap()),
        build(Quota::per_second(100).unwrap()),
    );
    let r = users.reserve("ada", 1);
    assert_eq!(users.settle("ada", r, 15), Ok(Settled::Charged));
    let now = users.now();
    let d = check_all(&[routes.cost("/search", 1), users.cost("ada", 0)], now);
    assert!(!d.is_allowed());
    assert_eq!(d.denied_by(), Some(1));
    assert_eq!(
        d.decisions()[1].retry_after(),
        Some(Duration::from_millis(500)),
        "the peek's retry"
    );
    assert_eq!(routes.peek("/search").remaining(), 100, "rolled back");
    // Within the tolerance again, the zero-cost entry passes and charges nothing.
    clock.advance(Duration::from_millis(500));
    let d = check_all(
        &[routes.cost("/search", 1), users.cost("ada", 0)],
        users.now(),
    );
    assert!(d.is_allowed());
    assert_eq!(users.peek("ada").remaining(), 0);
}

#[test]
fn check_all_takes_entries_of_any_type_without_casts() {
    let clock = ManualClock::new();
    let per_user = Limiter::<u64>::builder(Quota::per_second(2).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    let per_route = Limiter::<str>::builder(Quota::per_second(3).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    let now = per_user.now();
    // One limiter type: a slice or a Vec of `CheckAllEntry`, by value or by reference.
    assert!(check_all(&[per_user.cost(&1, 1), per_user.cost(&2, 1)], now).is_allowed());
    let costs = vec![per_user.cost(&1, 1), per_user.cost(&3, 1)];
    assert!(check_all(&costs, now).is_allowed());
    assert!(!check_all(&[&per_user.cost(&1, 1)], now).is_allowed());
    // Limiters of different key types: `&dyn Charge`, coerced without `as`.
    let (user, route) = (per_user.cost(&4, 1), per_route.cost("/a", 1));
    let mixed: Vec<&dyn Charge> = vec![&user, &route];
    assert!(check_all(&mixed, now).is_allowed());
    assert_eq!(per_route.peek("/a").remaining(), 2);
    // Another quota for one entry: the view's cost.
    let strict = per_route.with_quota(Quota::per_second(3).unwrap().with_limit(1).unwrap());
    let entries: [&dyn Charge; 2] = [&per_user.cost(&5, 1), &strict.cost("/b", 2)];
    let d = check_all(&entries, now);
    assert_eq!(d.denied_by(), Some(1));
    assert!(d.decisions()[1].cost_exceeds_limit());
    assert_eq!(per_user.peek(&5).remaining(), 2, "rolled back");
}

#[test]
fn with_quota_has_the_limiters_methods_on_limiter_and_live_limiter() {
    let l = manual(Quota::per_second(10).unwrap());
    let live = LiveLimiter::new(manual(Quota::per_second(10).unwrap()));
    let q = Quota::per_second(4).unwrap().with_limit(2).unwrap(); // T = 250 ms
    let now = l.now();
    for (name, view) in [
        ("limiter", l.with_quota(q)),
        ("live", live.limiter().with_quota(q)),
    ] {
        assert_eq!(*view.quota(), q, "{name}");
        assert!(view.check("k").is_allowed(), "{name}");
        assert!(view.check_at("k", now).is_allowed(), "{name}");
        assert!(!view.check_n("k", 1).is_allowed(), "{name}");
        assert!(!view.check_n_at("k", 1, now).is_allowed(), "{name}");
        assert!(view.refund("k", 1), "{name}");
        assert_eq!(view.peek("k").remaining(), 1, "{name}");
        assert!(view.refund_at("k", 1, now), "{name}");
        assert_eq!(view.peek_at("k", now).remaining(), 2, "{name}");
        let r = view.reserve_at("k", 2, now);
        assert_eq!(r.quota(), &q, "{name}");
        assert!(
            view.reserve("j", 3).decision().cost_exceeds_limit(),
            "{name}"
        );
        assert!(check_all(&[view.cost("m", 2)], now).is_allowed(), "{name}");
        drop(r);
    }
    // The same vocabulary on the live limiter, under its current quota.
    live.set_quota(q);
    assert!(live.current().refund_at("k", 1, now));
    assert_eq!(live.current().peek_at("k", now).remaining(), 1);
    let r = live.current().reserve_at("z", 1, now);
    assert_eq!(live.limiter().settle_at("z", r, 1, now), Ok(Settled::Exact));
}
