//! The example proxy as a real process, in front of a real upstream on loopback, driven by a
//! real HTTP client: what an operator running `examples/proxy/` gets.
//!
//! The binary is the one cargo builds from `examples/proxy/`, rebuilt when stale
//! (`common/proxy.rs`).
//!
//! The upstream is a hyper server in this test process that counts the requests reaching it,
//! so the tests see what the proxy forwarded, not only what it answered.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use crate::common::proxy::{hits, proxy_binary, start_proxy, upstream, Proxy};
use crate::common::{client_from, draft_fields, member, request, send, Reply};
use http::StatusCode;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET `path` through the proxy from the loopback address `from`.
async fn get(proxy: &Proxy, from: &str, path: &str, headers: &[(&str, &[u8])]) -> Reply {
    let from: IpAddr = from.parse().unwrap();
    send(&client_from(Some(from)), request(proxy.addr, path, headers)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_exactly_per_key_under_concurrent_clients() {
    let (up, reached) = upstream().await;
    let proxy = start_proxy("127.0.0.1", up, &["--limit", "ip=5/1h"]);
    let mut tasks = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        for _ in 0..4 {
            let addr = proxy.addr;
            tasks.push(tokio::spawn(async move {
                let client = client_from(Some(from.parse().unwrap()));
                let mut ok = 0;
                for _ in 0..5 {
                    let r = send(&client, request(addr, "/", &[])).await;
                    draft_fields(&r);
                    match r.status {
                        StatusCode::OK => ok += 1,
                        StatusCode::TOO_MANY_REQUESTS => {
                            assert_eq!(r.header("retry-after"), Some("720"));
                        }
                        s => panic!("status {s}"),
                    }
                }
                (from, ok)
            }));
        }
    }
    let mut admitted = std::collections::BTreeMap::new();
    for t in tasks {
        let (from, ok) = t.await.unwrap();
        *admitted.entry(from).or_insert(0) += ok;
    }
    // 20 requests from each address, exactly 5 admitted for each.
    assert_eq!(admitted.values().copied().collect::<Vec<_>>(), [5, 5, 5]);
    assert_eq!(
        hits(&reached),
        15,
        "only admitted requests reach the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_parse_as_structured_fields_with_the_limits_given() {
    let (up, _) = upstream().await;
    let proxy = start_proxy(
        "127.0.0.1",
        up,
        &["--limit", "ip=10/1s,burst=20", "--limit", "route=1000/60s"],
    );
    let r = get(&proxy, "127.0.0.1", "/a", &[]).await;
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "upstream"));
    let (policy, state) = draft_fields(&r);
    // q the burst, w the seconds a full funnel takes to drain (20 x 100 ms; 1000 x 60 ms).
    assert_eq!((policy[0].name.as_str(), policy[0].get("q")), ("ip", 20));
    assert_eq!(policy[0].get("w"), 2);
    assert_eq!(
        (policy[1].name.as_str(), policy[1].get("q")),
        ("route", 1000)
    );
    assert_eq!(policy[1].get("w"), 60);
    assert_eq!(member(&state, "ip").get("r"), 19);
    assert_eq!(member(&state, "route").get("r"), 999);
    assert_eq!(member(&state, "ip").get("t"), 1);

    let legacy = start_proxy("127.0.0.1", up, &["--limit", "ip=3/1h", "--legacy-headers"]);
    let r = get(&legacy, "127.0.0.1", "/", &[]).await;
    assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2"));
    assert_eq!(r.header("x-ratelimit-reset"), Some("1200"));
    assert!(r.header("ratelimit").is_none());
}

/// A peer that is IPv6 ([::1]): its key is its /64, and a trusted IPv6 proxy's forwarded
/// IPv6 clients are grouped by /64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_peers_and_forwarded_ipv6_clients_are_grouped_by_64() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        // A required part of the test is missing: fail, unless told to go without it.
        assert!(
            std::env::var_os("FUNNEL_NO_IPV6").is_some(),
            "this machine has no IPv6 loopback ([::1]), which this test needs; set \
             FUNNEL_NO_IPV6=1 to skip it knowingly"
        );
        eprintln!("SKIPPED (FUNNEL_NO_IPV6 is set): the IPv6 path is not run");
        return;
    }
    let (up, _) = upstream().await;
    let proxy = start_proxy("[::1]", up, &["--limit", "ip=2/1h"]);
    assert!(proxy.addr.is_ipv6());
    for expected in [200, 200, 429] {
        let r = get(&proxy, "::1", "/", &[]).await;
        assert_eq!(r.status.as_u16(), expected);
        draft_fields(&r);
    }

    let proxy = start_proxy("[::1]", up, &["--trust", "::1", "--limit", "client=2/1h"]);
    let xff = |ip: &'static str| [("x-forwarded-for", ip.as_bytes())];
    let status = |r: Reply| r.status.as_u16();
    assert_eq!(
        status(get(&proxy, "::1", "/", &xff("2001:db8::1")).await),
        200
    );
    assert_eq!(
        status(get(&proxy, "::1", "/", &xff("2001:db8::2")).await),
        200
    );
    // Another address in the same /64: the same funnel, spent.
    assert_eq!(
        status(get(&proxy, "::1", "/", &xff("2001:db8::ffff:1")).await),
        429
    );
    // The next /64: its own funnel.
    assert_eq!(
        status(get(&proxy, "::1", "/", &xff("2001:db8:0:1::9")).await),
        200
    );

    // Behind a proxy that writes RFC 7239 `Forwarded` (`client-forwarded`): the same /64
    // grouping, and the client's own `X-Forwarded-For` is not read.
    let proxy = start_proxy(
        "[::1]",
        up,
        &["--trust", "::1", "--limit", "client-forwarded=2/1h"],
    );
    let fwd = |spoof: &'static str| {
        [
            ("forwarded", &br#"for="[2001:db8:0:1::1]:4711""#[..]),
            ("x-forwarded-for", spoof.as_bytes()),
        ]
    };
    assert_eq!(
        status(get(&proxy, "::1", "/", &fwd("192.0.2.1")).await),
        200
    );
    assert_eq!(
        status(get(&proxy, "::1", "/", &fwd("192.0.2.2")).await),
        200
    );
    assert_eq!(
        status(get(&proxy, "::1", "/", &fwd("192.0.2.3")).await),
        429
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_count_only_from_a_trusted_proxy() {
    let (up, _) = upstream().await;
    let proxy = start_proxy(
        "127.0.0.1",
        up,
        &["--trust", "127.0.0.2", "--limit", "client=1/1h"],
    );
    let xff = |ip: &'static str| [("x-forwarded-for", ip.as_bytes())];
    let status = |r: Reply| r.status.as_u16();
    // Through the trusted proxy 127.0.0.2: one funnel per forwarded client.
    assert_eq!(
        status(get(&proxy, "127.0.0.2", "/", &xff("192.0.2.1")).await),
        200
    );
    assert_eq!(
        status(get(&proxy, "127.0.0.2", "/", &xff("192.0.2.2")).await),
        200
    );
    assert_eq!(
        status(get(&proxy, "127.0.0.2", "/", &xff("192.0.2.1")).await),
        429
    );
    // A malformed header from it: the proxy's own address, once.
    assert_eq!(
        status(get(&proxy, "127.0.0.2", "/", &xff("garbage")).await),
        200
    );
    let raw = [("x-forwarded-for", &b"\xff\xfe"[..])];
    assert_eq!(status(get(&proxy, "127.0.0.2", "/", &raw).await), 429);
    // From 127.0.0.3, not trusted: the header is ignored, every request is the peer's.
    assert_eq!(
        status(get(&proxy, "127.0.0.3", "/", &xff("192.0.2.3")).await),
        200
    );
    assert_eq!(
        status(get(&proxy, "127.0.0.3", "/", &xff("192.0.2.4")).await),
        429
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_forwards_everything_and_still_reports() {
    let (up, reached) = upstream().await;
    let proxy = start_proxy("127.0.0.1", up, &["--shadow", "--limit", "ip=2/1h"]);
    for i in 0..5 {
        let r = get(&proxy, "127.0.0.1", "/", &[]).await;
        assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "upstream"));
        assert!(r.header("retry-after").is_none());
        let (_, state) = draft_fields(&r);
        assert_eq!(member(&state, "ip").get("r"), 1 - i.min(1), "request {i}");
    }
    assert_eq!(hits(&reached), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_are_charged_all_or_nothing() {
    let (up, reached) = upstream().await;
    let proxy = start_proxy(
        "127.0.0.1",
        up,
        &["--limit", "ip=10/1h", "--limit", "route=2/1h"],
    );
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(get(&proxy, "127.0.0.1", "/a", &[]).await.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429]);
    let r = get(&proxy, "127.0.0.1", "/b", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    // The three denials charged nothing to ip: 3 of 10 used.
    assert_eq!(member(&draft_fields(&r).1, "ip").get("r"), 7);
    assert_eq!(hits(&reached), 3);
}

#[test]
fn help_explains_the_limit_syntax_and_bad_limits_exit_2() {
    let out = Command::new(proxy_binary()).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needed in [
        "<key>=<count>/<period>[,burst=<n>]",
        "defaults to\n                           count",
        "<n>ms | <n>s | <n>m | <n>h (a bare number is seconds)",
        "--trust",
        "--shadow",
        "--drain-timeout <s>",
    ] {
        assert!(help.contains(needed), "--help lacks {needed:?}:\n{help}");
    }
    let out = Command::new(proxy_binary())
        .args(["--upstream", "http://127.0.0.1:9", "--limit", "ip=10/1y"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("ip=10/1y") && err.contains("bad period"),
        "{err}"
    );
}

/// Sends SIGTERM to the proxy and waits (at most 30 s) for it to exit; its exit status.
fn terminate(mut proxy: Proxy) -> std::process::ExitStatus {
    proxy.terminate();
    proxy.wait_exit(Duration::from_secs(30)).0
}

/// A fresh directory for one test's state file, named after `test` and this process; the path
/// of the file in it (not written yet).
fn state_file(test: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("funnel-proxy-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.state");
    (dir, path)
}

/// `--state`: a key limited before a SIGTERM is still limited by the restarted proxy; an
/// unusable state file starts the proxy empty rather than not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_key_stays_limited_across_a_sigterm_and_a_restart() {
    let (up, reached) = upstream().await;
    let (dir, path) = state_file("state");
    let state = path.to_str().unwrap();
    let args = ["--limit", "ip=5/1h", "--state", state];

    let proxy = start_proxy("127.0.0.1", up, &args);
    for _ in 0..5 {
        assert_eq!(
            get(&proxy, "127.0.0.2", "/", &[]).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(
        get(&proxy, "127.0.0.2", "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        get(&proxy, "127.0.0.3", "/", &[]).await.status,
        StatusCode::OK
    );
    assert!(terminate(proxy).success(), "the proxy exits 0 after saving");
    assert!(path.exists(), "the state was written");

    let proxy = start_proxy("127.0.0.1", up, &args);
    let r = get(&proxy, "127.0.0.2", "/", &[]).await;
    assert_eq!(
        r.status,
        StatusCode::TOO_MANY_REQUESTS,
        "forgiven by the restart"
    );
    // 720 s until one more fits, less the moments the restart took.
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((700..=720).contains(&retry), "retry-after {retry}");
    // 127.0.0.3 had one request: four more fit.
    for _ in 0..4 {
        assert_eq!(
            get(&proxy, "127.0.0.3", "/", &[]).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(
        get(&proxy, "127.0.0.3", "/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert!(terminate(proxy).success());

    // Without the state, the same address starts afresh: what the test above rules out.
    let proxy = start_proxy("127.0.0.1", up, &["--limit", "ip=5/1h"]);
    assert_eq!(
        get(&proxy, "127.0.0.2", "/", &[]).await.status,
        StatusCode::OK
    );
    drop(proxy);

    // A damaged state file: the proxy says why and starts empty.
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let proxy = start_proxy("127.0.0.1", up, &args);
    assert_eq!(
        get(&proxy, "127.0.0.2", "/", &[]).await.status,
        StatusCode::OK
    );
    drop(proxy);
    assert_eq!(hits(&reached), 5 + 1 + 4 + 1 + 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recent_clock_option_keeps_limits_and_rejects_bad_intervals() {
    let (up, reached) = upstream().await;
    let proxy = start_proxy(
        "127.0.0.1",
        up,
        &["--limit", "ip=3/1h", "--recent-clock", "500us"],
    );
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(get(&proxy, "127.0.0.5", "/", &[]).await.status);
    }
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(ok, 3, "{statuses:?}");
    assert_eq!(hits(&reached), 3);
    for bad in ["0ms", "2s", "1.5ms", "fast"] {
        let err = refused("--recent-clock", bad);
        assert!(err.contains("--recent-clock"), "{err}");
    }
}

/// Runs the proxy with `flag value` on an otherwise good command line, checks that it exits 2
/// at once, and returns what it said.
fn refused(flag: &str, value: &str) -> String {
    let out = Command::new(proxy_binary())
        .args(["--upstream", "http://127.0.0.1:9", "--limit", "ip=1/1s"])
        .args([flag, value])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{flag} {value:?}");
    String::from_utf8(out.stderr).unwrap()
}

/// GET `path` through the proxy from `from`, on a connection of its own: the reply, or why
/// there is none (the proxy closed the connection before answering in full).
async fn try_get(addr: SocketAddr, from: &str, path: &str) -> Result<Reply, String> {
    let client = client_from(Some(from.parse().unwrap()));
    let exchange = async {
        let res = client
            .request(request(addr, path, &[]))
            .await
            .map_err(|e| format!("no response: {e:?}"))?;
        let (parts, body) = res.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("a cut body: {e:?}"))?
            .to_bytes();
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .map_err(|_| "no answer within 20 s".to_string())?
}

/// Waits (at most 10 s) until `n` requests have reached the upstream.
async fn until_reached(reached: &AtomicUsize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while hits(reached) < n {
        assert!(
            Instant::now() < deadline,
            "the request never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits (at most 1 s) until a new connection to `addr` is refused.
async fn until_refused(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match tokio::net::TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return,
            other => assert!(
                Instant::now() < deadline,
                "a new connection after SIGTERM was not refused: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A connection from `from` to `addr` that has sent the first part of a request's head.
async fn half_sent(addr: SocketAddr, from: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream
        .write_all(b"GET /half HTTP/1.1\r\nhost: proxy\r\n")
        .await
        .unwrap();
    stream
}

/// Sends the end of [`half_sent`]'s head and reads what comes back until the proxy closes.
async fn finish_half_sent(mut stream: tokio::net::TcpStream) -> String {
    stream.write_all(b"\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the proxy answers and closes within 10 s")
        .expect("an answer");
    String::from_utf8_lossy(&answer).into_owned()
}

/// SIGTERM with a slow request in flight and another one half received: the listener closes at
/// once, both are answered in full, the proxy exits 0 once they are, and the saved state holds
/// both requests' debts (the half-received one is decided during the drain).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_drains_the_requests_in_flight_then_saves_their_debts() {
    let (up, reached) = upstream().await;
    let (dir, path) = state_file("drain");
    let state = path.to_str().unwrap();
    let args = [
        "--limit",
        "ip=2/1h",
        "--state",
        state,
        "--drain-timeout",
        "8",
    ];

    let mut proxy = start_proxy("127.0.0.1", up, &args);
    // An idle keep-alive connection, which the drain must close rather than wait for.
    let idle = client_from(Some("127.0.0.8".parse().unwrap()));
    let r = send(&idle, request(proxy.addr, "/", &[])).await;
    assert_eq!(r.status, StatusCode::OK);

    let addr = proxy.addr;
    let half = half_sent(addr, "127.0.0.6").await;
    let slow = tokio::spawn(async move { try_get(addr, "127.0.0.7", "/sleep/2000").await });
    until_reached(&reached, 2).await;
    // Time for the proxy to read the half-sent head, so it has a request in progress.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let signalled = Instant::now();
    proxy.terminate();
    until_refused(addr).await;
    assert!(
        !slow.is_finished(),
        "the listener must close while the request is still in flight"
    );
    let answer = finish_half_sent(half).await;
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("upstream"),
        "the half-sent request: {answer:?}"
    );
    let reply = slow
        .await
        .unwrap()
        .expect("the request in flight is answered");
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (StatusCode::OK, "upstream")
    );
    let (status, said) = proxy.wait_exit(Duration::from_secs(30));
    let took = signalled.elapsed();
    assert!(status.success(), "{status}; it said:\n{said}");
    assert!(
        took < Duration::from_secs(8),
        "exited {took:?} after SIGTERM"
    );
    // Three connections open at the signal: the idle one, the half-sent one, the slow one.
    assert!(
        said.contains("proxy: draining 3 connection(s)"),
        "it said:\n{said}"
    );
    assert!(said.contains("proxy: drained"), "it said:\n{said}");
    assert!(
        said.contains(&format!("proxy: state saved to {state}")),
        "it said:\n{said}"
    );

    // 127.0.0.6 and 127.0.0.7 each spent one of their two on a drained request: one more
    // fits, not two.
    let proxy = start_proxy("127.0.0.1", up, &args);
    for from in ["127.0.0.6", "127.0.0.7"] {
        let r = get(&proxy, from, "/", &[]).await;
        assert_eq!(r.status, StatusCode::OK, "{from}");
        assert_eq!(member(&draft_fields(&r).1, "ip").get("r"), 0, "{from}");
        assert_eq!(
            get(&proxy, from, "/", &[]).await.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{from}"
        );
    }
    drop(proxy);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A request slower than the drain is cut when `--drain-timeout` ends (at once for 0) or at a
/// second signal, and the proxy exits 0 then rather than when the upstream answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_timeout_or_a_second_signal_cuts_a_slower_request() {
    let (up, reached) = upstream().await;
    let second = Duration::from_millis(500);
    let cases: [(&str, &[&str], Duration); 3] = [
        ("0", &["INT"], Duration::ZERO),
        ("1", &["TERM"], Duration::from_secs(1)),
        ("30", &["TERM", "INT"], second),
    ];
    for (timeout, signals, waits) in cases {
        let mut proxy = start_proxy(
            "127.0.0.1",
            up,
            &["--limit", "ip=100/1s", "--drain-timeout", timeout],
        );
        let addr = proxy.addr;
        let before = hits(&reached);
        let slow = tokio::spawn(async move { try_get(addr, "127.0.0.9", "/sleep/8000").await });
        until_reached(&reached, before + 1).await;
        let signalled = Instant::now();
        proxy.signal(signals[0]);
        if let Some(again) = signals.get(1) {
            tokio::time::sleep(second).await;
            proxy.signal(again);
        }
        let (status, said) = proxy.wait_exit(Duration::from_secs(30));
        let took = signalled.elapsed();
        let case = format!("--drain-timeout {timeout}, {signals:?}");
        assert!(status.success(), "{case}: {status}; it said:\n{said}");
        assert!(
            took >= waits && took < waits + Duration::from_secs(2),
            "{case}: exited {took:?} after the first signal; it said:\n{said}"
        );
        assert!(said.contains("cutting"), "{case}: it said:\n{said}");
        let cut = slow.await.unwrap();
        assert!(cut.is_err(), "{case}: answered {:?}", cut.map(|r| r.status));
    }
}

#[test]
fn a_bad_drain_timeout_exits_2_and_says_why() {
    for bad in ["", "-1", "+5", "1.5", "10s", "3601", "99999999999999999999"] {
        let err = refused("--drain-timeout", bad);
        assert!(
            err.contains("--drain-timeout") && err.contains("whole seconds"),
            "{err}"
        );
    }
}
