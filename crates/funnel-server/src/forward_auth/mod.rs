//! The forward-auth endpoint: `/forward-auth/<domain>` on the HTTP port, for the proxies that
//! ask an HTTP service before passing a request upstream (nginx `auth_request`, Caddy
//! `forward_auth`, Traefik `ForwardAuth`).
//!
//! The request the proxy sends along is turned into descriptors by the domain's actions
//! ([`actions`], configured in the `--forward-auth` file, [`config`]) and decided by the same
//! [`Decider`] as a gRPC call, all or nothing: shadow mode, metrics, reload of the rules and
//! the Redis fleet mode apply alike. The answer is 200 with the IETF `RateLimit-Policy` and
//! `RateLimit` fields, or, over the limit, 429 (or the `deny_status` the query asks for:
//! nginx's `auth_request` understands only 2xx, 401 and 403) with them and `Retry-After`.
//! A request no action matches is allowed, uncounted.
//!
//! The method, URI and host of the original request come from the headers the proxy writes
//! (`X-Forwarded-Method`, `X-Forwarded-Uri`, `X-Forwarded-Host` by default); the client's
//! address from the peer, or from `X-Forwarded-For`, `Forwarded` or `X-Real-IP` when the peer is a trusted
//! proxy, walked exactly as funnel-tower's [`funnel_tower::KeyBy::ClientIp`] walks it.

pub mod actions;
pub mod config;

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use funnel_tower::PeerAddr;

use crate::decide::Decider;
use crate::proto::rate_limit_response::Code;
use crate::proto::RateLimitRequest;

pub use config::Settings;

/// The query parameter choosing the status of a denial.
pub const DENY_STATUS: &str = "deny_status";

/// Why a forward-auth request is refused before any decision (answered 400 or 404).
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// `/forward-auth/<domain>` names no domain of the forward-auth file (404).
    UnknownDomain(String),
    /// The query's `deny_status` is not 401, 403 or 429 (400).
    BadQuery(String),
    /// The server runs without `--forward-auth` (404).
    NotConfigured,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let (status, msg) = match self {
            Refused::UnknownDomain(d) => (
                StatusCode::NOT_FOUND,
                format!("no domain {d:?} in the forward-auth file\n"),
            ),
            Refused::BadQuery(q) => (
                StatusCode::BAD_REQUEST,
                format!("bad query {q:?}: expected {DENY_STATUS}=401, 403 or 429\n"),
            ),
            Refused::NotConfigured => (
                StatusCode::NOT_FOUND,
                "forward-auth is not configured (--forward-auth <file>)\n".to_owned(),
            ),
        };
        (status, msg).into_response()
    }
}

/// The status of a denial the query asks for: 429 unless `deny_status` says 401 or 403. Other
/// parameters are ignored: Caddy and Traefik add the original request's query to the
/// endpoint's.
pub fn deny_status(query: Option<&str>) -> Result<StatusCode, Refused> {
    let mut status = StatusCode::TOO_MANY_REQUESTS;
    for pair in query.unwrap_or("").split('&') {
        let Some(value) = pair
            .strip_prefix(DENY_STATUS)
            .and_then(|r| r.strip_prefix('='))
        else {
            continue;
        };
        status = match value {
            "401" => StatusCode::UNAUTHORIZED,
            "403" => StatusCode::FORBIDDEN,
            "429" => StatusCode::TOO_MANY_REQUESTS,
            _ => {
                let shown: String = pair.chars().take(64).collect();
                return Err(Refused::BadQuery(shown));
            }
        };
    }
    Ok(status)
}

/// The original request's method, URI and host, and its client, read from what the proxy sent.
fn original<'a>(settings: &Settings, req: &'a Request) -> actions::Original<'a> {
    let headers = req.headers();
    let text = |name: &HeaderName| headers.get(name).map(|v| actions::bounded(v.as_bytes()));
    let method = text(&settings.method_header).unwrap_or_else(|| req.method().to_string());
    // The address walk reads a request head with the peer as an extension, as the tower
    // layer does: only the headers and the peer are copied.
    let mut head = axum::http::Request::new(());
    *head.headers_mut() = headers.clone();
    if settings.real_ip {
        // X-Real-IP is one hop: walked as an X-Forwarded-For holding only it.
        const XFF: HeaderName = HeaderName::from_static("x-forwarded-for");
        let forwarded = head.headers_mut();
        forwarded.remove(XFF);
        for v in headers.get_all("x-real-ip") {
            forwarded.append(XFF, v.clone());
        }
    }
    if let Some(ConnectInfo(peer)) = req.extensions().get::<ConnectInfo<SocketAddr>>() {
        head.extensions_mut().insert(PeerAddr(*peer));
    }
    let (parts, ()) = head.into_parts();
    actions::Original {
        method,
        path: text(&settings.uri_header),
        authority: text(&settings.host_header),
        headers,
        client: settings.client.address(&parts),
    }
}

/// Answers one forward-auth request for `domain`.
pub async fn answer(
    decider: &Decider,
    settings: Option<&Settings>,
    domain: &str,
    req: Request,
) -> Response {
    let Some(settings) = settings else {
        return Refused::NotConfigured.into_response();
    };
    let deny = match deny_status(req.uri().query()) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let Some(rate_limits) = settings.domains.get(domain) else {
        let shown: String = domain.chars().take(64).collect();
        return Refused::UnknownDomain(shown).into_response();
    };
    let descriptors = actions::descriptors(rate_limits, &original(settings, &req));
    if descriptors.is_empty() {
        return StatusCode::OK.into_response();
    }
    let request = RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    };
    let decided = match decider.decide_with_headers(&request, true).await {
        Ok(r) => r,
        Err(e) => {
            // The actions build only what validation accepts: this is a bug, not bad input.
            tracing::warn!(error = %e, domain, "forward-auth built a request the decider refused");
            return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response();
        }
    };
    let mut headers = HeaderMap::new();
    for h in &decided.response_headers_to_add {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.key.as_bytes()),
            HeaderValue::from_str(&h.value),
        ) {
            headers.append(name, value);
        }
    }
    if decided.overall_code != Code::OverLimit as i32 {
        return (StatusCode::OK, headers).into_response();
    }
    let wait = decided
        .statuses
        .iter()
        .filter(|s| s.code == Code::OverLimit as i32)
        .filter_map(|s| s.duration_until_reset.as_ref())
        .map(|d| {
            Duration::new(
                u64::try_from(d.seconds).unwrap_or(0),
                u32::try_from(d.nanos).unwrap_or(0),
            )
        })
        .max()
        .unwrap_or_default();
    // Whole seconds, rounded up, and at least one: a client told 0 would retry at once.
    let secs = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
    headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    (deny, headers, "over the rate limit\n").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_chooses_the_denial_status_or_is_refused() {
        assert_eq!(deny_status(None), Ok(StatusCode::TOO_MANY_REQUESTS));
        assert_eq!(deny_status(Some("")), Ok(StatusCode::TOO_MANY_REQUESTS));
        assert_eq!(
            deny_status(Some("deny_status=403")),
            Ok(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            deny_status(Some("deny_status=401")),
            Ok(StatusCode::UNAUTHORIZED)
        );
        assert!(matches!(
            deny_status(Some("deny_status=500")),
            Err(Refused::BadQuery(_))
        ));
        assert!(matches!(
            deny_status(Some("a=1&deny_status=4033")),
            Err(Refused::BadQuery(_))
        ));
        // Caddy and Traefik pass the original query along: ignored.
        assert_eq!(
            deny_status(Some("q=1&deny_status=403&x")),
            Ok(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            deny_status(Some("deny_statusx=1")),
            Ok(StatusCode::TOO_MANY_REQUESTS)
        );
    }
}
