//! The plain reference model of CL.THROTTLE: i128 integers, no atomics, no table, no eviction,
//! written from the CL.THROTTLE rules in docs/cl-throttle.md, independently of the crate's arithmetic. Tests, stress tests and fuzz targets compare the
//! engine against it.
//!
//! One deliberate choice, from the spec: a key whose arrival time is at or before `now` is the
//! same as an absent key. (redis-cell expires the key a fraction of a millisecond early, because
//! it truncates its TTL to whole milliseconds; the spec, and funnel, keep that last sub-millisecond
//! of debt.)

use std::collections::HashMap;

/// A quota in the model's terms: emission interval `t` (ns) and `limit` (max_burst + 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelQuota {
    pub t: i128,
    pub limit: i128,
}

impl ModelQuota {
    /// CL.THROTTLE's `<max_burst> <count> <period_s>`, for sane arguments (the model does not
    /// validate: callers only use it where the engine accepted the quota).
    pub fn cl(max_burst: i128, count: i128, period_s: i128) -> ModelQuota {
        ModelQuota {
            t: period_s * 1_000_000_000 / count,
            limit: max_burst + 1,
        }
    }

    /// `count` per `period_ns` with a burst capacity of `limit`.
    pub fn per(limit: i128, count: i128, period_ns: i128) -> ModelQuota {
        ModelQuota {
            t: period_ns / count,
            limit,
        }
    }
}

/// redis-cell's seconds: truncate, plus 1 when the fraction holds a whole millisecond.
pub fn secs(d: i128) -> i128 {
    let whole = d / 1_000_000_000;
    let frac_ms = (d - whole * 1_000_000_000) / 1_000_000;
    whole + i128::from(frac_ms > 0)
}

/// One call on a funnel whose stored arrival time is `stored` (None when absent). Returns the
/// five integers and the new stored arrival time.
pub fn throttle(
    stored: Option<i128>,
    now: i128,
    q: ModelQuota,
    quantity: i128,
) -> ([i64; 5], Option<i128>) {
    let tat = match stored {
        Some(tat) if tat > now => tat,
        _ => now,
    };
    let tau = q.t * q.limit;
    let inc = q.t * quantity;
    let new = tat.max(now) + inc;
    let limited = new - tau > now;
    let (retry, ttl, after) = if limited {
        let retry = if inc > tau { -1 } else { secs(new - tau - now) };
        (retry, tat - now, stored.filter(|s| *s > now))
    } else {
        (
            -1,
            new - now,
            if quantity == 0 {
                stored.filter(|s| *s > now)
            } else {
                Some(new)
            },
        )
    };
    let next = tau - ttl;
    let remaining = if next <= 0 {
        0
    } else if q.t >= 1_000 {
        (next / 1_000) / (q.t / 1_000)
    } else {
        next / q.t
    };
    let reply = [i128::from(limited), q.limit, remaining, retry, secs(ttl)];
    (
        reply.map(|x| i64::try_from(x).expect("model value fits i64")),
        after,
    )
}

/// The keyed model: one arrival time per key, unbounded.
#[derive(Default, Debug, Clone)]
pub struct Model {
    tats: HashMap<Vec<u8>, i128>,
}

impl Model {
    pub fn new() -> Model {
        Model::default()
    }

    /// One call for `key`; updates the key's arrival time when allowed.
    pub fn throttle(&mut self, key: &[u8], now: i128, q: ModelQuota, quantity: i128) -> [i64; 5] {
        let stored = self.tats.get(key).copied();
        let (reply, after) = throttle(stored, now, q, quantity);
        match after {
            Some(tat) => {
                self.tats.insert(key.to_vec(), tat);
            }
            None => {
                self.tats.remove(key);
            }
        }
        reply
    }

    /// Forgets a key (the engine's `reset`).
    pub fn reset(&mut self, key: &[u8]) {
        self.tats.remove(key);
    }

    /// The key's arrival time, if it has one after `now`.
    pub fn tat(&self, key: &[u8], now: i128) -> Option<i128> {
        self.tats.get(key).copied().filter(|t| *t > now)
    }
}
