//! TCP_NODELAY on accepted connections: responses leave as soon as they are written.
//!
//! Without it, when two responses of one HTTP/2 connection are written one after the other
//! (two calls in flight), Nagle's algorithm holds the second until the client acknowledges
//! the first, and a client that has nothing to send delays its acknowledgement by its
//! delayed-ACK timer (40 ms at least on Linux): the second call stalls that long.

use std::time::{Duration, Instant};

use crate::common::*;

/// Below the shortest delayed-ACK timer, with room for a loaded machine.
const STALL: Duration = Duration::from_millis(35);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_in_flight_do_not_wait_for_a_delayed_ack() {
    let dir = scratch("nodelay");
    let s = Server::start(
        &write_config(
            &dir,
            "d.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n",
        ),
        &["--no-watch"],
    );
    let client = s.client().await;
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
