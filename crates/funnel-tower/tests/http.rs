//! The layer in a real hyper server on loopback, driven by a real HTTP client.

use std::convert::Infallible;
use std::future::Ready;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use funnel::Quota;
use funnel_tower::{KeyBy, Net, PeerAddr, RateLimitLayer, Report};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower_layer::Layer;

/// The upstream: answers 200 "ok".
#[derive(Clone)]
struct Ok200;

impl<B> tower_service::Service<Request<B>> for Ok200 {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Request<B>) -> Self::Future {
        std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(b"ok")))))
    }
}

/// Serves `layer` around [`Ok200`] on a free loopback port, inserting each connection's
/// [`PeerAddr`].
async fn serve(layer: RateLimitLayer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limited = layer.layer(Ok200);
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                return;
            };
            let limited = limited.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                        req.extensions_mut().insert(PeerAddr(peer));
                        let mut s = limited.clone();
                        async move { tower_service::Service::call(&mut s, req).await }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut b = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::new())).unwrap();
    let res = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("no timeout")
        .expect("a response");
    let (parts, body) = res.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// A strict parser for the draft's fields: an sf-list of sf-strings, each with integer
/// parameters (RFC 8941: `"name";key=1;key=2, "other";key=3`). Panics on anything else.
fn sf_list(value: &str) -> Vec<(String, Vec<(String, u64)>)> {
    let mut out = Vec::new();
    for member in value.split(',') {
        let member = member.trim_start_matches(' ');
        assert!(!member.ends_with(' '), "trailing space in {value:?}");
        let rest = member.strip_prefix('"').expect("an sf-string");
        let (name, params) = rest.split_once('"').expect("a closed string");
        assert!(
            name.bytes()
                .all(|b| (0x20..0x7f).contains(&b) && b != b'\\'),
            "{name:?}"
        );
        let mut ps = Vec::new();
        for p in params.split(';').skip(1) {
            let (k, v) = p.split_once('=').expect("key=value");
            assert!(
                !k.is_empty()
                    && k.bytes().all(|b| b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b == b'_'
                        || b == b'-'
                        || b == b'.'
                        || b == b'*'),
                "key {k:?}"
            );
            assert!(
                !v.is_empty() && v.len() <= 15 && v.bytes().all(|b| b.is_ascii_digit()),
                "integer {v:?}"
            );
            ps.push((k.to_string(), v.parse().unwrap()));
        }
        assert!(params.is_empty() || params.starts_with(';'), "{params:?}");
        out.push((name.to_string(), ps));
    }
    out
}

fn field(r: &Reply, name: &str) -> Vec<(String, Vec<(String, u64)>)> {
    sf_list(r.headers.get(name).expect(name).to_str().unwrap())
}

fn param(list: &[(String, Vec<(String, u64)>)], policy: &str, key: &str) -> u64 {
    let (_, ps) = list.iter().find(|(n, _)| n == policy).expect(policy);
    ps.iter().find(|(k, _)| k == key).expect(key).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_holds_exactly_then_429_with_retry_after_problem_json_and_draft_headers() {
    // Limit 5, one unit back per hour.
    let quota = Quota::new(4, 1, Duration::from_secs(3600)).unwrap();
    let layer = RateLimitLayer::builder()
        .policy("ip", KeyBy::PeerIp { v6_prefix: 64 }, quota)
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    for i in 0..5 {
        let r = get(addr, "/", &[]).await;
        assert_eq!(r.status, StatusCode::OK, "request {i}");
        assert_eq!(r.body, "ok");
        let policy = field(&r, "ratelimit-policy");
        assert_eq!(param(&policy, "ip", "q"), 5);
        assert_eq!(param(&policy, "ip", "w"), 5 * 3600);
        let state = field(&r, "ratelimit");
        assert_eq!(param(&state, "ip", "r"), 4 - i);
        assert_eq!(param(&state, "ip", "t"), (i + 1) * 3600);
    }
    let r = get(addr, "/", &[]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers["retry-after"], "3600");
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert!(
        r.body.contains("\"status\":429") && r.body.contains("retry after 3600 s"),
        "{}",
        r.body
    );
    let state = field(&r, "ratelimit");
    assert_eq!(
        (param(&state, "ip", "r"), param(&state, "ip", "t")),
        (0, 3600)
    );
    let stats = layer.stats("ip").unwrap();
    assert_eq!((stats.allowed, stats.denied), (5, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_addresses_count_only_through_trusted_proxies_and_ipv6_groups_by_64() {
    let quota = Quota::new(1, 1, Duration::from_secs(3600)).unwrap(); // limit 2
    let trusted = RateLimitLayer::builder()
        .policy(
            "client",
            KeyBy::ClientIp {
                trusted: vec![Net::parse("127.0.0.1").unwrap()],
                v6_prefix: 64,
            },
            quota,
        )
        .build()
        .unwrap();
    let addr = serve(trusted).await;
    let xff = |ip: &'static str| [("x-forwarded-for", ip)];
    assert_eq!(
        get(addr, "/", &xff("2001:db8::1")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get(addr, "/", &xff("2001:db8::2")).await.status,
        StatusCode::OK
    );
    // Same /64: the rotated address shares the funnel.
    assert_eq!(
        get(addr, "/", &xff("2001:db8::ffff")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another /64, and an IPv4 client: their own funnels.
    assert_eq!(
        get(addr, "/", &xff("2001:db8:0:1::1")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get(addr, "/", &xff("198.51.100.1")).await.status,
        StatusCode::OK
    );
    // A malformed header from the trusted proxy falls back to the proxy's own address.
    assert_eq!(
        get(addr, "/", &xff("nonsense")).await.status,
        StatusCode::OK
    );

    // The same header from a peer that is not trusted is ignored: every request is the peer's.
    let untrusted = RateLimitLayer::builder()
        .policy(
            "client",
            KeyBy::ClientIp {
                trusted: vec![Net::parse("10.0.0.0/8").unwrap()],
                v6_prefix: 64,
            },
            quota,
        )
        .build()
        .unwrap();
    let addr = serve(untrusted).await;
    assert_eq!(
        get(addr, "/", &xff("192.0.2.1")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get(addr, "/", &xff("192.0.2.2")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get(addr, "/", &xff("192.0.2.3")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_never_rejects_but_counts_and_reports() {
    let layer = RateLimitLayer::builder()
        .policy(
            "ip",
            KeyBy::PeerIp { v6_prefix: 64 },
            Quota::new(0, 1, Duration::from_secs(60)).unwrap(),
        )
        .shadow(true)
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    for _ in 0..4 {
        let r = get(addr, "/", &[]).await;
        assert_eq!(r.status, StatusCode::OK);
        assert!(r.headers.contains_key("ratelimit"));
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
    let hour = Duration::from_secs(3600);
    let layer = RateLimitLayer::builder()
        .policy(
            "ip",
            KeyBy::PeerIp { v6_prefix: 64 },
            Quota::new(9, 1, hour).unwrap(),
        )
        .policy("route", KeyBy::Route, Quota::new(1, 1, hour).unwrap())
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    assert_eq!(get(addr, "/a", &[]).await.status, StatusCode::OK);
    assert_eq!(get(addr, "/a", &[]).await.status, StatusCode::OK);
    for _ in 0..3 {
        let r = get(addr, "/a", &[]).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(r.body.contains("\\\"route\\\""), "{}", r.body);
    }
    let r = get(addr, "/b", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    // Three units of ten used by the admitted requests only: the denied ones were not charged.
    assert_eq!(param(&field(&r, "ratelimit"), "ip", "r"), 7);
    assert_eq!(layer.stats("route").unwrap().denied, 3);
    assert_eq!(layer.stats("ip").unwrap().allowed, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_headers_and_exemptions() {
    let layer = RateLimitLayer::builder()
        .policy(
            "ip",
            KeyBy::PeerIp { v6_prefix: 64 },
            Quota::new(2, 1, Duration::from_secs(10)).unwrap(),
        )
        .report(Report::Legacy)
        .exempt_path("/health")
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let r = get(addr, "/", &[]).await;
    assert_eq!(r.headers["x-ratelimit-limit"], "3");
    assert_eq!(r.headers["x-ratelimit-remaining"], "2");
    assert_eq!(r.headers["x-ratelimit-reset"], "10");
    assert!(!r.headers.contains_key("ratelimit"));
    for _ in 0..10 {
        let h = get(addr, "/health", &[]).await;
        assert_eq!(h.status, StatusCode::OK);
        assert!(!h.headers.contains_key("x-ratelimit-limit"));
    }
}

#[test]
fn bad_configuration_is_an_error_at_build_time() {
    let q = Quota::per_second(1).unwrap();
    assert!(matches!(
        RateLimitLayer::builder().build(),
        Err(funnel_tower::Error::NoPolicy)
    ));
    let dup = RateLimitLayer::builder()
        .policy("a", KeyBy::Global, q)
        .policy("a", KeyBy::Route, q)
        .build();
    assert!(matches!(dup, Err(funnel_tower::Error::DuplicateName(_))));
    let quote = RateLimitLayer::builder()
        .policy("a\"b", KeyBy::Global, q)
        .build();
    assert!(matches!(quote, Err(funnel_tower::Error::BadName(_))));
    let prefix = RateLimitLayer::builder()
        .policy("a", KeyBy::PeerIp { v6_prefix: 129 }, q)
        .build();
    assert!(matches!(prefix, Err(funnel_tower::Error::BadPrefix(129))));
    let status = RateLimitLayer::builder()
        .policy("a", KeyBy::Global, q)
        .status(200)
        .build();
    assert!(matches!(status, Err(funnel_tower::Error::BadStatus(200))));
}
