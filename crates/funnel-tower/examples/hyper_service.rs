//! funnel's layer around a plain tower service, served by hyper 1 without a framework: the
//! server inserts each connection's [`PeerAddr`] into the requests, which the `ip` policy keys
//! on. Requests cost by weight: a `POST` takes 5 units, anything else 1.
//!
//! ```sh
//! cargo run -p funnel-tower --example hyper_service            # a few requests, then exits
//! cargo run -p funnel-tower --example hyper_service -- --serve 127.0.0.1:3000
//! ```
//!
//! Without `--serve` it listens on a free loopback port, sends itself two `POST`s and a burst
//! of `GET`s, prints what came back, and exits: 0 when the limit held, 1 otherwise.

use std::convert::Infallible;
use std::future::Ready;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use bytes::Bytes;
use funnel::Quota;
use funnel_tower::{KeyBy, PeerAddr, RateLimitLayer};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower_layer::Layer;
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The application: a tower service that answers every request with "hello".
#[derive(Clone)]
struct Hello;

impl<B> Service<Request<B>> for Hello {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        std::future::ready(Ok(Response::new(Full::from("hello\n"))))
    }
}

/// Serves `listener` forever: one task per connection, the limited service cloned per request.
async fn serve(listener: TcpListener, layer: RateLimitLayer) {
    let limited = layer.layer(Hello);
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let limited = limited.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(PeerAddr(peer));
                let mut limited = limited.clone();
                async move { limited.call(req).await }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let serve_at = match (args.next().as_deref(), args.next()) {
        (None, _) => None,
        (Some("--serve"), Some(addr)) => Some(addr.parse::<SocketAddr>()?),
        _ => return Err("usage: hyper_service [--serve <addr:port>]".into()),
    };
    // 120 units an hour per client address (one back every 30 s), 10 at once.
    let layer = RateLimitLayer::builder()
        .policy(
            "ip",
            KeyBy::PeerIp { v6_prefix: 64 },
            Quota::per_hour(120)?.with_limit(10)?,
        )
        .cost(|parts| if parts.method == Method::POST { 5 } else { 1 })
        .build()?;
    let listener = TcpListener::bind(serve_at.unwrap_or(([127, 0, 0, 1], 0).into())).await?;
    let addr = listener.local_addr()?;
    if serve_at.is_some() {
        eprintln!("hyper_service: listening on {addr}; try: curl -i http://{addr}/");
        serve(listener, layer).await;
        return Ok(());
    }
    tokio::spawn(serve(listener, layer));

    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut statuses = Vec::new();
    for method in [Method::POST, Method::POST, Method::GET, Method::GET] {
        let request = Request::builder()
            .method(method.clone())
            .uri(format!("http://{addr}/"))
            .body(Empty::new())?;
        let response = client.request(request).await?;
        let status = response.status();
        let remaining = response
            .headers()
            .get("ratelimit")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned();
        response.into_body().collect().await?;
        println!("{method} /: {status}  RateLimit: {remaining}");
        statuses.push(status);
    }
    // Two POSTs spend the 10 units; the GETs find none left (one unit comes back every 30 s).
    let expected = [
        StatusCode::OK,
        StatusCode::OK,
        StatusCode::TOO_MANY_REQUESTS,
        StatusCode::TOO_MANY_REQUESTS,
    ];
    if statuses != expected {
        eprintln!("hyper_service: expected {expected:?}");
        std::process::exit(1);
    }
    Ok(())
}
