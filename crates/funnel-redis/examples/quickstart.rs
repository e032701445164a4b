//! One limit shared by a fleet through Redis, and what answers when Redis cannot.
//!
//! ```sh
//! redis-server --port 6379 --save '' &        # or any Redis you have
//! cargo run -p funnel-redis --example quickstart
//! REDIS_URL=redis://10.0.0.5:6379/ cargo run -p funnel-redis --example quickstart
//! ```
//!
//! First, a limiter on the Redis at `REDIS_URL` (default `redis://127.0.0.1:6379/`): five
//! requests a minute per key, the deny cache answering a denied key without a round trip.
//! Then the same limiter pointed at an address where no Redis listens, under the
//! [`OnFailure::Local`] policy: each instance of a fleet of four keeps a quarter of the limit on
//! a local funnel until Redis is back. Exits 1 when Redis at `REDIS_URL` did not decide.

use std::time::Duration;

use funnel::Quota;
use funnel_redis::{Checked, OnFailure, RedisLimiter, Source};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn show(request: usize, checked: &Checked) {
    let d = &checked.decision;
    println!(
        "  request {request}: {:<7} remaining {}, retry after {}, from {:?}{}",
        if d.is_allowed() { "allowed" } else { "denied" },
        d.remaining(),
        d.retry_after()
            .map_or("-".into(), |t| format!("{:.1} s", t.as_secs_f64())),
        checked.source,
        checked
            .failure
            .map(|f| format!(" (Redis could not decide: {f})"))
            .unwrap_or_default(),
    );
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let quota = Quota::per_minute(5)?;
    // A prefix of its own, so that another run's keys do not count.
    let prefix = format!("funnel-quickstart:{}:", std::process::id());
    let fleet = |url: &str| {
        RedisLimiter::builder(url, quota)
            .prefix(prefix.clone())
            .deny_cache(10_000)
            .on_failure(OnFailure::Local { instances: 4 })
            .timeout(Duration::from_millis(50))
            .connect_timeout(Duration::from_millis(500))
            .build()
    };

    println!("Redis at {url}, 5 a minute per key:");
    let limiter = fleet(&url).await?;
    let mut redis_decided = false;
    for request in 1..=7 {
        let checked = limiter.check("client-42").await?;
        redis_decided |= matches!(checked.source, Source::Redis);
        show(request, &checked);
    }
    let stats = limiter.stats();
    println!(
        "  {} round trips to Redis, {} denials from the deny cache",
        stats.round_trips, stats.cache_denials
    );

    // Port 1 on loopback: nothing listens, so every request fails to connect and the policy
    // answers, at once. build() succeeds anyway: the limiter keeps trying in the background.
    let down = "redis://127.0.0.1:1/";
    println!("Redis down ({down}), OnFailure::Local {{ instances: 4 }}:");
    let limiter = fleet(down).await?;
    for request in 1..=3 {
        show(request, &limiter.check("client-42").await?);
    }

    if !redis_decided {
        eprintln!("quickstart: no Redis decided at {url}: start one, or set REDIS_URL");
        std::process::exit(1);
    }
    Ok(())
}
