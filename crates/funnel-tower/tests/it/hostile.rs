//! Hostile requests through the example proxy, started as a process in front of an upstream
//! on loopback and spoken to over raw TCP, so nothing between the test and the proxy cleans
//! up what is sent: forwarding headers forged by peers that are not trusted proxies, huge and
//! malformed heads, percent-encoded and dot-segment paths. Every request gets an answer that
//! is not a 5xx, and no request picks a key its sender was not given.
//!
//! Loopback has a whole /8: the tests connect from 127.0.0.1 (a client), 127.0.0.2 (the one
//! trusted proxy, `--trust 127.0.0.2`) and 127.0.0.3 (another client).

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::proxy::{start_proxy, upstream, Proxy};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Sends `head` (and nothing else) from the loopback address `from` on a fresh connection and
/// returns the status of the answer, or `None` when the connection closed without one.
async fn raw(proxy: &Proxy, from: &str, head: &[u8]) -> Option<u16> {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(from.parse().unwrap(), 0))
        .unwrap();
    let mut stream = socket.connect(proxy.addr).await.unwrap();
    // The proxy may answer and close before it has read everything (a head too large): a
    // failed write is not the test's concern, the answer is.
    let _ = stream.write_all(head).await;
    let mut reply = Vec::new();
    let first = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut reply)).await;
    if first.is_err() {
        // Still waiting for more (a body shorter than its length): end what we send.
        let _ = stream.shutdown().await;
        let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut reply))
            .await
            .expect("an answer or a close within 20 s of the end of the request");
    }
    let line = reply.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let code = line.strip_prefix("HTTP/1.")?.get(2..5)?;
    Some(code.parse().expect("a status code"))
}

/// A GET of `path` with `headers` (raw bytes, each `name: value`).
fn get(path: &str, headers: &[&[u8]]) -> Vec<u8> {
    let mut head =
        format!("GET {path} HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\n").into_bytes();
    for h in headers {
        head.extend_from_slice(h);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

fn header(name: &str, value: &[u8]) -> Vec<u8> {
    [name.as_bytes(), b": ", value].concat()
}

/// Forwarding headers a client may forge: addresses in every form, lists, lines, garbage.
fn forgeries() -> Vec<Vec<Vec<u8>>> {
    let mut f: Vec<Vec<Vec<u8>>> = Vec::new();
    for xff in [
        &b"203.0.113.1"[..],
        b"127.0.0.3",
        b"127.0.0.2",
        b"203.0.113.1, 127.0.0.2",
        b"127.0.0.2, 127.0.0.2, 203.0.113.9",
        b"2001:db8::1",
        b"[2001:db8::1]:80",
        b"fe80::1%eth0",
        b"::ffff:203.0.113.1",
        b"unknown",
        b"\xff\xfe\xfd",
        b"203.0.113.1\t,\t203.0.113.2",
        b",,,,,,",
    ] {
        f.push(vec![header("x-forwarded-for", xff)]);
        f.push(vec![header("forwarded", &[b"for=", xff].concat())]);
    }
    for fwd in [
        &b"for=\"[2001:db8::7]:4711\";proto=https"[..],
        b"for=203.0.113.1;by=127.0.0.2, for=127.0.0.2",
        b"For=\"203.0.113.5:_hidden\"",
        b"for=_hidden",
        b"proto=http;host=\"a,b\";for=203.0.113.6",
    ] {
        f.push(vec![header("forwarded", fwd)]);
    }
    // Many lines, both headers at once, and kilobytes of entries.
    f.push(
        (0..50)
            .map(|i| header("x-forwarded-for", format!("203.0.113.{i}").as_bytes()))
            .collect(),
    );
    f.push(vec![
        header("x-forwarded-for", b"203.0.113.7"),
        header("forwarded", b"for=203.0.113.8"),
        header("x-real-ip", b"203.0.113.9"),
    ]);
    let long = vec!["203.0.113.10"; 3_000].join(", ");
    f.push(vec![header("x-forwarded-for", long.as_bytes())]);
    f.push(vec![header("forwarded", format!("for={long}").as_bytes())]);
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_forwarding_headers_from_untrusted_peers_never_pick_a_key() {
    let up = upstream().await.0;
    for key in ["client", "client-forwarded"] {
        let limit = format!("{key}=1/1h");
        let proxy = start_proxy(
            "127.0.0.1",
            up,
            &["--trust", "127.0.0.2", "--limit", &limit],
        );
        // 127.0.0.1 is not trusted: its one request of the hour, then whatever it forges, it
        // is itself.
        assert_eq!(raw(&proxy, "127.0.0.1", &get("/", &[])).await, Some(200));
        for forged in forgeries() {
            let headers: Vec<&[u8]> = forged.iter().map(Vec::as_slice).collect();
            let status = raw(&proxy, "127.0.0.1", &get("/", &headers)).await;
            assert_eq!(
                status,
                Some(429),
                "{key}: {:?} from an untrusted peer",
                String::from_utf8_lossy(&headers.concat())
            );
        }
        // Another untrusted peer naming the first one is itself too: it has its own request.
        let spoof = header("x-forwarded-for", b"127.0.0.1");
        assert_eq!(
            raw(&proxy, "127.0.0.3", &get("/", &[&spoof])).await,
            Some(200)
        );

        // From the trusted proxy, the header it writes is read (so the 429s above came from the
        // peer's key, not from a header never being read): its entry, right-most, is the key,
        // and what the client wrote left of it is not.
        let (entry, other) = if key == "client" {
            (
                header("x-forwarded-for", b"203.0.113.50"),
                header("x-forwarded-for", b"198.51.100.1, 203.0.113.50"),
            )
        } else {
            (
                header("forwarded", b"for=203.0.113.50"),
                header("forwarded", b"for=198.51.100.1, for=203.0.113.50"),
            )
        };
        assert_eq!(
            raw(&proxy, "127.0.0.2", &get("/", &[&entry])).await,
            Some(200)
        );
        assert_eq!(
            raw(&proxy, "127.0.0.2", &get("/", &[&other])).await,
            Some(429)
        );
        let next = header(
            if key == "client" {
                "x-forwarded-for"
            } else {
                "forwarded"
            },
            if key == "client" {
                b"203.0.113.51"
            } else {
                b"for=203.0.113.51"
            },
        );
        assert_eq!(
            raw(&proxy, "127.0.0.2", &get("/", &[&next])).await,
            Some(200)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_malformed_heads_get_a_4xx_or_pass_never_a_5xx() {
    let up = upstream().await.0;
    let proxy = start_proxy(
        "127.0.0.1",
        up,
        &[
            "--trust",
            "127.0.0.2",
            "--limit",
            "client=100000/1s",
            "--limit",
            "header:x-api-key=100000/1s",
            "--limit",
            "route=100000/1s",
        ],
    );
    let big = |n: usize| "203.0.113.1, ".repeat(n / 13 + 1).into_bytes();
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("8 KiB XFF", get("/", &[&header("x-forwarded-for", &big(8 << 10))])),
        ("64 KiB XFF", get("/", &[&header("x-forwarded-for", &big(64 << 10))])),
        ("1 MiB XFF", get("/", &[&header("x-forwarded-for", &big(1 << 20))])),
        ("64 KiB Forwarded", get("/", &[&header("forwarded", &[b"for=".as_slice(), &big(64 << 10)].concat())])),
        ("64 KiB API key", get("/", &[&header("x-api-key", &vec![b'k'; 64 << 10])])),
        ("64 KiB of commas", get("/", &[&header("x-forwarded-for", &vec![b','; 64 << 10])])),
        ("non-UTF-8 XFF", get("/", &[&header("x-forwarded-for", b"\xff\xfe, 203.0.113.1, \x80")])),
        ("non-UTF-8 Forwarded", get("/", &[&header("forwarded", b"for=\"\xff\"")])),
        ("non-UTF-8 API key", get("/", &[&header("x-api-key", b"\xff\x80key")])),
        ("obs-fold", b"GET / HTTP/1.1\r\nhost: p\r\nx-forwarded-for: 203.0.113.1,\r\n 203.0.113.2\r\nconnection: close\r\n\r\n".to_vec()),
        ("header without a colon", get("/", &[b"x-forwarded-for 203.0.113.1"])),
        ("NUL in a value", get("/", &[b"x-forwarded-for: 203.0.113.1\x00"])),
        ("DEL in a value", get("/", &[b"x-api-key: a\x7fb"])),
        ("space in a name", get("/", &[b"x forwarded for: 203.0.113.1"])),
        ("space before the colon", get("/", &[b"x-forwarded-for : 203.0.113.1"])),
        ("bare CR", get("/", &[b"x-forwarded-for: 203.0.113.1\r203.0.113.2"])),
        ("1,000 header lines", get("/", &(0..1000).map(|_| b"x-forwarded-for: 203.0.113.1".as_slice()).collect::<Vec<_>>())),
        ("a 100 KiB path", get(&format!("/{}", "a".repeat(100 << 10)), &[])),
        ("a request line of garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec()),
        ("no version", b"GET /\r\n\r\n".to_vec()),
        ("HTTP/1.0 without a host", b"GET / HTTP/1.0\r\n\r\n".to_vec()),
        ("HTTP/2 preface on HTTP/1", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec()),
        ("absolute form", b"GET http://elsewhere.example/x HTTP/1.1\r\nhost: p\r\nconnection: close\r\n\r\n".to_vec()),
        ("asterisk form", b"OPTIONS * HTTP/1.1\r\nhost: p\r\nconnection: close\r\n\r\n".to_vec()),
        ("asterisk form, GET", b"GET * HTTP/1.1\r\nhost: p\r\nconnection: close\r\n\r\n".to_vec()),
        ("authority form", b"CONNECT upstream.example:443 HTTP/1.1\r\nhost: p\r\nconnection: close\r\n\r\n".to_vec()),
        ("content-length and chunked", b"POST / HTTP/1.1\r\nhost: p\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n0\r\n\r\n".to_vec()),
        ("two content-lengths", b"POST / HTTP/1.1\r\nhost: p\r\ncontent-length: 3\r\ncontent-length: 4\r\nconnection: close\r\n\r\nabcd".to_vec()),
        ("a body shorter than its length", b"POST / HTTP/1.1\r\nhost: p\r\ncontent-length: 100\r\nconnection: close\r\n\r\nabc".to_vec()),
    ];
    // A trusted proxy's headers are read: the same cases from it.
    let mut statuses = Vec::new();
    for (name, head) in cases.drain(..) {
        for from in ["127.0.0.1", "127.0.0.2"] {
            let status = raw(&proxy, from, &head).await;
            statuses.push((name, from, status));
        }
    }
    for (name, from, status) in &statuses {
        eprintln!("{name:>32} from {from}: {status:?}");
    }
    // hyper's HTTP/1 server closes a connection that opens with the HTTP/2 preface without
    // an answer (an HTTP/1 answer would mean nothing to an HTTP/2 client): that one only.
    let bad: Vec<_> = statuses
        .iter()
        .filter(|(name, _, s)| match s {
            Some(s) => *s >= 500,
            None => !name.starts_with("HTTP/2 preface"),
        })
        .collect();
    assert!(
        bad.is_empty(),
        "a 5xx or no answer: {bad:#?}\nall: {statuses:#?}"
    );
    // The proxy is still serving.
    assert_eq!(raw(&proxy, "127.0.0.1", &get("/", &[])).await, Some(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_and_dot_segment_paths_neither_escape_the_limit_nor_pick_a_key() {
    let up = upstream().await.0;
    let proxy = start_proxy(
        "127.0.0.1",
        up,
        &["--limit", "ip=1/1h", "--exempt-path", "/health"],
    );
    assert_eq!(raw(&proxy, "127.0.0.1", &get("/x", &[])).await, Some(200));
    // Exempt: under /health by whole segments.
    for path in [
        "/health",
        "/health/",
        "/health/db",
        "/health/v1.2/...",
        "/health?x=/../a",
    ] {
        assert_eq!(
            raw(&proxy, "127.0.0.1", &get(path, &[])).await,
            Some(200),
            "{path}"
        );
    }
    // Limited: anything an upstream may read as another path, and any other spelling of the
    // path; the key (the peer) is the same whatever the path.
    for path in [
        "/healthz",
        "/%68ealth",
        "/HEALTH",
        "/health/../x",
        "/health/./../x",
        "/health/%2e%2e/x",
        "/health/%2E%2e/x",
        "/health/.%2e/x",
        "/health/..;/x",
        "/health/..;jsessionid=1/x",
        "/health/%2e%2e%3b/x",
        "/health%2f..%2fx",
        "/health%2F..%2Fx",
        "/health/..%5cx",
        "/health/..\\x",
        "//health/../x",
        "/x",
        "/%78",
        "/x%00",
        "/%ff%fe",
        "/%zz",
        "/%",
        "/x/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    ] {
        let status = raw(&proxy, "127.0.0.1", &get(path, &[])).await;
        assert!(
            matches!(status, Some(s) if (400..500).contains(&s)),
            "{path}: {status:?}"
        );
    }
}
