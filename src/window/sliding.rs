//! The sliding window counter: the units admitted in the current fixed window plus the
//! previous window's, weighted by the share of the previous window that the sliding window
//! `(now - W, now]` still overlaps. A request of `n` passes while
//! `prev * (W - e) / W + cur + n <= limit` (`e` = time into the current window), compared
//! exactly in integers: `prev * (W - e) + (cur + n) * W <= limit * W`.
//!
//! It approximates the exact sliding log (every admission's time kept, as a Redis sorted set
//! does) with two counts, assuming the previous window's requests were spread evenly;
//! `docs/design/policies.md`, "Window algorithms", reports how often the two disagree on traces.
//!
//! The word:
//!
//! ```text
//!  63 62 61                      30 29              15 14               0
//! +-----+-------------------------+------------------+------------------+
//! |  0  | window index + 1 (32 b) |  prev (15 bits)  |  cur (15 bits)   |
//! +-----+-------------------------+------------------+------------------+
//! ```
//!
//! `0` is an absent key. With `W >= 1 s` the index stays below `2^32 - 2` over the clock's
//! whole range, so a word is below `2^62 - 2^30`: it fits the 62-bit payload of a keyed
//! table's slot, below the slot's marker states (`state.rs`). Counts are at most the limit,
//! so at most 32,767.

use std::time::Duration;

use super::limits::validate;
use super::report::decision;
use crate::decision::{Decision, Outcome};
use crate::error::Error;
use crate::quota_kind::{sealed::Step, QuotaKind, WindowQuota};

const COUNT_BITS: u32 = 15;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// The shortest window: `MAX_TIME / 1 s < 2^32 - 2`.
const MIN_WINDOW: Duration = Duration::from_secs(1);

/// A sliding window quota: `limit` units per any `window`-long span (estimated).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::{window::SlidingWindowQuota, Error};
///
/// let q = SlidingWindowQuota::per_minute(600)?;
/// assert_eq!(q.window(), Duration::from_secs(60));
/// assert_eq!(q.limit(), 600);
/// assert!(matches!(
///     SlidingWindowQuota::per_period(10, Duration::from_millis(100)),
///     Err(Error::WindowTooShort { .. })
/// ));
/// # Ok::<(), funnel::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlidingWindowQuota {
    pub(crate) limit: u64,
    /// Window length, ns, `>= 1 s`, `window * limit <= 2^62`.
    pub(crate) window: u64,
}

impl SlidingWindowQuota {
    /// `limit` units per second.
    ///
    /// # Errors
    ///
    /// As [`per_period`](Self::per_period).
    pub fn per_second(limit: u64) -> Result<SlidingWindowQuota, Error> {
        Self::per_period(limit, Duration::from_secs(1))
    }

    /// `limit` units per minute.
    ///
    /// # Errors
    ///
    /// As [`per_period`](Self::per_period).
    pub fn per_minute(limit: u64) -> Result<SlidingWindowQuota, Error> {
        Self::per_period(limit, Duration::from_secs(60))
    }

    /// `limit` units per hour.
    ///
    /// # Errors
    ///
    /// As [`per_period`](Self::per_period).
    pub fn per_hour(limit: u64) -> Result<SlidingWindowQuota, Error> {
        Self::per_period(limit, Duration::from_secs(3600))
    }

    /// `limit` units per `window`.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroLimit`]; [`Error::WindowLimitTooLarge`] above 32,767 (15 bits);
    /// [`Error::WindowTooShort`] under 1 s; [`Error::WindowTooLong`] when `window * limit`
    /// exceeds 2^62 ns.
    pub fn per_period(limit: u64, window: Duration) -> Result<SlidingWindowQuota, Error> {
        let window = validate(limit, window, COUNT_BITS, MIN_WINDOW)?;
        Ok(SlidingWindowQuota { limit, window })
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

/// `(window index, prev, cur)` of a word that holds any.
fn unpack(word: u64) -> Option<(u64, u64, u64)> {
    (word != 0).then(|| {
        (
            // Wrapping, as in the fixed counter's `unpack`: only words the counter did not
            // write have index bits 0.
            (word >> (2 * COUNT_BITS)).wrapping_sub(1),
            (word >> COUNT_BITS) & COUNT_MASK,
            word & COUNT_MASK,
        )
    })
}

fn pack(index: u64, prev: u64, cur: u64) -> u64 {
    debug_assert!(prev <= COUNT_MASK && cur <= COUNT_MASK);
    // Wrapping: as in the fixed counter's `pack`.
    (index.wrapping_add(1) << (2 * COUNT_BITS)) | (prev << COUNT_BITS) | cur
}

/// `prev * (W - e) + cur * W`: the estimate times `W`.
fn weighted(prev: u64, cur: u64, w: u64, e: u64) -> u128 {
    u128::from(prev) * u128::from(w - e) + u128::from(cur) * u128::from(w)
}

/// The earliest time in the window starting at `start` at which `n` more units fit, with
/// `prev` and `cur` there; `None` if they never fit in that window.
fn first_fit(start: u64, prev: u64, cur: u64, n: u64, q: &SlidingWindowQuota) -> Option<u64> {
    let room = q.limit.checked_sub(cur + n)?;
    if prev == 0 {
        return Some(start);
    }
    // prev * (W - e) <= room * W  <=>  e >= W - floor(room * W / prev)
    let slack = u128::from(room) * u128::from(q.window) / u128::from(prev);
    let e = q
        .window
        .saturating_sub(u64::try_from(slack).unwrap_or(u64::MAX));
    (e < q.window).then(|| start.saturating_add(e))
}

/// Decides a request of `n` units at `now` on `word` (`0`: absent). Returns the decision and,
/// when the word must change, the word to store (`None`: a denial or a peek writes nothing).
pub(crate) fn decide(
    word: u64,
    now: u64,
    quota: &SlidingWindowQuota,
    n: u64,
) -> (Decision, Option<u64>) {
    let SlidingWindowQuota { limit, window: w } = *quota;
    let current = now / w;
    let (index, prev, cur) = match unpack(word) {
        // The same window, or a later one (a caller's time going backwards: kept, stricter).
        Some((i, p, c)) if i >= current => (i, p, c),
        Some((i, _, c)) if i + 1 == current => (current, c, 0),
        _ => (current, 0, 0),
    };
    let (prev, cur) = (prev.min(limit), cur.min(limit));
    let start = index.saturating_mul(w);
    // Time into the window; 0 (the previous window fully weighted) for a later window.
    let e = now.saturating_sub(start).min(w - 1);
    let used = |cur: u64| weighted(prev, cur, w, e).div_ceil(u128::from(w)) as u64;
    // Until the estimate is 0: the end of the window after the last one holding a count.
    let reset = |cur: u64| {
        let until = if cur > 0 {
            start.saturating_add(2 * w)
        } else if prev > 0 {
            start.saturating_add(w)
        } else {
            now
        };
        // At most two windows, so that a word from the future cannot overflow a decision.
        until.saturating_sub(now).min(2 * w)
    };
    if n > limit {
        let d = decision(
            Outcome::CostExceedsLimit,
            limit,
            used(cur).min(limit),
            reset(cur),
            0,
        );
        return (d, None);
    }
    if weighted(prev, cur + n, w, e) <= u128::from(limit) * u128::from(w) {
        let after = cur + n;
        let d = decision(Outcome::Allowed, limit, used(after), reset(after), 0);
        (d, (n > 0).then(|| pack(index, prev, after)))
    } else {
        let fits_at = first_fit(start, prev, cur, n, quota)
            .filter(|t| *t > now)
            .or_else(|| first_fit(start.saturating_add(w), cur, 0, n, quota))
            .unwrap_or(start.saturating_add(2 * w));
        let retry = fits_at.saturating_sub(now).min(2 * w);
        let d = decision(
            Outcome::Limited,
            limit,
            used(cur).min(limit),
            reset(cur),
            retry,
        );
        (d, None)
    }
}

/// The time from which `word` says the same as an absent key (`0` for an absent word). A
/// keyed table reuses the slot of a key from then on.
pub(crate) fn expiry(word: u64, quota: &SlidingWindowQuota) -> u64 {
    match unpack(word) {
        Some((i, _, c)) if c > 0 => i.saturating_add(2).saturating_mul(quota.window),
        Some((i, p, _)) if p > 0 => i.saturating_add(1).saturating_mul(quota.window),
        _ => 0,
    }
}

impl QuotaKind for SlidingWindowQuota {}
impl WindowQuota for SlidingWindowQuota {}

impl Step for SlidingWindowQuota {
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
    use std::collections::HashMap;

    /// The reference model: units admitted per fixed window, the estimate recomputed from the
    /// map, and retry and reset found by trying every nanosecond (windows are tiny here).
    #[derive(Default, Clone)]
    struct Model {
        counts: HashMap<u64, u64>,
    }

    impl Model {
        /// The estimate at `now`, times `w`.
        fn scaled(&self, now: u64, w: u64) -> u128 {
            let k = now / w;
            let prev = if k == 0 {
                0
            } else {
                self.counts.get(&(k - 1)).copied().unwrap_or(0)
            };
            let cur = self.counts.get(&k).copied().unwrap_or(0);
            u128::from(prev) * u128::from(w - now % w) + u128::from(cur) * u128::from(w)
        }

        fn fits(&self, now: u64, w: u64, limit: u64, n: u64) -> bool {
            self.scaled(now, w) + u128::from(n) * u128::from(w) <= u128::from(limit) * u128::from(w)
        }

        /// `(allowed, remaining, reset, retry)`.
        fn decide(&mut self, now: u64, q: &SlidingWindowQuota, n: u64) -> (bool, u64, u64, u64) {
            let (w, limit) = (q.window, q.limit);
            let allowed = n <= limit && self.fits(now, w, limit, n);
            if allowed {
                *self.counts.entry(now / w).or_default() += n;
            }
            let used = self.scaled(now, w).div_ceil(u128::from(w)) as u64;
            let reset = (now..).find(|t| self.scaled(*t, w) == 0).unwrap() - now;
            let retry = if allowed || n > limit {
                0
            } else {
                (now + 1..).find(|t| self.fits(*t, w, limit, n)).unwrap() - now
            };
            (allowed, limit - used.min(limit), reset, retry)
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
        for seed in 0..300u64 {
            let mut s = seed;
            let limit = 1 + rng(&mut s) % 8;
            // Tiny windows (the public constructor asks for 1 s; the arithmetic does not care).
            let q = SlidingWindowQuota {
                limit,
                window: 5 + rng(&mut s) % 40,
            };
            let (mut word, mut now, mut model) = (0u64, rng(&mut s) % 200, Model::default());
            for step in 0..200 {
                now += rng(&mut s) % (q.window / 2 + 1);
                let n = rng(&mut s) % (limit + 2);
                let (d, write) = decide(word, now, &q, n);
                let (allowed, remaining, reset, retry) = model.decide(now, &q, n);
                let ctx = format!("seed {seed} step {step} now {now} n {n} {q:?}");
                assert_eq!(d.is_allowed(), allowed, "{ctx}");
                assert_eq!(d.remaining(), remaining, "{ctx}");
                let got_reset = d.reset_after().as_nanos() as u64;
                assert!(
                    got_reset >= reset && got_reset <= reset + limit,
                    "{ctx}: {got_reset} vs {reset}"
                );
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
    fn arbitrary_words_and_extreme_times_never_overflow() {
        let q = SlidingWindowQuota::per_second(COUNT_MASK).unwrap();
        for word in [u64::MAX, 1, COUNT_MASK, !COUNT_MASK, 1 << 63, 1 << 32] {
            for now in [0, crate::state::MAX_TIME_NANOS] {
                for n in [0, 1, COUNT_MASK, u64::MAX] {
                    let (d, _) = decide(word, now, &q, n);
                    let _ = (d.remaining(), d.reset_after(), d.to_cl_throttle());
                }
            }
        }
    }
}
