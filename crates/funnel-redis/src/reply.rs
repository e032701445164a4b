//! Reading Redis's replies into decisions: pure functions of the quota, the request and the
//! reply, so that whatever a server (or anything answering in its place) sends is either a
//! decision Redis took or a typed [`Error`], never a panic (the fuzz target `redis_reply`
//! feeds them every shape of [`redis::Value`]).
//!
//! * The script's reply must be exactly four integers `{code, tat_before, now, epoch}`
//!   (`script.rs`), every one in range, and the decision rebuilt from `tat_before` and `now`
//!   must agree with `code`: an allowed decision comes only from a reply whose code says
//!   Redis allowed it ([`Error::Disagreement`] otherwise).
//! * `CL.THROTTLE`'s must be exactly five integers the module gives for this quota and request
//!   (`cell.rs` checks them against the decision they stand for).

use funnel::{Decision, Outcome, Quota, Timestamp};
use redis::Value;

use crate::cell;
use crate::error::Error;
use crate::script::Verdict;

/// The script's reply, read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScriptReply {
    pub(crate) decision: Decision,
    pub(crate) verdict: Verdict,
    /// The key's arrival time before the request (server frame).
    pub(crate) tat: Timestamp,
    /// The script's time of the decision.
    pub(crate) now: Timestamp,
    /// The same, µs since the Unix epoch.
    pub(crate) now_us: u64,
    /// The data-set marker's epoch (`marker.rs`); 0: unknown.
    pub(crate) epoch: u64,
}

/// `N` integers, or `None`.
fn ints<const N: usize>(value: &Value) -> Option<[i64; N]> {
    let Value::Array(items) = value else {
        return None;
    };
    let mut out = [0i64; N];
    if items.len() != out.len() {
        return None;
    }
    for (slot, item) in out.iter_mut().zip(items) {
        let Value::Int(i) = item else { return None };
        *slot = *i;
    }
    Some(out)
}

/// Reads the script's reply to a request of `n` units (see the module documentation).
///
/// # Errors
///
/// [`Error::UnexpectedReply`] for any other shape or a number out of range,
/// [`Error::Disagreement`] when the code and the rebuilt decision differ.
pub(crate) fn script(quota: &Quota, n: u64, value: &Value) -> Result<ScriptReply, Error> {
    let bad = || Error::UnexpectedReply {
        reply: format!("{value:?}"),
    };
    let [code, tat_us, now_us, epoch] = ints(value).ok_or_else(bad)?;
    let verdict = Verdict::from_code(code).ok_or_else(bad)?;
    let to_ts = |us: i64| {
        u64::try_from(us)
            .ok()
            .and_then(|us| us.checked_mul(1_000))
            .and_then(|ns| Timestamp::from_nanos(ns).ok())
    };
    let tat = to_ts(tat_us).ok_or_else(bad)?;
    let now = to_ts(now_us).ok_or_else(bad)?;
    let epoch = u64::try_from(epoch).map_err(|_| bad())?;
    let (decision, _) = quota.decide_at(tat, now, n);
    let agrees = match verdict {
        Verdict::Allowed => decision.is_allowed(),
        Verdict::Limited => decision.outcome() == Outcome::Limited,
        Verdict::CostExceedsLimit => decision.cost_exceeds_limit(),
    };
    if !agrees {
        return Err(Error::Disagreement {
            verdict: code,
            decision,
        });
    }
    Ok(ScriptReply {
        decision,
        verdict,
        tat,
        now,
        now_us: u64::try_from(now_us).map_err(|_| bad())?,
        epoch,
    })
}

/// Reads `CL.THROTTLE`'s reply to a request of `n` units sent at `sent` (local frame): the
/// decision, and `R`, the earliest `TAT' − now` the reply allows, ns (`cell.rs`).
///
/// # Errors
///
/// [`Error::UnexpectedReply`] for anything but five integers the module gives for this quota.
pub(crate) fn cell(
    quota: &Quota,
    n: u64,
    value: &Value,
    sent: Timestamp,
) -> Result<(Decision, u64), Error> {
    let reply = ints(value).ok_or_else(|| Error::UnexpectedReply {
        reply: format!("{value:?}"),
    })?;
    cell::decision(quota, n, reply, sent)
}

/// Whether a reply (as read from the wire, a key's own error still a value) says Redis admitted
/// the request, and so charged it: the script's code 1, `CL.THROTTLE`'s `limited` 0. For the
/// replies no caller waits for any more; the caller's reading is [`script()`](fn@script) or [`cell()`](fn@cell).
pub(crate) fn admitted(cell: bool, value: &Value) -> bool {
    if cell {
        ints::<5>(value).is_some_and(|[limited, ..]| limited == 0)
    } else {
        ints::<4>(value).is_some_and(|[code, ..]| code == 1)
    }
}
