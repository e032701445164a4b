//! The layer and its service: where a request is decided.
//!
//! A request reads the current policy set with one lock-free load ([`ArcSwap::load`]) and is
//! decided under it from start to end; [`RateLimitLayer::reconfigure`] swaps in a new set.
//! Why `ArcSwap` rather than a cell whose readers are handles caching the last set they saw:
//! tower services are cloned per request (axum's router, `oneshot`, the example proxy), so
//! every clone would start from its template's stale handle and refresh on every request after
//! the first replacement. `ArcSwap` keeps no per-handle state: each load is lock-free, and the
//! old set is freed by reference count once the last request holding it is done.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use arc_swap::ArcSwap;
use bytes::Bytes;
use funnel::{check_all, Charge, Clock, Decision, MultiDecision, Timestamp};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use http_body_util::{Either, Full};

use crate::config::{Builder, Config, Counters, Policy};
use crate::key::KeyBytes;
use crate::response::{self, Extra};
use crate::{Error, PolicyStats};

mod persist;

struct Shared<C> {
    config: ArcSwap<Config<C>>,
    clock: C,
    /// Serialises [`RateLimitLayer::reconfigure`] calls (each builds on the set it replaces);
    /// requests never take it.
    writer: Mutex<()>,
}

/// The layer; cheap to clone (clones share the policy set and its tables).
///
/// # Examples
///
/// ```
/// use funnel::Quota;
/// use funnel_tower::{KeyBy, RateLimitLayer};
///
/// let layer = RateLimitLayer::builder()
///     .policy("ip", KeyBy::PeerIp { v6_prefix: 64 }, Quota::per_second(10)?)
///     .build()?;
/// // Wrap any `Service<http::Request<B>>`: tower::ServiceBuilder, axum's Router::layer, or by
/// // hand with `tower_layer::Layer::layer(&layer, inner)`.
/// assert_eq!(layer.stats("ip").unwrap().allowed, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RateLimitLayer<C = funnel::clock::QuantaClock> {
    shared: Arc<Shared<C>>,
}

impl<C> Clone for RateLimitLayer<C> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<C> std::fmt::Debug for RateLimitLayer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let config = self.shared.config.load();
        let names: Vec<&str> = config.policies.iter().map(|p| &*p.name).collect();
        f.debug_struct("RateLimitLayer")
            .field("policies", &names)
            .field("shadow", &config.shadow)
            .field("report", &config.report)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// A builder with no policy yet.
    pub fn builder() -> Builder {
        Builder::default()
    }
}

impl<C: Clock + Clone + 'static> RateLimitLayer<C> {
    pub(crate) fn from_config(config: Config<C>, clock: C) -> Self {
        RateLimitLayer {
            shared: Arc::new(Shared {
                config: ArcSwap::from_pointee(config),
                clock,
                writer: Mutex::new(()),
            }),
        }
    }

    /// Replaces every option and policy with those of `builder`, while requests flow; every
    /// service made from this layer (or a clone) decides its next request under the new set.
    ///
    /// A policy whose name and table capacity are unchanged keeps its table and counters:
    /// every key keeps its debt, read under the new quota as time (a key 3 s from empty stays
    /// 3 s from empty; see [`funnel::LiveLimiter`]). Any other policy starts with an empty
    /// table; a dropped policy's table is freed when the last request using it is done.
    ///
    /// # Errors
    ///
    /// As [`Builder::build`]; on an error the current set stays.
    pub fn reconfigure(&self, builder: Builder) -> Result<(), Error> {
        // A poisoned lock only means another reconfiguration panicked before its store.
        let _writer = self.shared.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.shared.config.load_full();
        let next = builder.into_config(&self.shared.clock, Some(&current))?;
        self.shared.config.store(Arc::new(next));
        Ok(())
    }

    /// The counters of the policy named `name` in the current set (a policy kept by
    /// [`reconfigure`](Self::reconfigure) keeps counting from where it was).
    pub fn stats(&self, name: &str) -> Option<PolicyStats> {
        let config = self.shared.config.load();
        let p = config.policies.iter().find(|p| &*p.name == name)?;
        Some(p.counters.snapshot())
    }

    /// The names of the current policies, in order.
    pub fn policy_names(&self) -> Vec<String> {
        let config = self.shared.config.load();
        config.policies.iter().map(|p| p.name.to_string()).collect()
    }
}

impl<S, C> tower_layer::Layer<S> for RateLimitLayer<C> {
    type Service = RateLimit<S, C>;

    fn layer(&self, inner: S) -> RateLimit<S, C> {
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service the layer wraps around another.
pub struct RateLimit<S, C = funnel::clock::QuantaClock> {
    inner: S,
    shared: Arc<Shared<C>>,
}

impl<S: Clone, C> Clone for RateLimit<S, C> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: std::fmt::Debug, C> std::fmt::Debug for RateLimit<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The body of a [`RateLimit`] response: the inner service's, or the problem document of a
/// rejection.
pub type Body<B> = Either<B, Full<Bytes>>;

impl<S, C, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for RateLimit<S, C>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>,
    C: Clock + Clone + 'static,
{
    type Response = Response<Body<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // Lock-free; the guard is dropped before the inner service is called.
        let config = self.shared.config.load();
        if config.is_exempt(req.method(), req.uri().path()) {
            drop(config);
            return ResponseFuture::inner(self.inner.call(req), Extra::default());
        }
        let (parts, body) = req.into_parts();
        let n = config.cost.as_ref().map_or(1, |f| f(&parts));
        let now = self.shared.clock.now();
        let verdict = decide(&config.policies, &parts, n, now);
        let decisions = verdict.decisions();
        let denied_by = verdict.denied_by();
        let headers = response::headers(&config, decisions, denied_by);
        match denied_by {
            None => {
                for (p, d) in config.policies.iter().zip(decisions) {
                    Counters::bump(&p.counters.allowed);
                    if config.near_limit.is_some_and(|pc| d.is_near_limit(pc)) {
                        Counters::bump(&p.counters.near_limit);
                    }
                }
            }
            Some(i) if config.shadow => Counters::bump(&config.policies[i].counters.shadow_denied),
            Some(i) => {
                let p = &config.policies[i];
                Counters::bump(&p.counters.denied);
                let response = response::rejection(config.status, p, &decisions[i], headers);
                return ResponseFuture::denied(response);
            }
        }
        drop(config);
        ResponseFuture::inner(self.inner.call(Request::from_parts(parts, body)), headers)
    }
}

/// The decisions of one request, one per policy, and which policy denied it. On a denial every
/// other policy's decision describes its funnel as the request left it: uncharged.
struct Verdict {
    decisions: Decisions,
    denied_by: Option<usize>,
}

enum Decisions {
    Inline([Decision; INLINE], usize),
    Heap(Vec<Decision>),
}

impl Verdict {
    fn decisions(&self) -> &[Decision] {
        match &self.decisions {
            Decisions::Inline(d, len) => &d[..*len],
            Decisions::Heap(d) => d,
        }
    }

    fn denied_by(&self) -> Option<usize> {
        self.denied_by
    }

    /// From `check_all`'s answer. On a denial the entries other than the denying one hold what
    /// the request *would* leave if charged; `uncharged(j)` answers for entry `j` as it stands.
    fn from_multi(m: &MultiDecision, uncharged: impl Fn(usize) -> Decision) -> Verdict {
        let ds = m.decisions();
        let denied_by = m.denied_by();
        let fix = |(j, d): (usize, &Decision)| match denied_by {
            Some(i) if j != i && d.is_allowed() => uncharged(j),
            _ => *d,
        };
        let decisions = if ds.len() <= INLINE {
            let mut inline = [ds[0]; INLINE];
            for (slot, d) in inline.iter_mut().zip(ds.iter().enumerate().map(fix)) {
                *slot = d;
            }
            Decisions::Inline(inline, ds.len())
        } else {
            Decisions::Heap(ds.iter().enumerate().map(fix).collect())
        };
        Verdict {
            decisions,
            denied_by,
        }
    }
}

/// Policies decided with no allocation (keys, entries and decisions on the stack); more go
/// through the heap.
const INLINE: usize = 4;

/// Decides a request of `n` units against every policy at `now`, all or nothing.
#[inline]
fn decide<C: Clock>(policies: &[Policy<C>], parts: &Parts, n: u64, now: Timestamp) -> Verdict {
    match policies {
        [p] => {
            let key = p.key.key(parts);
            let d = p
                .limiter
                .with_quota(p.quota)
                .check_n_at(key.as_slice(), n, now);
            Verdict {
                decisions: Decisions::Inline([d; INLINE], 1),
                denied_by: (!d.is_allowed()).then_some(0),
            }
        }
        ps if ps.len() <= INLINE => {
            let last = ps.len() - 1;
            // Slots past the last policy hold placeholders that are never charged.
            let keys: [KeyBytes<'_>; INLINE] = std::array::from_fn(|i| match ps.get(i) {
                Some(p) => p.key.key(parts),
                None => KeyBytes::Borrowed(&[]),
            });
            let costs: [_; INLINE] = std::array::from_fn(|i| {
                let p = &ps[i.min(last)];
                p.limiter.with_quota(p.quota).cost(keys[i].as_slice(), n)
            });
            let m = check_all(&costs[..ps.len()], now);
            Verdict::from_multi(&m, |j| uncharged(&ps[j], keys[j].as_slice(), now))
        }
        ps => {
            let keys: Vec<KeyBytes<'_>> = ps.iter().map(|p| p.key.key(parts)).collect();
            let costs: Vec<_> = ps
                .iter()
                .zip(&keys)
                .map(|(p, k)| p.limiter.with_quota(p.quota).cost(k.as_slice(), n))
                .collect();
            let m = check_all(&costs, now);
            Verdict::from_multi(&m, |j| uncharged(&ps[j], keys[j].as_slice(), now))
        }
    }
}

/// A policy's funnel for `key` as it stands: a check-only decision for no units.
fn uncharged<C: Clock>(p: &Policy<C>, key: &[u8], now: Timestamp) -> Decision {
    p.limiter.with_quota(p.quota).cost(key, 0).peek(now)
}

pin_project_lite::pin_project! {
    /// The future of a [`RateLimit`] call: the inner service's response with the rate-limit
    /// headers added, or the rejection.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = Projected]
    enum State<F> {
        // Waiting for the inner service; these headers go on its response.
        Inner { #[pin] fut: F, headers: Extra },
        // Rejected: the response is ready.
        Denied { response: Option<Response<Full<Bytes>>> },
    }
}

impl<F> ResponseFuture<F> {
    fn inner(fut: F, headers: Extra) -> Self {
        ResponseFuture {
            state: State::Inner { fut, headers },
        }
    }

    fn denied(response: Response<Full<Bytes>>) -> Self {
        ResponseFuture {
            state: State::Denied {
                response: Some(response),
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<Body<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            Projected::Inner { fut, headers } => {
                let mut response = match fut.poll(cx) {
                    Poll::Ready(Ok(r)) => r,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                };
                for (name, value) in headers.take() {
                    // The draft's `RateLimit` and `RateLimit-Policy` are lists, and an
                    // upstream's (or an inner layer's) entries join ours. The legacy
                    // `X-RateLimit-*` fields hold one value each: ours replaces theirs, so a
                    // response never carries two limits under one name.
                    if name.as_str().starts_with("x-ratelimit-") {
                        response.headers_mut().insert(name, value);
                    } else {
                        response.headers_mut().append(name, value);
                    }
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
