//! What the deny cache saves under attack: decisions per second and Redis round trips, with
//! and without the cache, one request at a time and with 64 requests in flight (the
//! multiplexed connection pipelines them), for an allowing mix and two abusive mixes.
//!
//! ```sh
//! cargo run --release -p funnel-lab --example attack            # starts its own redis-server
//! cargo run --release -p funnel-lab --example attack -- 200000  # requests per row
//! ```
//!
//! * Allowing: 10,000 keys, each allowed 1,000 per hour, uniformly: nothing is denied.
//! * Abusive 90%: 90% of the requests from 10 abusive keys (limit 10 per hour each, so they
//!   are denied almost always), 10% from legitimate keys that never repeat (so always allowed,
//!   and always a round trip). The cache can skip at most the abusers' requests: its cut is
//!   capped at about 10× (the inverse of the legitimate share the stream draws).
//! * Abusive 99%: the same with 99% of the requests from the abusers (a flood): about 100×.
//!
//! The cut is computed from the raw counts: (round trips without ÷ decisions without) ÷
//! (round trips with ÷ decisions with), nothing rounded before the division.

use std::sync::Arc;
use std::time::{Duration, Instant};

use funnel::Quota;
use funnel_redis::RedisLimiter;
use funnel_testkit::redis_server::RedisServer;

#[derive(Clone, Copy)]
enum Mix {
    Allowing,
    /// Percent of the requests from the abusers.
    Abusive(u64),
}

impl Mix {
    fn label(self) -> String {
        match self {
            Mix::Allowing => "allowing".into(),
            Mix::Abusive(p) => format!("abusive {p}%"),
        }
    }

    fn key(self, i: u64) -> String {
        let x = funnel_testkit::mix(i);
        match self {
            Mix::Allowing => format!("user:{}", (x >> 8) % 10_000),
            Mix::Abusive(p) if x % 100 < p => format!("abuser:{}", (x >> 8) % 10),
            // Never repeats within a run: splitmix64 is a bijection.
            Mix::Abusive(_) => format!("user:{x}"),
        }
    }

    fn quota(self) -> Quota {
        match self {
            Mix::Allowing => Quota::per_hour(1000),
            Mix::Abusive(_) => Quota::per_hour(10),
        }
        .expect("a valid quota")
    }
}

/// One row's raw counts.
struct Counts {
    decisions: u64,
    round_trips: u64,
    allowed: u64,
    secs: f64,
}

async fn row(
    server: &RedisServer,
    mix: Mix,
    in_flight: usize,
    cache: bool,
    requests: usize,
) -> Counts {
    let limiter = Arc::new(
        RedisLimiter::builder(server.url(), mix.quota())
            .prefix(format!("attack:{}:{in_flight}:{cache}:", mix.label()))
            .timeout(Duration::from_secs(2))
            .deny_cache(if cache { 100_000 } else { 0 })
            .build()
            .await
            .expect("limiter"),
    );
    // Load the script before the clock starts, so every row pays the same.
    limiter.check_n("warm-up", 0).await.expect("a decision");
    let before = limiter.stats();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..in_flight {
        let limiter = limiter.clone();
        tasks.push(tokio::spawn(async move {
            let mut allowed = 0u64;
            for i in (t..requests).step_by(in_flight) {
                let c = limiter.check(&mix.key(i as u64)).await.expect("a decision");
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
    let after = limiter.stats();
    Counts {
        decisions: requests as u64,
        round_trips: after.round_trips - before.round_trips,
        allowed,
        secs,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let requests: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50_000);
    let server = RedisServer::start().expect("redis-server");
    println!(
        "Redis {} on 127.0.0.1:{}, {requests} requests a row\n",
        server.version(),
        server.port()
    );
    println!(
        "{:<12} {:<6} {:>9} {:>12} {:>12} {:>14} {:>9}",
        "mix", "cache", "in flight", "decisions/s", "round trips", "trips/decision", "allowed"
    );
    let mut cuts = Vec::new();
    for mix in [Mix::Allowing, Mix::Abusive(90), Mix::Abusive(99)] {
        for in_flight in [1usize, 64] {
            let mut pair = Vec::new();
            for cache in [false, true] {
                let c = row(&server, mix, in_flight, cache, requests).await;
                println!(
                    "{:<12} {:<6} {:>9} {:>12.0} {:>12} {:>14.4} {:>9}",
                    mix.label(),
                    if cache { "on" } else { "off" },
                    in_flight,
                    c.decisions as f64 / c.secs,
                    c.round_trips,
                    c.round_trips as f64 / c.decisions as f64,
                    c.allowed
                );
                pair.push(c);
            }
            cuts.push((mix, in_flight, pair));
        }
    }
    println!(
        "\n{:<12} {:>9} {:>18} {:>16}",
        "mix", "in flight", "fewer round trips", "decisions/s ×"
    );
    for (mix, in_flight, pair) in cuts {
        let (off, on) = (&pair[0], &pair[1]);
        // (trips_off / decisions_off) / (trips_on / decisions_on), from the raw counts.
        let cut = (u128::from(off.round_trips) * u128::from(on.decisions)) as f64
            / (u128::from(on.round_trips) * u128::from(off.decisions)).max(1) as f64;
        let speed = (on.decisions as f64 / on.secs) / (off.decisions as f64 / off.secs);
        println!(
            "{:<12} {:>9} {:>17.2}× {:>15.2}×",
            mix.label(),
            in_flight,
            cut,
            speed
        );
    }
}
