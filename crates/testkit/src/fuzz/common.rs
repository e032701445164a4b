//! Shared by the fuzz bodies: input decoding that never fails, an independent statement of
//! which quotas are valid (the reference model, [`crate::model`], assumes a valid quota and
//! does not check), and the checks every [`Decision`] must pass.

use std::ops::RangeInclusive;
use std::time::Duration;

use arbitrary::Unstructured;
use funnel::{Decision, Error, Funnel, Limiter, Outcome, Quota, Timestamp};

const MAX_TOLERANCE_NANOS: u64 = Quota::MAX_TOLERANCE_NANOS;

use crate::model::ModelQuota;

/// The fuzzer's bytes, read as choices. Every read succeeds: once the bytes run out, each
/// choice is the smallest one, and [`Input::more`] turns false so the op loops end.
pub struct Input<'a> {
    u: Unstructured<'a>,
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input {
            u: Unstructured::new(data),
        }
    }

    /// Bytes are left.
    pub fn more(&self) -> bool {
        !self.u.is_empty()
    }

    pub fn u64_in(&mut self, range: RangeInclusive<u64>) -> u64 {
        let lo = *range.start();
        self.u.int_in_range(range).unwrap_or(lo)
    }

    pub fn usize_in(&mut self, range: RangeInclusive<usize>) -> usize {
        let lo = *range.start();
        self.u.int_in_range(range).unwrap_or(lo)
    }

    /// One of `n` choices, `0..n`.
    pub fn pick(&mut self, n: usize) -> usize {
        self.usize_in(0..=n - 1)
    }

    pub fn u64(&mut self) -> u64 {
        self.u.arbitrary().unwrap_or_default()
    }

    pub fn i64(&mut self) -> i64 {
        self.u.arbitrary().unwrap_or_default()
    }

    pub fn u16(&mut self) -> u16 {
        self.u.arbitrary().unwrap_or_default()
    }

    pub fn bool(&mut self) -> bool {
        self.u.arbitrary().unwrap_or_default()
    }

    /// True about once in `n` reads.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.u.ratio(1, n).unwrap_or(false)
    }

    /// Up to `max` raw bytes.
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let n = self.usize_in(0..=max).min(self.u.len());
        self.u.bytes(n).unwrap_or_default()
    }

    /// A span of nanoseconds biased towards the edges of a quota with emission interval `t`
    /// and tolerance `tau`: zero, a few ns, `k*t +- 1`, `tau +- 1`, seconds, or anything.
    pub fn span(&mut self, t: u64, tau: u64) -> u64 {
        match self.pick(8) {
            0 => 0,
            1 => self.u64_in(1..=1_000),
            2 => {
                let k = self.u64_in(1..=4);
                (t.saturating_mul(k)).saturating_sub(1) + self.u64_in(0..=2)
            }
            3 => tau.saturating_sub(1) + self.u64_in(0..=2),
            4 => self.u64_in(0..=u64::from(u32::MAX)),
            5 => self.u64_in(1..=10_000) * 1_000_000_000,
            6 => self.u64_in(0..=tau.saturating_mul(2)),
            _ => self.u64(),
        }
    }

    /// A cost for a quota of `limit`: mostly `0..=limit+2`, sometimes enormous.
    pub fn cost(&mut self, limit: u64) -> u64 {
        match self.pick(16) {
            0 => u64::MAX,
            1 => self.u64(),
            2 => limit,
            3 => limit.saturating_add(1),
            _ => self.u64_in(0..=limit.saturating_add(2)),
        }
    }

    /// A duration: a period for a quota. Mostly sane (ns to hours), sometimes anything.
    pub fn period(&mut self) -> Duration {
        match self.pick(8) {
            0 => Duration::from_nanos(self.u64_in(0..=10_000)),
            1 => Duration::from_millis(self.u64_in(0..=10_000)),
            2..=4 => Duration::from_secs(self.u64_in(0..=3_600)),
            5 => Duration::from_nanos(self.u64()),
            6 => Duration::new(self.u64(), self.u64_in(0..=999_999_999) as u32),
            _ => Duration::from_secs(self.u64_in(0..=100 * 365 * 86_400)),
        }
    }

    /// A count of actions per period or a burst: mostly small, sometimes anything.
    pub fn small_or_any(&mut self, small: u64) -> u64 {
        match self.pick(8) {
            0 => self.u64(),
            1 => u64::MAX - self.u64_in(0..=2),
            _ => self.u64_in(0..=small),
        }
    }
}

/// How the crate documents quota validation, written out independently: the model quota a
/// constructor must accept, or the exact error it must give.
pub mod expect {
    use super::*;

    fn tolerance_too_large(t: u128, limit: u128) -> Error {
        Error::ToleranceTooLarge {
            tolerance_nanos: t.saturating_mul(limit),
            max_nanos: MAX_TOLERANCE_NANOS,
        }
    }

    /// `with_limit` on a quota of interval `t`: `Quota::from_parts`.
    pub fn from_parts(t: u128, limit: u128) -> Result<ModelQuota, Error> {
        if limit == 0 {
            return Err(Error::ZeroLimit);
        }
        if t * limit > u128::from(MAX_TOLERANCE_NANOS) {
            return Err(tolerance_too_large(t, limit));
        }
        Ok(ModelQuota {
            t: t as i128,
            limit: limit as i128,
        })
    }

    /// `count` per `period` with a burst capacity of `limit`.
    pub fn with_count(limit: u128, count: u64, period: Duration) -> Result<ModelQuota, Error> {
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
        if t > u128::from(u64::MAX) {
            return Err(tolerance_too_large(t, limit));
        }
        from_parts(t, limit)
    }

    pub fn new(max_burst: u64, count: u64, period: Duration) -> Result<ModelQuota, Error> {
        if max_burst == u64::MAX {
            return Err(Error::BurstTooLarge { max_burst });
        }
        with_count(u128::from(max_burst) + 1, count, period)
    }

    pub fn from_cl_throttle(
        max_burst: i64,
        count: i64,
        period_s: i64,
    ) -> Result<ModelQuota, Error> {
        for (argument, value) in [
            ("max_burst", max_burst),
            ("count", count),
            ("period", period_s),
        ] {
            if value < 0 {
                return Err(Error::Negative { argument, value });
            }
        }
        new(
            max_burst as u64,
            count as u64,
            Duration::from_secs(period_s as u64),
        )
    }

    pub fn timestamp(nanos: u64) -> Result<u64, Error> {
        if nanos <= Timestamp::MAX.as_nanos() {
            Ok(nanos)
        } else {
            Err(Error::TimeOutOfRange {
                nanos: u128::from(nanos),
                max_nanos: Timestamp::MAX.as_nanos(),
            })
        }
    }
}

/// Asserts that an engine constructor's answer is the expected one, and that an accepted
/// quota reports the expected interval, limit and tolerance. Returns the quota and its model.
pub fn same_quota(
    what: &str,
    got: Result<Quota, Error>,
    expected: Result<ModelQuota, Error>,
) -> Option<(Quota, ModelQuota)> {
    match (got, expected) {
        (Ok(q), Ok(m)) => {
            assert_eq!(
                q.emission_interval().as_nanos() as i128,
                m.t,
                "{what}: interval of {q:?}"
            );
            assert_eq!(i128::from(q.limit()), m.limit, "{what}: limit of {q:?}");
            assert_eq!(
                i128::from(q.max_burst()),
                m.limit - 1,
                "{what}: max_burst of {q:?}"
            );
            assert_eq!(
                q.tolerance().as_nanos() as i128,
                m.t * m.limit,
                "{what}: tolerance of {q:?}"
            );
            Some((q, m))
        }
        (Err(e), Err(x)) => {
            assert_eq!(e, x, "{what}: wrong error");
            assert!(!e.to_string().is_empty());
            None
        }
        (got, expected) => panic!("{what}: engine says {got:?}, expected {expected:?}"),
    }
}

/// A quota that is always valid, small enough that costs and bursts collide often:
/// `max_burst` 0..=7, 1..=10 actions per 1 ns .. 100 s.
pub fn small_quota(input: &mut Input) -> (Quota, ModelQuota) {
    let max_burst = input.u64_in(0..=7);
    let count = input.u64_in(1..=10);
    let period = match input.pick(4) {
        0 => Duration::from_nanos(input.u64_in(count..=count * 2_000)),
        1 => Duration::from_millis(input.u64_in(1..=5_000)),
        _ => Duration::from_secs(input.u64_in(1..=100)),
    };
    let got = Quota::from_cl_throttle_period(max_burst, count, period);
    same_quota("small quota", got, expect::new(max_burst, count, period))
        .expect("a small quota is valid")
}

/// A quota from any constructor with any arguments (errors are fine, and must be the documented
/// ones); `None` when the arguments were rejected.
pub fn any_quota(input: &mut Input) -> Option<(Quota, ModelQuota)> {
    let count = input.small_or_any(2_000);
    match input.pick(7) {
        0 | 1 => {
            let max_burst = input.small_or_any(20);
            let period = input.period();
            same_quota(
                "Quota::from_cl_throttle_period",
                Quota::from_cl_throttle_period(max_burst, count, period),
                expect::new(max_burst, count, period),
            )
        }
        2 => {
            let (b, c, p) = match input.pick(3) {
                0 => (input.i64(), input.i64(), input.i64()),
                _ => (
                    input.u64_in(0..=20) as i64 - 1,
                    input.u64_in(0..=200) as i64 - 1,
                    input.u64_in(0..=10_000) as i64 - 1,
                ),
            };
            same_quota(
                "Quota::from_cl_throttle",
                Quota::from_cl_throttle(b, c, p),
                expect::from_cl_throttle(b, c, p),
            )
        }
        3 => {
            let (got, secs) = match input.pick(3) {
                0 => (Quota::per_second(count), 1),
                1 => (Quota::per_minute(count), 60),
                _ => (Quota::per_hour(count), 3_600),
            };
            let expected = expect::with_count(u128::from(count), count, Duration::from_secs(secs));
            same_quota("Quota::per_*", got, expected)
        }
        4 => {
            let period = input.period();
            same_quota(
                "Quota::per_period",
                Quota::per_period(count, period),
                expect::with_count(u128::from(count), count, period),
            )
        }
        _ => {
            // with_limit on a valid quota, or CL.THROTTLE's max_burst at its emission interval.
            let (base, m) = small_quota(input);
            let x = input.small_or_any(1_000);
            if input.bool() {
                same_quota(
                    "Quota::with_limit",
                    base.with_limit(x),
                    expect::from_parts(m.t as u128, u128::from(x)),
                )
            } else {
                let period = base.emission_interval();
                same_quota(
                    "Quota::from_cl_throttle_period (one per emission interval)",
                    Quota::from_cl_throttle_period(x, 1, period),
                    expect::new(x, 1, period),
                )
            }
        }
    }
}

/// The checks every decision passes whatever the funnel's history: the outcome, the flags and
/// the five integers agree with each other, `remaining <= limit`, a retry only when limited or
/// turned away, and an allowed request fills at most the tolerance.
pub fn consistent(d: &Decision, quota: &Quota, n: u64) {
    let cl = d.to_cl_throttle();
    let allowed = matches!(d.outcome(), Outcome::Allowed | Outcome::AllowedUntracked);
    assert_eq!(d.is_allowed(), allowed, "{d:?}");
    assert_eq!(cl[0], i64::from(!allowed), "{d:?}");
    assert_eq!(d.limit(), quota.limit(), "{d:?}");
    assert_eq!(cl[1], i64::try_from(quota.limit()).unwrap(), "{d:?}");
    assert!(d.remaining() <= quota.limit(), "{d:?}");
    // CL.THROTTLE's remaining divides truncated microseconds: never below the exact one, but
    // it is not bounded by the limit (T = 1999 ns counts 1 us per action: about 2x the limit).
    assert!(cl[2] >= 0 && cl[2] as u64 >= d.remaining(), "{d:?}: {cl:?}");
    assert!(cl[4] >= 0, "{d:?}: {cl:?}");
    let limited = matches!(d.outcome(), Outcome::Limited | Outcome::TurnedAway);
    assert_eq!(d.retry_after().is_some(), limited, "{d:?}");
    assert_eq!(cl[3] >= 0, limited, "{d:?}: {cl:?}");
    assert_eq!(
        d.cost_exceeds_limit(),
        d.outcome() == Outcome::CostExceedsLimit,
        "{d:?}"
    );
    assert_eq!(
        n > quota.limit(),
        d.outcome() == Outcome::CostExceedsLimit,
        "{d:?} for cost {n}"
    );
    if let Some(retry) = d.retry_after() {
        assert!(!retry.is_zero(), "{d:?}: limited with nothing to wait for");
    }
    if allowed {
        let charged = Duration::from_nanos(quota.emission_interval().as_nanos() as u64 * n);
        assert!(
            d.reset_after() <= quota.tolerance(),
            "{d:?}: allowed beyond the tolerance"
        );
        assert!(
            d.reset_after() >= charged,
            "{d:?}: charged less than {n} units"
        );
    }
}

/// The arrival time stored for `key`, read without side effects: a peek at time zero reports
/// `reset_after = TAT - 0` whether it is allowed or not (0 when the key holds no slot or was
/// reset).
pub fn stored_tat<K: std::hash::Hash + ?Sized, C: funnel::Clock>(
    limiter: &Limiter<K, C>,
    key: &K,
) -> u64 {
    limiter
        .peek_at(key, Timestamp::ZERO)
        .reset_after()
        .as_nanos() as u64
}

/// [`stored_tat`] for a [`Funnel`].
pub fn funnel_tat<C: funnel::Clock>(funnel: &Funnel<C>) -> u64 {
    funnel
        .check_n_at(0, Timestamp::ZERO)
        .reset_after()
        .as_nanos() as u64
}

/// redis-cell's seconds, as the model rounds them.
pub fn secs(nanos: u64) -> i64 {
    crate::model::secs(i128::from(nanos)) as i64
}

/// What a body has exercised, counted per thread, so the stable replay test can check that the
/// committed corpus still reaches the interesting paths (a change in input decoding would
/// otherwise silently stop exercising eviction). The fuzzer ignores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Event {
    NewKey,
    RecoveredEviction,
    ForcedEviction,
    TurnedAway,
    AllowedUntracked,
    Allowed,
    Limited,
    CostExceedsLimit,
    ResetOfATrackedKey,
    ClockAtMax,
    QuotaRejected,
    TimeRejected,
    TimeWentBack,
    LineRejected,
    LineReplied,
    SlotRecycledUnderBackwardTime,
}

const EVENTS: usize = Event::SlotRecycledUnderBackwardTime as usize + 1;

impl Event {
    pub const ALL: [Event; EVENTS] = [
        Event::NewKey,
        Event::RecoveredEviction,
        Event::ForcedEviction,
        Event::TurnedAway,
        Event::AllowedUntracked,
        Event::Allowed,
        Event::Limited,
        Event::CostExceedsLimit,
        Event::ResetOfATrackedKey,
        Event::ClockAtMax,
        Event::QuotaRejected,
        Event::TimeRejected,
        Event::TimeWentBack,
        Event::LineRejected,
        Event::LineReplied,
        Event::SlotRecycledUnderBackwardTime,
    ];
}

thread_local! {
    static SEEN: std::cell::Cell<[u64; EVENTS]> = const { std::cell::Cell::new([0; EVENTS]) };
}

/// Counts one `event` on this thread.
pub fn saw(event: Event) {
    SEEN.with(|seen| {
        let mut counts = seen.get();
        counts[event as usize] += 1;
        seen.set(counts);
    });
}

/// How often this thread saw `event` since the last [`clear_seen`].
pub fn seen(event: Event) -> u64 {
    SEEN.with(|seen| seen.get()[event as usize])
}

/// The events this thread saw, for a log line.
pub fn seen_summary() -> String {
    let seen: Vec<String> = Event::ALL
        .iter()
        .filter(|e| seen(**e) > 0)
        .map(|e| format!("{e:?} {}", seen(*e)))
        .collect();
    seen.join(", ")
}

pub fn clear_seen() {
    SEEN.with(|seen| seen.set([0; EVENTS]));
}
