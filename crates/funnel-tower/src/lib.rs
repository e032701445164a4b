//! # funnel-tower
//!
//! A tower [`Layer`](tower_layer::Layer) that rate-limits `http` requests with funnel: keys from
//! the request (peer IP with IPv6 grouped by prefix, client IP through trusted proxies only, a
//! header, the route, a closure), several named limits charged all or nothing, the IETF
//! `RateLimit-Policy` / `RateLimit` header fields (draft-ietf-httpapi-ratelimit-headers) or the
//! legacy `X-RateLimit-*` triple, `429` with `Retry-After` and an RFC 9457 problem body, a
//! shadow mode that evaluates and counts but never rejects, and a policy set that can be
//! replaced while traffic flows.
//!
//! ```
//! use funnel::Quota;
//! use funnel_tower::{KeyBy, RateLimitLayer};
//!
//! let layer = RateLimitLayer::builder()
//!     .policy("ip", KeyBy::PeerIp { v6_prefix: 64 }, Quota::per_second(10)?.with_limit(20)?)
//!     .policy("route", KeyBy::Route, Quota::per_minute(1000)?)
//!     .build()?;
//! // let app = tower::ServiceBuilder::new().layer(layer).service(handler);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Where things are
//!
//! * [`KeyBy`] (`key.rs`) — which key a request is limited by, and what each key falls back
//!   to when the request does not carry it (no peer address, a malformed forwarding header);
//! * [`Builder`] (`config.rs`) — the policies and options, checked at build time; the policy
//!   set a layer decides under, and how a replacement keeps each policy's debt;
//! * [`RateLimit`] (`service.rs`) — the service: where a request is decided;
//! * `response.rs` — the headers and the rejection;
//! * [`spec`] — limits written on a command line, as the example proxy takes them.
//!
//! ## Header mapping (draft -10)
//!
//! For a policy named `ip` whose funnel holds `q` units and drains completely in `w` seconds:
//! `RateLimit-Policy: "ip";q=<limit>;w=<limit × emission interval, seconds rounded up>` and
//! `RateLimit: "ip";r=<remaining>;t=<seconds>`. On a denied request `t` is the `Retry-After`
//! value: the seconds until the request could pass, rounded up, so never earlier than the
//! true time. Otherwise `t` is the seconds until the funnel is empty again (the full quota
//! back), rounded up. A request that costs more than a policy's limit can never pass: it gets
//! no `Retry-After`, and `t` is the time until the funnel is empty.
//!
//! ## Several policies
//!
//! Every policy is charged or none ([`funnel::check_all`], in the order the policies were
//! given): a request denied by one policy is charged to none, so a client hammering one route
//! does not use up its per-IP allowance elsewhere. The response names the denying policy.
//! [`Report`] chooses whether the headers describe every policy or the closest to its limit.
//!
//! ## Shadow mode
//!
//! [`Builder::shadow`] decides every request exactly as in enforcing mode and adds the same
//! headers, but lets denied requests through; a request that would have been denied is charged
//! to no policy, as it would not have been when enforcing, so the counters
//! ([`RateLimitLayer::stats`]) read the same as they would under enforcement.
//!
//! ## Replacing the policies while traffic flows
//!
//! [`RateLimitLayer::reconfigure`] swaps in a new policy set built from a [`Builder`]. Requests
//! read the set with one lock-free load (an [`arc_swap::ArcSwap`]); a request already decided
//! keeps the set it was decided under. A policy whose name and table capacity are unchanged
//! keeps its table, so **every key keeps its debt**, read under the new quota as
//! [`funnel::LiveLimiter`] states it: debt is kept as time. Its counters carry on too.
//!
//! ```
//! use funnel::Quota;
//! use funnel_tower::{KeyBy, RateLimitLayer};
//!
//! let ip = || KeyBy::PeerIp { v6_prefix: 64 };
//! let layer = RateLimitLayer::builder().policy("ip", ip(), Quota::per_second(10)?).build()?;
//! // Later, from a config reload; services already built from `layer` follow.
//! layer.reconfigure(
//!     RateLimitLayer::builder()
//!         .policy("ip", ip(), Quota::per_second(20)?) // same name: same table, debts kept
//!         .policy("global", KeyBy::Global, Quota::per_second(5_000)?),
//! )?;
//! assert!(layer.stats("global").is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Features
//!
//! * `axum`: [`KeyBy::Route`] keys on axum's matched route (`/users/{id}`) instead of the raw
//!   path, and the IP keys read axum's `ConnectInfo<SocketAddr>` when there is no
//!   [`PeerAddr`].

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod config;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod key;
mod response;
mod service;
pub mod spec;

pub use config::Builder;
pub use key::{KeyBy, KeyFn, Net, PeerAddr};
pub use service::{Body, RateLimit, RateLimitLayer, ResponseFuture};

/// A bad configuration, reported by [`Builder::build`] and [`RateLimitLayer::reconfigure`].
///
/// # Examples
///
/// ```
/// use funnel::Quota;
/// use funnel_tower::{Error, KeyBy, RateLimitLayer};
///
/// let err = RateLimitLayer::builder()
///     .policy("ip", KeyBy::PeerIp { v6_prefix: 64 }, Quota::per_second(1)?)
///     .exempt_path("health")
///     .build()
///     .unwrap_err();
/// assert!(matches!(err, Error::BadExemptPath(_)));
/// # Ok::<(), funnel::Error>(())
/// ```
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
    /// An exempt path does not start with `/`.
    BadExemptPath(String),
    /// The near-limit threshold is over 100 percent.
    BadNearLimit(u8),
    /// funnel refused a table size.
    Funnel(funnel::Error),
    /// A saved state could not be written, read or restored
    /// ([`RateLimitLayer::save_state`], [`RateLimitLayer::restore_state`]): funnel's reason.
    State(funnel::SnapshotError),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoPolicy => f.write_str("a rate-limit layer needs at least one policy"),
            Error::BadName(n) => write!(f, "policy name {n:?} is not a valid header string"),
            Error::DuplicateName(n) => write!(f, "two policies are named {n:?}"),
            Error::BadPrefix(p) => write!(f, "IPv6 prefix /{p} is longer than 128 bits"),
            Error::BadStatus(s) => write!(f, "status {s} is not a 4xx or 5xx"),
            Error::BadExemptPath(p) => write!(f, "exempt path {p:?} does not start with '/'"),
            Error::BadNearLimit(p) => write!(f, "near-limit threshold {p}% is over 100%"),
            Error::Funnel(e) => write!(f, "{e}"),
            Error::State(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Funnel(e) => Some(e),
            Error::State(e) => Some(e),
            _ => None,
        }
    }
}

/// Which policies the rate-limit headers describe.
///
/// "Closest to its limit" is **proportional**: the policy with the smallest share of its limit
/// left, `remaining / limit` (compared exactly, in integers), so a policy with 5 of 10 left is
/// closer than one with 50 of 1,000. Ties go to the one with fewer units left, then to the
/// first given. On a denial it is always the denying policy.
///
/// # Examples
///
/// ```
/// use funnel::Quota;
/// use funnel_tower::{KeyBy, RateLimitLayer, Report};
///
/// let layer = RateLimitLayer::builder()
///     .policy("ip", KeyBy::PeerIp { v6_prefix: 64 }, Quota::per_second(10)?)
///     .policy("global", KeyBy::Global, Quota::per_second(1_000)?)
///     .report(Report::Closest)
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Report {
    /// Every policy, as a list, in the order given.
    #[default]
    All,
    /// Only the policy closest to its limit.
    Closest,
    /// The legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` (seconds, as `t`) of the
    /// policy closest to its limit, instead of the draft's fields.
    Legacy,
}

/// Counters of one policy, each a snapshot.
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
/// let stats = layer.stats("ip").unwrap();
/// assert_eq!((stats.allowed, stats.denied, stats.near_limit), (0, 0, 0));
/// assert!(layer.stats("route").is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PolicyStats {
    /// Requests this policy admitted (and that were admitted as a whole).
    pub allowed: u64,
    /// Requests rejected because this policy denied them.
    pub denied: u64,
    /// In shadow mode, requests this policy would have rejected.
    pub shadow_denied: u64,
    /// Admitted requests after which this policy was near its limit
    /// ([`Builder::near_limit`]; always 0 without it).
    pub near_limit: u64,
}
