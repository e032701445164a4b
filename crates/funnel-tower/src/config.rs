//! The configuration of a layer: the [`Builder`], and the immutable policy set ([`Config`]) that
//! requests are decided under and that [`RateLimitLayer::reconfigure`] replaces.
//!
//! [`RateLimitLayer::reconfigure`]: crate::RateLimitLayer::reconfigure

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use funnel::{Clock, Limiter, Quota};
use http::{HeaderValue, Method, StatusCode};

use crate::key::KeyBy;
use crate::{Error, PolicyStats, Report};

/// The cost function of [`Builder::cost`].
pub(crate) type CostFn = Arc<dyn Fn(&http::request::Parts) -> u64 + Send + Sync>;

/// Builds a [`RateLimitLayer`](crate::RateLimitLayer), or a replacement policy set for one
/// ([`RateLimitLayer::reconfigure`](crate::RateLimitLayer::reconfigure)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use funnel::Quota;
/// use funnel_tower::{KeyBy, RateLimitLayer, Report};
///
/// let layer = RateLimitLayer::builder()
///     .policy("ip", KeyBy::PeerIp { v6_prefix: 64 }, Quota::per_second(10)?.with_limit(20)?)
///     .policy("global", KeyBy::Global, Quota::per_second(5_000)?)
///     .cost(|parts| if parts.method == http::Method::POST { 5 } else { 1 })
///     .exempt_path("/health")
///     .exempt_method(http::Method::OPTIONS)
///     .report(Report::Closest)
///     .near_limit(80)
///     .build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub struct Builder {
    policies: Vec<PolicyDef>,
    status: u16,
    shadow: bool,
    report: Report,
    cost: Option<CostFn>,
    exempt_methods: Vec<Method>,
    exempt_paths: Vec<String>,
    near_limit: Option<u8>,
}

struct PolicyDef {
    name: String,
    key: KeyBy,
    quota: Quota,
    capacity: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            policies: Vec::new(),
            status: 429,
            shadow: false,
            report: Report::All,
            cost: None,
            exempt_methods: Vec::new(),
            exempt_paths: Vec::new(),
            near_limit: None,
        }
    }
}

impl Builder {
    /// Adds a named limit with a table for up to 65,536 keys in debt at once. The name is the
    /// policy's identity: it names the policy in the headers and the problem body, and a
    /// replacement set keeps the table of a policy of the same name.
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
        self.policies.push(PolicyDef {
            name: name.into(),
            key,
            quota,
            capacity: keys,
        });
        self
    }

    /// The status of a rejection (default 429; any 4xx or 5xx, e.g. 503 for load shedding).
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

    /// The cost of a request in units (default 1), e.g. by method or declared size; charged
    /// to every policy. A cost above a policy's limit can never pass: such a request is
    /// denied without a `Retry-After`.
    pub fn cost(
        mut self,
        f: impl Fn(&http::request::Parts) -> u64 + Send + Sync + 'static,
    ) -> Self {
        self.cost = Some(Arc::new(f));
        self
    }

    /// Requests with this method pass unlimited, uncounted and without headers.
    pub fn exempt_method(mut self, method: Method) -> Self {
        self.exempt_methods.push(method);
        self
    }

    /// Requests under the path `prefix` pass unlimited, uncounted and without headers. The
    /// match is by whole segments: `/health` exempts `/health`, `/health/` and `/health/db`,
    /// not `/healthz` (a trailing `/` in `prefix` changes nothing; `/` exempts every path).
    /// A path with a `.` or `..` segment (also percent-encoded, also with `;` parameters, as
    /// in `..;x`), an encoded `/` or `\`, or a plain `\` is never exempt, since the upstream
    /// may normalise it into a path outside `prefix`. Nothing else is decoded: `/%68ealth` is
    /// not `/health` here (it is limited, the safe side). A prefix that
    /// does not start with `/` is [`Error::BadExemptPath`].
    pub fn exempt_path(mut self, prefix: impl Into<String>) -> Self {
        self.exempt_paths.push(prefix.into());
        self
    }

    /// Counts, per policy, the admitted requests after which the policy has at least
    /// `percent`% of its limit in use ([`funnel::Decision::is_near_limit`], Envoy's near-limit statistic),
    /// readable as [`PolicyStats::near_limit`]. Over 100 is [`Error::BadNearLimit`].
    pub fn near_limit(mut self, percent: u8) -> Self {
        self.near_limit = Some(percent);
        self
    }

    /// Checks the configuration and allocates the tables, with funnel's default clock.
    ///
    /// # Errors
    ///
    /// Every [`Error`] variant but none of funnel's quota errors (a [`Quota`] is valid once
    /// built).
    pub fn build(self) -> Result<crate::RateLimitLayer, Error> {
        self.build_with_clock(funnel::clock::QuantaClock::new())
    }

    /// [`build`](Self::build) with another clock, e.g. a `funnel::clock::ManualClock` in
    /// tests.
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build).
    pub fn build_with_clock<C: Clock + Clone + 'static>(
        self,
        clock: C,
    ) -> Result<crate::RateLimitLayer<C>, Error> {
        let config = self.into_config(&clock, None)?;
        Ok(crate::RateLimitLayer::from_config(config, clock))
    }

    /// The policy set this builder describes. A policy of `previous` whose name and capacity
    /// are unchanged lends its table and counters to the new one.
    pub(crate) fn into_config<C: Clock + Clone>(
        self,
        clock: &C,
        previous: Option<&Config<C>>,
    ) -> Result<Config<C>, Error> {
        if self.policies.is_empty() {
            return Err(Error::NoPolicy);
        }
        let status = StatusCode::from_u16(self.status)
            .ok()
            .filter(|s| s.is_client_error() || s.is_server_error())
            .ok_or(Error::BadStatus(self.status))?;
        if let Some(p) = self.near_limit.filter(|p| *p > 100) {
            return Err(Error::BadNearLimit(p));
        }
        let mut exempt_paths = Vec::with_capacity(self.exempt_paths.len());
        for p in self.exempt_paths {
            exempt_paths.push(exempt_prefix(p)?);
        }
        let mut policies: Vec<Policy<C>> = Vec::with_capacity(self.policies.len());
        for def in self.policies {
            let name = def.name;
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
            if !valid {
                return Err(Error::BadName(name));
            }
            if policies.iter().any(|p| *p.name == *name) {
                return Err(Error::DuplicateName(name));
            }
            if let KeyBy::PeerIp { v6_prefix }
            | KeyBy::ClientIp { v6_prefix, .. }
            | KeyBy::ClientIpForwarded { v6_prefix, .. } = &def.key
            {
                if *v6_prefix > 128 {
                    return Err(Error::BadPrefix(*v6_prefix));
                }
            }
            let kept = previous
                .and_then(|c| c.policies.iter().find(|p| *p.name == *name))
                .filter(|p| p.capacity == def.capacity);
            let (limiter, counters) = match kept {
                Some(p) => (p.limiter.clone(), p.counters.clone()),
                None => {
                    let limiter = Limiter::<[u8]>::builder(def.quota)
                        .capacity(def.capacity)
                        .clock(clock.clone())
                        .build()
                        .map_err(Error::Funnel)?;
                    (Arc::new(limiter), Arc::new(Counters::default()))
                }
            };
            let field = format!(
                "\"{name}\";q={};w={}",
                def.quota.limit(),
                ceil_secs(def.quota.tolerance()).max(1)
            );
            // The name is printable ASCII without quotes (checked above): a valid value.
            let policy_value =
                HeaderValue::try_from(field.as_str()).map_err(|_| Error::BadName(name.clone()))?;
            policies.push(Policy {
                name: name.into_boxed_str(),
                key: def.key,
                quota: def.quota,
                capacity: def.capacity,
                limiter,
                counters,
                policy_value,
            });
        }
        let joined = policies
            .iter()
            .map(|p| p.policy_value.to_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(", ");
        let all_policies =
            HeaderValue::try_from(joined.as_str()).map_err(|_| Error::BadName(joined.clone()))?;
        Ok(Config {
            policies,
            all_policies,
            status,
            shadow: self.shadow,
            report: self.report,
            cost: self.cost,
            exempt_methods: self.exempt_methods,
            exempt_paths,
            near_limit: self.near_limit,
        })
    }
}

/// Whole seconds, rounded up: never earlier than the true time.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// One policy of a [`Config`].
#[derive(Clone)]
pub(crate) struct Policy<C> {
    pub(crate) name: Box<str>,
    pub(crate) key: KeyBy,
    /// The quota every decision of this policy is made under (`Limiter::with_quota`): the
    /// table may have been built under an earlier one.
    pub(crate) quota: Quota,
    capacity: usize,
    /// Shared with the policy of the same name in earlier and later sets.
    pub(crate) limiter: Arc<Limiter<[u8], C>>,
    pub(crate) counters: Arc<Counters>,
    /// `"name";q=..;w=..`, built once: the `RateLimit-Policy` value of [`Report::Closest`].
    pub(crate) policy_value: HeaderValue,
}

/// The counters of a policy; they outlive a replacement that keeps the policy.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) allowed: AtomicU64,
    pub(crate) denied: AtomicU64,
    pub(crate) shadow_denied: AtomicU64,
    pub(crate) near_limit: AtomicU64,
}

impl Counters {
    /// Adds one (Relaxed: statistics, ordered with nothing).
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> PolicyStats {
        // Relaxed: statistics; each counter is read on its own.
        PolicyStats {
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            shadow_denied: self.shadow_denied.load(Ordering::Relaxed),
            near_limit: self.near_limit.load(Ordering::Relaxed),
        }
    }
}

/// A policy set and the options around it, immutable once built: a request is decided under
/// one `Config` from start to end.
#[derive(Clone)]
pub(crate) struct Config<C> {
    pub(crate) policies: Vec<Policy<C>>,
    /// Every policy's field, joined: the `RateLimit-Policy` value for [`Report::All`].
    pub(crate) all_policies: HeaderValue,
    pub(crate) status: StatusCode,
    pub(crate) shadow: bool,
    pub(crate) report: Report,
    pub(crate) cost: Option<CostFn>,
    pub(crate) exempt_methods: Vec<Method>,
    /// Checked to start with `/`, without a trailing `/` (except `/` itself).
    pub(crate) exempt_paths: Vec<Box<str>>,
    pub(crate) near_limit: Option<u8>,
}

impl<C> Config<C> {
    /// Whether a request passes without being limited.
    #[inline]
    pub(crate) fn is_exempt(&self, method: &Method, path: &str) -> bool {
        self.exempt_methods.contains(method) || path_is_exempt(&self.exempt_paths, path)
    }
}

/// An exempt path as [`Builder::exempt_path`] takes it: it must start with `/`; without its
/// trailing `/` (`/health/` and `/health` are one prefix; `/` stays `/`). Public only for the
/// fuzz body, through `crate::fuzzing` (feature `fuzzing`).
pub fn exempt_prefix(p: String) -> Result<Box<str>, Error> {
    if !p.starts_with('/') {
        return Err(Error::BadExemptPath(p));
    }
    let trimmed = p.trim_end_matches('/');
    Ok(Box::from(if trimmed.is_empty() { "/" } else { trimmed }))
}

/// Whether `path` lies under one of `prefixes` (each from [`exempt_prefix`]) and has nothing
/// an upstream may normalise into another path. Public only for the fuzz body, as
/// [`exempt_prefix`].
#[inline]
pub fn path_is_exempt(prefixes: &[Box<str>], path: &str) -> bool {
    !prefixes.is_empty()
        && !ambiguous(path)
        && prefixes.iter().any(|prefix| under_path(prefix, path))
}

/// Whether `path` is `prefix` or lies below it, by whole segments.
fn under_path(prefix: &str, path: &str) -> bool {
    if prefix == "/" {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// Whether `path` has a segment an upstream may rewrite, which no exempt prefix may match (an
/// upstream that normalises `/health/../admin` serves `/admin`): a `.` or `..` segment (`.`
/// also as `%2e`, any case), an encoded `/` or `\` (`%2f`, `%5c`), or a plain `\`, which some
/// servers take for `/`. No allocation: it runs on every request while exempt paths are set.
fn ambiguous(path: &str) -> bool {
    let bytes = path.as_bytes();
    let encoded = |code: &[u8]| bytes.windows(3).any(|w| w.eq_ignore_ascii_case(code));
    bytes.contains(&b'\\') || encoded(b"%2f") || encoded(b"%5c") || path.split('/').any(dots)
}

/// Whether a path segment is `.` or `..`, each dot plain or `%2e`, with or without
/// parameters: servers that read path parameters (`;` or `%3b` and what follows, as in
/// `..;jsessionid=1`) drop them before they resolve dot segments, so `/health/..;/admin` is
/// `/admin` to them.
fn dots(segment: &str) -> bool {
    let (mut rest, mut n) = (segment.as_bytes(), 0);
    while !rest.is_empty() {
        if rest[0] == b'.' {
            rest = &rest[1..];
        } else if rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(b"%2e") {
            rest = &rest[3..];
        } else if rest[0] == b';' || (rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(b"%3b")) {
            break;
        } else {
            return false;
        }
        n += 1;
    }
    n == 1 || n == 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exempt_paths_match_whole_segments_only() {
        for (prefix, path, exempt) in [
            ("/health", "/health", true),
            ("/health", "/health/", true),
            ("/health", "/health/db", true),
            ("/health", "/healthz", false),
            ("/health", "/healthz-x", false),
            ("/health", "/", false),
            ("/health", "/api/health", false),
            ("/static", "/static/app.js", true),
            ("/", "/anything", true),
        ] {
            assert_eq!(under_path(prefix, path), exempt, "{prefix} {path}");
        }
    }

    #[test]
    fn paths_an_upstream_may_normalise_elsewhere_are_never_exempt() {
        for path in [
            "/health/../admin",
            "/health/%2e%2e/admin",
            "/health/%2E./admin",
            "/health/./x",
            "/health%2f..%2fadmin",
            "/health\\..\\admin",
            // Path parameters, which some servers drop before resolving dot segments.
            "/health/..;/admin",
            "/health/..;jsessionid=1/admin",
            "/health/.%3bx/admin",
            "/health/%2e%2E%3B/admin",
        ] {
            assert!(ambiguous(path), "{path}");
        }
        // Dots inside a segment are just characters.
        for path in [
            "/health/v1.2/..x",
            "/health/...",
            "/health/.well-known",
            "/health/;x",
            "/health/...;x",
        ] {
            assert!(!ambiguous(path), "{path}");
        }
    }

    #[test]
    fn a_trailing_slash_in_an_exempt_path_changes_nothing() {
        let q = Quota::per_second(1).unwrap();
        let config = Builder::default()
            .policy("g", KeyBy::Global, q)
            .exempt_path("/static/")
            .exempt_path("//")
            .into_config(&funnel::clock::ManualClock::new(), None)
            .unwrap();
        assert_eq!(&*config.exempt_paths[0], "/static");
        assert_eq!(&*config.exempt_paths[1], "/");
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(3)), 3);
        assert_eq!(ceil_secs(Duration::from_millis(3001)), 4);
    }
}
