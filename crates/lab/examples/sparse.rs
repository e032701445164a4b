//! What the preferred slot (docs/design/table.md) does to a decision, on one thread.
//!
//! * `allow` / `deny`: a cached keyed decision (`Limiter<u64>` on the recent clock, keys drawn by
//!   a small PRNG) at 1,000 to 32,000 keys in a table of the default 65,536 slots, across the
//!   share of the table in use below which lookups read the preferred slot first.
//! * `churn`: every request a new key (time handed in, one step of 50 ns per request), a million
//!   of them into a fresh default table: the creation path, from an empty table to a full one,
//!   under an allowing quota (a key recovers 10 µs after its request) and a denying one (an
//!   hour).
//!
//! Prints the best of several runs per row; run it on two builds, alternating, to compare them.
//!
//! ```sh
//! cargo run --release -p funnel-lab --example sparse -- allow
//! cargo run --release -p funnel-lab --example sparse -- deny
//! cargo run --release -p funnel-lab --example sparse -- churn
//! ```
use std::hint::black_box;
use std::time::Instant;

use funnel::clock::{RecentClock, Timestamp};
use funnel::{Limiter, Quota, DEFAULT_CAPACITY};
use funnel_testkit::rng::Rng;

/// Cached decisions per run.
const N: u64 = 2_000_000;
/// New keys per churn run.
const NEW_KEYS: u64 = 1_000_000;

fn main() {
    match std::env::args().nth(1).as_deref() {
        None | Some("allow") => cached(true),
        Some("deny") => cached(false),
        Some("churn") => churn(),
        Some(_) => {
            eprintln!("usage: sparse [allow|deny|churn]");
            std::process::exit(2)
        }
    }
}

/// The best of `runs` timings of `run`, in ns per decision over `per_run` decisions.
fn best(runs: usize, per_run: u64, mut run: impl FnMut() -> u64) -> f64 {
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            black_box(run());
            started.elapsed().as_nanos() as f64 / per_run as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn cached(allow: bool) {
    let clock = RecentClock::shared().expect("the recent clock's upkeep thread starts");
    for keys in [1_000u64, 2_000, 4_000, 6_500, 10_000, 16_000, 32_000] {
        // Allowing: a limit no run reaches. Denying: one a second, spent by the prefill.
        let quota = if allow {
            Quota::per_second(1_000).and_then(|q| q.with_limit(4_000_000_000))
        } else {
            Quota::per_second(1)
        }
        .expect("a valid quota");
        let limiter = Limiter::<u64>::builder(quota)
            .capacity(DEFAULT_CAPACITY)
            .clock(clock.clone())
            .build()
            .expect("a valid limiter");
        for key in 0..keys {
            let _ = limiter.check(&key);
            let _ = limiter.check(&key);
        }
        let mut rng = Rng::new(7);
        let ns = best(5, N, || {
            (0..N)
                .map(|_| u64::from(limiter.check(&rng.below(keys)).is_allowed()))
                .sum()
        });
        println!(
            "{} keys {keys:6} ({:4.1}% of {} slots): {ns:.2} ns",
            if allow { "allow" } else { "deny" },
            100.0 * keys as f64 / limiter.capacity() as f64,
            limiter.capacity()
        );
    }
}

fn churn() {
    for (name, quota) in [
        ("allow", Quota::per_second(100_000)),
        ("deny", Quota::per_hour(1)),
    ] {
        let quota = quota.expect("a valid quota");
        let mut round = 0u64;
        let ns = best(9, NEW_KEYS, || {
            round += 1;
            let limiter = Limiter::<u64>::builder(quota)
                .build()
                .expect("a valid limiter");
            // Keys no other run used.
            let first = round << 40;
            (0..NEW_KEYS)
                .map(|i| {
                    let now = Timestamp::from_nanos(1_000_000 + i * 50).expect("in range");
                    u64::from(limiter.check_at(&(first + i), now).is_allowed())
                })
                .sum()
        });
        println!("churn {name}: {ns:.1} ns per new key ({NEW_KEYS} new keys into {DEFAULT_CAPACITY} slots)");
    }
}
