//! # funnel-tower
//!
//! A tower [`Layer`](tower_layer::Layer) that rate-limits `http` requests with funnel: keys from
//! the request (peer IP with IPv6 grouped by prefix, client IP through trusted proxies only, a
//! header, the route, a closure), several named limits charged all or nothing, the IETF
//! `RateLimit-Policy` / `RateLimit` header fields (draft-ietf-httpapi-ratelimit-headers) or the
//! legacy `X-RateLimit-*` triple, `429` with `Retry-After` and an RFC 9457 problem body, and a
//! shadow mode that evaluates and counts but never rejects.
//!
//! ```
//! use std::time::Duration;
//! use funnel::Quota;
//! use funnel_tower::{KeyBy, RateLimitLayer};
//!
//! let layer = RateLimitLayer::builder()
//!     .policy("ip", KeyBy::PeerIp { v6_prefix: 64 }, Quota::new(19, 10, Duration::from_secs(1))?)
//!     .policy("route", KeyBy::Route, Quota::per_minute(1000)?)
//!     .build()?;
//! // let app = tower::ServiceBuilder::new().layer(layer).service(handler);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Header mapping (draft -10)
//!
//! For a policy named `ip` whose funnel holds `q` units and refills completely in `w`
//! seconds: `RateLimit-Policy: "ip";q=<limit>;w=<tolerance, seconds rounded up>` and
//! `RateLimit: "ip";r=<remaining>;t=<seconds>`, where `t` is, on a denied request, the
//! `Retry-After` value (seconds until the request could pass, rounded up: never earlier than
//! the true time), and otherwise the seconds until the funnel is empty again, rounded up.

mod key;
pub mod spec;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use funnel::clock::{Clock, QuantaClock};
use funnel::{check_all, Charge, Decision, Limiter, Quota};
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{Either, Full};

pub use key::{KeyBy, KeyFn, Net, PeerAddr};

/// A bad configuration, reported by [`Builder::build`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// No policy was given.
    NoPolicy,
    /// A policy name is empty or not a valid structured-field string (printable ASCII, no `"`
    /// or `\`).
    BadName(String),
    /// Two policies share a name.
    DuplicateName(String),
    /// A key's IPv6 prefix is over 128.
    BadPrefix(u8),
    /// The status code for denials is not a 4xx or 5xx.
    BadStatus(u16),
    /// funnel refused a table size.
    Funnel(funnel::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoPolicy => f.write_str("a rate-limit layer needs at least one policy"),
            Error::BadName(n) => write!(f, "policy name {n:?} is not a valid header string"),
            Error::DuplicateName(n) => write!(f, "two policies are named {n:?}"),
            Error::BadPrefix(p) => write!(f, "IPv6 prefix /{p} is longer than 128 bits"),
            Error::BadStatus(s) => write!(f, "status {s} is not a 4xx or 5xx"),
            Error::Funnel(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

/// Which policies the `RateLimit` headers describe.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Report {
    /// Every policy, as a list.
    #[default]
    All,
    /// Only the policy closest to its limit (the least remaining; the denying one on a denial).
    Closest,
    /// The legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds) of the closest policy.
    Legacy,
}

/// Counters of one policy, each a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyStats {
    /// Requests this policy admitted (and that were admitted as a whole).
    pub allowed: u64,
    /// Requests rejected because this policy denied them.
    pub denied: u64,
    /// In shadow mode, requests this policy would have rejected.
    pub shadow_denied: u64,
}

struct Policy {
    name: String,
    key: KeyBy,
    quota: Quota,
    limiter: Limiter<[u8], QuantaClock>,
    /// `"name";q=..;w=..`, built once.
    policy_field: String,
    /// The same as a header value, for [`Report::Closest`].
    policy_value: HeaderValue,
    allowed: AtomicU64,
    denied: AtomicU64,
    shadow_denied: AtomicU64,
}

type CostFn = Arc<dyn Fn(&http::request::Parts) -> u64 + Send + Sync>;

struct Shared {
    policies: Vec<Policy>,
    /// Every policy's field, joined: the `RateLimit-Policy` value for [`Report::All`].
    all_policies: HeaderValue,
    clock: QuantaClock,
    status: StatusCode,
    shadow: bool,
    report: Report,
    cost: Option<CostFn>,
    exempt_methods: Vec<Method>,
    exempt_paths: Vec<String>,
}

/// The layer; cheap to clone (the limiters are shared).
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

/// Builds a [`RateLimitLayer`].
#[must_use]
pub struct Builder {
    policies: Vec<(String, KeyBy, Quota, usize)>,
    status: u16,
    shadow: bool,
    report: Report,
    cost: Option<CostFn>,
    exempt_methods: Vec<Method>,
    exempt_paths: Vec<String>,
}

impl RateLimitLayer {
    /// A builder with no policy yet.
    pub fn builder() -> Builder {
        Builder {
            policies: Vec::new(),
            status: 429,
            shadow: false,
            report: Report::All,
            cost: None,
            exempt_methods: Vec::new(),
            exempt_paths: Vec::new(),
        }
    }

    /// The counters of the policy named `name`.
    pub fn stats(&self, name: &str) -> Option<PolicyStats> {
        let p = self.shared.policies.iter().find(|p| p.name == name)?;
        // Relaxed: statistics.
        Some(PolicyStats {
            allowed: p.allowed.load(Ordering::Relaxed),
            denied: p.denied.load(Ordering::Relaxed),
            shadow_denied: p.shadow_denied.load(Ordering::Relaxed),
        })
    }
}

impl Builder {
    /// Adds a named limit with a table for up to 65,536 keys in debt at once.
    pub fn policy(self, name: impl Into<String>, key: KeyBy, quota: Quota) -> Self {
        self.policy_with_capacity(name, key, quota, funnel::DEFAULT_CAPACITY)
    }

    /// Adds a named limit whose table holds `keys` keys (18 bytes each).
    pub fn policy_with_capacity(
        mut self,
        name: impl Into<String>,
        key: KeyBy,
        quota: Quota,
        keys: usize,
    ) -> Self {
        self.policies.push((name.into(), key, quota, keys));
        self
    }

    /// The status of a rejection (default 429).
    pub fn status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// Shadow mode: evaluate, count and add headers, never reject.
    pub fn shadow(mut self, on: bool) -> Self {
        self.shadow = on;
        self
    }

    /// Which policies the headers describe (default [`Report::All`]).
    pub fn report(mut self, report: Report) -> Self {
        self.report = report;
        self
    }

    /// The cost of a request in units (default 1), e.g. by method or declared size.
    pub fn cost(
        mut self,
        f: impl Fn(&http::request::Parts) -> u64 + Send + Sync + 'static,
    ) -> Self {
        self.cost = Some(Arc::new(f));
        self
    }

    /// Requests with this method pass unlimited and uncounted.
    pub fn exempt_method(mut self, method: Method) -> Self {
        self.exempt_methods.push(method);
        self
    }

    /// Requests whose path starts with `prefix` pass unlimited and uncounted.
    pub fn exempt_path(mut self, prefix: impl Into<String>) -> Self {
        self.exempt_paths.push(prefix.into());
        self
    }

    /// Checks the configuration and allocates the tables.
    ///
    /// # Errors
    ///
    /// Every [`Error`] variant.
    pub fn build(self) -> Result<RateLimitLayer, Error> {
        if self.policies.is_empty() {
            return Err(Error::NoPolicy);
        }
        let status = StatusCode::from_u16(self.status)
            .ok()
            .filter(|s| s.is_client_error() || s.is_server_error())
            .ok_or(Error::BadStatus(self.status))?;
        let clock = QuantaClock::new();
        let mut policies: Vec<Policy> = Vec::new();
        for (name, key, quota, keys) in self.policies {
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
            if !valid {
                return Err(Error::BadName(name));
            }
            if policies.iter().any(|p| p.name == name) {
                return Err(Error::DuplicateName(name));
            }
            if let KeyBy::PeerIp { v6_prefix } | KeyBy::ClientIp { v6_prefix, .. } = &key {
                if *v6_prefix > 128 {
                    return Err(Error::BadPrefix(*v6_prefix));
                }
            }
            let limiter = Limiter::<[u8]>::builder(quota)
                .capacity(keys)
                .clock(clock.clone())
                .build()
                .map_err(Error::Funnel)?;
            let policy_field = format!(
                "\"{name}\";q={};w={}",
                quota.limit(),
                ceil_secs(quota.tolerance()).max(1)
            );
            // The name is printable ASCII without quotes (checked above), so the field is a
            // valid header value.
            let policy_value = HeaderValue::try_from(policy_field.as_str())
                .map_err(|_| Error::BadName(name.clone()))?;
            policies.push(Policy {
                name,
                key,
                quota,
                limiter,
                policy_field,
                policy_value,
                allowed: AtomicU64::new(0),
                denied: AtomicU64::new(0),
                shadow_denied: AtomicU64::new(0),
            });
        }
        let joined: Vec<&str> = policies.iter().map(|p| p.policy_field.as_str()).collect();
        let all_policies = HeaderValue::try_from(joined.join(", "))
            .map_err(|_| Error::BadName(joined.join(", ")))?;
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                policies,
                all_policies,
                clock,
                status,
                shadow: self.shadow,
                report: self.report,
                cost: self.cost,
                exempt_methods: self.exempt_methods,
                exempt_paths: self.exempt_paths,
            }),
        })
    }
}

impl<S> tower_layer::Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service the layer wraps around another.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// The body of a [`RateLimit`] response: the inner service's, or the problem document of a
/// rejection.
pub type Body<B> = Either<B, Full<Bytes>>;

impl<S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for RateLimit<S>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<Body<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let shared = &self.shared;
        let exempt = shared.exempt_methods.contains(req.method())
            || shared
                .exempt_paths
                .iter()
                .any(|p| req.uri().path().starts_with(p.as_str()));
        if exempt {
            return ResponseFuture::Inner {
                fut: self.inner.call(req),
                headers: Extra::default(),
            };
        }
        let (parts, body) = req.into_parts();
        let n = shared.cost.as_ref().map_or(1, |f| f(&parts));
        let now = shared.clock.now();
        // One policy, the common case: decide on the key where it lies, no allocation.
        let single;
        let verdict;
        let (decisions, denied_by): (&[Decision], Option<usize>) = match &shared.policies[..] {
            [p] => {
                single = [p.key.with_key(&parts, |k| p.limiter.check_n_at(k, n, now))];
                let denied = (!single[0].is_allowed()).then_some(0);
                (&single, denied)
            }
            policies => {
                let keys: Vec<Vec<u8>> = policies.iter().map(|p| p.key.key(&parts)).collect();
                let costs: Vec<_> = policies
                    .iter()
                    .zip(&keys)
                    .map(|(p, k)| p.limiter.cost(k.as_slice(), n))
                    .collect();
                let entries: Vec<&dyn Charge> = costs.iter().map(|c| c as &dyn Charge).collect();
                verdict = check_all(&entries, now);
                (verdict.decisions(), verdict.denied_by())
            }
        };
        let headers = headers(shared, decisions, denied_by);
        match denied_by {
            None => {
                for p in &shared.policies {
                    // Relaxed: statistics.
                    p.allowed.fetch_add(1, Ordering::Relaxed);
                }
            }
            Some(i) if shared.shadow => {
                shared.policies[i]
                    .shadow_denied
                    .fetch_add(1, Ordering::Relaxed);
            }
            Some(i) => {
                shared.policies[i].denied.fetch_add(1, Ordering::Relaxed);
                let p = &shared.policies[i];
                return ResponseFuture::Denied {
                    response: Some(rejection(shared.status, p, &decisions[i], headers)),
                };
            }
        }
        ResponseFuture::Inner {
            fut: self.inner.call(Request::from_parts(parts, body)),
            headers,
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of a [`RateLimit`] call.
    #[project = Projected]
    pub enum ResponseFuture<F> {
        /// Waiting for the inner service; these headers go on its response.
        Inner { #[pin] fut: F, headers: Extra },
        /// Rejected: the response is ready.
        Denied { response: Option<Response<Full<Bytes>>> },
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<Body<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            Projected::Inner { fut, headers } => {
                let mut response = match fut.poll(cx) {
                    Poll::Ready(Ok(r)) => r,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                };
                for (name, value) in headers.take() {
                    response.headers_mut().append(name, value);
                }
                Poll::Ready(Ok(response.map(Either::Left)))
            }
            Projected::Denied { response } => match response.take() {
                Some(r) => Poll::Ready(Ok(r.map(Either::Right))),
                // Polled again after completion: a contract breach by the caller; answer with
                // an empty 500 rather than panicking.
                None => {
                    let mut r = Response::new(Either::Right(Full::new(Bytes::new())));
                    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                    Poll::Ready(Ok(r))
                }
            },
        }
    }
}

/// Whole seconds, rounded up: never earlier than the true time.
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `t` of a decision: the retry time when denied, else the time until the funnel is empty.
fn t_secs(d: &Decision) -> u64 {
    match d.retry_after() {
        Some(r) if !d.is_allowed() => ceil_secs(r),
        _ => ceil_secs(d.reset_after()),
    }
}

/// The rate-limit headers of one response: at most three, kept inline (no allocation).
#[derive(Default)]
pub struct Extra {
    items: [Option<(HeaderName, HeaderValue)>; 3],
}

impl Extra {
    fn push(&mut self, name: &'static str, value: HeaderValue) {
        if let Some(slot) = self.items.iter_mut().find(|s| s.is_none()) {
            *slot = Some((HeaderName::from_static(name), value));
        }
    }

    /// The headers, leaving none behind.
    fn take(&mut self) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
        self.items.iter_mut().filter_map(Option::take)
    }
}

fn headers(shared: &Shared, decisions: &[Decision], denied_by: Option<usize>) -> Extra {
    use std::fmt::Write as _;
    let closest = denied_by.unwrap_or_else(|| {
        (0..decisions.len())
            .min_by_key(|&i| decisions[i].remaining())
            .unwrap_or(0)
    });
    let mut out = Extra::default();
    match shared.report {
        Report::Legacy => {
            let d = &decisions[closest];
            for (name, v) in [
                ("x-ratelimit-limit", d.limit()),
                ("x-ratelimit-remaining", d.remaining()),
                ("x-ratelimit-reset", t_secs(d)),
            ] {
                out.push(name, HeaderValue::from(v));
            }
        }
        Report::All | Report::Closest => {
            let all = shared.report == Report::All;
            let chosen = if all {
                0..decisions.len()
            } else {
                closest..closest + 1
            };
            let policy = if all {
                shared.all_policies.clone()
            } else {
                shared.policies[closest].policy_value.clone()
            };
            out.push("ratelimit-policy", policy);
            // One buffer for the whole `RateLimit` value: `"name";r=..;t=..`, comma-separated.
            let mut state = String::with_capacity(40 * chosen.len());
            for i in chosen {
                let d = &decisions[i];
                let sep = if state.is_empty() { "" } else { ", " };
                let _ = write!(
                    state,
                    "{sep}\"{}\";r={};t={}",
                    shared.policies[i].name,
                    d.remaining(),
                    t_secs(d)
                );
            }
            // Printable ASCII by construction (checked names, digits); `from_maybe_shared`
            // takes the buffer without copying it.
            if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(state)) {
                out.push("ratelimit", v);
            }
        }
    }
    out
}

fn rejection(
    status: StatusCode,
    policy: &Policy,
    decision: &Decision,
    mut headers: Extra,
) -> Response<Full<Bytes>> {
    let retry = decision.retry_after().map(ceil_secs);
    let detail = match retry {
        Some(s) => format!("limit \\\"{}\\\" exceeded; retry after {s} s", policy.name),
        None => format!(
            "limit \\\"{}\\\" exceeded; this request costs more than the limit of {} allows",
            policy.name,
            policy.quota.limit()
        ),
    };
    let body = format!(
        "{{\"type\":\"about:blank\",\"title\":\"{}\",\"status\":{},\"detail\":\"{detail}\"}}",
        status.canonical_reason().unwrap_or("Rate limited"),
        status.as_u16()
    );
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if let Some(s) = retry {
        h.insert(RETRY_AFTER, HeaderValue::from(s));
    }
    for (name, value) in headers.take() {
        h.append(name, value);
    }
    response
}
