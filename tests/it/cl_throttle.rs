//! CL.THROTTLE's five integers, exactly as redis-cell 0.5.0 answers them (the rules and the
//! examples are in docs/cl-throttle.md), through every public path that decides:
//! [`Funnel::check_n_at`], [`Limiter::with_quota`] and [`Replay::line`].
//!
//! * the worked examples of docs/cl-throttle.md and redis-cell's own unit-test sequence, one
//!   test per row and path (`through_funnel::...`, `through_limiter::...`, `through_replay::...`);
//! * rows whose emission interval is not a whole number of microseconds, where redis-cell's
//!   `remaining` (whole microseconds divided) can be one above [`Decision::remaining`] (exact
//!   nanoseconds);
//! * random sequences (seeded, the seed in every message) compared reply by reply with the plain
//!   i128 model, `funnel_testkit::model`.

use funnel_testkit::model;
use funnel_testkit::rng;

use std::collections::HashMap;
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::replay::{parse_line, Replay};
use funnel::{Clock, Decision, Funnel, Limiter, Quota, Timestamp};
use model::{Model, ModelQuota};
use rng::Rng;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

// ---------------------------------------------------------------------------------------------
// Driving CL.THROTTLE through one public path
// ---------------------------------------------------------------------------------------------

/// Which public path a scenario goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// One [`Funnel`] per key, built from the key's first quota, [`Funnel::check_n_at`].
    Funnel,
    /// One keyed [`Limiter`], through [`Limiter::with_quota`] with each call's quota.
    Limiter,
    /// [`Replay::line`]: text in, text out.
    Replay,
}

/// A stand-in for `redis-cli CL.THROTTLE ...` that answers through one path.
struct Cell {
    via: Via,
    funnels: HashMap<String, (Quota, Funnel<ManualClock>)>,
    limiter: Limiter<str, ManualClock>,
    replay: Replay,
}

impl Cell {
    fn new(via: Via) -> Cell {
        let limiter = Limiter::builder(Quota::per_second(1).unwrap())
            .capacity(1024)
            .clock(ManualClock::new())
            .seed(1)
            .build()
            .unwrap();
        Cell {
            via,
            funnels: HashMap::new(),
            limiter,
            replay: Replay::with_capacity(1024).unwrap(),
        }
    }

    /// `CL.THROTTLE <command>` at `now_ns`, the command being `<key> <max_burst> <count>
    /// <period> [<quantity>]`: the five integers and (except through replay) the decision.
    fn throttle(&mut self, now_ns: u64, command: &str) -> ([i64; 5], Option<Decision>) {
        if self.via == Via::Replay {
            let out = self.replay.line(format!("{now_ns} {command}").as_bytes());
            return (parse_reply(&out), None);
        }
        let (key, quota, quantity) = parse_command(command);
        let now = Timestamp::from_nanos(now_ns).unwrap();
        let d = match self.via {
            Via::Funnel => {
                let (q, funnel) = self
                    .funnels
                    .entry(key.to_owned())
                    .or_insert_with(|| (quota, Funnel::with_clock(quota, ManualClock::new())));
                assert_eq!(
                    *q, quota,
                    "a Funnel has one quota: scenario changed it for {key}"
                );
                funnel.check_n_at(quantity, now)
            }
            Via::Limiter => self
                .limiter
                .with_quota(quota)
                .check_n_at(key, quantity, now),
            Via::Replay => unreachable!(),
        };
        (d.to_cl_throttle(), Some(d))
    }

    /// Just the five integers.
    fn reply(&mut self, now_ns: u64, command: &str) -> [i64; 5] {
        self.throttle(now_ns, command).0
    }

    /// Keys holding state, where the path has a table (`None` for a bare Funnel).
    fn tracked_keys(&self) -> Option<usize> {
        match self.via {
            Via::Funnel => None,
            Via::Limiter => Some(self.limiter.len()),
            Via::Replay => Some(self.replay.limiter().len()),
        }
    }
}

fn parse_command(command: &str) -> (&str, Quota, u64) {
    let f: Vec<&str> = command.split_whitespace().collect();
    let int = |i: usize| f[i].parse::<i64>().unwrap();
    let quota = Quota::from_cl_throttle(int(1), int(2), int(3)).unwrap();
    let quantity = if f.len() > 4 {
        f[4].parse::<u64>().unwrap()
    } else {
        1
    };
    (f[0], quota, quantity)
}

fn parse_reply(out: &str) -> [i64; 5] {
    let v: Vec<i64> = out
        .split(' ')
        .map(|x| {
            x.parse()
                .unwrap_or_else(|_| panic!("not five integers: {out:?}"))
        })
        .collect();
    v.try_into()
        .unwrap_or_else(|_| panic!("not five integers: {out:?}"))
}

/// redis-cell's seconds, from the spec: truncate, then +1 when the fraction holds a whole ms.
fn cl_seconds(d: Duration) -> i64 {
    d.as_secs() as i64 + i64::from(d.subsec_millis() > 0)
}

// ---------------------------------------------------------------------------------------------
// The spec's "Observed replies" table, row by row
// ---------------------------------------------------------------------------------------------

/// `k 15 30 60` twenty times at `0, gap, 2*gap, ...`: 16 allowed counting remaining down from
/// 15 with reset growing 2 s a call, then limited with retry 2 s. Returns the time of the last
/// call.
fn twenty_calls_on_15_30_60(cell: &mut Cell, gap_ns: u64) -> u64 {
    let mut now = 0;
    for i in 0..20 {
        now = i * gap_ns;
        let expected = if i < 16 {
            [0, 16, 15 - i as i64, -1, 2 * (i as i64 + 1)]
        } else {
            [1, 16, 0, 2, 32]
        };
        assert_eq!(
            cell.reply(now, "k 15 30 60"),
            expected,
            "{:?}: call {}",
            cell.via,
            i + 1
        );
    }
    now
}

fn twenty_quick_calls_admit_sixteen_then_limit_with_retry_2(via: Via) {
    twenty_calls_on_15_30_60(&mut Cell::new(via), 0);
}

fn twenty_calls_spread_over_two_milliseconds_give_the_same_replies(via: Via) {
    twenty_calls_on_15_30_60(&mut Cell::new(via), 100 * US);
}

/// The spec's rows after the twenty calls, in order, each at the time of the last call: a
/// cost of 5 (limited, retry 10 s), then a peek (allowed, the funnel full).
const AFTER_TWENTY_CALLS: [(&str, [i64; 5]); 2] = [
    ("k 15 30 60 5", [1, 16, 0, 10, 32]),
    ("k 15 30 60 0", [0, 16, 0, -1, 32]),
];

/// The twenty calls, then the first `rows` of [`AFTER_TWENTY_CALLS`], each reply checked.
/// Returns the cell and the time of the last call.
fn twenty_calls_then(via: Via, rows: usize) -> (Cell, u64) {
    let mut cell = Cell::new(via);
    let now = twenty_calls_on_15_30_60(&mut cell, 0);
    for (command, reply) in &AFTER_TWENTY_CALLS[..rows] {
        assert_eq!(cell.reply(now, command), *reply, "{via:?}: {command}");
    }
    (cell, now)
}

fn then_a_cost_of_5_is_limited_with_retry_10(via: Via) {
    twenty_calls_then(via, 1);
}

fn then_a_peek_is_allowed_and_reports_the_full_funnel(via: Via) {
    let (mut cell, now) = twenty_calls_then(via, 2);
    // The peek charged nothing: the same limited reply as before it.
    assert_eq!(cell.reply(now, "k 15 30 60"), [1, 16, 0, 2, 32]);
}

fn then_a_cost_above_the_limit_is_limited_with_retry_minus_1(via: Via) {
    let (mut cell, now) = twenty_calls_then(via, 2);
    let (reply, d) = cell.throttle(now, "k 15 30 60 100");
    assert_eq!(reply, [1, 16, 0, -1, 32]);
    if let Some(d) = d {
        assert!(d.cost_exceeds_limit());
        assert_eq!(d.retry_after(), None);
    }
}

fn one_per_2_seconds_without_burst_admits_one_then_retry_2(via: Via) {
    let mut cell = Cell::new(via);
    assert_eq!(cell.reply(0, "k 0 1 2"), [0, 1, 0, -1, 2]);
    assert_eq!(cell.reply(0, "k 0 1 2"), [1, 1, 0, 2, 2]);
}

fn three_per_10_seconds_rounds_3_333_seconds_up_to_4(via: Via) {
    let mut cell = Cell::new(via);
    let (first, d) = cell.throttle(0, "k 0 3 10");
    assert_eq!(first, [0, 1, 0, -1, 4]);
    if let Some(d) = d {
        assert_eq!(d.reset_after(), Duration::from_nanos(3_333_333_333));
    }
    let (second, d) = cell.throttle(0, "k 0 3 10");
    assert_eq!(second, [1, 1, 0, 4, 4]);
    if let Some(d) = d {
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(3_333_333_333)));
    }
}

fn a_peek_on_a_fresh_key_reports_the_full_limit_and_creates_no_state(via: Via) {
    let mut cell = Cell::new(via);
    assert_eq!(cell.reply(0, "k 4 1 1 0"), [0, 5, 5, -1, 0]);
    assert!(
        matches!(cell.tracked_keys(), None | Some(0)),
        "{via:?}: a peek created a key"
    );
    // And the key is still fresh: the whole burst fits.
    assert_eq!(cell.reply(0, "k 4 1 1 5"), [0, 5, 0, -1, 5]);
}

fn the_whole_burst_at_once_empties_a_fresh_key(via: Via) {
    let mut cell = Cell::new(via);
    assert_eq!(cell.reply(0, "k 4 1 1 5"), [0, 5, 0, -1, 5]);
    assert_eq!(cell.tracked_keys().unwrap_or(1), 1);
}

// ---------------------------------------------------------------------------------------------
// redis-cell's unit test (cell/mod.rs, `it_rate_limits`): burst 4, 1/s, times in ms
// ---------------------------------------------------------------------------------------------

/// One case of redis-cell's unit test: at `ms`, `quantity` -> limited, remaining, reset, retry.
struct UnitCase {
    ms: u64,
    quantity: u64,
    limited: bool,
    remaining: u64,
    reset_ms: u64,
    retry_ms: Option<u64>,
}

const fn case(
    ms: u64,
    quantity: u64,
    limited: bool,
    remaining: u64,
    reset_ms: u64,
    retry_ms: Option<u64>,
) -> UnitCase {
    UnitCase {
        ms,
        quantity,
        limited,
        remaining,
        reset_ms,
        retry_ms,
    }
}

const REDIS_CELL_UNIT_TEST: [UnitCase; 15] = [
    case(0, 6, true, 5, 0, None), // cost 6 > limit 5: never, retry -1
    case(0, 1, false, 4, 1_000, None),
    case(0, 1, false, 3, 2_000, None),
    case(0, 1, false, 2, 3_000, None),
    case(0, 1, false, 1, 4_000, None),
    case(0, 1, false, 0, 5_000, None),
    case(0, 1, true, 0, 5_000, Some(1_000)),
    case(3_000, 1, false, 2, 3_000, None),
    case(3_100, 1, false, 1, 3_900, None),
    case(4_000, 1, false, 1, 4_000, None),
    case(8_000, 1, false, 4, 1_000, None),
    case(9_500, 1, false, 4, 1_000, None),
    case(9_500, 0, false, 4, 1_000, None), // a peek
    case(9_500, 2, false, 2, 3_000, None),
    case(9_500, 5, true, 2, 3_000, Some(3_000)),
];

fn redis_cells_unit_test_sequence_burst_4_one_per_second(via: Via) {
    let mut cell = Cell::new(via);
    for (i, c) in REDIS_CELL_UNIT_TEST.iter().enumerate() {
        let (reply, d) = cell.throttle(c.ms * MS, &format!("cell 4 1 1 {}", c.quantity));
        let reset = Duration::from_millis(c.reset_ms);
        let retry = c.retry_ms.map(Duration::from_millis);
        let expected = [
            i64::from(c.limited),
            5,
            c.remaining as i64,
            retry.map_or(-1, cl_seconds),
            cl_seconds(reset),
        ];
        assert_eq!(
            reply, expected,
            "{via:?}: case {i} at {} ms, quantity {}",
            c.ms, c.quantity
        );
        if let Some(d) = d {
            let at = format!("{via:?}: case {i} at {} ms, quantity {}", c.ms, c.quantity);
            assert_eq!(d.is_allowed(), !c.limited, "{at}");
            assert_eq!(d.limit(), 5, "{at}");
            assert_eq!(d.remaining(), c.remaining, "{at}");
            assert_eq!(d.reset_after(), reset, "{at}");
            assert_eq!(d.retry_after(), retry, "{at}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Emission intervals that are not a whole number of microseconds
// ---------------------------------------------------------------------------------------------

/// `k 9 3 1`: T = 333,333,333 ns (333,333.333 µs). Two calls at 0 leave the arrival time at
/// 2T; at `T - 1 µs` the funnel holds `T + 1 µs` of debt: exactly 8.999997 units free, so the
/// exact floor is 8, but redis-cell divides 2,999,998 µs by 333,333 µs and answers 9.
fn remaining_divides_whole_microseconds_as_redis_cell_does(via: Via) {
    let mut cell = Cell::new(via);
    assert_eq!(cell.reply(0, "k 9 3 1"), [0, 10, 9, -1, 1]);
    assert_eq!(cell.reply(0, "k 9 3 1"), [0, 10, 8, -1, 1]);
    let (peek, d) = cell.throttle(333_332_333, "k 9 3 1 0");
    assert_eq!(peek, [0, 10, 9, -1, 1]);
    if let Some(d) = d {
        assert_eq!(d.reset_after(), Duration::from_nanos(333_334_333));
        assert_eq!(
            d.remaining(),
            8,
            "Decision::remaining is the exact nanosecond floor"
        );
    }
    // One more unit fits only 8 times, as the exact floor says, not 9.
    for i in 0..8 {
        assert_eq!(
            cell.reply(333_332_333, "k 9 3 1")[0],
            0,
            "{via:?}: unit {i} after the peek"
        );
    }
    assert_eq!(
        cell.reply(333_332_333, "k 9 3 1")[0],
        1,
        "{via:?}: a ninth unit"
    );
}

/// `k 1 2000000 2001`: T = 1,000,500 ns. After one call at 0, at 999,500 ns the debt is
/// 1,000 ns: the exact floor of 2,000,000 / 1,000,500 is 1, redis-cell's 2,000 µs / 1,000 µs is
/// 2 (a full limit reported while the funnel is still 1 µs in debt).
fn remaining_can_report_the_full_limit_one_microsecond_before_recovery(via: Via) {
    let mut cell = Cell::new(via);
    assert_eq!(cell.reply(0, "k 1 2000000 2001"), [0, 2, 1, -1, 1]);
    let (peek, d) = cell.throttle(999_500, "k 1 2000000 2001 0");
    assert_eq!(peek, [0, 2, 2, -1, 0]);
    if let Some(d) = d {
        assert_eq!(d.remaining(), 1);
        assert_eq!(d.reset_after(), Duration::from_nanos(1_000));
    }
    assert_eq!(
        cell.reply(999_500, "k 1 2000000 2001 2")[0],
        1,
        "two units do not fit yet"
    );
    assert_eq!(
        cell.reply(1_000_500, "k 1 2000000 2001 2"),
        [0, 2, 0, -1, 1]
    );
}

/// Every test above, once per path.
macro_rules! through_each_path {
    ($($scenario:ident),* $(,)?) => {
        mod through_funnel {
            $( #[test] fn $scenario() { super::$scenario(super::Via::Funnel) } )*
        }
        mod through_limiter {
            $( #[test] fn $scenario() { super::$scenario(super::Via::Limiter) } )*
        }
        mod through_replay {
            $( #[test] fn $scenario() { super::$scenario(super::Via::Replay) } )*
        }
    };
}

through_each_path!(
    twenty_quick_calls_admit_sixteen_then_limit_with_retry_2,
    twenty_calls_spread_over_two_milliseconds_give_the_same_replies,
    then_a_cost_of_5_is_limited_with_retry_10,
    then_a_peek_is_allowed_and_reports_the_full_funnel,
    then_a_cost_above_the_limit_is_limited_with_retry_minus_1,
    one_per_2_seconds_without_burst_admits_one_then_retry_2,
    three_per_10_seconds_rounds_3_333_seconds_up_to_4,
    a_peek_on_a_fresh_key_reports_the_full_limit_and_creates_no_state,
    the_whole_burst_at_once_empties_a_fresh_key,
    redis_cells_unit_test_sequence_burst_4_one_per_second,
    remaining_divides_whole_microseconds_as_redis_cell_does,
    remaining_can_report_the_full_limit_one_microsecond_before_recovery,
);

// ---------------------------------------------------------------------------------------------
// Replay transcripts
// ---------------------------------------------------------------------------------------------

#[test]
fn a_replay_transcript_answers_line_by_line() {
    let replay = Replay::with_capacity(64).unwrap();
    let transcript = [
        ("0 user123 15 30 60", "0 16 15 -1 2"),
        ("0 user123 15 30 60", "0 16 14 -1 4"),
        ("1000000000 user123 15 30 60", "0 16 13 -1 5"),
        ("2000000000 user123 15 30 60 5", "0 16 9 -1 14"),
        ("2000000000 user123 15 30 60 0", "0 16 9 -1 14"),
        ("2000000000 user123 15 30 60 100", "1 16 9 -1 14"),
        ("2000000000 k 0 1 2", "0 1 0 -1 2"),
        ("2000000000 k 0 1 2", "1 1 0 2 2"),
        ("4000000000 k 0 1 2", "0 1 0 -1 2"),
        ("4000000000 api:token:abc 4 1 1 6", "1 5 5 -1 0"),
        ("4000000000 api:token:abc 4 1 1 5", "0 5 0 -1 5"),
        ("4000000000 api:token:abc 4 1 1", "1 5 0 1 5"),
        ("4000000000\tk\t0\t1\t2\r", "1 1 0 2 2"),
    ];
    for (line, expected) in transcript {
        assert_eq!(replay.line(line.as_bytes()), expected, "line {line:?}");
    }
    for (line, field) in [
        ("4000000000 bad 15 0 60", "count"),
        ("4000000000 bad -1 30 60", "max_burst"),
        ("4000000000 bad 15 30 60 -3", "quantity"),
        ("4000000000 bad 15 30", "period_s"),
        ("x bad 15 30 60", "now_ns"),
    ] {
        let out = replay.line(line.as_bytes());
        assert!(
            out.starts_with("error: ") && out.contains(field),
            "line {line:?} gave {out:?}"
        );
    }
}

/// `examples/data/replay.txt`, line by line against the model (so the file may grow).
#[test]
fn the_example_replay_file_matches_the_model() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/replay.txt");
    let text = std::fs::read(path).unwrap();
    let replay = Replay::with_capacity(1024).unwrap();
    let mut model = Model::new();
    let mut valid = 0;
    for raw in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let shown = String::from_utf8_lossy(raw);
        let out = replay.line(raw);
        if parse_line(raw).is_err() {
            assert!(out.starts_with("error: "), "line {shown:?} gave {out:?}");
            continue;
        }
        let f: Vec<&str> = shown.split_whitespace().collect();
        let int = |i: usize| f.get(i).map_or(1, |x| x.parse::<i128>().unwrap());
        let q = ModelQuota::cl(int(2), int(3), int(4));
        let expected = model.throttle(f[1].as_bytes(), int(0), q, int(5));
        assert_eq!(parse_reply(&out), expected, "line {shown:?}");
        valid += 1;
    }
    assert!(valid >= 10, "the example file has only {valid} valid lines");
}

// ---------------------------------------------------------------------------------------------
// Random sequences against the model
// ---------------------------------------------------------------------------------------------

/// A quota in the engine's and the model's terms, and its CL.THROTTLE arguments when it has
/// whole-second period (so replay can take it too).
#[derive(Clone, Copy, Debug)]
struct AnyQuota {
    quota: Quota,
    model: ModelQuota,
    cl: Option<(i64, i64, i64)>,
}

impl AnyQuota {
    fn t(&self) -> u64 {
        self.model.t as u64
    }
    fn limit(&self) -> u64 {
        self.model.limit as u64
    }
    fn tau(&self) -> u64 {
        self.t() * self.limit()
    }
}

/// `max_burst 0..50`, `count 1..5000`, `period 1..120 s`: redis-cell's sane domain.
fn random_cl_quota(rng: &mut Rng) -> AnyQuota {
    let (b, c, p) = (
        rng.between(0, 50),
        rng.between(1, 5000),
        rng.between(1, 120),
    );
    let quota = Quota::from_cl_throttle(b as i64, c as i64, p as i64).unwrap();
    let model = ModelQuota::cl(b.into(), c.into(), p.into());
    AnyQuota {
        quota,
        model,
        cl: Some((b as i64, c as i64, p as i64)),
    }
}

/// Any period in nanoseconds (sub-microsecond to minutes, most of them sub-second), through
/// `Quota::from_cl_throttle_period` (the period as a `Duration`).
fn random_duration_quota(rng: &mut Rng) -> AnyQuota {
    let period_ns = match rng.below(4) {
        0 => rng.between(1, 10_000),
        1 => rng.between(1, S),
        2 => rng.between(1, 1_000) * MS,
        _ => rng.between(1, 120 * S),
    };
    let count = rng.between(1, period_ns.min(5000));
    let max_burst = rng.between(0, 50);
    let quota =
        Quota::from_cl_throttle_period(max_burst, count, Duration::from_nanos(period_ns)).unwrap();
    let model = ModelQuota::per(i128::from(max_burst) + 1, count.into(), period_ns.into());
    AnyQuota {
        quota,
        model,
        cl: None,
    }
}

/// A time step: zero, sub-microsecond, sub-millisecond, exactly or around a multiple of `T`,
/// within twice the tolerance, or huge.
fn random_gap(rng: &mut Rng, q: &AnyQuota) -> u64 {
    let t = q.t();
    match rng.below(12) {
        0..=2 => 0,
        3 => rng.between(1, 999),
        4 => rng.between(1, MS - 1),
        5 => t * rng.between(1, 3),
        6 => (t * rng.between(1, 3)).saturating_sub(1),
        7 => t * rng.between(1, 3) + 1,
        8 => rng.between(t / 2, t + t / 2),
        9 | 10 => rng.below(2 * q.tau() + 1),
        _ => rng.between(q.tau(), 1 << 50),
    }
}

/// A cost: mostly `0..=limit + 3`, rarely `u64::MAX`.
fn random_cost(rng: &mut Rng, q: &AnyQuota) -> u64 {
    if rng.chance(1, 100) {
        u64::MAX
    } else {
        rng.below(q.limit() + 4)
    }
}

/// Checks one engine decision against the model's reply and, exactly, against the model's state
/// before (`before`) and after (`after`) the call.
#[allow(clippy::too_many_arguments)]
fn assert_matches_model(
    d: &Decision,
    expected: [i64; 5],
    q: &AnyQuota,
    n: u64,
    now: u64,
    before: Option<i128>,
    after: Option<i128>,
    ctx: &dyn Fn() -> String,
) {
    assert_eq!(d.to_cl_throttle(), expected, "{}", ctx());
    let (now_i, t, tau) = (i128::from(now), q.model.t, q.model.t * q.model.limit);
    let tat_after = after.unwrap_or(now_i);
    let exact_remaining = (tau - (tat_after - now_i)).max(0) / t;
    assert_eq!(
        i128::from(d.remaining()),
        exact_remaining,
        "exact remaining; {}",
        ctx()
    );
    assert_eq!(
        d.reset_after().as_nanos() as i128,
        tat_after - now_i,
        "reset_after; {}",
        ctx()
    );
    assert_eq!(d.is_allowed(), expected[0] == 0, "allowed; {}", ctx());
    assert_eq!(
        d.cost_exceeds_limit(),
        n > q.limit(),
        "cost exceeds limit; {}",
        ctx()
    );
    let retry = (expected[0] == 1 && n <= q.limit()).then(|| {
        let new = before.unwrap_or(now_i).max(now_i) + t * i128::from(n);
        Duration::from_nanos((new - tau - now_i) as u64)
    });
    assert_eq!(d.retry_after(), retry, "retry_after; {}", ctx());
}

const KEYS: [&str; 6] = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "user:42:login",
    "10.0.0.1",
];

/// A seeded limiter of `quota` on a manual clock and a replay, each with room for 4,096 keys
/// (more than a sequence's keys: the sequences check that nothing is evicted), and an empty
/// model.
fn paths_and_model(quota: Quota, seed: u64) -> (Limiter<str, ManualClock>, Replay, Model) {
    let limiter = Limiter::<str>::builder(quota)
        .capacity(4096)
        .clock(ManualClock::new())
        .seed(seed)
        .build()
        .unwrap();
    (limiter, Replay::with_capacity(4096).unwrap(), Model::new())
}

/// One seed: several keys, each with its own fixed quota, decided through a Funnel per key, one
/// Limiter and (for whole-second periods) one Replay, all compared with the model.
fn fixed_quota_sequence(seed: u64, quota: fn(&mut Rng) -> AnyQuota, steps: usize) {
    let mut rng = Rng::new(seed);
    let keys = &KEYS[..rng.between(1, KEYS.len() as u64) as usize];
    let quotas: Vec<AnyQuota> = keys.iter().map(|_| quota(&mut rng)).collect();
    let funnels: Vec<Funnel<ManualClock>> = quotas
        .iter()
        .map(|q| Funnel::with_clock(q.quota, ManualClock::new()))
        .collect();
    // The limiter's own quota is key 0's, so key 0 also goes through `check_n_at`.
    let (limiter, replay, mut model) = paths_and_model(quotas[0].quota, seed);
    let mut now = if rng.chance(1, 2) {
        0
    } else {
        rng.below(1 << 61)
    };
    for step in 0..steps {
        let k = rng.below(keys.len() as u64) as usize;
        let (key, q) = (keys[k], quotas[k]);
        now += random_gap(&mut rng, &q);
        let n = random_cost(&mut rng, &q);
        let ctx = || format!("seed {seed} step {step}: key {key} {q:?} n {n} now {now}");
        let at = Timestamp::from_nanos(now).unwrap_or_else(|e| panic!("{e}; {}", ctx()));
        let before = model.tat(key.as_bytes(), now.into());
        let expected = model.throttle(key.as_bytes(), now.into(), q.model, n.into());
        let after = model.tat(key.as_bytes(), now.into());

        let by_limiter = if k == 0 && rng.chance(1, 2) {
            limiter.check_n_at(key, n, at)
        } else {
            limiter.with_quota(q.quota).check_n_at(key, n, at)
        };
        assert_matches_model(&by_limiter, expected, &q, n, now, before, after, &ctx);
        let by_funnel = funnels[k].check_n_at(n, at);
        assert_eq!(
            by_funnel,
            by_limiter,
            "Funnel and Limiter disagree; {}",
            ctx()
        );
        if let Some((b, c, p)) = q.cl {
            let out = replay.line(format!("{now} {key} {b} {c} {p} {n}").as_bytes());
            if i64::try_from(n).is_ok() {
                assert_eq!(parse_reply(&out), expected, "replay; {}", ctx());
            } else {
                // Beyond i64, as in redis-cell, the quantity is not an integer.
                assert!(
                    out.starts_with("error: "),
                    "replay of n {n}: {out:?}; {}",
                    ctx()
                );
            }
        }
    }
    assert_eq!(limiter.stats().forced_evictions, 0, "seed {seed}");
    assert_eq!(replay.limiter().stats().forced_evictions, 0, "seed {seed}");
    limiter
        .check_invariants()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
}

#[test]
fn random_cl_throttle_sequences_match_the_model_through_every_path() {
    for seed in 0..300 {
        fixed_quota_sequence(seed, random_cl_quota, 150);
    }
}

#[test]
fn random_sub_second_and_odd_periods_match_the_model() {
    for seed in 1_000..1_250 {
        fixed_quota_sequence(seed, random_duration_quota, 150);
    }
}

/// CL.THROTTLE takes the quota on every call: a key's debt carries over when it changes. The
/// Limiter (with_quota) and replay against the model, with the quota drawn per call.
#[test]
fn changing_the_quota_between_calls_keeps_the_debt_as_the_model_does() {
    for seed in 2_000..2_150 {
        let mut rng = Rng::new(seed);
        let pool: Vec<AnyQuota> = (0..3).map(|_| random_cl_quota(&mut rng)).collect();
        let (limiter, replay, mut model) = paths_and_model(pool[0].quota, seed);
        let mut now = rng.below(1 << 40);
        for step in 0..150 {
            let key = *rng.pick(&KEYS[..3]);
            let q = *rng.pick(&pool);
            now += random_gap(&mut rng, &q);
            let n = rng.below(q.limit() + 4);
            let ctx = || format!("seed {seed} step {step}: key {key} {q:?} n {n} now {now}");
            let before = model.tat(key.as_bytes(), now.into());
            let expected = model.throttle(key.as_bytes(), now.into(), q.model, n.into());
            let after = model.tat(key.as_bytes(), now.into());
            let d =
                limiter
                    .with_quota(q.quota)
                    .check_n_at(key, n, Timestamp::from_nanos(now).unwrap());
            assert_matches_model(&d, expected, &q, n, now, before, after, &ctx);
            let (b, c, p) = q.cl.unwrap();
            let out = replay.line(format!("{now} {key} {b} {c} {p} {n}").as_bytes());
            assert_eq!(parse_reply(&out), expected, "replay; {}", ctx());
        }
        assert_eq!(limiter.stats().forced_evictions, 0, "seed {seed}");
    }
}

/// Peeking with `check_n(0)` through the clock, not `check_n_at`, agrees with the model too.
#[test]
fn decisions_on_the_funnels_own_clock_match_the_model() {
    for seed in 3_000..3_100 {
        let mut rng = Rng::new(seed);
        let q = random_cl_quota(&mut rng);
        let clock = ManualClock::new();
        let funnel = Funnel::with_clock(q.quota, clock.clone());
        let mut model = Model::new();
        for step in 0..100 {
            clock.advance(Duration::from_nanos(random_gap(&mut rng, &q)));
            let now = clock.now().as_nanos();
            let n = rng.below(q.limit() + 4);
            let expected = model.throttle(b"k", now.into(), q.model, n.into());
            let d = if n == 0 && rng.chance(1, 2) {
                funnel.peek()
            } else {
                funnel.check_n(n)
            };
            assert_eq!(
                d.to_cl_throttle(),
                expected,
                "seed {seed} step {step}: {q:?} n {n} now {now}"
            );
        }
    }
}

/// `Decision::remaining()` is the exact floor, `to_cl_throttle()[2]` redis-cell's microsecond
/// division: they differ only when `T` is not a whole number of microseconds, and then by at most
/// one, always upwards.
#[test]
fn cl_remaining_differs_from_the_exact_floor_only_for_fractional_microsecond_intervals() {
    let mut seen_difference = false;
    for seed in 4_000..4_400 {
        let mut rng = Rng::new(seed);
        let q = random_cl_quota(&mut rng);
        let funnel = Funnel::with_clock(q.quota, ManualClock::new());
        let mut now = 0;
        for step in 0..60 {
            now += random_gap(&mut rng, &q);
            let d = funnel.check_n_at(
                rng.below(q.limit() + 1),
                Timestamp::from_nanos(now).unwrap(),
            );
            let (exact, cl) = (d.remaining() as i64, d.to_cl_throttle()[2]);
            let ctx = format!("seed {seed} step {step}: {q:?} now {now}");
            if q.t() % US == 0 {
                assert_eq!(cl, exact, "{ctx}");
            } else {
                assert!(
                    cl == exact || cl == exact + 1,
                    "cl {cl} exact {exact}; {ctx}"
                );
                seen_difference |= cl != exact;
            }
        }
    }
    assert!(
        seen_difference,
        "no sequence hit a microsecond rounding difference"
    );
}

// ---------------------------------------------------------------------------------------------
// Exactness up to the table's capacity
// ---------------------------------------------------------------------------------------------

/// `Replay::new` is documented "exact (no eviction of a funnel in debt) while fewer keys than
/// [its capacity] are in debt together", and `Builder::capacity` as "room for at least
/// `max_keys` keys". With half the capacity in debt, every key must still answer as the model
/// does. (Fails today: the first forced eviction comes at 25–45% of the capacity; see the
/// report.)
#[test]
fn a_replay_stays_exact_while_half_its_capacity_is_in_debt() {
    let capacity = 4096;
    let replay = Replay::with_capacity(capacity).unwrap();
    let mut model = Model::new();
    let q = ModelQuota::cl(0, 1, 3600);
    for pass in 0..2 {
        for k in 0..capacity / 2 {
            let key = format!("key-{k}");
            let expected = model.throttle(key.as_bytes(), 0, q, 1);
            let out = replay.line(format!("0 {key} 0 1 3600").as_bytes());
            assert_eq!(
                parse_reply(&out),
                expected,
                "pass {pass}, {key}: {:?} with {} keys in a table of {}",
                replay.limiter().stats(),
                capacity / 2,
                replay.limiter().capacity()
            );
        }
    }
}

/// The same on a seeded (so reproducible) limiter: 2,048 keys in debt in a table built with
/// `capacity(4096)`, and no funnel in debt may be evicted.
#[test]
fn a_limiter_evicts_no_funnel_in_debt_while_half_its_capacity_is_free() {
    let limiter = Limiter::<u64>::builder(Quota::per_hour(1).unwrap())
        .capacity(4096)
        .clock(ManualClock::new())
        .seed(0)
        .build()
        .unwrap();
    assert_eq!(limiter.capacity(), 4102); // 586 buckets of seven
    for key in 0..2048u64 {
        assert!(limiter.check_at(&key, Timestamp::ZERO).is_allowed());
        assert_eq!(
            limiter.stats().forced_evictions,
            0,
            "key {key} evicted a funnel in debt with {} keys tracked of {}",
            key,
            limiter.capacity()
        );
    }
    for key in 0..2048u64 {
        assert!(
            !limiter.check_at(&key, Timestamp::ZERO).is_allowed(),
            "key {key} forgot its debt"
        );
    }
}
