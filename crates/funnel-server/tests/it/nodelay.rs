//! TCP_NODELAY on accepted connections, in plain text and under TLS: responses leave as soon
//! as they are written.
//!
//! Without it, when two responses of one HTTP/2 connection are written one after the other
//! (two calls in flight), Nagle's algorithm holds the second until the client acknowledges
//! the first, and a client that has nothing to send delays its acknowledgement by its
//! delayed-ACK timer (40 ms at least on Linux): the second call stalls that long.

use std::time::{Duration, Instant};

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::common::proto::rate_limit_service_client::RateLimitServiceClient;
use crate::common::*;

/// Below the shortest delayed-ACK timer, with room for a loaded machine.
const STALL: Duration = Duration::from_millis(35);

const YAML: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_in_flight_do_not_wait_for_a_delayed_ack() {
    let dir = scratch("nodelay");
    let s = Server::start(&write_config(&dir, "d.yaml", YAML), &["--no-watch"]);
    no_stall(s.client().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_too() {
    let dir = scratch("nodelay-tls");
    let Some(ca) = funnel_testkit::certificates::Authority::new(&dir, "ca") else {
        return;
    };
    let server = ca.server("server", &["IP:127.0.0.1"]);
    let (cert, key) = (server.cert.to_string_lossy(), server.key.to_string_lossy());
    let s = Server::start(
        &write_config(&dir, "d.yaml", YAML),
        &[
            "--no-watch",
            "--grpc-tls",
            "--grpc-tls-cert",
            &cert,
            "--grpc-tls-key",
            &key,
        ],
    );
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca.cert()).unwrap()));
    let channel = Endpoint::from_shared(format!("https://{}", s.grpc))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    no_stall(RateLimitServiceClient::new(channel)).await;
}

/// Two calls at a time on `client`'s one connection, round after round: the median round
/// stays below a delayed acknowledgement.
async fn no_stall(client: RateLimitServiceClient<Channel>) {
    let one = |i: usize| {
        let mut c = client.clone();
        async move {
            call(&mut c, req("d", vec![desc(&[("k", &format!("v{i}"))])])).await;
        }
    };
    one(0).await;
    let mut rounds = Vec::new();
    for i in 0..60 {
        let start = Instant::now();
        tokio::join!(one(2 * i), one(2 * i + 1));
        rounds.push(start.elapsed());
    }
    rounds.sort();
    // The median: one slow round on a loaded machine is not a stall; rounds stalled by the
    // delayed acknowledgement are the rule without TCP_NODELAY.
    let median = rounds[rounds.len() / 2];
    assert!(
        median < STALL,
        "two calls in flight took {median:?} (median round; slowest {:?})",
        rounds.last()
    );
}
