//! TCP_NODELAY on accepted connections: the first call on a fresh gRPC connection answers
//! without waiting for the client's delayed acknowledgement.
//!
//! Without it, the server's second small write of a new connection (the HTTP/2 settings
//! acknowledgement and the response, after its own settings) waits under Nagle's algorithm for
//! the client to acknowledge the first, which a client delays by its delayed-ACK timer (40 ms
//! at least on Linux): every first call then takes that long.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Below the shortest delayed-ACK timer, with room for a loaded machine.
const STALL: Duration = Duration::from_millis(35);

#[tokio::test]
async fn first_calls_on_fresh_connections_do_not_stall() {
    let dir = scratch("nodelay");
    let s = Server::start(
        &write_config(
            &dir,
            "d.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n",
        ),
        &["--no-watch"],
    );
    // One connection first, so that the process and the runtime are warm.
    let mut warm = s.client().await;
    call(&mut warm, req("d", vec![desc(&[("k", "v")])])).await;

    let mut firsts = Vec::new();
    for i in 0..9 {
        let start = Instant::now();
        let mut c = s.client().await;
        let r = call(&mut c, req("d", vec![desc(&[("k", &format!("v{i}"))])])).await;
        firsts.push(start.elapsed());
        assert_eq!(r.overall_code, OK);
    }
    firsts.sort();
    // The median: one slow call on a loaded machine is not a stall, every call slow is.
    let median = firsts[firsts.len() / 2];
    assert!(
        median < STALL,
        "the first call of a fresh connection took {median:?} (median of {firsts:?})"
    );
}
