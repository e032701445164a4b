//! Window algorithms in one word: a fixed window counter ([`FixedWindow`]) and a sliding window
//! counter ([`SlidingWindow`], the previous window's count weighted by how much of it still
//! overlaps the sliding window), each a packed `u64`, each with the same [`Decision`] as the
//! funnel.
//!
//! Every algorithm is a pure step function over its word, `decide(word, now, quota, n) ->
//! (Decision, Option<new word>)`, plus `expiry(word, quota)`, the time from which the word says
//! the same as an absent one (so a table can evict it lazily, as it does recovered funnels);
//! the single-key atomic types run the step in a CAS loop, as [`Funnel`](crate::Funnel) does.
//! `docs/DESIGN.md`, "Window algorithms", states the layouts, the ranges and how they compare
//! with an exact sliding log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::decision::{Decision, Outcome};
use crate::error::Error;
use crate::quota::Quota;

mod counter;
pub(crate) mod fixed;
pub(crate) mod sliding;

pub use fixed::{FixedWindow, FixedWindowQuota};
pub use sliding::{SlidingWindow, SlidingWindowQuota};

/// The single-key counters' update: decides with `step` on `word`'s value and, when the step
/// asks for a write, stores the new value if `word` still holds the one decided on; otherwise
/// decides again on the value found. `step(value)` returns the decision and the value to store
/// (`None`: nothing to write, as for a denial or a peek, which then costs one load). The same
/// loop as [`Funnel`](crate::Funnel)'s, which keeps its own: through this function its denial
/// compiled to a longer loop, measurably slower with the caller's time
/// (`cargo bench --bench funnel -- 'deny/caller-time/funnel'`).
#[inline(always)]
fn update(word: &AtomicU64, step: impl Fn(u64) -> (Decision, Option<u64>)) -> Decision {
    // Relaxed throughout: the word publishes no other memory, and every decision is linearised
    // by the word's own modification order (the CAS fails if anyone wrote since our load, so an
    // admission is always decided on the value it replaces).
    let mut current = word.load(Ordering::Relaxed);
    loop {
        let (decision, write) = step(current);
        let Some(new) = write else { return decision };
        match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return decision,
            Err(found) => current = found,
        }
    }
}

/// Validates `limit` units per `window` for a word with `count_bits` of count and a window
/// index that must stay below `2^index_bits` over the clock's whole range.
pub(crate) fn validate(
    limit: u64,
    window: Duration,
    count_bits: u32,
    min_window: Duration,
) -> Result<u64, Error> {
    if limit == 0 {
        return Err(Error::ZeroLimit);
    }
    let max = (1 << count_bits) - 1;
    if limit > max {
        return Err(Error::WindowLimitTooLarge { limit, max });
    }
    if window < min_window {
        return Err(Error::WindowTooShort {
            window,
            min: min_window,
        });
    }
    let nanos = window.as_nanos();
    if nanos.saturating_mul(u128::from(limit)) > 1 << 62 {
        return Err(Error::WindowTooLong { window, limit });
    }
    Ok(nanos as u64) // < 2^62: checked just above (limit >= 1)
}

/// A [`Decision`] saying `used` of `limit` units are in use and the state is fresh again after
/// `reset` ns. A decision derives its remaining units from an emission interval `t`:
/// `floor((t * limit - reset) / t)`, so `t` is chosen to make that exactly `limit - used`
/// (`reset / used <= t < reset / (used - 1)`); when no integer `t` fits (only when `reset`
/// is under `used * (used - 1)` ns, at the very end of a window), `reset` is rounded up by at
/// most `used` ns to the nearest value that has one. Requires `used <= limit` and `reset <= 2
/// W`, with `W * limit <= 2^62` (the quotas' validation and the counters ensure both), so
/// `t * limit <= 2^63`.
///
/// `t` is at most `2^63 - 1`, so that its top bit is free for the window flag
/// ([`Decision::of_window`]). It would reach `2^63` only for `used = 1` and `reset = 2^63`
/// (a sliding window of `2^62` ns, whose limit is then 1); there any `t` up to `reset` gives
/// the same `remaining`, 0.
pub(crate) fn decision(
    outcome: Outcome,
    limit: u64,
    used: u64,
    reset: u64,
    retry: u64,
) -> Decision {
    debug_assert!(used <= limit);
    if used == 0 {
        // Nothing in use: the state is the same as a fresh one.
        return Decision::with_outcome(outcome, &Quota::view(1, limit), 0, retry).of_window();
    }
    let t = reset.div_ceil(used).clamp(1, (1 << 63) - 1);
    let reset = if t * (used - 1) < reset {
        reset
    } else {
        t * (used - 1) + 1
    };
    Decision::with_outcome(outcome, &Quota::view(t, limit), reset, retry).of_window()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_reset_keeps_the_window_flag_and_reports_nothing_remaining() {
        // One unit of a limit of 1, fresh again in 2^63 ns (a sliding window of 2^62 ns):
        // `t` would be 2^63, the flag's bit.
        let d = decision(Outcome::Allowed, 1, 1, 1 << 63, 0);
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.reset_after(), Duration::from_nanos(1 << 63));
        assert_eq!(d.to_cl_throttle()[2], 0);
    }

    #[test]
    fn the_encoded_decision_reports_exactly_the_units_in_use() {
        for limit in [1u64, 2, 3, 7, 100, 32_767] {
            for used in (0..=limit).step_by((limit / 7).max(1) as usize) {
                for reset in [0u64, 1, 2, 5, 99, 1_000, 12_345, 1_000_000_007] {
                    let d = decision(Outcome::Allowed, limit, used, reset, 0);
                    assert_eq!(d.remaining(), limit - used, "{limit} {used} {reset}");
                    // CL.THROTTLE's reply too: no microsecond rounding of the encoding.
                    assert_eq!(
                        d.to_cl_throttle()[2],
                        (limit - used) as i64,
                        "{limit} {used} {reset}"
                    );
                    let got = d.reset_after().as_nanos() as u64;
                    if used == 0 {
                        assert_eq!(got, 0);
                    } else {
                        assert!(
                            got >= reset && got <= reset + used,
                            "{limit} {used} {reset}"
                        );
                    }
                }
            }
        }
    }
}
