//! Fuzz body `ops`: an arbitrary sequence of operations on a keyed [`Limiter`] with a tiny
//! table, compared after every operation with the reference [`Model`] of CL.THROTTLE.
//!
//! The input chooses a capacity of 1..=16 keys (one to three buckets, so lazy and forced
//! eviction happen all the time; sometimes 32 or 64), whether the table may grow (a third of
//! inputs: up to 2 to 64 times that, so growths, moves and drops of recovered keys happen
//! between operations), a [`WhenFull`] policy, the hasher seed
//! (fixed for the run, so a failure replays exactly), the limiter's quota and a
//! [`ManualClock`]; then up to
//! [`MAX_OPS`] operations over at most [`MAX_KEYS`] distinct `u16` keys: requests through every
//! public entry point (`check`, `check_n`, `check_at`, `check_n_at`, and `check_n` and
//! `check_n_at` through `with_quota` with per-call quotas, costs `0..=limit+2` and sometimes
//! enormous), peeks, resets and clock
//! advances (zero, a few ns, around `T` and the tolerance, seconds, up to saturating at
//! [`Timestamp::MAX`]). The clock never goes back (the keyed limiter forgets recovered funnels
//! lazily, which is only equivalent to the model while time is monotonic).
//!
//! # The bound check
//!
//! The model is unbounded; the limiter is not, and may legitimately answer differently in three
//! ways, each announced by a counter in [`Stats`]. Instead of excusing a wrong answer later,
//! when the evicted key comes back, the body *audits the whole key space after every
//! operation*: for every key it has used it reads the engine's stored arrival time (a peek at
//! time zero, which writes nothing, reports `reset_after = TAT`) and compares the key's debt
//! (`TAT > now`) with the model's. So the model and the engine agree on every key before each
//! operation, and then:
//!
//! * every decision other than [`Outcome::TurnedAway`] must give exactly the model's five
//!   integers, including [`Outcome::AllowedUntracked`] (a fresh funnel's answer);
//! * the stats may move only when the requested key owed nothing and the request would pass
//!   (`0 < n <= limit`): exactly one of `keys`, `recovered_evictions`, `forced_evictions`,
//!   `turned_away`, `admitted_untracked` goes up by one (or none, when the key still held a
//!   drained slot). `turned_away` goes up iff the decision is `TurnedAway` and the policy is
//!   `Deny`; `admitted_untracked` iff `AllowedUntracked` and `Allow`; `forced_evictions` only
//!   under `Evict`. Any of the last three needs every candidate slot of the key in debt: at
//!   least `min(capacity, 14)` keys (a key's candidates are the whole table or two buckets of
//!   7 slots each);
//! * `TurnedAway` must be `[1, limit, 0, r, r]` with `r` the exact debt of some key in debt
//!   (the least indebted candidate's), and leaves the requested key absent;
//! * `AllowedUntracked` leaves the requested key absent;
//! * in the audit, every key must match the model exactly, except the victims of forced
//!   evictions: exactly as many keys as `forced_evictions` went up by, never the requested key,
//!   each of which had debt in the model and is now *absent* in the engine. An evicted key
//!   therefore gains exactly what it owed and never more: it becomes a fresh funnel, not one
//!   with credit, and cannot be half-evicted (keeping a changed debt) or rebound to another
//!   key's funnel.
//!
//! After an accepted divergence the model is re-synchronised to the engine's state for that key
//! (the key is forgotten), so every later answer is again compared exactly. After every
//! operation `check_invariants` (no key bound twice, no RESERVED slot at rest, counters equal to
//! the bound slots) must pass and `len() <= capacity()`.
//!
//! The audit reads every stored arrival time through the packed slot word, so this target also
//! covers the private codec of `src/state.rs` (TAT and generation round trips across binds,
//! rebinds, resets and times up to [`Timestamp::MAX`]).

use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::{Clock, Decision, Limiter, Outcome, Quota, Stats, Timestamp, WhenFull};

use super::common::{self, saw, Event, Input};
use crate::model::{Model, ModelQuota};

/// Operations per input.
pub const MAX_OPS: usize = 400;
/// Distinct keys per input: enough to overflow a 16-slot table several times.
pub const MAX_KEYS: usize = 40;
/// Per-call quotas per input, besides the limiter's own.
const MAX_QUOTAS: usize = 4;

/// Runs one input; panics on any divergence.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut h = Harness::new(&mut input);
    let mut ops = 0;
    while input.more() && ops < MAX_OPS {
        h.step(&mut input);
        ops += 1;
    }
}

/// The ways a request reaches the table.
#[derive(Clone, Copy, Debug)]
enum Api {
    Check,
    CheckN,
    CheckAt,
    CheckNAt,
    WithQuota,
    WithQuotaAt,
    Peek,
    PeekAt,
}

struct Harness {
    limiter: Limiter<u16, ManualClock>,
    clock: ManualClock,
    when_full: WhenFull,
    /// The table may grow: its key count also moves when a growth drops recovered keys, and
    /// moves may take recovered slots, so only the full-table counters are checked per step.
    growable: bool,
    model: Model,
    /// Every key used so far: the audited key space.
    keys: Vec<u16>,
    /// The limiter's quota first, then per-call quotas.
    quotas: Vec<(Quota, ModelQuota)>,
    /// The clock's time, ns.
    now: u64,
}

impl Harness {
    fn new(input: &mut Input) -> Harness {
        // Mostly 1..=16 keys, so the table is full all the time; sometimes 32 or 64, so that a
        // key's two candidate buckets are a strict part of the table.
        let capacity = match input.usize_in(1..=16) {
            16 => [16, 32, 64][input.pick(3)],
            small => small,
        };
        let when_full = [WhenFull::Evict, WhenFull::Deny, WhenFull::Allow][input.pick(3)];
        let seed = input.u64();
        let quota = common::small_quota(input);
        let start = if input.one_in(8) {
            input.u64_in(0..=Timestamp::MAX.as_nanos())
        } else {
            0
        };
        let clock = ManualClock::starting_at(Timestamp::from_nanos(start).unwrap());
        let growable = input.one_in(3);
        let mut builder = Limiter::builder(quota.0)
            .capacity(capacity)
            .seed(seed)
            .when_full(when_full)
            .clock(clock.clone());
        if growable {
            builder = builder.max_capacity(capacity * [2, 4, 16, 64][input.pick(4)]);
        }
        let limiter = builder.build().expect("a tiny table builds");
        let slots = limiter.capacity();
        if growable {
            let buckets = slots / 7;
            assert!(
                slots >= capacity && slots % 7 == 0 && buckets.is_power_of_two(),
                "{slots} slots for {capacity}, growable"
            );
        } else {
            assert!(
                slots >= capacity && slots < capacity + 7 && slots % 7 == 0,
                "{slots} slots for {capacity}"
            );
        }
        assert!(limiter.is_empty());
        assert_eq!(limiter.quota(), &quota.0);
        Harness {
            limiter,
            clock,
            when_full,
            growable,
            model: Model::new(),
            keys: Vec::new(),
            quotas: vec![quota],
            now: start,
        }
    }

    fn step(&mut self, input: &mut Input) {
        match input.pick(16) {
            0..=8 => {
                let key = self.key(input);
                let api = match input.pick(8) {
                    0 => Api::Check,
                    1 => Api::CheckN,
                    2 => Api::CheckAt,
                    3 => Api::CheckNAt,
                    4 => Api::WithQuota,
                    5 => Api::WithQuotaAt,
                    6 => Api::Peek,
                    _ => Api::PeekAt,
                };
                let q = match api {
                    Api::WithQuota | Api::WithQuotaAt => input.pick(self.quotas.len()),
                    _ => 0,
                };
                let n = match api {
                    Api::Check | Api::CheckAt => 1,
                    Api::Peek | Api::PeekAt => 0,
                    _ => input.cost(self.quotas[q].0.limit()),
                };
                self.request(key, q, n, api);
            }
            9..=12 => self.advance(input),
            13 => {
                let key = self.key(input);
                self.reset(key);
            }
            14 => {
                if self.quotas.len() <= MAX_QUOTAS {
                    let quota = if input.bool() {
                        common::any_quota(input)
                    } else {
                        Some(common::small_quota(input))
                    };
                    self.quotas.extend(quota);
                }
            }
            _ => {
                // Idle ops still must not disturb anything.
                assert_eq!(self.limiter.now().as_nanos(), self.now);
            }
        }
        self.check_table();
    }

    /// A key: a new one while there is room for it, else one already used.
    fn key(&mut self, input: &mut Input) -> u16 {
        if self.keys.is_empty() || (self.keys.len() < MAX_KEYS && input.one_in(3)) {
            let key = input.u16();
            if !self.keys.contains(&key) {
                self.keys.push(key);
            }
            key
        } else {
            self.keys[input.pick(self.keys.len())]
        }
    }

    fn advance(&mut self, input: &mut Input) {
        let (quota, _) = self.quotas[input.pick(self.quotas.len())];
        let span = if input.one_in(64) {
            Duration::MAX
        } else {
            let t = quota.emission_interval().as_nanos() as u64;
            Duration::from_nanos(input.span(t, quota.tolerance().as_nanos() as u64))
        };
        let then = Timestamp::from_nanos(self.now)
            .unwrap()
            .saturating_add(span);
        assert!(then.as_nanos() >= self.now && then <= Timestamp::MAX);
        if input.bool() {
            self.clock.advance(span);
        } else {
            self.clock.set(then);
        }
        assert_eq!(
            self.clock.now(),
            then,
            "the clock saturates like Timestamp::saturating_add"
        );
        self.now = then.as_nanos();
        if then == Timestamp::MAX {
            saw(Event::ClockAtMax);
        }
    }

    fn request(&mut self, key: u16, q: usize, n: u64, api: Api) {
        let (quota, mq) = self.quotas[q];
        let now = Timestamp::from_nanos(self.now).unwrap();
        let l = &self.limiter;
        let before = l.stats();
        let d: Decision = match api {
            Api::Check => l.check(&key),
            Api::CheckN => l.check_n(&key, n),
            Api::CheckAt => l.check_at(&key, now),
            Api::CheckNAt => l.check_n_at(&key, n, now),
            Api::WithQuota => l.with_quota(quota).check_n(&key, n),
            Api::WithQuotaAt => l.with_quota(quota).check_n_at(&key, n, now),
            Api::Peek => l.peek(&key),
            Api::PeekAt => l.peek_at(&key, now),
        };
        let after = l.stats();
        let what = format!(
            "{api:?} key {key} cost {n} at {} under {mq:?} ({:?})",
            self.now, self.when_full
        );
        common::consistent(&d, &quota, n);

        let kb = key.to_le_bytes();
        let owed = self.model.tat(&kb, i128::from(self.now));
        let expected = self
            .model
            .throttle(&kb, i128::from(self.now), mq, i128::from(n));
        let may_create = owed.is_none() && n > 0 && n <= quota.limit();
        let delta = Delta::between(&before, &after, self.growable);
        if delta.total() > 0 && !self.growable {
            assert!(
                may_create && delta.total() == 1,
                "{what}: stats moved {delta:?}"
            );
        }
        let at_max = self.limiter.capacity() == self.limiter.max_capacity();
        if self.growable && delta.turned_away + delta.untracked > 0 {
            assert!(at_max, "{what}: {delta:?} while the table could still grow");
        }
        if delta.forced > 0 && self.growable && !at_max {
            // The last resort of a move whose target buckets were full (`docs/design/growing.md`);
            // the audit below still holds the victim to its debt.
            saw(Event::ForcedEviction);
        } else if delta.turned_away + delta.untracked + delta.forced > 0 {
            let slots = self.limiter.capacity().min(14);
            let in_debt = self.in_debt().len()
                - usize::from(self.model.tat(&kb, i128::from(self.now)).is_some());
            assert!(
                in_debt >= slots,
                "{what}: table full ({delta:?}) with only {in_debt} keys in debt"
            );
        }
        assert_eq!(
            delta.turned_away == 1,
            d.outcome() == Outcome::TurnedAway,
            "{what}: {d:?} {delta:?}"
        );
        assert_eq!(
            delta.untracked == 1,
            d.outcome() == Outcome::AllowedUntracked,
            "{what}: {d:?} {delta:?}"
        );
        if delta.forced > 0 {
            assert_eq!(
                self.when_full,
                WhenFull::Evict,
                "{what}: forced eviction under another policy"
            );
            saw(Event::ForcedEviction);
        }
        if delta.recovered > 0 {
            saw(Event::RecoveredEviction);
        }
        if delta.keys > 0 {
            saw(Event::NewKey);
        }
        saw(match d.outcome() {
            Outcome::Allowed => Event::Allowed,
            Outcome::Limited => Event::Limited,
            Outcome::CostExceedsLimit => Event::CostExceedsLimit,
            Outcome::TurnedAway => Event::TurnedAway,
            _ => Event::AllowedUntracked,
        });

        match d.outcome() {
            Outcome::TurnedAway => {
                assert_eq!(
                    self.when_full,
                    WhenFull::Deny,
                    "{what}: turned away under another policy"
                );
                assert_eq!(
                    expected[0], 0,
                    "{what}: turned away a request the model denies"
                );
                // The engine did not charge the key: neither does the model.
                self.model.reset(&kb);
                let r = d.retry_after().unwrap().as_nanos() as u64;
                assert_eq!(d.reset_after().as_nanos() as u64, r, "{what}: {d:?}");
                assert_eq!(d.remaining(), 0, "{what}: {d:?}");
                let limit = i64::try_from(quota.limit()).unwrap();
                let s = common::secs(r);
                assert_eq!(d.to_cl_throttle(), [1, limit, 0, s, s], "{what}: {d:?}");
                let debts = self.in_debt();
                assert!(
                    debts.iter().any(|&(_, owed)| owed == r),
                    "{what}: retry {r} ns is no tracked key's debt: {debts:?}"
                );
            }
            Outcome::AllowedUntracked => {
                assert_eq!(
                    self.when_full,
                    WhenFull::Allow,
                    "{what}: untracked under another policy"
                );
                assert_eq!(d.to_cl_throttle(), expected, "{what}: {d:?}");
                // The engine did not record the key: neither does the model.
                self.model.reset(&kb);
            }
            _ => assert_eq!(
                d.to_cl_throttle(),
                expected,
                "{what}: {d:?} (stats {before:?} -> {after:?})"
            ),
        }
        self.audit(delta.forced, Some(key), &what);
    }

    fn reset(&mut self, key: u16) {
        let kb = key.to_le_bytes();
        let owed = self.model.tat(&kb, i128::from(self.now));
        let before = self.limiter.stats();
        let tracked = self.limiter.reset(&key);
        assert_eq!(self.limiter.stats(), before, "reset {key}: stats moved");
        if owed.is_some() {
            assert!(
                tracked,
                "reset {key}: a key in debt ({owed:?}) was not tracked"
            );
            saw(Event::ResetOfATrackedKey);
        }
        self.model.reset(&kb);
        assert_eq!(
            common::stored_tat(&self.limiter, &key),
            0,
            "reset {key}: debt left"
        );
        self.audit(0, None, &format!("reset {key}"));
    }

    /// Keys in debt in the model, with what they owe (ns).
    fn in_debt(&self) -> Vec<(u16, u64)> {
        let now = i128::from(self.now);
        self.keys
            .iter()
            .filter_map(|&k| {
                self.model
                    .tat(&k.to_le_bytes(), now)
                    .map(|tat| (k, (tat - now) as u64))
            })
            .collect()
    }

    /// Compares every key's debt with the model; `forced` keys other than `requester` may have
    /// lost all of theirs (and are then forgotten by the model too).
    fn audit(&mut self, forced: u64, requester: Option<u16>, what: &str) {
        let before = self.limiter.stats();
        let now = i128::from(self.now);
        let mut victims = Vec::new();
        for &key in &self.keys {
            let kb = key.to_le_bytes();
            let tat = i128::from(common::stored_tat(&self.limiter, &key));
            let engine = (tat > now).then_some(tat);
            let model = self.model.tat(&kb, now);
            if engine == model {
                continue;
            }
            assert!(
                model.is_some() && engine.is_none() && Some(key) != requester,
                "{what}: key {key} owes until {engine:?} in the engine, {model:?} in the model"
            );
            victims.push(key);
        }
        assert_eq!(
            victims.len() as u64,
            forced,
            "{what}: keys that lost their debt: {victims:?}"
        );
        for key in victims {
            self.model.reset(&key.to_le_bytes());
        }
        // Peeks charge and create nothing; in a growing table they may move their key to its
        // bucket of the new size (`nudge`), which the growth counters show.
        let after = self.limiter.stats();
        let policy = |s: &Stats| {
            (
                s.recovered_evictions,
                s.forced_evictions,
                s.turned_away,
                s.admitted_untracked,
                if self.growable { 0 } else { s.keys },
            )
        };
        assert_eq!(
            policy(&after),
            policy(&before),
            "{what}: peeks moved the stats"
        );
    }

    fn check_table(&self) {
        if let Err(e) = self.limiter.check_invariants() {
            panic!("invariants: {e}");
        }
        let stats = self.limiter.stats();
        assert!(self.limiter.len() <= self.limiter.capacity(), "{stats:?}");
        assert_eq!(self.limiter.len(), stats.keys);
        assert_eq!(self.limiter.is_empty(), stats.keys == 0);
        assert!(
            stats.keys <= self.keys.len(),
            "{stats:?} with {} keys used",
            self.keys.len()
        );
    }
}

/// How much each counter went up.
#[derive(Debug, Default)]
struct Delta {
    keys: u64,
    recovered: u64,
    forced: u64,
    turned_away: u64,
    untracked: u64,
}

impl Delta {
    /// The counters' rises from `a` to `b`. A growable table's key count also falls (a growth
    /// drops recovered keys): not compared.
    fn between(a: &Stats, b: &Stats, growable: bool) -> Delta {
        let up = |x: u64, y: u64| {
            assert!(y >= x, "a counter went down: {a:?} -> {b:?}");
            y - x
        };
        Delta {
            keys: if growable {
                0
            } else {
                up(a.keys as u64, b.keys as u64)
            },
            recovered: up(a.recovered_evictions, b.recovered_evictions),
            forced: up(a.forced_evictions, b.forced_evictions),
            turned_away: up(a.turned_away, b.turned_away),
            untracked: up(a.admitted_untracked, b.admitted_untracked),
        }
    }

    fn total(&self) -> u64 {
        self.keys + self.recovered + self.forced + self.turned_away + self.untracked
    }
}
