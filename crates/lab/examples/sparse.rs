//! A cached keyed decision (`Limiter<u64>` on the recent clock, one thread, keys drawn by a small
//! PRNG) at 1,000 to 32,000 keys in a table of the default 65,536 slots: how a decision's cost
//! moves with the share of the table in use, where the preferred slot is read first while the
//! table is sparse (docs/DESIGN.md, "The table"). Prints the best of five runs per row; run it
//! on two builds, alternating, to compare them.
//!
//! ```sh
//! cargo run --release -p funnel-lab --example sparse -- allow
//! cargo run --release -p funnel-lab --example sparse -- deny
//! ```
use std::hint::black_box;
use std::time::Instant;

use funnel::clock::RecentClock;
use funnel::{Limiter, Quota, DEFAULT_CAPACITY};
use funnel_testkit::rng::Rng;

/// Decisions per run.
const N: u64 = 2_000_000;

fn main() {
    let allow = match std::env::args().nth(1).as_deref() {
        None | Some("allow") => true,
        Some("deny") => false,
        Some(_) => {
            eprintln!("usage: sparse [allow|deny]");
            std::process::exit(2)
        }
    };
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
            limiter.check(&key);
            limiter.check(&key);
        }
        let mut rng = Rng::new(7);
        let best = (0..5)
            .map(|_| {
                let started = Instant::now();
                let mut allowed = 0u64;
                for _ in 0..N {
                    allowed += u64::from(limiter.check(&rng.below(keys)).is_allowed());
                }
                black_box(allowed);
                started.elapsed().as_nanos() as f64 / N as f64
            })
            .fold(f64::INFINITY, f64::min);
        println!(
            "{} keys {keys:6} ({:4.1}% of {} slots): {best:.2} ns",
            if allow { "allow" } else { "deny" },
            100.0 * keys as f64 / limiter.capacity() as f64,
            limiter.capacity()
        );
    }
}
