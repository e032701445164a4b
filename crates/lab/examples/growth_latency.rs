//! The latency of single requests while a table grows: one thread creates `keys` new keys (each
//! stays in debt for an hour) in a table started at 1,024 slots that may grow to 1.25x the keys,
//! timing every request, and prints the percentiles, the slowest request and the table's counters.
//!
//! ```sh
//! cargo run --release -p funnel-lab --example growth_latency -- [keys, default 10000000]
//! GROWTH_HUGE=1 cargo run --release -p funnel-lab --example growth_latency   # with Builder::huge_pages(true)
//! ```
//!
//! Each request is timed with two `Instant::now()` reads, which add their own cost to every
//! figure (the lab's `floors -- clock` measures it); the percentiles mean something only on an
//! idle machine. Requests slower than a millisecond are listed as they happen.

use funnel::{Limiter, Quota};
use std::time::Instant;

fn main() -> Result<(), funnel::Error> {
    let keys: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000)
        .max(1);
    let huge = std::env::var("GROWTH_HUGE").is_ok_and(|v| v == "1");
    let limiter = Limiter::<u64>::builder(Quota::per_hour(1)?)
        .capacity(1024)
        .max_capacity((keys / 4 * 5).max(1024))
        .huge_pages(huge)
        .build()?;
    let now = limiter.now();
    let mut took = Vec::with_capacity(keys);
    let started = Instant::now();
    let mut allowed = 0u64;
    for i in 0..keys as u64 {
        // Spread over the key space, as client addresses would be.
        let key = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let t = Instant::now();
        allowed += u64::from(limiter.check_at(&key, now).is_allowed());
        let ns = t.elapsed().as_nanos() as u64;
        if ns > 1_000_000 {
            println!(
                "request {i} took {:.2} ms (table of {} slots)",
                ns as f64 / 1e6,
                limiter.capacity()
            );
        }
        took.push(ns);
    }
    let total = started.elapsed();
    took.sort_unstable();
    let at = |p: f64| took[((took.len() - 1) as f64 * p) as usize];
    println!(
        "{keys} new keys, {allowed} allowed, huge pages {huge}: {:.2} s; a request's latency \
         p50 {} ns, p99 {} ns, p99.9 {} ns, p99.99 {} ns, p99.999 {} ns, max {} ns",
        total.as_secs_f64(),
        at(0.5),
        at(0.99),
        at(0.999),
        at(0.9999),
        at(0.99999),
        took[took.len() - 1],
    );
    println!("{} slots, {:?}", limiter.capacity(), limiter.stats());
    Ok(())
}
