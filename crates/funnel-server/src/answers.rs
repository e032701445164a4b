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
}

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
