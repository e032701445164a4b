//! The service-wide switches that change what a request is answered, named after
//! envoyproxy/ratelimit's settings so that a deployment moved from it keeps its answers:
//!
//! * `shadow_mode` (`SHADOW_MODE`): a request over the limit is answered OK overall; each
//!   descriptor's status still says what it decided, and the override is counted.
//! * `quota_mode` (`QUOTA_MODE`): every descriptor with a limit is in quota mode (as a rule's
//!   own `quota_mode: true` makes its descriptor): the request is over the limit when a
//!   descriptor in rate-limit mode is, or when every quota-mode descriptor is.
//! * `dynamic_metadata` (`RESPONSE_DYNAMIC_METADATA`): the response carries the request's
//!   domain, descriptors and `hits_addend`, and the `metadata` of the rules that passed
//!   ([`crate::dynamic_metadata`]).
//! * `limit_headers` (`LIMIT_RESPONSE_HEADERS_ENABLED` and the three header names): the limit,
//!   what is left and the seconds until reset of the descriptor closest to its limit, in
//!   `response_headers_to_add`.
//! * `charge_denied`: each descriptor charged on its own, as envoyproxy/ratelimit does,
//!   instead of funnel's all-or-nothing.
//! * `near_limit_ratio` (`NEAR_LIMIT_RATIO`): from what share of a limit used the units asked
//!   count in the `near_limit` statistic (the answers themselves do not change).

use crate::proto::rate_limit_response::{Code, DescriptorStatus};
use crate::proto::HeaderValue;

/// The switches (all off by default: funnel's own answers).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answers {
    /// Answer OK overall whatever the decision (the statuses keep theirs).
    pub shadow_mode: bool,
    /// Every descriptor with a limit in quota mode.
    pub quota_mode: bool,
    /// Fill `dynamic_metadata`.
    pub dynamic_metadata: bool,
    /// Add envoyproxy/ratelimit's limit headers under these names.
    pub limit_headers: Option<LimitHeaders>,
    /// Charge every descriptor on its own, even when another denies the request.
    pub charge_denied: bool,
    /// Where `near_limit` starts counting.
    pub near_limit_ratio: NearLimitRatio,
}

/// envoyproxy/ratelimit's `NEAR_LIMIT_RATIO`: the units asked past `floor(limit × ratio)` of
/// a limit, and within it, count in `near_limit` ([`crate::stats::Hit::new`]). Between 0 and
/// 1; 0.8 by default.
#[derive(Clone, Copy, Debug)]
pub struct NearLimitRatio(f64);

impl NearLimitRatio {
    /// The ratio `r`, or `None` unless it is a number from 0 to 1.
    pub fn new(r: f64) -> Option<NearLimitRatio> {
        (0.0..=1.0).contains(&r).then_some(NearLimitRatio(r))
    }

    /// The units of `limit` past which `near_limit` counts: `floor(limit × ratio)`.
    pub fn threshold(self, limit: u64) -> u64 {
        // Exact for every limit below 2^53; the floor of a product in 0..=limit fits in u64.
        (limit as f64 * self.0).floor() as u64
    }
}

/// The ratio as `--near-limit-ratio` and `NEAR_LIMIT_RATIO` write it: a number from 0 to 1.
impl std::str::FromStr for NearLimitRatio {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim()
            .parse::<f64>()
            .ok()
            .and_then(NearLimitRatio::new)
            .ok_or_else(|| format!("{s:?}: expected a number from 0 to 1, such as 0.8"))
    }
}

impl Default for NearLimitRatio {
    fn default() -> Self {
        NearLimitRatio(0.8)
    }
}

impl PartialEq for NearLimitRatio {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

// `new` admits no NaN, so equality of the bits is an equivalence.
impl Eq for NearLimitRatio {}

/// The names of the three limit headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitHeaders {
    /// The limit of the descriptor closest to its limit (`RateLimit-Limit`).
    pub limit: String,
    /// What it has left (`RateLimit-Remaining`).
    pub remaining: String,
    /// Whole seconds until it resets (`RateLimit-Reset`).
    pub reset: String,
}

impl Default for LimitHeaders {
    fn default() -> Self {
        LimitHeaders {
            limit: "RateLimit-Limit".into(),
            remaining: "RateLimit-Remaining".into(),
            reset: "RateLimit-Reset".into(),
        }
    }
}

/// One descriptor's answer, as the header choice reads it.
pub struct Answered<'a> {
    /// Its status.
    pub status: &'a DescriptorStatus,
    /// Matched an `unlimited` rule.
    pub unlimited: bool,
    /// In quota mode.
    pub quota_mode: bool,
}

/// The status the limit headers describe, chosen as envoyproxy/ratelimit chooses it: the
/// descriptor with a limit and the least left, except that the last descriptor over the limit
/// in rate-limit mode (not quota mode) wins over any that is not.
pub fn closest<'a>(answered: &[Answered<'a>]) -> Option<&'a DescriptorStatus> {
    let mut least = u32::MAX;
    let mut chosen = None;
    for a in answered {
        if a.status.current_limit.is_some() && a.status.limit_remaining < least {
            chosen = Some(a.status);
            least = a.status.limit_remaining;
        }
        if !a.unlimited && !a.quota_mode && a.status.code == Code::OverLimit as i32 {
            chosen = Some(a.status);
            least = 0;
        }
    }
    chosen
}

impl LimitHeaders {
    /// The three headers for `status`: its `requests_per_unit`, its `limit_remaining`, and its
    /// `duration_until_reset` in whole seconds (which the statuses already round up).
    pub fn headers(&self, status: &DescriptorStatus) -> Vec<HeaderValue> {
        let limit = status
            .current_limit
            .as_ref()
            .map_or(0, |l| l.requests_per_unit);
        let reset = status
            .duration_until_reset
            .as_ref()
            .map_or(0, |d| d.seconds.max(0));
        [
            (&self.limit, limit.to_string()),
            (&self.remaining, status.limit_remaining.to_string()),
            (&self.reset, reset.to_string()),
        ]
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key: key.clone(),
            value,
            ..Default::default()
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn near_starts_past_the_ratio_of_the_limit() {
        use super::NearLimitRatio;
        let default = NearLimitRatio::default();
        // 0.8 of 5 is 4: the fifth unit is near, the fourth not.
        assert_eq!(default.threshold(5), 4);
        // As the fixed 80% it replaces: a unit is near when less than 20% is left after it.
        for limit in 1..200u64 {
            for used in 0..=limit {
                assert_eq!(
                    used > default.threshold(limit),
                    (limit - used) * 5 < limit,
                    "{used} of {limit}"
                );
            }
        }
        assert_eq!(NearLimitRatio::new(0.5).unwrap().threshold(10), 5);
        assert_eq!(NearLimitRatio::new(0.0).unwrap().threshold(10), 0);
        assert_eq!(NearLimitRatio::new(1.0).unwrap().threshold(10), 10);
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            assert!(NearLimitRatio::new(bad).is_none(), "{bad}");
        }
        assert_eq!(" 0.5 ".parse(), Ok(NearLimitRatio::new(0.5).unwrap()));
        for bad in ["", "half", "1.5", "-0.1", "NaN"] {
            let e = bad.parse::<NearLimitRatio>().unwrap_err();
            assert!(e.contains("from 0 to 1"), "{bad}: {e}");
        }
    }

    use super::*;
    use crate::proto::rate_limit_response::RateLimit;

    fn status(code: Code, limit: Option<u32>, remaining: u32, reset: i64) -> DescriptorStatus {
        DescriptorStatus {
            code: code as i32,
            current_limit: limit.map(|requests_per_unit| RateLimit {
                requests_per_unit,
                unit: 2,
                ..Default::default()
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(prost_types::Duration {
                seconds: reset,
                nanos: 0,
            }),
        }
    }

    fn answered(s: &DescriptorStatus, quota_mode: bool) -> Answered<'_> {
        Answered {
            status: s,
            unlimited: false,
            quota_mode,
        }
    }

    #[test]
    fn the_least_remaining_is_chosen_and_a_denial_wins() {
        let a = status(Code::Ok, Some(10), 7, 30);
        let b = status(Code::Ok, Some(5), 2, 30);
        let none = status(Code::Ok, None, 0, 0);
        let got = closest(&[
            answered(&a, false),
            answered(&none, false),
            answered(&b, false),
        ]);
        assert_eq!(got, Some(&b), "no limit is never chosen; 2 left beats 7");
        let over = status(Code::OverLimit, Some(10), 0, 30);
        let zero = status(Code::Ok, Some(4), 0, 30);
        assert_eq!(
            closest(&[answered(&over, false), answered(&zero, false)]),
            Some(&over),
            "0 left is not less than a denial's 0"
        );
        assert_eq!(
            closest(&[answered(&zero, false), answered(&over, false)]),
            Some(&over),
            "a denial wins over an earlier 0 left"
        );
        let quota_over = status(Code::OverLimit, Some(3), 0, 30);
        assert_eq!(
            closest(&[answered(&zero, false), answered(&quota_over, true)]),
            Some(&zero),
            "a quota-mode denial wins only by what it has left"
        );
        assert_eq!(closest(&[answered(&none, false)]), None);
    }

    #[test]
    fn the_headers_carry_limit_remaining_and_whole_seconds() {
        let names = LimitHeaders {
            limit: "X-Limit".into(),
            ..Default::default()
        };
        let got: Vec<(String, String)> = names
            .headers(&status(Code::Ok, Some(10), 7, 42))
            .into_iter()
            .map(|h| (h.key, h.value))
            .collect();
        assert_eq!(
            got,
            vec![
                ("X-Limit".to_owned(), "10".to_owned()),
                ("RateLimit-Remaining".to_owned(), "7".to_owned()),
                ("RateLimit-Reset".to_owned(), "42".to_owned()),
            ]
        );
    }
}
