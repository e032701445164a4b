//! funnel's CL.THROTTLE answers against the real redis-cell module (built by
//! `bash .ci/redis-cell.sh`; skipped with a notice when it is not): random bursts of calls, each
//! sent to the module in one pipeline and decided by funnel (`Limiter::with_quota`, the quota
//! from the same `max_burst count period`, the same quantity) at the instant the server's
//! `TIME` gave before the burst. Every call's five integers must be equal.
//!
//! The module reads the wall clock itself at every call, so its calls of one burst are some
//! microseconds apart where funnel's are at one instant. Two rules make that irrelevant:
//!
//! * a burst counts only when `TIME` before and after it fall in the same millisecond
//!   (otherwise it is sent again, on fresh keys, shorter after repeated misses), so every call
//!   of the module happens less than 1 ms after the first one on its key;
//! * every quota's emission interval `T` is a whole, even number of milliseconds, so every
//!   duration funnel reports (reset, retry, the distance to the tolerance) is a multiple of
//!   2 ms, and the module's, less than 1 ms shorter, has the same whole seconds as CL.THROTTLE
//!   rounds them (truncated, plus one from a whole millisecond), the same allowed-or-limited
//!   side and the same `remaining` (the leftover is less than one `T`).
//!
//! Keys are fresh in every burst (a burst-unique prefix in Redis, a new limiter in funnel), so a
//! key's state never spans two bursts, whose instants differ by more than the module's
//! microseconds. Within a burst a key sees several quotas now and then, as when a service
//! changes its limit. Quotas keep `T * limit` and `T * quantity` under 2^52 ns, where the
//! module's floating-point steps are exact (`docs/cl-throttle.md`, "Which redis-cell").
//!
//! `CELL_SEED` picks the generator's seed (default fixed, so CI is repeatable).

use funnel::{Limiter, Quota, Timestamp};
use funnel_testkit::Rng;
use redis::Value;

/// Bursts compared per run.
const BURSTS: usize = 1_000;
/// The most calls in one burst.
const MAX_CALLS: u64 = 40;
/// Sends of one burst that may straddle a millisecond before the test gives up.
const ATTEMPTS: usize = 200;
/// Where the module's arithmetic (f64 steps on nanoseconds) stays exact.
const EXACT_NANOS: u64 = 1 << 52;
const MS: u64 = 1_000_000;

/// One CL.THROTTLE call: the key (without the burst's prefix), the quota's three arguments,
/// and the quantity (`None`: the argument is left out, which means 1).
#[derive(Clone, Debug)]
struct Call {
    key: String,
    max_burst: u64,
    count: u64,
    period: u64,
    quantity: Option<u64>,
}

/// A quota `(max_burst, count, period)` whose emission interval is a whole, even number of
/// milliseconds: `count` divides `500 * period`, so `T = 1000 * period / count` ms is even.
fn quota(rng: &mut Rng) -> (u64, u64, u64) {
    let period = match rng.below(8) {
        0 => 1,
        1 => 2,
        2 => 60,
        3 => 3600,
        4 => 86_400,
        5 => rng.between(1, 10),
        _ => rng.between(1, 100_000),
    };
    let n = 500 * period;
    let divisors: Vec<u64> = (1..)
        .take_while(|d| d * d <= n)
        .filter(|d| n % d == 0)
        .flat_map(|d| [d, n / d])
        .collect();
    let count = match rng.below(6) {
        0 => 1,
        1 => n, // T = 2 ms, the shortest
        _ => *rng.pick(&divisors),
    };
    let t = 1_000 * period / count * MS;
    let most = EXACT_NANOS / t; // the largest limit the module computes exactly
    let limit = match rng.below(8) {
        0 => 1,
        1 => 2,
        2 => most.min(rng.between(1, 1 << 20)),
        _ => most.min(rng.between(1, 40)),
    };
    (limit - 1, count, period)
}

fn quantity(rng: &mut Rng, limit: u64, t: u64) -> Option<u64> {
    let most = EXACT_NANOS / t;
    let q = match rng.below(16) {
        0 => return None,
        1 => 0,
        2 => limit,
        3 => limit + 1,
        4 => limit.saturating_sub(1),
        5 => limit * 2,
        6 => most,
        7 => rng.between(0, most),
        8 | 9 => rng.between(0, limit.min(10)),
        _ => 1,
    };
    Some(q.min(most))
}

/// A key of printable UTF-8, some with spaces or non-ASCII letters, the empty key included.
fn key(rng: &mut Rng) -> String {
    const CHARS: [char; 12] = ['a', 'b', 'z', '0', '9', ':', '-', ' ', 'é', 'ß', '中', '🦀'];
    let len = rng.below(9) as usize;
    (0..len).map(|_| *rng.pick(&CHARS)).collect()
}

/// A burst: a few keys, each with a quota of its own, and calls on them; now and then a call
/// uses another key's quota.
fn burst(rng: &mut Rng, calls: u64) -> Vec<Call> {
    let keys: Vec<(String, (u64, u64, u64))> = (0..rng.between(1, 4))
        .map(|_| (key(rng), quota(rng)))
        .collect();
    (0..calls)
        .map(|_| {
            let (key, mut q) = rng.pick(&keys).clone();
            if rng.chance(1, 10) {
                q = rng.pick(&keys).1;
            }
            let (max_burst, count, period) = q;
            let t = 1_000 * period / count * MS;
            Call {
                key,
                max_burst,
                count,
                period,
                quantity: quantity(rng, max_burst + 1, t),
            }
        })
        .collect()
}

/// The server's `TIME` in microseconds since the Unix epoch.
fn micros(v: &Value) -> u64 {
    let (secs, us): (u64, u64) = redis::from_redis_value(v).expect("TIME's two integers");
    secs * 1_000_000 + us
}

/// Sends `calls` to the module under `prefix` between two `TIME`s, in one pipeline: the time
/// before, in µs, and the replies, or `None` when the burst straddled a millisecond.
fn send(con: &mut redis::Connection, prefix: &str, calls: &[Call]) -> Option<(u64, Vec<[i64; 5]>)> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    for c in calls {
        let cmd = pipe
            .cmd("CL.THROTTLE")
            .arg(format!("{prefix}{}", c.key))
            .arg(c.max_burst)
            .arg(c.count)
            .arg(c.period);
        if let Some(q) = c.quantity {
            cmd.arg(q);
        }
    }
    pipe.cmd("TIME");
    let replies: Vec<Value> = pipe.query(con).expect("the burst's pipeline");
    assert_eq!(replies.len(), calls.len() + 2);
    let before = micros(&replies[0]);
    let after = micros(&replies[calls.len() + 1]);
    if before / 1_000 != after / 1_000 {
        return None;
    }
    let answers = replies[1..=calls.len()]
        .iter()
        .map(|v| {
            let five: Vec<i64> = redis::from_redis_value(v).expect("CL.THROTTLE's reply");
            five.try_into()
                .unwrap_or_else(|r| panic!("CL.THROTTLE answered {r:?}, not five integers"))
        })
        .collect();
    Some((before, answers))
}

/// funnel's answers to `calls`, on fresh keys, all at `now_us`.
fn funnel(calls: &[Call], now_us: u64) -> Vec<[i64; 5]> {
    let now = Timestamp::from_nanos(now_us * 1_000).expect("the Unix time fits a Timestamp");
    let limiter = Limiter::<[u8]>::builder(Quota::per_second(1).unwrap())
        .capacity(256)
        .build()
        .unwrap();
    calls
        .iter()
        .map(|c| {
            let quota =
                Quota::from_cl_throttle(c.max_burst as i64, c.count as i64, c.period as i64)
                    .unwrap_or_else(|e| panic!("{c:?}: funnel refused the quota: {e}"));
            limiter
                .with_quota(quota)
                .check_n_at(c.key.as_bytes(), c.quantity.unwrap_or(1), now)
                .to_cl_throttle()
        })
        .collect()
}

#[test]
fn random_bursts_get_the_modules_five_integers_from_funnel() {
    let Some(server) = funnel_testkit::redis_cell::server() else {
        return;
    };
    let mut con = server.connection().expect("a connection");
    let seed =
        std::env::var("CELL_SEED").map_or(0xCE11_5EED, |v| v.parse().expect("CELL_SEED: u64"));
    let mut rng = Rng::new(seed);
    let (mut calls_compared, mut resent, mut limited, mut allowed) = (0, 0, 0, 0);
    let mut sent = 0u64; // every send gets a prefix of its own
    for b in 0..BURSTS {
        let mut size = rng.between(1, MAX_CALLS);
        let mut calls = burst(&mut rng, size);
        let mut attempt = 0;
        let (now_us, module) = loop {
            sent += 1;
            if let Some(answer) = send(&mut con, &format!("{sent}:"), &calls) {
                break answer;
            }
            attempt += 1;
            resent += 1;
            assert!(
                attempt < ATTEMPTS,
                "burst #{b} straddled a millisecond {ATTEMPTS} times, down to {size} call(s): \
                 the machine is too loaded to keep a burst within a millisecond"
            );
            if attempt % 10 == 0 && size > 1 {
                size = size.div_ceil(2);
                calls.truncate(size as usize);
            }
        };
        let ours = funnel(&calls, now_us);
        for (i, ((call, theirs), ours)) in calls.iter().zip(&module).zip(&ours).enumerate() {
            assert_eq!(
                theirs, ours,
                "seed {seed:#x}, burst #{b}, call #{i}: CL.THROTTLE {:?} {} {} {} {:?}: the \
                 module answered {theirs:?}, funnel {ours:?}; the burst:\n{calls:#?}",
                call.key, call.max_burst, call.count, call.period, call.quantity
            );
            if theirs[0] == 1 {
                limited += 1;
            } else {
                allowed += 1;
            }
        }
        calls_compared += calls.len();
    }
    // The bursts reached both answers, not only one.
    assert!(
        limited > 0 && allowed > 0,
        "{limited} limited, {allowed} allowed"
    );
    eprintln!(
        "cell_conformance: {calls_compared} calls in {BURSTS} bursts equal ({allowed} allowed, \
         {limited} limited; {resent} burst(s) sent again after straddling a millisecond)"
    );
}
