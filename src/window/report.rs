//! A window counter's answer as a [`Decision`], encoded so that the funnel's accessors read
//! the window's numbers: [`decision`].

use crate::decision::{Decision, Outcome};
use crate::quota::Quota;

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
    use std::time::Duration;

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
