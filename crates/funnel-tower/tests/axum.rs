//! The layer on an axum router, served by `axum::serve` with connect info: the README's usage.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use funnel::Quota;
use funnel_tower::{KeyBy, PeerAddr, RateLimitLayer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_limits_an_axum_router() {
    let limits = RateLimitLayer::builder()
        .policy(
            "ip",
            KeyBy::PeerIp { v6_prefix: 64 },
            Quota::new(2, 1, Duration::from_secs(60)).unwrap(),
        )
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(limits.clone())
        // axum's ConnectInfo, handed to the layer as a PeerAddr (runs before the limiter).
        .layer(axum::middleware::map_request(
            |ConnectInfo(addr): ConnectInfo<SocketAddr>, mut req: axum::extract::Request| async move {
                req.extensions_mut().insert(PeerAddr(addr));
                req
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let mut stream =
            tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
                .await
                .unwrap()
                .unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut reply = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut reply))
            .await
            .unwrap()
            .unwrap();
        statuses.push(reply[9..12].to_string());
        if reply.starts_with("HTTP/1.1 200") {
            assert!(
                reply.to_ascii_lowercase().contains("ratelimit: \"ip\";r="),
                "{reply}"
            );
        }
    }
    assert_eq!(statuses, ["200", "200", "200", "429"]);
    assert_eq!(limits.stats("ip").unwrap().denied, 1);
}
