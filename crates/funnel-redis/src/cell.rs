//! [`Backend::Cell`](crate::Backend::Cell): redis-cell's `CL.THROTTLE <key> <max_burst>
//! <count> <period_s> <quantity>` where the module is loaded, its five integers read back into
//! a [`funnel::Decision`].
//!
//! **What the reply says, and what it does not.** `CL.THROTTLE` answers `[limited, limit,
//! remaining, retry_after_s, reset_after_s]`: whole seconds, truncated then raised by one when
//! the fraction holds a whole millisecond (`docs/cl-throttle.md`), and no clock. The funnel
//! after the request, `R = TAT' − now` (the decision's `reset_after`), is therefore known only to
//! an interval: the one the reply's `reset_after_s` allows, narrowed by `retry_after_s` (when
//! limited: `R + n·T − τ` must round to it) and by `remaining` (`⌊(τ − R) / T⌋`). The decision
//! built here takes the **earliest** `R` in that interval, so
//!
//! * `is_allowed`, `limit` and `remaining` are the module's exactly, and
//!   [`Decision::to_cl_throttle`](funnel::Decision::to_cl_throttle) gives back the very five
//!   integers (checked on every reply: a mismatch is [`Error::UnexpectedReply`]);
//! * `reset_after()` and `retry_after()` are below the true values by less than a second (the
//!   rounding of whole seconds), never above: a client told to retry after them may come back
//!   early and be denied again, but is never held back longer than the module would hold it;
//! * the deny cache keeps `sent + R` in the local clock (`sent`: when the request left), a lower
//!   bound of the key's arrival time, so it denies only what the module still denies.
//!
//! The emission interval is redis-cell's `period_s · 10⁹ / count` computed in `f64` then
//! truncated to the nanosecond; [`cl_arguments`] finds a `count` and a whole-second `period_s`
//! that give the quota's interval exactly both ways (integer and `f64`), and the quota must be
//! whole microseconds (as for the script) so that the module's microsecond `remaining` is the
//! exact one.

use std::time::Duration;

use funnel::{Decision, Quota, Timestamp};
use redis::Value;

use crate::error::Error;

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

/// `CL.THROTTLE`'s `max_burst`, `count`, `period_s` for `quota`.
///
/// # Errors
///
/// [`Error::NotCellQuota`] when no whole-second period up to 10,000 s gives the interval.
pub(crate) fn cl_arguments(quota: &Quota) -> Result<[i64; 3], Error> {
    let t = quota.emission_interval().as_nanos();
    let not_cell = Error::NotCellQuota {
        emission_interval_ns: t,
    };
    let max_burst = i64::try_from(quota.max_burst()).map_err(|_| Error::NotCellQuota {
        emission_interval_ns: t,
    })?;
    for period_s in 1..=10_000u128 {
        let ns = period_s * u128::from(SEC);
        let count = ns / t;
        if count == 0 {
            continue;
        }
        // redis-cell: `((period_ns as f64) / (count as f64)) as i64`.
        let float = ((ns as f64) / (count as f64)) as i64;
        if ns / count == t && i64::try_from(t).is_ok_and(|t| t == float) {
            let count = i64::try_from(count).map_err(|_| Error::NotCellQuota {
                emission_interval_ns: t,
            })?;
            return Ok([max_burst, count, period_s as i64]);
        }
    }
    Err(not_cell)
}

/// The range of durations, ns, `[lo, hi)`, that redis-cell reports as `s` whole seconds.
fn seconds_range(s: i64) -> Option<(u64, u64)> {
    let s = u64::try_from(s).ok()?;
    if s == 0 {
        Some((0, MS))
    } else {
        Some(((s - 1) * SEC + MS, s * SEC + MS))
    }
}

/// The decision a `CL.THROTTLE` reply to a request of `n` units stands for, at `now` (any
/// time frame: only differences matter), and `R`, the earliest `TAT' − now` it allows (see
/// the module documentation).
///
/// # Errors
///
/// [`Error::UnexpectedReply`] when the reply is not one the module gives for this quota.
pub(crate) fn decision(
    quota: &Quota,
    n: u64,
    reply: [i64; 5],
    now: Timestamp,
) -> Result<(Decision, u64), Error> {
    let bad = || Error::UnexpectedReply {
        reply: format!("CL.THROTTLE {reply:?} for a request of {n}"),
    };
    let [limited, limit, remaining, retry_s, reset_s] = reply;
    let t = u64::try_from(quota.emission_interval().as_nanos()).map_err(|_| bad())?;
    let tau = u64::try_from(quota.tolerance().as_nanos()).map_err(|_| bad())?;
    if u64::try_from(limit).ok() != Some(quota.limit()) {
        return Err(bad());
    }
    let rem = u64::try_from(remaining).map_err(|_| bad())?;
    let over_limit = n > quota.limit();
    let (mut lo, mut hi) = seconds_range(reset_s).ok_or_else(bad)?; // [lo, hi)
    let mut narrow = |(a, b): (u64, u64)| {
        lo = lo.max(a);
        hi = hi.min(b);
    };
    // remaining = ⌊(τ − R) / T⌋, 0 once R > τ − T: R ∈ [τ − (rem+1)·T + 1, τ − rem·T].
    let floor = (tau + 1).saturating_sub((rem + 1).saturating_mul(t));
    if rem == 0 {
        narrow((floor, u64::MAX));
    } else {
        let top = tau.checked_sub(rem.saturating_mul(t)).ok_or_else(bad)?;
        narrow((floor, top.saturating_add(1)));
    }
    match (limited, over_limit) {
        (0, false) => narrow((n.saturating_mul(t), tau.saturating_add(1))),
        (1, false) => {
            // retry = R + n·T − τ, and a denial means retry > 0.
            let (a, b) = seconds_range(retry_s).ok_or_else(bad)?;
            let shift = tau - n * t; // n ≤ limit, so n·T ≤ τ
            narrow(((a.max(1)).saturating_add(shift), b.saturating_add(shift)));
        }
        (1, true) if retry_s == -1 => {}
        _ => return Err(bad()),
    }
    if lo >= hi {
        return Err(bad());
    }
    let r = lo;
    let tat = if limited == 0 {
        // Allowed: TAT' = max(TAT, now) + n·T with R = TAT' − now ≥ n·T (narrowed above).
        now.saturating_add(Duration::from_nanos(r - n * t))
    } else {
        // Denied: nothing changed, R = TAT − now.
        now.saturating_add(Duration::from_nanos(r))
    };
    let (decision, _) = quota.decide_at(tat, now, n);
    if decision.to_cl_throttle() != reply {
        return Err(bad());
    }
    Ok((decision, r))
}

/// Whether a `MODULE LIST` reply lists the redis-cell module (`name` `redis-cell`).
pub(crate) fn lists_redis_cell(reply: &Value) -> bool {
    let Value::Array(modules) = reply else {
        return false;
    };
    modules.iter().any(|module| {
        let fields: Vec<&Value> = match module {
            Value::Array(fields) => fields.iter().collect(),
            Value::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
            _ => return false,
        };
        fields.windows(2).any(|pair| {
            matches!(pair, [Value::BulkString(k), Value::BulkString(v)]
                if k.as_slice() == b"name" && v.as_slice() == b"redis-cell")
                || matches!(pair, [Value::SimpleString(k), Value::SimpleString(v)]
                if k == "name" && v == "redis-cell")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(max_burst: u64, count: u64, period_s: u64) -> Quota {
        Quota::from_cl_throttle_period(max_burst, count, Duration::from_secs(period_s)).unwrap()
    }

    #[test]
    fn cl_arguments_give_the_quotas_interval_exactly() {
        assert_eq!(cl_arguments(&q(15, 30, 60)).unwrap(), [15, 1, 2]);
        assert_eq!(cl_arguments(&q(0, 10, 1)).unwrap(), [0, 10, 1]);
        assert_eq!(cl_arguments(&q(9, 10, 3600)).unwrap(), [9, 1, 360]);
        // 3 per second: 333,333,333 ns, as `CL.THROTTLE k 0 3 1` truncates it.
        assert_eq!(cl_arguments(&q(0, 3, 1)).unwrap(), [0, 3, 1]);
        // One per 20,000 s: no period up to 10,000 s gives it.
        assert!(matches!(
            cl_arguments(&q(0, 1, 20_000)),
            Err(Error::NotCellQuota { .. })
        ));
    }

    /// Every reply the in-process arithmetic gives (which the module's equals on whole
    /// microseconds) reads back into a decision with the same five integers, whose `R` is at
    /// most the true one and less than a second below it.
    #[test]
    fn every_reply_reads_back_to_the_same_five_integers_and_an_earlier_reset() {
        let now = Timestamp::from_nanos(5 * SEC).unwrap();
        for quota in [
            q(15, 30, 60),
            q(4, 1, 1),
            q(0, 10, 1),
            q(9, 10, 3600),
            q(99, 1000, 1),
        ] {
            let t = u64::try_from(quota.emission_interval().as_nanos()).unwrap();
            let tau = t * quota.limit();
            let step = (tau / 997).max(1);
            let mut debt = 0;
            while debt <= tau {
                for n in [0, 1, 2, quota.limit(), quota.limit() + 1] {
                    let tat = now.saturating_add(Duration::from_nanos(debt));
                    let (truth, _) = quota.decide_at(tat, now, n);
                    let reply = truth.to_cl_throttle();
                    let (read, r) = decision(&quota, n, reply, now)
                        .unwrap_or_else(|e| panic!("{quota:?} debt {debt} n {n}: {e}"));
                    assert_eq!(read.to_cl_throttle(), reply);
                    assert_eq!(read.outcome(), truth.outcome());
                    let true_r = u64::try_from(truth.reset_after().as_nanos()).unwrap();
                    assert!(r <= true_r && true_r - r < SEC, "{r} vs {true_r}");
                    assert!(read.reset_after() <= truth.reset_after());
                    if let (Some(a), Some(b)) = (read.retry_after(), truth.retry_after()) {
                        assert!(a <= b && b - a < Duration::from_secs(1));
                    }
                }
                debt += step;
            }
        }
    }

    #[test]
    fn a_reply_for_another_quota_is_an_unexpected_reply() {
        let now = Timestamp::from_nanos(SEC).unwrap();
        assert!(matches!(
            decision(&q(15, 30, 60), 1, [0, 17, 15, -1, 2], now),
            Err(Error::UnexpectedReply { .. })
        ));
        assert!(matches!(
            decision(&q(15, 30, 60), 1, [0, 16, 3, -1, 2], now),
            Err(Error::UnexpectedReply { .. })
        ));
    }
}
