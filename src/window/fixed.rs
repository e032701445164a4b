//! The fixed window counter: at most `limit` units per window `[k W, (k + 1) W)`; the count
//! starts again at every window boundary (so up to twice the limit can pass around one
//! boundary: its known weakness, which the sliding window counter fixes).
//!
//! The word:
//!
//! ```text
//!  63 62 61                                  22 21                  0
//! +-----+--------------------------------------+---------------------+
//! |  0  |  window index + 1 (40 bits)           |  count (22 bits)    |
//! +-----+--------------------------------------+---------------------+
//! ```
//!
//! `0` is an absent key (the index field of a written word is at least 1). The window index
//! is `now / W`; with `W >= 4 ms` it stays below `2^40 - 2` over the clock's whole range, so
//! a word is below `2^62 - 2^22`: it fits the 62-bit payload of a keyed table's slot, below
//! the slot's marker states (`state.rs`).

use std::time::Duration;

use super::limits::validate;
use super::report::decision;
use crate::decision::{Decision, Outcome};
use crate::error::Error;
use crate::quota_kind::{sealed::Step, QuotaKind, WindowQuota};

const COUNT_BITS: u32 = 22;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// The shortest window: `MAX_TIME / 4 ms < 2^40 - 2`.
const MIN_WINDOW: Duration = Duration::from_millis(4);

/// A fixed window quota: `limit` units per `window`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::{window::FixedWindowQuota, Error};
///
/// let q = FixedWindowQuota::per_minute(100)?;
/// assert_eq!((q.limit(), q.window()), (100, Duration::from_secs(60)));
/// assert_eq!(FixedWindowQuota::per_period(5, Duration::from_millis(250))?.limit(), 5);
/// assert!(matches!(
///     FixedWindowQuota::per_period(1 << 22, Duration::from_secs(1)),
///     Err(Error::WindowLimitTooLarge { max: 4_194_303, .. })
/// ));
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FixedWindowQuota {
    pub(crate) limit: u64,
    /// Window length, ns, `>= 4 ms`, `window * limit <= 2^62`.
    pub(crate) window: u64,
}

impl FixedWindowQuota {
    /// `limit` units per second.
    ///
    /// # Errors
    ///
    /// As [`per_period`](Self::per_period).
    pub fn per_second(limit: u64) -> Result<FixedWindowQuota, Error> {
        Self::per_period(limit, Duration::from_secs(1))
    }

    /// `limit` units per minute.
    ///
    /// # Errors
    ///
    /// As [`per_period`](Self::per_period).
    pub fn per_minute(limit: u64) -> Result<FixedWindowQuota, Error> {
        Self::per_period(limit, Duration::from_secs(60))
    }

    /// `limit` units per hour.
    ///
    /// # Errors
    ///
    /// As [`per_period`](Self::per_period).
    pub fn per_hour(limit: u64) -> Result<FixedWindowQuota, Error> {
        Self::per_period(limit, Duration::from_secs(3600))
    }

    /// `limit` units per `window`.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroLimit`]; [`Error::WindowLimitTooLarge`] above 4,194,303 (22 bits);
    /// [`Error::WindowTooShort`] under 4 ms; [`Error::WindowTooLong`] when `window * limit`
    /// exceeds 2^62 ns.
    pub fn per_period(limit: u64, window: Duration) -> Result<FixedWindowQuota, Error> {
        let window = validate(limit, window, COUNT_BITS, MIN_WINDOW)?;
        Ok(FixedWindowQuota { limit, window })
    }

    /// Units per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }
}

/// The word's window index (without the +1) and count, if it holds any.
fn unpack(word: u64) -> Option<(u64, u64)> {
    // Wrapping: a word the counter wrote holds index + 1 >= 1; any other (only tests and
    // fuzzing make one) reads as the last window, which can only deny.
    (word != 0).then(|| ((word >> COUNT_BITS).wrapping_sub(1), word & COUNT_MASK))
}

fn pack(index: u64, count: u64) -> u64 {
    debug_assert!(count <= COUNT_MASK);
    // Wrapping: only the last window's index (read from a word the counter did not write,
    // `unpack`) has no successor; it packs into index bits 0, which `unpack` reads as the last
    // window again.
    (index.wrapping_add(1) << COUNT_BITS) | count
}

/// Decides a request of `n` units at `now` on `word` (`0`: absent). Returns the decision and,
/// when the word must change, the word to store (`None`: a denial or a peek writes nothing).
pub(crate) fn decide(
    word: u64,
    now: u64,
    quota: &FixedWindowQuota,
    n: u64,
) -> (Decision, Option<u64>) {
    let FixedWindowQuota { limit, window } = *quota;
    let current = now / window;
    // A word from a later window (a caller's time going backwards) keeps its count: stricter.
    let (index, used) = match unpack(word) {
        Some((index, count)) if index >= current => (index, count.min(limit)),
        _ => (current, 0),
    };
    let end = index.saturating_add(1).saturating_mul(window);
    // Clamped to one window so that a word from far in the future cannot overflow a decision.
    let until_end = end.saturating_sub(now).min(window);
    let reset = |used: u64| if used == 0 { 0 } else { until_end };
    if n > limit {
        let d = decision(Outcome::CostExceedsLimit, limit, used, reset(used), 0);
        return (d, None);
    }
    if used + n <= limit {
        let after = used + n;
        let d = decision(Outcome::Allowed, limit, after, reset(after), 0);
        (d, (n > 0).then(|| pack(index, after)))
    } else {
        // Fits in the next window, which starts at `end`.
        let d = decision(Outcome::Limited, limit, used, reset(used), until_end);
        (d, None)
    }
}

/// The time from which `word` says the same as an absent key: the end of its window (`0` for
/// an absent word). A keyed table reuses the slot of a key from then on.
pub(crate) fn expiry(word: u64, quota: &FixedWindowQuota) -> u64 {
    match unpack(word) {
        Some((index, _)) => index.saturating_add(1).saturating_mul(quota.window),
        None => 0,
    }
}

impl QuotaKind for FixedWindowQuota {}
impl WindowQuota for FixedWindowQuota {}

impl Step for FixedWindowQuota {
    #[inline(always)]
    fn decide(&self, word: u64, now: u64, n: u64) -> (Decision, Option<u64>) {
        decide(word, now, self, n)
    }

    #[inline(always)]
    fn expiry(&self, word: u64) -> u64 {
        expiry(word, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference model: a map from window index to units admitted in it.
    #[derive(Default)]
    struct Model {
        counts: std::collections::HashMap<u64, u64>,
    }

    impl Model {
        fn decide(&mut self, now: u64, limit: u64, window: u64, n: u64) -> (bool, u64, u64, u64) {
            let k = now / window;
            let used = self.counts.get(&k).copied().unwrap_or(0);
            let end = (k + 1) * window - now;
            if n <= limit && used + n <= limit {
                *self.counts.entry(k).or_default() += n;
                let after = used + n;
                (true, limit - after, if after > 0 { end } else { 0 }, 0)
            } else {
                let retry = if n > limit { 0 } else { end };
                (false, limit - used, if used > 0 { end } else { 0 }, retry)
            }
        }
    }

    /// The test kit's PRNG, as a function of a seed it advances.
    fn rng(seed: &mut u64) -> u64 {
        let mut r = funnel_testkit::Rng::new(*seed);
        *seed = seed.wrapping_add(1);
        r.next_u64()
    }

    #[test]
    fn random_traces_match_the_reference_model() {
        let (mut admitted, mut retried) = (0, 0);
        for seed in 0..200u64 {
            let mut s = seed;
            let limit = 1 + rng(&mut s) % 9;
            let window = 4_000_000 * (1 + rng(&mut s) % 5);
            let q = FixedWindowQuota::per_period(limit, Duration::from_nanos(window)).unwrap();
            let (mut word, mut now, mut model) = (0u64, rng(&mut s) % 10_000_000, Model::default());
            for step in 0..300 {
                now += rng(&mut s) % (window / 2);
                let n = rng(&mut s) % (limit + 2);
                let (d, write) = decide(word, now, &q, n);
                let (allowed, remaining, reset, retry) = model.decide(now, limit, window, n);
                let ctx = format!("seed {seed} step {step} now {now} n {n}");
                assert_eq!(d.is_allowed(), allowed, "{ctx}");
                assert_eq!(d.remaining(), remaining, "{ctx}");
                let got_reset = d.reset_after().as_nanos() as u64;
                assert!(got_reset >= reset && got_reset <= reset + limit, "{ctx}");
                assert_eq!(
                    d.retry_after().map_or(0, |r| r.as_nanos() as u64),
                    retry,
                    "{ctx}"
                );
                assert_eq!(write.is_some(), allowed && n > 0, "{ctx}");
                admitted += u64::from(allowed);
                retried += u64::from(retry > 0);
                if let Some(w) = write {
                    word = w;
                }
                // After its expiry the word answers as an absent key would.
                let later = expiry(word, &q).max(now);
                assert_eq!(
                    decide(word, later, &q, 1).0,
                    decide(0, later, &q, 1).0,
                    "{ctx}"
                );
            }
        }
        assert!(
            admitted > 10_000 && retried > 5_000,
            "{admitted} admitted, {retried} retries"
        );
    }

    #[test]
    fn up_to_twice_the_limit_passes_around_a_boundary() {
        let q = FixedWindowQuota::per_second(5).unwrap();
        let mut word = 0;
        let mut admitted = 0;
        for now in [999_999_999u64, 1_000_000_000] {
            for _ in 0..5 {
                let (d, w) = decide(word, now, &q, 1);
                admitted += u64::from(d.is_allowed());
                word = w.unwrap_or(word);
            }
        }
        assert_eq!(admitted, 10);
    }

    #[test]
    fn time_going_backwards_keeps_the_later_window_count() {
        let q = FixedWindowQuota::per_second(2).unwrap();
        let (_, w) = decide(0, 5_500_000_000, &q, 2);
        let (d, w2) = decide(w.unwrap(), 4_500_000_000, &q, 1);
        assert!(!d.is_allowed());
        assert_eq!(w2, None);
    }

    #[test]
    fn arbitrary_words_and_extreme_times_never_overflow() {
        let q = FixedWindowQuota::per_period(COUNT_MASK, Duration::from_millis(4)).unwrap();
        for word in [u64::MAX, 1, COUNT_MASK, !COUNT_MASK, 1 << 63] {
            for now in [0, crate::state::MAX_TIME_NANOS] {
                for n in [0, 1, COUNT_MASK, u64::MAX] {
                    let (d, _) = decide(word, now, &q, n);
                    let _ = (d.remaining(), d.reset_after(), d.to_cl_throttle());
                }
            }
        }
    }
}
