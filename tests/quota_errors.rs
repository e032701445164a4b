//! Where redis-cell wraps, aborts or silently accepts, funnel answers with a typed
//! [`funnel::Error`] (or an ordinary decision), never a panic or a wrap
//! (docs/DESIGN.md, "Where we differ from redis-cell on purpose"):
//!
//! * every bad quota: zero count or period, `T` under 1 ns, `max_burst` at and near `u64::MAX`,
//!   extreme and negative CL.THROTTLE integers, tolerances above 2^60 ns, `Duration::MAX`;
//! * timestamps beyond [`Timestamp::MAX`], and decisions at `Timestamp::MAX` with the largest
//!   tolerance;
//! * costs of `u64::MAX`;
//! * time going backwards: never more admitted than the later time allows;
//! * replay lines with garbage;
//! * what the errors say.

#[path = "support/rng.rs"]
mod rng;

use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::replay::{parse_line, LineError, Replay};
use funnel::{
    Clock, Decision, Error, Funnel, Limiter, Outcome, Quota, Timestamp, MAX_CAPACITY,
    MAX_TOLERANCE_NANOS,
};
use rng::Rng;

const S: u64 = 1_000_000_000;
/// `Timestamp::MAX` in nanoseconds, as documented: `3 * 2^60 - 2`.
const MAX_NANOS: u64 = 3 * (1 << 60) - 2;

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
    assert_eq!(Quota::new(15, 0, secs(60)), Err(Error::ZeroCount));
    assert_eq!(Quota::from_cl_throttle(15, 0, 60), Err(Error::ZeroCount));
    assert_eq!(Quota::per_second(0), Err(Error::ZeroCount));
    assert_eq!(Quota::per_minute(0), Err(Error::ZeroCount));
    assert_eq!(Quota::per_hour(0), Err(Error::ZeroCount));
    assert_eq!(Quota::per_period(0, secs(1)), Err(Error::ZeroCount));
}

#[test]
fn a_zero_period_is_an_error() {
    assert_eq!(Quota::new(15, 30, Duration::ZERO), Err(Error::ZeroPeriod));
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
        Quota::new(0, 2, Duration::from_nanos(1)),
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
        Quota::new(u64::MAX, 1, secs(1)),
        Err(Error::BurstTooLarge {
            max_burst: u64::MAX
        })
    );
    let q = Quota::per_second(1).unwrap();
    assert_eq!(
        q.with_max_burst(u64::MAX),
        Err(Error::BurstTooLarge {
            max_burst: u64::MAX
        })
    );
}

#[test]
fn max_burst_near_u64_max_overflows_the_tolerance_and_says_by_how_much() {
    // limit u64::MAX at 1 s per action: the exact 128-bit tolerance is reported, not a wrap.
    assert_eq!(
        Quota::new(u64::MAX - 1, 1, secs(1)),
        Err(Error::ToleranceTooLarge {
            tolerance_nanos: u128::from(u64::MAX) * u128::from(S),
            max_nanos: MAX_TOLERANCE_NANOS,
        })
    );
    assert_eq!(
        Quota::new(u64::MAX - 1, 1, Duration::from_nanos(1)),
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
        Quota::per_second(1).unwrap().with_max_burst(u64::MAX - 1),
        Err(Error::ToleranceTooLarge { .. })
    ));
}

#[test]
fn the_tolerance_may_reach_2_pow_60_nanoseconds_and_no_further() {
    assert_eq!(MAX_TOLERANCE_NANOS, 1 << 60);
    let max = MAX_TOLERANCE_NANOS;
    // By the period...
    let q = Quota::new(0, 1, Duration::from_nanos(max)).unwrap();
    assert_eq!(q.tolerance(), Duration::from_nanos(max));
    assert_eq!(
        Quota::new(0, 1, Duration::from_nanos(max + 1)),
        Err(Error::ToleranceTooLarge {
            tolerance_nanos: u128::from(max) + 1,
            max_nanos: max
        })
    );
    // ... by the limit at 1 ns per action ...
    let q = Quota::new(max - 1, 1, Duration::from_nanos(1)).unwrap();
    assert_eq!(q.limit(), max);
    assert_eq!(
        Quota::new(max, 1, Duration::from_nanos(1)),
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
        Quota::new(0, 1, Duration::MAX),
        Err(Error::ToleranceTooLarge { .. })
    ));
    assert!(matches!(
        Quota::per_period(1_000, Duration::MAX),
        Err(Error::ToleranceTooLarge { .. })
    ));
    // (2^64 - 1) s + 999,999,999 ns over 2^64 - 1 actions: exactly 1 s per action, a sane rate.
    let q = Quota::new(0, u64::MAX, Duration::MAX).unwrap();
    assert_eq!(q.emission_interval(), secs(1));
}

/// What `Quota::new(max_burst, count, period)` must give, computed in u128 from the documented
/// rules: `(emission interval ns, limit)` or the error, checked in the documented order.
fn expected_quota(max_burst: u64, count: u64, period: Duration) -> Result<(u64, u64), Error> {
    let limit = max_burst
        .checked_add(1)
        .ok_or(Error::BurstTooLarge { max_burst })?;
    if count == 0 {
        return Err(Error::ZeroCount);
    }
    if period.is_zero() {
        return Err(Error::ZeroPeriod);
    }
    let t = period.as_nanos() / u128::from(count);
    if t == 0 {
        return Err(Error::EmissionIntervalTooSmall { period, count });
    }
    let tolerance = t.saturating_mul(u128::from(limit));
    if tolerance > u128::from(MAX_TOLERANCE_NANOS) {
        return Err(Error::ToleranceTooLarge {
            tolerance_nanos: tolerance,
            max_nanos: MAX_TOLERANCE_NANOS,
        });
    }
    Ok((t as u64, limit))
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
        let got = Quota::new(b, c, period);
        let expected = expected_quota(b, c, period);
        let ctx = format!("case {i}: Quota::new({b}, {c}, {period:?})");
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
        let expected = match (u64::try_from(b), u64::try_from(c), u64::try_from(p)) {
            (Err(_), _, _) => Err(Error::Negative {
                argument: "max_burst",
                value: b,
            }),
            (_, Err(_), _) => Err(Error::Negative {
                argument: "count",
                value: c,
            }),
            (_, _, Err(_)) => Err(Error::Negative {
                argument: "period",
                value: p,
            }),
            (Ok(b), Ok(c), Ok(p)) => expected_quota(b, c, secs(p)),
        };
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
// Timestamps
// ---------------------------------------------------------------------------------------------

#[test]
fn timestamps_beyond_max_are_errors() {
    assert_eq!(Timestamp::MAX.as_nanos(), MAX_NANOS);
    assert_eq!(Timestamp::from_nanos(MAX_NANOS), Ok(Timestamp::MAX));
    assert_eq!(
        Timestamp::from_nanos(MAX_NANOS + 1),
        Err(Error::TimeOutOfRange {
            nanos: u128::from(MAX_NANOS) + 1
        })
    );
    assert_eq!(
        Timestamp::from_nanos(u64::MAX),
        Err(Error::TimeOutOfRange {
            nanos: u128::from(u64::MAX)
        })
    );
    assert_eq!(
        Timestamp::from_duration(Duration::MAX),
        Err(Error::TimeOutOfRange {
            nanos: Duration::MAX.as_nanos()
        })
    );
    assert_eq!(
        Timestamp::from_duration(Duration::from_nanos(MAX_NANOS + 1)),
        Err(Error::TimeOutOfRange {
            nanos: u128::from(MAX_NANOS) + 1
        })
    );
    assert_eq!(
        Timestamp::from_duration(Duration::from_nanos(MAX_NANOS)),
        Ok(Timestamp::MAX)
    );
}

#[test]
fn adding_to_a_timestamp_saturates_at_max() {
    assert_eq!(
        Timestamp::ZERO.saturating_add(Duration::MAX),
        Timestamp::MAX
    );
    assert_eq!(
        Timestamp::MAX.saturating_add(Duration::from_nanos(1)),
        Timestamp::MAX
    );
    assert_eq!(
        at(MAX_NANOS - 1).saturating_add(Duration::from_nanos(1)),
        Timestamp::MAX
    );
    let clock = ManualClock::starting_at(at(MAX_NANOS - 5));
    clock.advance(Duration::MAX);
    assert_eq!(clock.now(), Timestamp::MAX);
}

// ---------------------------------------------------------------------------------------------
// Decisions at the edges
// ---------------------------------------------------------------------------------------------

/// A Funnel and a Limiter key deciding the same requests.
struct Both {
    funnel: Funnel<ManualClock>,
    limiter: Limiter<str, ManualClock>,
}

impl Both {
    fn new(q: Quota) -> Both {
        let limiter = Limiter::<str>::builder(q)
            .capacity(64)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        Both {
            funnel: Funnel::with_clock(q, ManualClock::new()),
            limiter,
        }
    }

    /// The request on both; they must agree.
    fn check(&self, n: u64, now: Timestamp) -> Decision {
        let a = self.funnel.check_n_at(n, now);
        let b = self.limiter.check_n_at("k", n, now);
        assert_eq!(a, b, "Funnel and Limiter disagree on n {n} at {now:?}");
        a
    }
}

#[test]
fn a_cost_of_u64_max_is_limited_with_retry_minus_1_and_writes_nothing() {
    let q = Quota::from_cl_throttle(4, 1, 1).unwrap();
    for now in [0, 1, 5 * S, MAX_NANOS] {
        let both = Both::new(q);
        let d = both.check(u64::MAX, at(now));
        assert_eq!(d.outcome(), Outcome::CostExceedsLimit);
        assert!(d.cost_exceeds_limit() && !d.is_allowed());
        assert_eq!(d.retry_after(), None);
        assert_eq!(d.to_cl_throttle(), [1, 5, 5, -1, 0]);
        assert!(
            both.limiter.is_empty(),
            "a cost that can never pass created a key"
        );
        // On a funnel in debt: the debt is reported, nothing is added.
        assert!(both.check(2, at(now)).is_allowed());
        let d = both.check(u64::MAX, at(now));
        assert_eq!(d.to_cl_throttle(), [1, 5, 3, -1, 2]);
        assert_eq!(d.reset_after(), secs(2));
        assert_eq!(both.check(0, at(now)).reset_after(), secs(2));
        // limit + 1 is the smallest cost that can never pass.
        assert!(both.check(6, at(now)).cost_exceeds_limit());
        assert_eq!(both.check(3, at(now)).outcome(), Outcome::Allowed);
    }
}

#[test]
fn deciding_at_timestamp_max_with_the_largest_tolerance_does_not_overflow() {
    let max = MAX_TOLERANCE_NANOS;
    let max_secs_rounded = (max / S + 1) as i64; // 1,152,921,504.606... s rounds up
                                                 // One action per 2^60 ns.
    let both = Both::new(Quota::new(0, 1, Duration::from_nanos(max)).unwrap());
    let d = both.check(1, Timestamp::MAX);
    assert!(d.is_allowed());
    assert_eq!(d.reset_after(), Duration::from_nanos(max));
    assert_eq!(d.to_cl_throttle(), [0, 1, 0, -1, max_secs_rounded]);
    let d = both.check(1, Timestamp::MAX);
    assert_eq!(d.retry_after(), Some(Duration::from_nanos(max)));
    assert_eq!(
        d.to_cl_throttle(),
        [1, 1, 0, max_secs_rounded, max_secs_rounded]
    );
    assert!(both.check(u64::MAX, Timestamp::MAX).cost_exceeds_limit());
    assert_eq!(both.check(0, Timestamp::MAX).remaining(), 0);

    // 2^60 actions of 1 ns each, all at once, at the end of time.
    let both = Both::new(Quota::new(max - 1, 1, Duration::from_nanos(1)).unwrap());
    let d = both.check(max, Timestamp::MAX);
    assert!(d.is_allowed());
    assert_eq!(d.reset_after(), Duration::from_nanos(max));
    assert_eq!(d.to_cl_throttle(), [0, max as i64, 0, -1, max_secs_rounded]);
    let d = both.check(max, Timestamp::MAX);
    assert_eq!(d.retry_after(), Some(Duration::from_nanos(max)));
    let d = both.check(1, Timestamp::MAX);
    assert_eq!(d.retry_after(), Some(Duration::from_nanos(1)));
    assert!(both.check(max + 1, Timestamp::MAX).cost_exceeds_limit());
    both.limiter.check_invariants().unwrap();

    // A funnel filled at MAX asked from the origin: the largest debt there can be.
    let d = both.check(1, Timestamp::ZERO);
    assert_eq!(d.reset_after(), Duration::from_nanos(MAX_NANOS + max));
    assert_eq!(d.retry_after(), Some(Duration::from_nanos(MAX_NANOS + 1)));
    assert_eq!(d.remaining(), 0);
    let _ = d.to_cl_throttle();
}

#[test]
fn a_replay_at_timestamp_max_with_the_largest_whole_second_tolerance_answers() {
    let replay = Replay::with_capacity(16).unwrap();
    let most = MAX_TOLERANCE_NANOS / S; // whole seconds in the largest tolerance
    assert_eq!(
        replay.line(format!("{MAX_NANOS} a 0 1 {most}").as_bytes()),
        format!("0 1 0 -1 {most}")
    );
    assert_eq!(
        replay.line(format!("{MAX_NANOS} a 0 1 {most}").as_bytes()),
        format!("1 1 0 {most} {most}")
    );
    let b = most - 1;
    assert_eq!(
        replay.line(format!("{MAX_NANOS} b {b} 1 1 {most}").as_bytes()),
        format!("0 {most} 0 -1 {most}")
    );
    let out = replay.line(format!("{MAX_NANOS} c {most} 1 1").as_bytes());
    assert!(out.starts_with("error: ") && out.contains("ns"), "{out}");
    let out = replay.line(format!("{} a 0 1 1", MAX_NANOS + 1).as_bytes());
    assert!(
        out.starts_with("error: ") && out.contains(&MAX_NANOS.to_string()),
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------------
// Time going backwards
// ---------------------------------------------------------------------------------------------

#[test]
fn a_full_funnel_asked_at_earlier_times_admits_nothing() {
    let q = Quota::from_cl_throttle(4, 1, 1).unwrap();
    let late = 1_000 * S;
    let both = Both::new(q);
    assert!(both.check(5, at(late)).is_allowed());
    let before = both.check(0, at(late));
    let mut e = late;
    let mut step = 1;
    while e > 0 {
        e = e.saturating_sub(step);
        step = step * 3 + 1;
        for n in [1, 1, 2, 5, 0] {
            let d = both.check(n, at(e));
            assert!(
                !d.is_allowed() || n == 0,
                "n {n} admitted at {e} ns, before {late}"
            );
            assert_eq!(d.remaining(), 0);
            let _ = d.to_cl_throttle();
        }
    }
    assert_eq!(
        both.check(0, at(late)),
        before,
        "the backwards sweep changed the funnel"
    );
}

/// After any requests up to a later time `L`, requests at non-increasing earlier times admit in
/// total at most the units still free at `L`; and while the funnel is in debt at `L` every
/// admitted unit is charged to it exactly.
#[test]
fn a_backwards_sweep_never_admits_more_than_the_later_time_allows() {
    let (mut sweeps_that_admitted, mut sweeps_in_debt) = (0, 0);
    for seed in 0..400 {
        let mut rng = Rng::new(seed);
        let (b, c, p) = (rng.between(0, 20), rng.between(1, 100), rng.between(1, 60));
        let q = Quota::from_cl_throttle(b as i64, c as i64, p as i64).unwrap();
        let (t, limit) = (q.emission_interval().as_nanos() as u64, q.limit());
        let both = Both::new(q);
        // Some traffic going forward up to L.
        let mut now = rng.below(1 << 40);
        for _ in 0..rng.below(30) {
            now += rng.below(2 * t);
            both.check(rng.below(limit + 1), at(now));
        }
        let late = now;
        let free = both.check(0, at(late));
        let (free_units, in_debt) = (free.remaining(), !free.reset_after().is_zero());
        // Then a sweep backwards.
        let mut admitted = 0;
        let mut e = late;
        for step in 0..200 {
            e = e.saturating_sub(match rng.below(4) {
                0 => 0,
                1 => rng.below(1_000),
                2 => rng.below(2 * t),
                _ => rng.below(e / 4 + 1),
            });
            let n = rng.below(limit + 2);
            let d = both.check(n, at(e));
            if d.is_allowed() {
                admitted += n;
            }
            assert!(
                admitted <= free_units,
                "seed {seed} step {step}: {admitted} units admitted going back from {late} \
                 to {e}, only {free_units} free at {late}"
            );
        }
        sweeps_that_admitted += u32::from(admitted > 0);
        sweeps_in_debt += u32::from(in_debt);
        if in_debt {
            assert_eq!(
                both.check(0, at(late)).remaining(),
                free_units - admitted,
                "seed {seed}: units admitted in the past were not charged"
            );
        }
    }
    assert!(sweeps_that_admitted > 50 && sweeps_in_debt > 50, "{sweeps_that_admitted} sweeps admitted, {sweeps_in_debt} started in debt: too few to mean much");
}

/// Requests at times in any order, spanning `[first, last]`, admit at most `limit +
/// floor((last - first) / T)` units: the same bound as time going forward.
#[test]
fn times_in_any_order_admit_no_more_than_their_span_allows() {
    for seed in 1_000..1_300 {
        let mut rng = Rng::new(seed);
        let (b, c, p) = (rng.between(0, 20), rng.between(1, 100), rng.between(1, 60));
        let q = Quota::from_cl_throttle(b as i64, c as i64, p as i64).unwrap();
        let (t, limit) = (q.emission_interval().as_nanos() as u64, q.limit());
        let both = Both::new(q);
        let base = rng.below(1 << 50);
        let periods = rng.between(1, 3 * limit);
        let span = rng.below(t * periods) + 1;
        let (mut first, mut last, mut admitted) = (u64::MAX, 0, 0);
        for step in 0..150 {
            let now = base + rng.below(span);
            let n = rng.below(limit + 1);
            (first, last) = (first.min(now), last.max(now));
            if both.check(n, at(now)).is_allowed() {
                admitted += n;
            }
            let bound = limit + (last - first) / t;
            assert!(
                admitted <= bound,
                "seed {seed} step {step}: {admitted} units admitted within [{first}, {last}], \
                 T {t}, limit {limit}: at most {bound}"
            );
        }
    }
}

#[test]
fn a_clock_set_backwards_only_makes_decisions_stricter() {
    let clock = ManualClock::starting_at(at(100 * S));
    let funnel = Funnel::with_clock(Quota::from_cl_throttle(0, 1, 10).unwrap(), clock.clone());
    let limiter = Limiter::<str>::builder(Quota::from_cl_throttle(0, 1, 10).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(funnel.check().is_allowed() && limiter.check("k").is_allowed());
    clock.set(at(50 * S));
    for d in [funnel.check(), limiter.check("k")] {
        assert!(!d.is_allowed());
        assert_eq!(d.retry_after(), Some(secs(60)));
        assert_eq!(d.reset_after(), secs(60));
    }
    clock.set(Timestamp::ZERO);
    assert!(!funnel.check().is_allowed() && !limiter.check("k").is_allowed());
    clock.set(at(110 * S));
    assert!(funnel.check().is_allowed() && limiter.check("k").is_allowed());
}

/// A keyed limiter reuses the slot of a funnel that has recovered *at the creator's `now`*. A
/// request stamped earlier than that then finds its key absent: its old debt is forgotten. This
/// is the one way an earlier `now` can admit what the key's own history would not; it never
/// admits more than the later time (the reuser's) allows.
#[test]
fn a_slot_reused_at_a_later_time_admits_no_more_than_that_later_time_allows() {
    // One per 10 s, in a table of one bucket: once it is full, a new key must reuse a
    // recovered slot.
    let q = Quota::from_cl_throttle(0, 1, 10).unwrap();
    let limiter = Limiter::<u64>::builder(q)
        .capacity(1)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let slots = limiter.capacity() as u64;
    for key in 0..slots {
        assert!(limiter.check_at(&key, at(100 * S)).is_allowed());
    }
    // At 200 s every funnel has recovered; the next key takes one of their slots.
    assert!(limiter.check_at(&slots, at(200 * S)).is_allowed());
    assert_eq!(limiter.stats().recovered_evictions, 1);
    assert_eq!(limiter.stats().forced_evictions, 0);
    // Asked at 105 s, three keys still show their debt; the one whose slot was reused does not.
    let fresh_at_105: Vec<u64> = (0..slots)
        .filter(|k| limiter.peek_at(k, at(105 * S)).reset_after().is_zero())
        .collect();
    assert_eq!(
        fresh_at_105.len(),
        1,
        "exactly the evicted key forgot its debt"
    );
    let evicted = fresh_at_105[0];
    // It admits what it would at 200 s (a full funnel: 1), never more. (Being a new key again
    // in a full table, it takes the least indebted slot.)
    assert!(limiter.check_at(&evicted, at(105 * S)).is_allowed());
    assert!(!limiter.check_at(&evicted, at(105 * S)).is_allowed());
    assert!(!limiter.check_at(&evicted, at(104 * S)).is_allowed());
    limiter.check_invariants().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Replay lines with garbage
// ---------------------------------------------------------------------------------------------

fn not_an_integer(field: &'static str, text: &str) -> LineError {
    LineError::NotAnInteger {
        field,
        text: text.to_owned(),
    }
}

#[test]
fn garbage_replay_lines_are_errors_naming_the_field() {
    let cases: Vec<(&[u8], LineError)> = vec![
        (b"", LineError::Missing("now_ns")),
        (b" \t \r", LineError::Missing("now_ns")),
        (b"5", LineError::Missing("key")),
        (b"5 k", LineError::Missing("max_burst")),
        (b"5 k 1", LineError::Missing("count")),
        (b"5 k 1 2", LineError::Missing("period_s")),
        (b"5 k 1 2 3 4 5", LineError::TooManyFields),
        (b"1e3 k 1 2 3", not_an_integer("now_ns", "1e3")),
        (b"0x10 k 1 2 3", not_an_integer("now_ns", "0x10")),
        (b"\0 k 1 2 3", not_an_integer("now_ns", "\0")),
        (b"5 k 1.5 2 3", not_an_integer("max_burst", "1.5")),
        (b"5 k \xff 2 3", not_an_integer("max_burst", "\u{fffd}")),
        (b"5 k 1 two 3", not_an_integer("count", "two")),
        (b"5 k 1 2 3s", not_an_integer("period_s", "3s")),
        (b"5 k 1 2 3 q", not_an_integer("quantity", "q")),
        (b"5 k 1 2 3 --1", not_an_integer("quantity", "--1")),
        (
            b"9223372036854775808 k 1 2 3",
            not_an_integer("now_ns", "9223372036854775808"),
        ),
        (
            b"5 k 1 2 3 9223372036854775808",
            not_an_integer("quantity", "9223372036854775808"),
        ),
        (
            b"5 k 1 2 3 18446744073709551615",
            not_an_integer("quantity", "18446744073709551615"),
        ),
        (b"-1 k 1 2 3", LineError::NegativeTime(-1)),
        (
            b"-9223372036854775808 k 1 2 3",
            LineError::NegativeTime(i64::MIN),
        ),
        (b"5 k 1 2 3 -1", LineError::NegativeQuantity(-1)),
        (
            b"3458764513820540927 k 1 2 3",
            LineError::Invalid(Error::TimeOutOfRange {
                nanos: u128::from(MAX_NANOS) + 1,
            }),
        ),
        (b"5 k 1 0 3", LineError::Invalid(Error::ZeroCount)),
        (b"5 k 1 2 0", LineError::Invalid(Error::ZeroPeriod)),
        (
            b"5 k -1 2 3",
            LineError::Invalid(Error::Negative {
                argument: "max_burst",
                value: -1,
            }),
        ),
        (
            b"5 k 1 2000000001 2",
            LineError::Invalid(Error::EmissionIntervalTooSmall {
                period: secs(2),
                count: 2_000_000_001,
            }),
        ),
    ];
    let replay = Replay::with_capacity(16).unwrap();
    for (line, expected) in cases {
        let shown = String::from_utf8_lossy(line);
        assert_eq!(parse_line(line), Err(expected.clone()), "line {shown:?}");
        assert_eq!(
            replay.line(line),
            format!("error: {expected}"),
            "line {shown:?}"
        );
    }
    assert!(
        replay.limiter().is_empty(),
        "a bad line changed the replay's state"
    );
}

#[test]
fn odd_but_valid_replay_lines_are_decided() {
    let replay = Replay::with_capacity(16).unwrap();
    // Non-UTF-8 keys are raw bytes, as Redis keys are (redis-cell aborts the server on them).
    assert_eq!(replay.line(b"5 \xff\xfe 1 2 3"), "0 2 1 -1 2");
    assert_eq!(replay.line(b"5 \xff\xfe 1 2 3"), "0 2 0 -1 3");
    assert_eq!(replay.line(b"5 \xff\xfe 1 2 3"), "1 2 0 2 3");
    // An explicit plus sign, tabs, a trailing CR.
    assert_eq!(replay.line(b"+5\tplus\t+1\t+2\t+3\t+0\r"), "0 2 2 -1 0");
    // The largest quantity is a cost that can never pass.
    assert_eq!(
        replay.line(b"5 big 1 2 3 9223372036854775807"),
        "1 2 2 -1 0"
    );
    // A line earlier than the previous one is decided at its own time: stricter.
    assert_eq!(replay.line(b"0 \xff\xfe 1 2 3"), "1 2 0 2 3");
}

#[test]
fn a_replay_never_panics_on_random_lines_and_garbage_leaves_the_state_alone() {
    let tokens: [&[u8]; 24] = [
        b"0",
        b"1",
        b"-1",
        b"2",
        b"60",
        b"+7",
        b"007",
        b"1000000000",
        b"1000000001",
        b"1152921504",
        b"3458764513820540926",
        b"3458764513820540927",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"9223372036854775808",
        b"18446744073709551615",
        b"k",
        b"\xff",
        b"\0",
        b"1e9",
        b"",
        b" ",
        b"\t",
        b"\r",
    ];
    let mut rng = Rng::new(99);
    let replay = Replay::with_capacity(64).unwrap();
    for i in 0..5_000 {
        let mut line = Vec::new();
        for _ in 0..rng.below(9) {
            if rng.chance(1, 8) {
                let len = rng.below(6) as usize;
                line.extend(rng.bytes(len));
            } else {
                let token: &&[u8] = rng.pick(&tokens);
                line.extend_from_slice(token);
            }
            line.push(b' ');
        }
        let out = replay.line(&line);
        let ints = out.split(' ').all(|x| x.parse::<i64>().is_ok()) && out.split(' ').count() == 5;
        assert!(
            out.starts_with("error: ") || ints,
            "line {i} {:?} gave {out:?}",
            String::from_utf8_lossy(&line)
        );
        assert_eq!(out.starts_with("error: "), parse_line(&line).is_err());
    }
    // The garbage neither stopped the replay nor touched a key it did not name.
    let out = replay.line(b"0 fresh-key-after-garbage 15 30 60");
    assert_eq!(out, "0 16 15 -1 2");
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
        Quota::new(u64::MAX, 1, secs(1)).unwrap_err(),
        &["max_burst", &u64::MAX.to_string()],
    );
    says(
        Quota::new(0, 1, Duration::from_nanos(MAX_TOLERANCE_NANOS + 1)).unwrap_err(),
        &["1152921504606846977", "1152921504606846976", "36.5 years"],
    );
    says(
        Quota::from_cl_throttle(15, -3, 60).unwrap_err(),
        &["count", "-3", "negative"],
    );
    says(
        Timestamp::from_nanos(u64::MAX).unwrap_err(),
        &["18446744073709551615", "3458764513820540926"],
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

#[test]
fn replay_line_errors_name_the_field_and_the_expected_format() {
    let text = LineError::Missing("period_s").to_string();
    assert!(
        text.contains("<period_s>") && text.contains("<now_ns> <key> <max_burst>"),
        "{text}"
    );
    let text = not_an_integer("count", "two").to_string();
    assert!(text.contains("<count>") && text.contains("two"), "{text}");
    let text = LineError::NegativeQuantity(-3).to_string();
    assert!(text.contains("quantity") && text.contains("-3"), "{text}");
    let text = LineError::NegativeTime(-1).to_string();
    assert!(text.contains("now_ns") && text.contains("-1"), "{text}");
}
