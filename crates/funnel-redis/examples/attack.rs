//! What the deny cache saves under attack: decisions per second and Redis round trips per
//! decision, with and without the cache, one request at a time and with 64 requests in flight
//! (the multiplexed connection pipelines them), for an allowing mix and an abusive mix.
//!
//! ```sh
//! cargo run --release -p funnel-redis --example attack            # starts its own redis-server
//! cargo run --release -p funnel-redis --example attack -- 200000  # requests per row
//! ```
//!
//! * Allowing mix: 10,000 keys, each allowed 1,000 per hour, uniformly: nothing is denied.
//! * Abusive mix: 90% of the requests from 10 abusive keys (limit 10 per hour each, so they are
//!   denied almost always), 10% from 10,000 legitimate keys.

use std::sync::Arc;
use std::time::{Duration, Instant};

use funnel::Quota;
use funnel_redis::RedisLimiter;

#[path = "../tests/support/server.rs"]
mod server;

fn keys(abusive: bool, n: usize) -> Vec<String> {
    (0..n as u64)
        .map(|i| {
            let x = funnel_testkit::mix(i);
            if abusive && x % 10 != 0 {
                format!("abuser:{}", (x >> 4) % 10)
            } else {
                format!("user:{}", (x >> 8) % 10_000)
            }
        })
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let requests: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50_000);
    let server = server::Server::start();
    println!(
        "{:<9} {:<6} {:>9} {:>14} {:>22} {:>10}",
        "mix", "cache", "in flight", "decisions/s", "round trips/decision", "allowed"
    );
    for abusive in [false, true] {
        let quota = if abusive {
            Quota::new(9, 10, Duration::from_secs(3600)).unwrap()
        } else {
            Quota::new(999, 1000, Duration::from_secs(3600)).unwrap()
        };
        let stream = Arc::new(keys(abusive, requests));
        for in_flight in [1usize, 64] {
            for cache in [false, true] {
                let prefix = format!("attack:{abusive}:{in_flight}:{cache}:");
                let limiter = Arc::new(
                    RedisLimiter::builder(server.url(), quota)
                        .prefix(prefix)
                        .timeout(Duration::from_secs(2))
                        .deny_cache(if cache { 100_000 } else { 0 })
                        .build()
                        .await
                        .expect("limiter"),
                );
                let started = Instant::now();
                let mut tasks = Vec::new();
                for t in 0..in_flight {
                    let (limiter, stream) = (limiter.clone(), stream.clone());
                    tasks.push(tokio::spawn(async move {
                        let mut allowed = 0u64;
                        for key in stream.iter().skip(t).step_by(in_flight) {
                            let c = limiter.check(key).await.expect("a decision");
                            allowed += u64::from(c.decision.is_allowed());
                        }
                        allowed
                    }));
                }
                let mut allowed = 0;
                for t in tasks {
                    allowed += t.await.expect("task");
                }
                let secs = started.elapsed().as_secs_f64();
                let stats = limiter.stats();
                println!(
                    "{:<9} {:<6} {:>9} {:>14.0} {:>22.3} {:>10}",
                    if abusive { "abusive" } else { "allowing" },
                    if cache { "on" } else { "off" },
                    in_flight,
                    requests as f64 / secs,
                    stats.round_trips as f64 / requests as f64,
                    allowed
                );
            }
        }
    }
}
