//! Fuzz body `state`: arbitrary quotas, costs and times straight into the arithmetic through
//! the public single-key [`Funnel`] with caller time, compared with the reference model.
//!
//! * Quotas come from every public constructor with any arguments (`u64`, `i64`, any
//!   [`Duration`]); an error is fine but must be the documented one (`common::expect`), and an
//!   accepted quota must report the expected interval, limit and tolerance.
//! * Then up to [`MAX_OPS`] requests, peeks and resets at arbitrary times (any `u64`, checked
//!   against [`Timestamp::from_nanos`]; then edges: `0`, [`Timestamp::MAX`], the stored arrival
//!   time `+- 1`, `+- T`, `+- tau`), **including times that go backwards**. The model is
//!   [`model::throttle`] on the arrival time the funnel must hold: a funnel never forgets its
//!   arrival time, so it is exact for any order of times.
//! * Each decision must give the model's five integers, and exactly the nanoseconds behind
//!   them: `reset_after = max(TAT, now) [+ n*T] - now`, `retry_after = new - tau - now`,
//!   `remaining = floor((tau - reset_after) / T)`; `remaining <= limit`; a retry only when
//!   limited. A request that is not charged (a denial, a peek, a cost above the limit) leaves
//!   the funnel unchanged: the peek before equals the peek after, and the stored arrival time
//!   (read by a peek at time zero) is the same. After every operation the stored arrival time
//!   equals the model's.
//! * Every request is mirrored on a keyed [`Limiter`] holding this one key: with no other key
//!   it can never evict, so its decisions must equal the funnel's bit for bit, and its stored
//!   arrival time too: this drives the packed slot word of `src/state.rs` (private) through
//!   the same extreme times.

use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::{Decision, Funnel, Limiter, Outcome, Quota, Timestamp};

use super::common::{self, saw, Event, Input};
use crate::model::{self, ModelQuota};

/// Operations per input.
pub const MAX_OPS: usize = 300;

/// Runs one input; panics on any divergence.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    // A few quotas, each checked against the documented validation; the last valid one runs.
    let mut chosen = None;
    for _ in 0..=input.pick(4) {
        if let Some(q) = common::any_quota(&mut input) {
            chosen = Some(q);
        }
    }
    let Some((quota, mq)) = chosen else {
        saw(Event::QuotaRejected);
        return;
    };
    let clock = ManualClock::new();
    let funnel = Funnel::with_clock(quota, clock.clone());
    let keyed = Limiter::<u8>::builder(quota)
        .capacity(1)
        .seed(input.u64())
        .clock(clock.clone())
        .build()
        .expect("a one-key table builds");
    let key = input.u16() as u8;
    let mut h = Harness {
        funnel,
        keyed,
        clock,
        key,
        quota,
        mq,
        tat: 0,
        now: 0,
    };
    let mut ops = 0;
    while input.more() && ops < MAX_OPS {
        h.step(&mut input);
        ops += 1;
    }
}

struct Harness {
    funnel: Funnel<ManualClock>,
    keyed: Limiter<u8, ManualClock>,
    clock: ManualClock,
    key: u8,
    quota: Quota,
    mq: ModelQuota,
    /// The arrival time the funnel must hold (0: never charged, or reset).
    tat: u64,
    now: u64,
}

impl Harness {
    fn step(&mut self, input: &mut Input) {
        self.now = self.time(input);
        match input.pick(12) {
            0 => {
                self.funnel.reset();
                self.keyed.reset(&self.key);
                self.tat = 0;
            }
            k => {
                let n = match k {
                    1 => 0,
                    2 => 1,
                    _ => input.cost(self.quota.limit()),
                };
                self.request(n, input.pick(3));
            }
        }
        assert_eq!(
            common::funnel_tat(&self.funnel),
            self.tat,
            "stored arrival time"
        );
        assert_eq!(
            common::stored_tat(&self.keyed, &self.key),
            self.tat,
            "keyed arrival time"
        );
        if let Err(e) = self.keyed.check_invariants() {
            panic!("invariants: {e}");
        }
        assert!(self.keyed.len() <= 1);
    }

    /// The next time: anything (checked against the documented range), or an edge of the
    /// funnel's state. May go backwards.
    fn time(&mut self, input: &mut Input) -> u64 {
        let max = Timestamp::MAX.as_nanos();
        let t = self.quota.emission_interval().as_nanos() as u64;
        let tau = self.quota.tolerance().as_nanos() as u64;
        let near = |base: u64, input: &mut Input| {
            let d = input.span(t, tau);
            if input.bool() {
                base.saturating_add(d)
            } else {
                base.saturating_sub(d)
            }
        };
        let nanos = match input.pick(8) {
            0 => {
                let any = input.u64();
                let got = Timestamp::from_nanos(any).map(Timestamp::as_nanos);
                assert_eq!(
                    got,
                    common::expect::timestamp(any),
                    "Timestamp::from_nanos({any})"
                );
                if got.is_err() {
                    saw(Event::TimeRejected);
                }
                any
            }
            1 => 0,
            2 => max - input.u64_in(0..=2),
            3 | 4 => near(self.tat, input),
            _ => near(self.now, input),
        };
        let nanos = nanos.min(max);
        if nanos < self.now {
            saw(Event::TimeWentBack);
        }
        if nanos == max {
            saw(Event::ClockAtMax);
        }
        nanos
    }

    fn request(&mut self, n: u64, api: usize) {
        let now = Timestamp::from_nanos(self.now).unwrap();
        let what = format!(
            "cost {n} at {} on TAT {} under {:?}",
            self.now, self.tat, self.mq
        );
        let peek_before = self.funnel.check_n_at(0, now);
        let d = match (api, n) {
            (0, 1) => self.funnel.check_at(now),
            (0, _) => self.funnel.check_n_at(n, now),
            (1, 0) => {
                self.clock.set(now);
                self.funnel.peek()
            }
            (1, 1) => {
                self.clock.set(now);
                self.funnel.check()
            }
            _ => {
                self.clock.set(now);
                self.funnel.check_n(n)
            }
        };
        common::consistent(&d, &self.quota, n);
        assert_ne!(d.outcome(), Outcome::TurnedAway, "{what}");
        assert_ne!(d.outcome(), Outcome::AllowedUntracked, "{what}");
        saw(match d.outcome() {
            Outcome::Allowed => Event::Allowed,
            Outcome::Limited => Event::Limited,
            _ => Event::CostExceedsLimit,
        });

        // The model, on the arrival time the funnel holds (None when never charged).
        let stored = (self.tat > 0).then_some(i128::from(self.tat));
        let (reply, after) = model::throttle(stored, i128::from(self.now), self.mq, i128::from(n));
        assert_eq!(d.to_cl_throttle(), reply, "{what}: {d:?}");

        // The exact nanoseconds behind the integers.
        let (t, limit, tau) = (
            self.mq.t as u64,
            self.quota.limit(),
            self.quota.tolerance().as_nanos() as u64,
        );
        let base = self.tat.max(self.now);
        let charged = n <= limit && base + n * t <= self.now + tau;
        let reset = if charged { base + n * t } else { base } - self.now;
        assert_eq!(d.is_allowed(), charged, "{what}: {d:?}");
        assert_eq!(
            d.reset_after(),
            Duration::from_nanos(reset),
            "{what}: {d:?}"
        );
        let retry =
            (n <= limit && !charged).then(|| Duration::from_nanos(base + n * t - tau - self.now));
        assert_eq!(d.retry_after(), retry, "{what}: {d:?}");
        assert_eq!(
            d.remaining(),
            tau.saturating_sub(reset) / t,
            "{what}: {d:?}"
        );

        // The same request on the keyed path, for the one key it holds.
        let kd: Decision = self.keyed.check_n_at(&self.key, n, now);
        assert_eq!(kd, d, "{what}: keyed path");

        if charged && n > 0 {
            assert_eq!(
                after,
                Some(i128::from(base + n * t)),
                "{what}: the model stores another TAT"
            );
            self.tat = base + n * t;
        } else {
            assert_eq!(
                self.funnel.check_n_at(0, now),
                peek_before,
                "{what}: an uncharged request moved the funnel"
            );
        }
    }
}
