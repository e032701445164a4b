//! Time at its edges: timestamps beyond [`Timestamp::MAX`] are typed errors and adding to a
//! timestamp saturates; deciding at `Timestamp::MAX` with the largest tolerance or a cost of
//! `u64::MAX` neither overflows nor panics; and time going backwards (a caller's clock, a
//! reordered log) is never more generous than the later time allows, for a `Funnel`, a
//! `Limiter` key and a slot reused by another key.

use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::replay::Replay;
use funnel::{Clock, Decision, Error, Funnel, Limiter, Outcome, Quota, Timestamp};
use funnel_testkit::Rng;

const MAX_TOLERANCE_NANOS: u64 = Quota::MAX_TOLERANCE_NANOS;

const S: u64 = 1_000_000_000;
/// `Timestamp::MAX` in nanoseconds, as documented: `3 * 2^60 - 32`.
const MAX_NANOS: u64 = 3 * (1 << 60) - 32;

fn at(nanos: u64) -> Timestamp {
    Timestamp::from_nanos(nanos).unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
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
            nanos: u128::from(MAX_NANOS) + 1,
            max_nanos: MAX_NANOS,
        })
    );
    assert_eq!(
        Timestamp::from_nanos(u64::MAX),
        Err(Error::TimeOutOfRange {
            nanos: u128::from(u64::MAX),
            max_nanos: MAX_NANOS,
        })
    );
    assert_eq!(
        Timestamp::from_duration(Duration::MAX),
        Err(Error::TimeOutOfRange {
            nanos: Duration::MAX.as_nanos(),
            max_nanos: MAX_NANOS,
        })
    );
    assert_eq!(
        Timestamp::from_duration(Duration::from_nanos(MAX_NANOS + 1)),
        Err(Error::TimeOutOfRange {
            nanos: u128::from(MAX_NANOS) + 1,
            max_nanos: MAX_NANOS,
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
    let both = Both::new(Quota::per_period(1, Duration::from_nanos(max)).unwrap());
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
    let both = Both::new(
        Quota::per_period(1, Duration::from_nanos(1))
            .unwrap()
            .with_limit(max)
            .unwrap(),
    );
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
            let _ = both.check(rng.below(limit + 1), at(now));
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
