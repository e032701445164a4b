//! What a decision looks like on the wire: the rate-limit headers of every response, and the
//! `429` (or the configured status) with `Retry-After` and an RFC 9457 problem body.
//!
//! The crate documentation states the header mapping; this file is its only implementation.

use std::io::Write as _;

use bytes::Bytes;
use funnel::Decision;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::Full;

use crate::config::{ceil_secs, Config, Policy};
use crate::Report;

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// The rate-limit headers of one response: at most three, kept inline (no allocation for the
/// list itself).
#[derive(Default)]
pub(crate) struct Extra {
    items: [Option<(HeaderName, HeaderValue)>; 3],
}

impl std::fmt::Debug for Extra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.items.iter().flatten()).finish()
    }
}

impl Extra {
    fn push(&mut self, name: HeaderName, value: HeaderValue) {
        if let Some(slot) = self.items.iter_mut().find(|s| s.is_none()) {
            *slot = Some((name, value));
        }
    }

    /// The headers, leaving none behind.
    pub(crate) fn take(&mut self) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
        self.items.iter_mut().filter_map(Option::take)
    }
}

/// `t` of a decision: the retry time when denied (rounded up, as `Retry-After`), else the time
/// until the funnel is empty (rounded up).
pub(crate) fn t_secs(d: &Decision) -> u64 {
    match d.retry_after() {
        Some(r) if !d.is_allowed() => ceil_secs(r),
        _ => ceil_secs(d.reset_after()),
    }
}

/// The policy closest to its limit: the denying one, else the smallest `remaining / limit`
/// (cross-multiplied, exact), ties to fewer remaining, then to the first.
pub(crate) fn closest(decisions: &[Decision], denied_by: Option<usize>) -> usize {
    if let Some(i) = denied_by {
        return i;
    }
    let mut best = 0;
    for (i, d) in decisions.iter().enumerate().skip(1) {
        let b = &decisions[best];
        let here = u128::from(d.remaining()) * u128::from(b.limit());
        let there = u128::from(b.remaining()) * u128::from(d.limit());
        if here < there || (here == there && d.remaining() < b.remaining()) {
            best = i;
        }
    }
    best
}

/// The headers for one decided request.
pub(crate) fn headers<C>(
    config: &Config<C>,
    decisions: &[Decision],
    denied_by: Option<usize>,
) -> Extra {
    let mut out = Extra::default();
    match config.report {
        Report::Legacy => {
            let d = &decisions[closest(decisions, denied_by).min(decisions.len() - 1)];
            out.push(X_LIMIT, HeaderValue::from(d.limit()));
            out.push(X_REMAINING, HeaderValue::from(d.remaining()));
            out.push(X_RESET, HeaderValue::from(t_secs(d)));
        }
        Report::All => {
            out.push(RATELIMIT_POLICY, config.all_policies.clone());
            let items = config.policies.iter().zip(decisions);
            if let Some(v) = ratelimit_value(items) {
                out.push(RATELIMIT, v);
            }
        }
        Report::Closest => {
            let i = closest(decisions, denied_by);
            if let (Some(p), Some(d)) = (config.policies.get(i), decisions.get(i)) {
                out.push(RATELIMIT_POLICY, p.policy_value.clone());
                if let Some(v) = ratelimit_value(std::iter::once((p, d))) {
                    out.push(RATELIMIT, v);
                }
            }
        }
    }
    out
}

/// `"name";r=..;t=..`, comma-separated, written without `core::fmt` into a stack buffer and
/// copied once into the value.
fn ratelimit_value<'a, C: 'a>(
    items: impl Iterator<Item = (&'a Policy<C>, &'a Decision)>,
) -> Option<HeaderValue> {
    let mut buf = ValueBuf::default();
    for (i, (p, d)) in items.enumerate() {
        if i > 0 {
            buf.push(b", ");
        }
        buf.push(b"\"");
        buf.push(p.name.as_bytes());
        buf.push(b"\";r=");
        buf.push_u64(d.remaining());
        buf.push(b";t=");
        buf.push_u64(t_secs(d));
    }
    // Printable ASCII by construction (checked names, digits): never an error.
    HeaderValue::from_bytes(buf.as_bytes()).ok()
}

/// Bytes on the stack, moved to the heap only when they outgrow it (very long policy names).
struct ValueBuf {
    stack: [u8; 192],
    len: usize,
    heap: Vec<u8>,
}

impl Default for ValueBuf {
    fn default() -> Self {
        ValueBuf {
            stack: [0; 192],
            len: 0,
            heap: Vec::new(),
        }
    }
}

impl ValueBuf {
    #[inline]
    fn push(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        if self.heap.is_empty() && end <= self.stack.len() {
            self.stack[self.len..end].copy_from_slice(bytes);
            self.len = end;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.stack[..self.len]);
            }
            self.heap.extend_from_slice(bytes);
        }
    }

    /// `n` in decimal.
    #[inline]
    fn push_u64(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            // `n % 10` is below 10: the cast cannot truncate.
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[at..]);
    }

    fn as_bytes(&self) -> &[u8] {
        if self.heap.is_empty() {
            &self.stack[..self.len]
        } else {
            &self.heap
        }
    }
}

/// The rejection of a request `policy` denied.
pub(crate) fn rejection<C>(
    status: StatusCode,
    policy: &Policy<C>,
    decision: &Decision,
    mut headers: Extra,
) -> Response<Full<Bytes>> {
    let retry = decision.retry_after().map(ceil_secs);
    let mut body = Vec::with_capacity(160);
    // Writing to a Vec cannot fail; the name is printable ASCII without `"` or `\`.
    let _ = write!(
        body,
        "{{\"type\":\"about:blank\",\"title\":\"{}\",\"status\":{},\"detail\":\"limit \\\"{}\\\" exceeded; ",
        status.canonical_reason().unwrap_or("Rate limited"),
        status.as_u16(),
        policy.name,
    );
    let _ = match retry {
        Some(s) => write!(body, "retry after {s} s\"}}"),
        None => write!(
            body,
            "this request costs more than the limit of {} allows\"}}",
            policy.quota.limit()
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(CONTENT_TYPE, PROBLEM_JSON);
    if let Some(s) = retry {
        h.insert(RETRY_AFTER, HeaderValue::from(s));
    }
    for (name, value) in headers.take() {
        h.append(name, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use funnel::clock::ManualClock;
    use funnel::{Funnel, Quota};
    use std::time::Duration;

    /// A decision with `remaining` of `limit` left.
    fn with_left(limit: u64, remaining: u64) -> Decision {
        let f = Funnel::with_clock(Quota::per_hour(limit).unwrap(), ManualClock::new());
        let mut d = f.check();
        for _ in remaining + 1..limit {
            d = f.check();
        }
        assert_eq!(d.remaining(), remaining);
        d
    }

    #[test]
    fn the_value_buffer_writes_decimals_and_outgrows_the_stack() {
        let mut b = ValueBuf::default();
        for n in [0, 7, 10, 1234567890, u64::MAX] {
            b.push_u64(n);
            b.push(b",");
        }
        assert_eq!(b.as_bytes(), b"0,7,10,1234567890,18446744073709551615,");
        let long = "n".repeat(150);
        b.push(long.as_bytes());
        b.push(long.as_bytes());
        assert_eq!(b.as_bytes().len(), 39 + 300);
        assert!(b.as_bytes().ends_with(long.as_bytes()));
    }

    #[test]
    fn closest_is_the_smallest_share_left_not_the_fewest_units() {
        // 50 of 1000 left (5%) is closer than 5 of 10 left (50%).
        let d = [with_left(10, 5), with_left(1000, 50)];
        assert_eq!(closest(&d, None), 1);
        // Equal shares: the fewer units.
        let d = [with_left(100, 50), with_left(10, 5)];
        assert_eq!(closest(&d, None), 1);
        // Equal in both: the first.
        let d = [with_left(10, 5), with_left(10, 5)];
        assert_eq!(closest(&d, None), 0);
        // A denial names the denying policy, whatever the others say.
        assert_eq!(closest(&d, Some(1)), 1);
    }

    #[test]
    fn t_of_a_denial_is_the_retry_time_rounded_up() {
        let clock = ManualClock::new();
        let f = Funnel::with_clock(
            Quota::per_period(2, Duration::from_millis(3001)).unwrap(),
            clock.clone(),
        );
        assert!(f.check().is_allowed() && f.check().is_allowed());
        let d = f.check();
        let retry = d.retry_after().unwrap();
        assert_eq!(t_secs(&d), 2);
        assert!(Duration::from_secs(t_secs(&d)) >= retry);
        clock.advance(retry);
        assert!(f.check().is_allowed());
    }
}
