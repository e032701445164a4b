//! What the Redis tests share: the test kit's `redis-server` launcher, a limiter with a
//! generous timeout, and a fake server that answers every request with one chosen error reply
//! (for the replies a real server is hard to bring into: `LOADING`, `BUSY`, ...).

#![allow(dead_code)] // each test file uses part of this

use std::time::Duration;

use funnel::Quota;
use funnel_redis::RedisLimiter;
#[allow(unused_imports)] // each test file uses part of this
pub use funnel_testkit::redis_server::{RedisCluster, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A timeout no healthy loopback round trip comes near, for the tests that are not about
/// timeouts.
pub const GENEROUS: Duration = Duration::from_secs(2);

/// A private server; the tests fail (never skip) without `redis-server`.
pub fn server() -> RedisServer {
    RedisServer::start().expect("redis-server (installed by .ci/run)")
}

pub async fn limiter(server: &RedisServer, quota: Quota) -> RedisLimiter {
    RedisLimiter::builder(server.url(), quota)
        .timeout(GENEROUS)
        .build()
        .await
        .expect("limiter")
}

/// A blocking connection for the tests' own inspection.
pub fn inspect(server: &RedisServer) -> redis::Connection {
    server.connection().expect("a connection")
}

/// A fake Redis on a loopback port: `CLIENT ...` (the client's handshake) gets `+OK`, `PING`
/// `+PONG`, every other command the error line `reply` (say `LOADING Redis is loading`).
/// Returns its URL; it lives as long as the runtime.
pub async fn fake_server(reply: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(read) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if read == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..read]);
                    let mut out = Vec::new();
                    while let Some((name, used)) = parse_command(&buf) {
                        buf.drain(..used);
                        let line = match name.to_ascii_uppercase().as_str() {
                            "CLIENT" => "+OK".to_string(),
                            "PING" => "+PONG".to_string(),
                            _ => format!("-{reply}"),
                        };
                        out.extend_from_slice(line.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                    if socket.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// One RESP command (an array of bulk strings) at the start of `buf`: its name and length.
fn parse_command(buf: &[u8]) -> Option<(String, usize)> {
    let line = |at: usize| -> Option<(&[u8], usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((&buf[at..end], end + 2))
    };
    let (head, mut at) = line(0)?;
    let count: usize = std::str::from_utf8(head.strip_prefix(b"*")?)
        .ok()?
        .parse()
        .ok()?;
    let mut name = String::new();
    for i in 0..count {
        let (len, next) = line(at)?;
        let len: usize = std::str::from_utf8(len.strip_prefix(b"$")?)
            .ok()?
            .parse()
            .ok()?;
        if buf.len() < next + len + 2 {
            return None;
        }
        if i == 0 {
            name = String::from_utf8_lossy(&buf[next..next + len]).into_owned();
        }
        at = next + len + 2;
    }
    Some((name, at))
}
