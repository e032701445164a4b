//! An axum app with two policies charged all or nothing: per client address (10 a second, 20
//! at once) and per route template (1,000 a minute for `/users/{id}`, whatever the id).
//!
//! ```sh
//! cargo run -p funnel-tower --features axum --example axum_app            # one burst, then exits
//! cargo run -p funnel-tower --features axum --example axum_app -- --serve 127.0.0.1:3000
//! ```
//!
//! Without `--serve` it listens on a free loopback port, sends itself requests from one
//! address until one is denied (at most 100), prints what came back, and exits: 0 when the
//! burst held at least 20 and the denial was a 429 with `Retry-After`, 1 otherwise.

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use funnel::Quota;
use funnel_tower::{KeyBy, RateLimitLayer};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn user() -> &'static str {
    "hello\n"
}

fn app() -> Result<Router, BoxError> {
    let limits = RateLimitLayer::builder()
        .policy(
            "ip",
            KeyBy::PeerIp { v6_prefix: 64 },
            Quota::per_second(10)?.with_limit(20)?,
        )
        .policy("route", KeyBy::Route, Quota::per_minute(1000)?)
        .build()?;
    // The layer reads the peer address from axum's ConnectInfo, and the route template from
    // its MatchedPath (the crate's `axum` feature).
    Ok(Router::new().route("/users/{id}", get(user)).layer(limits))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let serve = match (args.next().as_deref(), args.next()) {
        (None, _) => None,
        (Some("--serve"), Some(addr)) => Some(addr.parse::<SocketAddr>()?),
        _ => return Err("usage: axum_app [--serve <addr:port>]".into()),
    };
    let listener = TcpListener::bind(serve.unwrap_or(([127, 0, 0, 1], 0).into())).await?;
    let addr = listener.local_addr()?;
    let server = axum::serve(
        listener,
        app()?.into_make_service_with_connect_info::<SocketAddr>(),
    );
    if serve.is_some() {
        eprintln!("axum_app: listening on {addr}; try: curl -i http://{addr}/users/7");
        server.await?;
        return Ok(());
    }
    tokio::spawn(async move { server.await });

    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut allowed = 0;
    for i in 0..100 {
        let uri = format!("http://{addr}/users/{i}");
        let response = client
            .request(Request::get(uri).body(Empty::new())?)
            .await?;
        let status = response.status();
        let header = |name: &str| {
            let value = response.headers().get(name);
            value.and_then(|v| v.to_str().ok()).map(str::to_owned)
        };
        let (policy, state, retry_after) = (
            header("ratelimit-policy"),
            header("ratelimit"),
            header("retry-after"),
        );
        response.into_body().collect().await?;
        if i == 0 || status != StatusCode::OK {
            println!(
                "GET /users/{i}: {status}\n  RateLimit-Policy: {}\n  RateLimit: {}\n  \
                 Retry-After: {}",
                policy.as_deref().unwrap_or("-"),
                state.as_deref().unwrap_or("-"),
                retry_after.as_deref().unwrap_or("-"),
            );
        }
        match status {
            StatusCode::OK => allowed += 1,
            StatusCode::TOO_MANY_REQUESTS if retry_after.is_some() && allowed >= 20 => {
                // 20 at once, and one more for each 100 ms the burst took.
                println!("{allowed} allowed, then denied");
                return Ok(());
            }
            _ => break,
        }
    }
    eprintln!("axum_app: expected at least 20 requests allowed, then a 429 with Retry-After");
    std::process::exit(1);
}
