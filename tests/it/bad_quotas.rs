//! Every bad quota is a typed [`funnel::Error`], never a panic or a silent wrap (where
//! redis-cell wraps, aborts or accepts; docs/cl-throttle.md, "Where funnel deliberately
//! differs"): zero count or period, `T` under 1 ns, `max_burst` at and near `u64::MAX`, extreme
//! and negative CL.THROTTLE integers, tolerances above 2^60 ns, `Duration::MAX`, random
//! arguments; and what the errors say.

use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::replay::Replay;
use funnel::{Error, Funnel, Limiter, Quota, Timestamp, MAX_CAPACITY};
use funnel_testkit::fuzz::common::expect;
use funnel_testkit::model::ModelQuota;
use funnel_testkit::Rng;

const MAX_TOLERANCE_NANOS: u64 = Quota::MAX_TOLERANCE_NANOS;

const S: u64 = 1_000_000_000;

fn at(nanos: u64) -> Timestamp {
    Timestamp::from_nanos(nanos).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

// ---------------------------------------------------------------------------------------------
// Quotas
// ---------------------------------------------------------------------------------------------

#[test]
fn a_zero_count_is_an_error_on_every_constructor() {
    assert_eq!(
        Quota::from_cl_throttle_period(15, 0, secs(60)),
        Err(Error::ZeroCount)
    );
    assert_eq!(Quota::from_cl_throttle(15, 0, 60), Err(Error::ZeroCount));
    assert_eq!(Quota::per_second(0), Err(Error::ZeroCount));
    assert_eq!(Quota::per_minute(0), Err(Error::ZeroCount));
    assert_eq!(Quota::per_hour(0), Err(Error::ZeroCount));
    assert_eq!(Quota::per_period(0, secs(1)), Err(Error::ZeroCount));
}

#[test]
fn a_zero_period_is_an_error() {
    assert_eq!(
        Quota::from_cl_throttle_period(15, 30, Duration::ZERO),
        Err(Error::ZeroPeriod)
    );
    assert_eq!(Quota::from_cl_throttle(15, 30, 0), Err(Error::ZeroPeriod));
    assert_eq!(Quota::per_period(5, Duration::ZERO), Err(Error::ZeroPeriod));
}

#[test]
fn a_limit_of_zero_is_an_error() {
    let q = Quota::per_second(5).unwrap();
    assert_eq!(q.with_limit(0), Err(Error::ZeroLimit));
}

#[test]
fn an_emission_interval_under_one_nanosecond_is_an_error() {
    assert_eq!(
        Quota::from_cl_throttle_period(0, 2, Duration::from_nanos(1)),
        Err(Error::EmissionIntervalTooSmall {
            period: Duration::from_nanos(1),
            count: 2
        })
    );
    // redis-cell's "Zero rates are not supported": count above period * 1e9.
    assert_eq!(
        Quota::from_cl_throttle(0, 1_000_000_001, 1),
        Err(Error::EmissionIntervalTooSmall {
            period: secs(1),
            count: 1_000_000_001
        })
    );
    assert_eq!(
        Quota::from_cl_throttle(1, i64::MAX, 1),
        Err(Error::EmissionIntervalTooSmall {
            period: secs(1),
            count: i64::MAX as u64
        })
    );
    assert_eq!(
        Quota::per_period(u64::MAX, secs(1)),
        Err(Error::EmissionIntervalTooSmall {
            period: secs(1),
            count: u64::MAX
        })
    );
}

#[test]
fn one_nanosecond_per_action_is_the_finest_rate_and_its_remaining_is_exact() {
    let q = Quota::from_cl_throttle(9, 1_000_000_000, 1).unwrap();
    assert_eq!(q.emission_interval(), Duration::from_nanos(1));
    // redis-cell answers remaining = i64::MAX below 1 µs per action; we answer the exact 9.
    let d = Funnel::with_clock(q, ManualClock::new()).check_at(at(0));
    assert_eq!(d.to_cl_throttle(), [0, 10, 9, -1, 0]);
    assert_eq!(d.remaining(), 9);
}

#[test]
fn max_burst_u64_max_cannot_make_a_limit() {
    assert_eq!(
        Quota::from_cl_throttle_period(u64::MAX, 1, secs(1)),
        Err(Error::BurstTooLarge {
            max_burst: u64::MAX
        })
    );
    assert_eq!(
        Quota::from_cl_throttle(i64::MAX, 1, 1),
        Err(Error::ToleranceTooLarge {
            tolerance_nanos: (1u128 << 63) * u128::from(S),
            max_nanos: MAX_TOLERANCE_NANOS,
        })
    );
}

#[test]
fn max_burst_near_u64_max_overflows_the_tolerance_and_says_by_how_much() {
    // limit u64::MAX at 1 s per action: the exact 128-bit tolerance is reported, not a wrap.
    assert_eq!(
        Quota::from_cl_throttle_period(u64::MAX - 1, 1, secs(1)),
        Err(Error::ToleranceTooLarge {
            tolerance_nanos: u128::from(u64::MAX) * u128::from(S),
            max_nanos: MAX_TOLERANCE_NANOS,
        })
    );
    assert_eq!(
        Quota::from_cl_throttle_period(u64::MAX - 1, 1, Duration::from_nanos(1)),
        Err(Error::ToleranceTooLarge {
            tolerance_nanos: u128::from(u64::MAX),
            max_nanos: MAX_TOLERANCE_NANOS,
        })
    );
    assert!(matches!(
        Quota::per_second(1).unwrap().with_limit(u64::MAX),
        Err(Error::ToleranceTooLarge { .. })
    ));
    assert!(matches!(
        Quota::per_period(1, Duration::from_nanos(1))
            .unwrap()
            .with_limit(u64::MAX),
        Err(Error::ToleranceTooLarge { .. })
    ));
}

#[test]
fn the_tolerance_may_reach_2_pow_60_nanoseconds_and_no_further() {
    assert_eq!(MAX_TOLERANCE_NANOS, 1 << 60);
    let max = MAX_TOLERANCE_NANOS;
    // By the period...
    let q = Quota::from_cl_throttle_period(0, 1, Duration::from_nanos(max)).unwrap();
    assert_eq!(q.tolerance(), Duration::from_nanos(max));
    assert_eq!(
        Quota::from_cl_throttle_period(0, 1, Duration::from_nanos(max + 1)),
        Err(Error::ToleranceTooLarge {
            tolerance_nanos: u128::from(max) + 1,
            max_nanos: max
        })
    );
    // ... by the limit at 1 ns per action ...
    let q = Quota::from_cl_throttle_period(max - 1, 1, Duration::from_nanos(1)).unwrap();
    assert_eq!(q.limit(), max);
    assert_eq!(
        Quota::from_cl_throttle_period(max, 1, Duration::from_nanos(1)),
        Err(Error::ToleranceTooLarge {
            tolerance_nanos: u128::from(max) + 1,
            max_nanos: max
        })
    );
    // ... and by the limit at 1 s per action: floor(2^60 / 1e9) = 1,152,921,504 units.
    let most = max / S;
    assert_eq!(
        Quota::from_cl_throttle(most as i64 - 1, 1, 1)
            .unwrap()
            .limit(),
        most
    );
    assert_eq!(
        Quota::from_cl_throttle(most as i64, 1, 1),
        Err(Error::ToleranceTooLarge {
            tolerance_nanos: u128::from(most + 1) * u128::from(S),
            max_nanos: max,
        })
    );
    let one_per_second = Quota::per_second(1).unwrap();
    assert_eq!(one_per_second.with_limit(most).unwrap().limit(), most);
    assert!(matches!(
        one_per_second.with_limit(most + 1),
        Err(Error::ToleranceTooLarge { .. })
    ));
}

#[test]
fn the_largest_cl_throttle_integers_are_errors_not_wraps() {
    // redis-cell: limit = max_burst + 1 wraps negative, T * limit overflows: limited forever.
    assert_eq!(
        Quota::from_cl_throttle(i64::MAX, 1, 1),
        Err(Error::ToleranceTooLarge {
            tolerance_nanos: (1u128 << 63) * u128::from(S),
            max_nanos: MAX_TOLERANCE_NANOS,
        })
    );
    assert_eq!(
        Quota::from_cl_throttle(1, 1, i64::MAX),
        Err(Error::ToleranceTooLarge {
            tolerance_nanos: u128::from(i64::MAX as u64) * u128::from(S) * 2,
            max_nanos: MAX_TOLERANCE_NANOS,
        })
    );
    assert!(matches!(
        Quota::from_cl_throttle(i64::MAX, i64::MAX, i64::MAX),
        Err(Error::ToleranceTooLarge { .. })
    ));
}

#[test]
fn negative_cl_throttle_integers_are_errors_naming_the_argument() {
    for value in [-1, -2, i64::MIN] {
        assert_eq!(
            Quota::from_cl_throttle(value, 30, 60),
            Err(Error::Negative {
                argument: "max_burst",
                value
            })
        );
        assert_eq!(
            Quota::from_cl_throttle(15, value, 60),
            Err(Error::Negative {
                argument: "count",
                value
            })
        );
        assert_eq!(
            Quota::from_cl_throttle(15, 30, value),
            Err(Error::Negative {
                argument: "period",
                value
            })
        );
    }
    // The first bad argument is the one reported.
    assert_eq!(
        Quota::from_cl_throttle(-1, 0, i64::MIN),
        Err(Error::Negative {
            argument: "max_burst",
            value: -1
        })
    );
}

#[test]
fn a_period_of_duration_max_is_an_error_unless_the_count_brings_it_back_in_range() {
    assert!(matches!(
        Quota::from_cl_throttle_period(0, 1, Duration::MAX),
        Err(Error::ToleranceTooLarge { .. })
    ));
    assert!(matches!(
        Quota::per_period(1_000, Duration::MAX),
        Err(Error::ToleranceTooLarge { .. })
    ));
    // (2^64 - 1) s + 999,999,999 ns over 2^64 - 1 actions: exactly 1 s per action, a sane rate.
    let q = Quota::from_cl_throttle_period(0, u64::MAX, Duration::MAX).unwrap();
    assert_eq!(q.emission_interval(), secs(1));
}

/// What a quota constructor must give, from the test kit's statement of the documented rules
/// (`funnel_testkit::fuzz::common::expect`, shared with the fuzz bodies): `(emission interval
/// ns, limit)` or the error, checked in the documented order.
fn interval_and_limit(model: Result<ModelQuota, Error>) -> Result<(u64, u64), Error> {
    model.map(|m| (m.t as u64, m.limit as u64))
}

#[test]
fn random_quota_arguments_give_a_quota_or_the_right_typed_error_never_a_panic() {
    let mut rng = Rng::new(7);
    let interesting = [
        0,
        1,
        2,
        999_999_999,
        1_000_000_000,
        1_000_000_001,
        MAX_TOLERANCE_NANOS - 1,
        MAX_TOLERANCE_NANOS,
        MAX_TOLERANCE_NANOS + 1,
        u64::MAX / 2,
        u64::MAX - 1,
        u64::MAX,
    ];
    let pick = |rng: &mut Rng| match rng.below(3) {
        0 => *rng.pick(&interesting),
        1 => rng.below(100),
        _ => rng.next_u64() >> rng.below(64),
    };
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    for i in 0..20_000 {
        let (b, c, p) = (
            pick(&mut rng),
            pick(&mut rng),
            pick(&mut rng) >> rng.below(40),
        );
        let period = Duration::new(
            p,
            if rng.chance(1, 2) {
                0
            } else {
                rng.below(S) as u32
            },
        );
        let got = Quota::from_cl_throttle_period(b, c, period);
        let expected = interval_and_limit(expect::new(b, c, period));
        let ctx = format!("case {i}: Quota::from_cl_throttle_period({b}, {c}, {period:?})");
        match (&got, &expected) {
            (Ok(q), Ok((t, limit))) => {
                assert_eq!(q.emission_interval(), Duration::from_nanos(*t), "{ctx}");
                assert_eq!((q.limit(), q.max_burst()), (*limit, b), "{ctx}");
                assert_eq!(
                    q.tolerance().as_nanos(),
                    u128::from(*t) * u128::from(*limit),
                    "{ctx}"
                );
                // A valid quota decides at the end of time without overflow.
                let funnel = Funnel::with_clock(*q, ManualClock::new());
                for n in [0, 1, c, *limit, u64::MAX] {
                    let _ = funnel.check_n_at(n, Timestamp::MAX).to_cl_throttle();
                }
                *outcomes.entry("Ok".to_owned()).or_insert(0) += 1;
            }
            (Err(e), Err(x)) => {
                assert_eq!(e, x, "{ctx}");
                assert!(!e.to_string().is_empty());
                let kind = format!("{e:?}");
                let kind = kind.split([' ', '{']).next().unwrap().to_owned();
                *outcomes.entry(kind).or_insert(0) += 1;
            }
            _ => panic!("{ctx}: got {got:?}, expected {expected:?}"),
        }
        // Any i64 triple through the CL.THROTTLE constructor.
        let (b, c, p) = (
            rng.next_u64() as i64,
            rng.next_u64() as i64,
            rng.next_u64() as i64,
        );
        let (b, c, p) = (b >> rng.below(64), c >> rng.below(64), p >> rng.below(64));
        let got = Quota::from_cl_throttle(b, c, p);
        let expected = interval_and_limit(expect::from_cl_throttle(b, c, p));
        assert_eq!(
            got.map(|q| (q.emission_interval().as_nanos() as u64, q.limit())),
            expected,
            "case {i}: from_cl_throttle({b}, {c}, {p})"
        );
    }
    for kind in [
        "Ok",
        "BurstTooLarge",
        "ZeroCount",
        "ZeroPeriod",
        "EmissionIntervalTooSmall",
        "ToleranceTooLarge",
    ] {
        assert!(
            outcomes.get(kind).copied().unwrap_or(0) > 50,
            "too few {kind}: {outcomes:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// What the errors say
// ---------------------------------------------------------------------------------------------

#[test]
fn error_messages_say_what_was_wrong_and_the_bounds() {
    let says = |e: Error, parts: &[&str]| {
        let text = e.to_string();
        for part in parts {
            assert!(
                text.contains(part),
                "{e:?} says {text:?}, which lacks {part:?}"
            );
        }
    };
    says(Error::ZeroCount, &["count", "at least 1"]);
    says(Error::ZeroPeriod, &["period"]);
    says(Error::ZeroLimit, &["limit", "at least 1"]);
    says(
        Quota::from_cl_throttle(0, 2_000_000_001, 2).unwrap_err(),
        &["2000000001", "2s", "1 ns", "2000000000"],
    );
    says(
        Quota::from_cl_throttle_period(u64::MAX, 1, secs(1)).unwrap_err(),
        &["max_burst", &u64::MAX.to_string()],
    );
    says(
        Quota::from_cl_throttle_period(0, 1, Duration::from_nanos(MAX_TOLERANCE_NANOS + 1))
            .unwrap_err(),
        &["1152921504606846977", "1152921504606846976", "36.5 years"],
    );
    says(
        Quota::from_cl_throttle(15, -3, 60).unwrap_err(),
        &["count", "-3", "negative"],
    );
    says(
        Timestamp::from_nanos(u64::MAX).unwrap_err(),
        &["18446744073709551615", "3458764513820540896"],
    );
    let zero = Limiter::<str>::builder(Quota::per_second(1).unwrap())
        .capacity(0)
        .build();
    assert_eq!(zero.as_ref().err(), Some(&Error::ZeroCapacity));
    says(zero.err().unwrap(), &["capacity", "at least 1"]);
    let huge = Limiter::<str>::builder(Quota::per_second(1).unwrap())
        .capacity(MAX_CAPACITY + 1)
        .build();
    let e = huge.err().unwrap();
    assert_eq!(
        e,
        Error::CapacityTooLarge {
            requested: MAX_CAPACITY + 1,
            max: MAX_CAPACITY
        }
    );
    says(
        e,
        &[&(MAX_CAPACITY + 1).to_string(), &MAX_CAPACITY.to_string()],
    );
    assert_eq!(Replay::with_capacity(0).err(), Some(Error::ZeroCapacity));
    // It is a std error, so `?` works into Box<dyn Error>.
    let boxed: Box<dyn std::error::Error> = Box::new(Error::ZeroCount);
    assert!(boxed.to_string().contains("count"));
}
