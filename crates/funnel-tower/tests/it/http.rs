//! The layer in a real hyper server on loopback, driven by a real HTTP client; the draft's
//! fields read by a structured-field parser (`common::sf_list`).

use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    client_from, draft_fields, get, get_from, member, request, send, serve, serve_with, Reply,
};
use funnel::clock::ManualClock;
use funnel::Quota;
use funnel_tower::{KeyBy, Net, RateLimitLayer, Report};
use http::{Method, StatusCode};

const HOUR: Duration = Duration::from_secs(3600);

/// A quota of `limit` units, one back per hour: nothing refills during a test.
fn per_hour(limit: u64) -> Quota {
    Quota::per_period(1, HOUR)
        .unwrap()
        .with_limit(limit)
        .unwrap()
}

fn ip() -> KeyBy {
    KeyBy::PeerIp { v6_prefix: 64 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_holds_exactly_then_429_with_retry_after_problem_json_and_draft_headers() {
    let layer = RateLimitLayer::builder()
        .policy("ip", ip(), per_hour(5))
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    for i in 0..5 {
        let r = get(addr, "/", &[]).await;
        assert_eq!(r.status, StatusCode::OK, "request {i}");
        assert_eq!(r.body, "ok");
        let (policy, state) = draft_fields(&r);
        assert_eq!(policy.len(), 1);
        assert_eq!(member(&policy, "ip").get("q"), 5);
        assert_eq!(member(&policy, "ip").get("w"), 5 * 3600);
        assert_eq!(member(&state, "ip").get("r"), 4 - i);
        // Allowed: the seconds until the funnel is empty, rounded up.
        assert_eq!(member(&state, "ip").get("t"), (i + 1) * 3600);
    }
    let r = get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), Some("3600"));
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert!(
        r.body.contains("\"status\":429") && r.body.contains("retry after 3600 s"),
        "{}",
        r.body
    );
    let (_, state) = draft_fields(&r);
    assert_eq!(member(&state, "ip").get("r"), 0);
    assert_eq!(member(&state, "ip").get("t"), 3600);
    let stats = layer.stats("ip").unwrap();
    assert_eq!((stats.allowed, stats.denied), (5, 1));
}

/// `t` of a denial is the `Retry-After`, and neither is earlier than the true retry time: a
/// retry after `Retry-After` seconds passes, one a nanosecond before the true time does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t_equals_retry_after_and_neither_is_earlier_than_the_true_retry_time() {
    let clock = ManualClock::new();
    // Two units, one back every 1.5005 s.
    let quota = Quota::per_period(2, Duration::from_millis(3001)).unwrap();
    let layer = RateLimitLayer::builder()
        .policy("ip", ip(), quota)
        .build_with_clock(clock.clone())
        .unwrap();
    let addr = serve(layer).await;
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    let r = get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    let (_, state) = draft_fields(&r);
    assert_eq!(r.header("retry-after"), Some("2"));
    assert_eq!(member(&state, "ip").get("t"), 2);
    // The true retry time is 1.5005 s: a nanosecond before it, still denied.
    clock.advance(Duration::from_nanos(1_500_500_000 - 1));
    assert_eq!(
        get(addr, "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_nanos(1));
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_addresses_count_only_through_trusted_proxies_and_ipv6_groups_by_64() {
    let client = |trusted: &str| KeyBy::ClientIp {
        trusted: vec![Net::parse(trusted).unwrap()],
        v6_prefix: 64,
    };
    let trusted = RateLimitLayer::builder()
        .policy("client", client("127.0.0.1"), per_hour(2))
        .build()
        .unwrap();
    let addr = serve(trusted).await;
    let xff = |ip: &'static str| [("x-forwarded-for", ip.as_bytes())];
    let status = |r: Reply| r.status;
    assert_eq!(
        status(get(addr, "/", &xff("2001:db8::1")).await),
        StatusCode::OK
    );
    assert_eq!(
        status(get(addr, "/", &xff("2001:db8::2")).await),
        StatusCode::OK
    );
    // Same /64: the rotated address shares the funnel.
    let r = get(addr, "/", &xff("2001:db8::ffff")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    // Another /64, and an IPv4 client: their own funnels.
    assert_eq!(
        status(get(addr, "/", &xff("2001:db8:0:1::1")).await),
        StatusCode::OK
    );
    assert_eq!(
        status(get(addr, "/", &xff("198.51.100.1")).await),
        StatusCode::OK
    );

    // The same header from a peer that is not trusted is ignored: every request is the peer's.
    let untrusted = RateLimitLayer::builder()
        .policy("client", client("10.0.0.0/8"), per_hour(2))
        .build()
        .unwrap();
    let addr = serve(untrusted).await;
    assert_eq!(
        status(get(addr, "/", &xff("192.0.2.1")).await),
        StatusCode::OK
    );
    assert_eq!(
        status(get(addr, "/", &xff("192.0.2.2")).await),
        StatusCode::OK
    );
    let r = get(addr, "/", &xff("192.0.2.3")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
}

/// Malformed, oversized and non-UTF-8 forwarding headers from a trusted proxy: each answered
/// (no panic, no dropped connection) and keyed by the proxy itself, as documented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_forwarding_headers_fall_back_to_the_peer_without_failing_a_request() {
    let layer = RateLimitLayer::builder()
        .policy(
            "client",
            KeyBy::ClientIp {
                trusted: vec![Net::parse("127.0.0.1").unwrap()],
                v6_prefix: 64,
            },
            per_hour(1),
        )
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    // An address padded to 8 KB (inside the value: a server trims only the ends).
    let huge_entry = format!("198.51.100.9{}, 127.0.0.1", " ".repeat(8_000));
    let many_hops = vec!["127.0.0.1"; 500].join(",");
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("x-forwarded-for", b"not-an-address".to_vec()),
        ("x-forwarded-for", b"198.51.100.9, \xff\xfe".to_vec()),
        ("x-forwarded-for", b"198.51.100.9:443".to_vec()),
        ("x-forwarded-for", huge_entry.into_bytes()),
        ("x-forwarded-for", many_hops.into_bytes()),
        ("forwarded", b"for=unknown".to_vec()),
        ("forwarded", b"for=_hidden;proto=https".to_vec()),
        ("forwarded", b"proto=https".to_vec()),
        ("forwarded", b"for=\"[2001:db8::1\"".to_vec()),
        ("forwarded", b"for=\xc3\x28".to_vec()),
    ];
    let mut statuses = Vec::new();
    for (name, value) in &bad {
        let r = get(addr, "/", &[(name, value)]).await;
        draft_fields(&r);
        statuses.push(r.status.as_u16());
    }
    // All of them are the proxy's own key (limit 1): the first passes, the rest are denied.
    assert_eq!(statuses[0], 200);
    assert!(statuses[1..].iter().all(|s| *s == 429), "{statuses:?}");
    // A good header is still read: its own key.
    let r = get(addr, "/", &[("x-forwarded-for", b"198.51.100.9")]).await;
    assert_eq!(r.status, StatusCode::OK);
    // What the client wrote left of its own address is never read, garbage or not.
    let r = get(
        addr,
        "/",
        &[("x-forwarded-for", b"\xff garbage, 198.51.100.10")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(layer.stats("client").unwrap().denied, 9);
}

/// A server that inserts no peer address: the IP keys share one "missing" key, documented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_peer_address_every_request_shares_one_key() {
    let layer = RateLimitLayer::builder()
        .policy("ip", ip(), per_hour(2))
        .build()
        .unwrap();
    let addr = serve_with(layer, false).await;
    assert_eq!(
        get_from(addr, "127.0.0.2", "/").await.status,
        StatusCode::OK
    );
    assert_eq!(
        get_from(addr, "127.0.0.3", "/").await.status,
        StatusCode::OK
    );
    let r = get_from(addr, "127.0.0.4", "/").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    draft_fields(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_never_rejects_but_counts_and_reports() {
    let layer = RateLimitLayer::builder()
        .policy("ip", ip(), per_hour(1))
        .shadow(true)
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    for i in 0..4 {
        let r = get(addr, "/", &[]).await;
        assert_eq!(r.status, StatusCode::OK);
        assert!(r.header("retry-after").is_none());
        let (_, state) = draft_fields(&r);
        assert_eq!(member(&state, "ip").get("r"), 0, "request {i}");
    }
    let stats = layer.stats("ip").unwrap();
    assert_eq!(
        (stats.allowed, stats.denied, stats.shadow_denied),
        (1, 0, 3)
    );
}

/// Two policies: a request the route policy denies is charged to neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_policies_are_charged_all_or_nothing() {
    let layer = RateLimitLayer::builder()
        .policy("ip", ip(), per_hour(10))
        .policy("route", KeyBy::Route, per_hour(2))
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    assert_eq!(get(addr, "/a", &[]).await.status, StatusCode::OK);
    assert_eq!(get(addr, "/a", &[]).await.status, StatusCode::OK);
    for _ in 0..3 {
        let r = get(addr, "/a", &[]).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(r.body.contains("\\\"route\\\""), "{}", r.body);
        let (_, state) = draft_fields(&r);
        // The denial shows the ip policy as it stands: the rolled-back charge is not in it.
        assert_eq!(member(&state, "ip").get("r"), 8);
    }
    let r = get(addr, "/b", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    // Three units of ten used by the admitted requests only: the denied ones were not charged.
    let (policy, state) = draft_fields(&r);
    assert_eq!(member(&state, "ip").get("r"), 7);
    assert_eq!(member(&policy, "route").get("q"), 2);
    assert_eq!(layer.stats("route").unwrap().denied, 3);
    assert_eq!(layer.stats("ip").unwrap().allowed, 3);
}

/// `Report::Closest` names the policy with the smallest share of its limit left, not the one
/// with the fewest units.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closest_reports_the_smallest_share_left() {
    let layer = RateLimitLayer::builder()
        .policy("ip", ip(), per_hour(2))
        .policy("global", KeyBy::Global, per_hour(20))
        .report(Report::Closest)
        .build()
        .unwrap();
    let addr = serve(layer).await;
    // First request: ip 1 of 2 left (50%), global 19 of 20 (95%): ip is closer.
    let r = get_from(addr, "127.0.0.2", "/").await;
    let (policy, state) = draft_fields(&r);
    assert_eq!((policy[0].name.as_str(), state.len()), ("ip", 1));
    assert_eq!(policy[0].get("q"), 2);
    // Use up 15 more global units from other addresses (2 each, 1 from the last).
    for i in 3..=10 {
        let from = format!("127.0.0.{i}");
        let n = if i == 10 { 1 } else { 2 };
        for _ in 0..n {
            assert_eq!(get_from(addr, &from, "/").await.status, StatusCode::OK);
        }
    }
    // Now from a fresh address: ip 1 of 2 left (50%), global 3 of 20 (15%). The fewest
    // units would be ip; the smallest share is global.
    let r = get_from(addr, "127.0.0.11", "/").await;
    assert_eq!(r.status, StatusCode::OK);
    let (policy, state) = draft_fields(&r);
    assert_eq!(state.len(), 1);
    assert_eq!(state[0].name, "global");
    assert_eq!((policy[0].get("q"), state[0].get("r")), (20, 3));
    // A denial always names the denying policy.
    let r = get_from(addr, "127.0.0.11", "/").await;
    assert_eq!(r.status, StatusCode::OK);
    let r = get_from(addr, "127.0.0.11", "/").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    let (_, state) = draft_fields(&r);
    assert_eq!((state[0].name.as_str(), state[0].get("r")), ("ip", 0));
}

/// A cost function charges each request its weight, to every policy; a cost over the limit
/// can never pass and gets no `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_charged_its_cost() {
    let layer = RateLimitLayer::builder()
        .policy("ip", ip(), per_hour(10))
        .cost(|parts| {
            parts
                .headers
                .get("x-cost")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        })
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let cost = |n: &'static str| [("x-cost", n.as_bytes())];
    let r = get(addr, "/", &cost("4")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(member(&draft_fields(&r).1, "ip").get("r"), 6);
    // 7 does not fit in 6: denied, retry when one more unit is back (an hour).
    let r = get(addr, "/", &cost("7")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), Some("3600"));
    assert_eq!(member(&draft_fields(&r).1, "ip").get("r"), 6);
    // 11 never fits a limit of 10: no Retry-After, and the body says why.
    let r = get(addr, "/", &cost("11")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.header("retry-after").is_none());
    assert!(
        r.body.contains("costs more than the limit of 10"),
        "{}",
        r.body
    );
    draft_fields(&r);
    // Nothing was charged for the denials: 6 units still fit, and a malformed cost is 1.
    assert_eq!(get(addr, "/", &cost("6")).await.status, StatusCode::OK);
    let r = get(addr, "/", &cost("lots")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_headers_and_exempt_paths_by_whole_segments() {
    let layer = RateLimitLayer::builder()
        .policy(
            "ip",
            ip(),
            Quota::per_period(1, Duration::from_secs(10))
                .unwrap()
                .with_limit(3)
                .unwrap(),
        )
        .report(Report::Legacy)
        .exempt_path("/health")
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let r = get(addr, "/", &[]).await;
    assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2"));
    assert_eq!(r.header("x-ratelimit-reset"), Some("10"));
    assert!(r.header("ratelimit").is_none() && r.header("ratelimit-policy").is_none());
    for path in ["/health", "/health/", "/health/db"] {
        for _ in 0..5 {
            let h = get(addr, path, &[]).await;
            assert_eq!(h.status, StatusCode::OK, "{path}");
            assert!(h.header("x-ratelimit-limit").is_none());
        }
    }
    // `/healthz` is another path: limited like any other.
    let r = get(addr, "/healthz-x", &[]).await;
    assert_eq!(r.header("x-ratelimit-remaining"), Some("1"));
    // A path an upstream may normalise out of `/health` is limited too.
    let r = get(addr, "/health/../admin", &[]).await;
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exempt_method_passes_uncounted_and_without_headers() {
    let layer = RateLimitLayer::builder()
        .policy("ip", ip(), per_hour(1))
        .exempt_method(Method::OPTIONS)
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    let client = client_from(None);
    for _ in 0..5 {
        let mut req = request(addr, "/", &[]);
        *req.method_mut() = Method::OPTIONS;
        let r = send(&client, req).await;
        assert_eq!(r.status, StatusCode::OK);
        assert!(r.header("ratelimit").is_none());
    }
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    assert_eq!(
        get(addr, "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let stats = layer.stats("ip").unwrap();
    assert_eq!((stats.allowed, stats.denied), (1, 1));
}

/// A header key: one funnel per value, raw bytes included; absent and oversized values share
/// one "missing" key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_key_limits_each_value_and_shares_one_key_when_missing_or_oversized() {
    let layer = RateLimitLayer::builder()
        .policy(
            "token",
            KeyBy::Header(http::HeaderName::from_static("x-api-key")),
            per_hour(1),
        )
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let key = |k: &'static [u8]| [("x-api-key", k)];
    for k in [&b"alpha"[..], b"beta", b"\xff\xfe raw bytes"] {
        assert_eq!(
            get(addr, "/", &key(k)).await.status,
            StatusCode::OK,
            "{k:?}"
        );
        let r = get(addr, "/", &key(k)).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{k:?}");
    }
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    let oversized = vec![b'k'; 300];
    let r = get(addr, "/", &[("x-api-key", &oversized)]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
}

/// A closure key: the tenant from the path; a request without one shares the "missing" key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closure_key_limits_what_the_closure_returns() {
    let tenant = KeyBy::Custom(Arc::new(|parts: &http::request::Parts| {
        let rest = parts.uri.path().strip_prefix("/t/")?;
        Some(rest.split('/').next()?.as_bytes().to_vec())
    }));
    let layer = RateLimitLayer::builder()
        .policy("tenant", tenant, per_hour(2))
        .build()
        .unwrap();
    let addr = serve(layer).await;
    for path in ["/t/acme/a", "/t/acme/b"] {
        assert_eq!(get(addr, path, &[]).await.status, StatusCode::OK);
    }
    let r = get(addr, "/t/acme/c", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(get(addr, "/t/globex/a", &[]).await.status, StatusCode::OK);
    assert_eq!(get(addr, "/elsewhere", &[]).await.status, StatusCode::OK);
    assert_eq!(get(addr, "/other", &[]).await.status, StatusCode::OK);
    let r = get(addr, "/third", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_status_replaces_429_everywhere() {
    let layer = RateLimitLayer::builder()
        .policy("ip", ip(), per_hour(1))
        .status(503)
        .build()
        .unwrap();
    let addr = serve(layer).await;
    assert_eq!(get(addr, "/", &[]).await.status, StatusCode::OK);
    let r = get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("retry-after"), Some("3600"));
    assert!(
        r.body.contains("\"status\":503") && r.body.contains("\"title\":\"Service Unavailable\""),
        "{}",
        r.body
    );
    draft_fields(&r);
}

/// The near-limit counter: admitted requests after which at least 50% of the limit is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_limit_counts_admitted_requests_past_the_threshold() {
    let layer = RateLimitLayer::builder()
        .policy("ip", ip(), per_hour(4))
        .policy("global", KeyBy::Global, per_hour(100))
        .near_limit(50)
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    for _ in 0..5 {
        get(addr, "/", &[]).await;
    }
    // ip: 1, 2, 3, 4 of 4 used; the 2nd, 3rd and 4th are at or past 50%; the 5th is denied.
    let stats = layer.stats("ip").unwrap();
    assert_eq!((stats.allowed, stats.denied, stats.near_limit), (4, 1, 3));
    assert_eq!(layer.stats("global").unwrap().near_limit, 0);
}

#[test]
fn bad_configuration_is_an_error_at_build_time() {
    use funnel_tower::Error;
    let q = Quota::per_second(1).unwrap();
    let one = || RateLimitLayer::builder().policy("a", KeyBy::Global, q);
    assert!(matches!(
        RateLimitLayer::builder().build(),
        Err(Error::NoPolicy)
    ));
    let dup = one().policy("a", KeyBy::Route, q).build();
    assert!(matches!(dup, Err(Error::DuplicateName(_))));
    let quote = RateLimitLayer::builder()
        .policy("a\"b", KeyBy::Global, q)
        .build();
    assert!(matches!(quote, Err(Error::BadName(_))));
    let prefix = RateLimitLayer::builder()
        .policy("a", KeyBy::PeerIp { v6_prefix: 129 }, q)
        .build();
    assert!(matches!(prefix, Err(Error::BadPrefix(129))));
    assert!(matches!(
        one().status(200).build(),
        Err(Error::BadStatus(200))
    ));
    assert!(matches!(
        one().exempt_path("health").build(),
        Err(Error::BadExemptPath(_))
    ));
    assert!(matches!(
        one().near_limit(101).build(),
        Err(Error::BadNearLimit(101))
    ));
    let table = RateLimitLayer::builder()
        .policy_with_capacity("a", KeyBy::Global, q, 0)
        .build();
    assert!(matches!(table, Err(Error::Funnel(_))));
}
