//! Fuzz body `replay_line`: arbitrary bytes (invalid UTF-8, huge numbers, signs, tabs and
//! carriage returns, missing or extra fields), split at `\n`, into
//! [`funnel::replay::parse_line`] and [`Replay::line`] / [`Replay::apply`].
//!
//! * Never a panic. `Replay::line` answers five integers separated by single spaces, or
//!   `error: ` and the parse error; lines alternate between `Replay::line` and
//!   `Replay::apply` on the same replay.
//! * `parse_line` agrees with an independent reading of the documented format
//!   (`<now_ns> <key> <max_burst> <count> <period_s> [<quantity>]`, fields split by spaces,
//!   tabs or `\r`, numbers as an optional sign and ASCII digits in `i64` range): the same
//!   fields, or exactly the same error for the first bad field.
//! * For lines that parse, the reply equals the reference model's ([`model::throttle`]) on
//!   the arrival time the key must hold. Times may go backwards in a replay; a key whose
//!   funnel had drained by the latest time seen may have had its slot reused (lazy eviction),
//!   so for such a key the reply may also be a fresh funnel's, and the body then follows the
//!   engine's stored arrival time (read with a peek at time zero). A forced eviction (not
//!   expected at this capacity, but legal) is accepted only for keys that were in debt and are
//!   now absent, as many as the counter says.

use std::collections::HashMap;

use funnel::replay::{parse_line, LineError, Replay};
use funnel::Error;

use super::common::{self, saw, Event};
use crate::model::{self, ModelQuota};

/// Lines per input.
pub const MAX_LINES: usize = 400;
/// Keys the replay's table holds: far more than `MAX_LINES` keys in debt can fill.
const CAPACITY: usize = 4_096;

/// Runs one input; panics on any divergence.
pub fn run(data: &[u8]) {
    let replay = Replay::with_capacity(CAPACITY).unwrap();
    // Per key, the arrival time the engine must hold (absent: never charged or recycled).
    let mut tats: HashMap<Vec<u8>, i128> = HashMap::new();
    let mut latest: i128 = -1;
    for (i, line) in data.split(|b| *b == b'\n').take(MAX_LINES).enumerate() {
        let parsed = parse_line(line);
        let expected = expect_line(line);
        let before = replay.limiter().stats();
        // Alternate the two entry points: `line` formats what `apply` returns.
        let answer = if i % 2 == 0 {
            let out = replay.line(line);
            match out.strip_prefix("error: ") {
                Some(reason) => Err(reason.to_owned()),
                None => Ok(five_integers(&out).unwrap_or_else(|| panic!("{line:?}: {out:?}"))),
            }
        } else {
            replay.apply(line).map_err(|e| e.to_string())
        };
        let text = String::from_utf8_lossy(line);
        match (parsed, expected) {
            (Err(e), Err(x)) => {
                assert_eq!(e, x, "{text:?}");
                saw(Event::LineRejected);
                assert_eq!(answer, Err(e.to_string()), "{text:?}");
                assert!(!e.to_string().contains('\n'), "{text:?}: {e}");
            }
            (Ok(p), Ok(x)) => {
                assert_eq!(
                    (p.now.as_nanos(), p.key, p.quantity),
                    (x.now, x.key, x.quantity),
                    "{text:?}"
                );
                assert_eq!(
                    p.quota.emission_interval().as_nanos() as i128,
                    x.quota.t,
                    "{text:?}"
                );
                assert_eq!(i128::from(p.quota.limit()), x.quota.limit, "{text:?}");
                let reply = answer.unwrap_or_else(|e| panic!("{text:?}: error: {e}"));
                saw(Event::LineReplied);
                if reply[0] == 1 && reply[3] >= 0 {
                    saw(Event::Limited);
                }
                if i128::from(x.now) < latest {
                    saw(Event::TimeWentBack);
                }

                let now = i128::from(x.now);
                let quantity = i128::from(x.quantity);
                let stored = tats.get(x.key).copied();
                let engine = common::stored_tat(replay.limiter(), x.key);
                let engine = (engine > 0).then_some(i128::from(engine));
                // Before this line the engine held `stored`, or nothing when that funnel had
                // drained by the latest time seen (its slot may have gone to another key).
                let mut held_before = vec![stored];
                if stored.is_some_and(|s| s <= latest) {
                    held_before.push(None);
                }
                let explained = held_before.iter().position(|&held| {
                    let (exact, after) = model::throttle(held, now, x.quota, quantity);
                    let charged = exact[0] == 0 && quantity > 0;
                    reply == exact && engine == if charged { after } else { held }
                });
                if explained == Some(1) && now < latest {
                    saw(Event::SlotRecycledUnderBackwardTime);
                }
                assert!(
                    explained.is_some(),
                    "{text:?}: replied {reply:?}, engine holds {engine:?}; model from {stored:?} at \
                     {now} (latest {latest}): {:?}",
                    model::throttle(stored, now, x.quota, quantity)
                );
                match engine {
                    Some(tat) => tats.insert(x.key.to_vec(), tat),
                    None => tats.remove(x.key),
                };
                latest = latest.max(now);
                let forced = replay.limiter().stats().forced_evictions - before.forced_evictions;
                if forced > 0 {
                    evicted(&replay, &mut tats, now, latest, forced, &text);
                }
            }
            (parsed, expected) => panic!("{text:?}: parsed {parsed:?}, expected {expected:?}"),
        }
    }
}

/// `n` keys lost their funnel to a forced eviction at `now`: each must have been in debt and
/// now be absent. A key whose funnel had drained by the `latest` time may also have lost its
/// slot to lazy eviction, which is not counted; so the keys surely evicted must be at most `n`,
/// and with the possibly recycled ones at least `n`. Then follow the engine.
fn evicted(
    replay: &Replay,
    tats: &mut HashMap<Vec<u8>, i128>,
    now: i128,
    latest: i128,
    n: u64,
    text: &str,
) {
    let (mut surely, mut maybe) = (0, 0);
    tats.retain(|key, tat| {
        let engine = i128::from(common::stored_tat(replay.limiter(), key.as_slice()));
        if engine == *tat {
            return true;
        }
        assert_eq!(
            engine, 0,
            "{text:?}: key {key:?} went from {tat} to {engine}"
        );
        if *tat <= latest {
            maybe += 1;
        } else {
            assert!(*tat > now, "{text:?}: key {key:?} lost a drained funnel");
            surely += 1;
        }
        false
    });
    assert!(
        surely <= n && n <= surely + maybe,
        "{text:?}: {n} evicted, found {surely} + {maybe}"
    );
}

/// `a b c d e`: five `i64` separated by single spaces, written canonically.
fn five_integers(out: &str) -> Option<[i64; 5]> {
    let mut reply = [0i64; 5];
    let mut parts = out.split(' ');
    for slot in reply.iter_mut() {
        *slot = parts.next()?.parse().ok()?;
    }
    let canonical = reply.map(|x| x.to_string()).join(" ");
    (parts.next().is_none() && canonical == out).then_some(reply)
}

#[derive(Debug)]
struct Expected<'a> {
    now: u64,
    key: &'a [u8],
    quota: ModelQuota,
    quantity: u64,
}

/// The documented line format, read independently of `parse_line`.
fn expect_line(line: &[u8]) -> Result<Expected<'_>, LineError> {
    let fields: Vec<&[u8]> = line
        .split(|b| matches!(b, b' ' | b'\t' | b'\r'))
        .filter(|f| !f.is_empty())
        .collect();
    let names = [
        "now_ns",
        "key",
        "max_burst",
        "count",
        "period_s",
        "quantity",
    ];
    let mut ints = [0i64, 0, 0, 0, 0, 1];
    for (i, name) in names.iter().enumerate() {
        match fields.get(i) {
            None if i == 5 => {}
            None => return Err(LineError::Missing(name)),
            Some(_) if i == 1 => {}
            Some(text) => {
                ints[i] = integer(text).ok_or_else(|| LineError::NotAnInteger {
                    field: name,
                    text: String::from_utf8_lossy(text).into_owned(),
                })?
            }
        }
    }
    if fields.len() > 6 {
        return Err(LineError::TooManyFields);
    }
    let [now, _, max_burst, count, period, quantity] = ints;
    if now < 0 {
        return Err(LineError::Invalid(Error::Negative {
            argument: "now_ns",
            value: now,
        }));
    }
    let now = common::expect::timestamp(now as u64).map_err(LineError::Invalid)?;
    if quantity < 0 {
        return Err(LineError::Invalid(Error::Negative {
            argument: "quantity",
            value: quantity,
        }));
    }
    let quota =
        common::expect::from_cl_throttle(max_burst, count, period).map_err(LineError::Invalid)?;
    // The spec's CL.THROTTLE arithmetic: T = period * 10^9 / count.
    assert_eq!(
        quota,
        ModelQuota::cl(max_burst.into(), count.into(), period.into())
    );
    Ok(Expected {
        now,
        key: fields[1],
        quota,
        quantity: quantity as u64,
    })
}

/// An optional `+` or `-`, then one or more ASCII digits, within `i64`.
fn integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut value: i128 = 0;
    for d in digits {
        value = value * 10 + i128::from(d - b'0');
        if value > 1 << 63 {
            return None;
        }
    }
    i64::try_from(if negative { -value } else { value }).ok()
}
