//! The minimal loop a new user writes, apart from the harness: one thread draws a key below
//! 1,000 with a small PRNG and decides it, for funnel (time handed in, `RecentClock`,
//! `QuantaClock`) and governor with ahash (`QuantaUpkeepClock`, `QuantaClock`), the variants
//! alternating, each run timed on a CPU (/proc/thread-self/schedstat, Linux).
//!
//! ```sh
//! cargo run --release -p funnel-compare --example minimal_loop -- allow 21
//! cargo run --release -p funnel-compare --example minimal_loop -- deny 21
//! ```
use std::hint::black_box;
use std::num::NonZeroU32;

use funnel::clock::{Clock, QuantaClock, RecentClock};
use funnel::{Limiter, Quota};
use governor::clock::{QuantaClock as GQ, QuantaUpkeepClock};
use governor::RateLimiter;

struct Rng(u64);
impl Rng {
    #[inline(always)]
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z as u128 * n as u128) >> 64) as u64
    }
}

/// Decisions per run.
const N: u64 = 4_000_000;

/// This thread's time on a CPU, ns.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat (Linux) gives the thread's time on a CPU")
}

/// ns per decision on a CPU.
fn time(mut f: impl FnMut(&mut Rng) -> bool, seed: u64) -> f64 {
    let mut r = Rng(seed);
    let c = cpu_ns();
    let mut a = 0u64;
    for _ in 0..N {
        a += f(&mut r) as u64;
    }
    black_box(a);
    (cpu_ns() - c) as f64 / N as f64
}

fn main() {
    let usage = || -> ! {
        eprintln!("usage: minimal_loop [allow|deny] [runs, at least 1]");
        std::process::exit(2)
    };
    let allow = match std::env::args().nth(1).as_deref() {
        None | Some("allow") => true,
        Some("deny") => false,
        Some(_) => usage(),
    };
    let reps: usize = match std::env::args().nth(2).map(|v| v.parse()) {
        None => 11,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => usage(),
    };
    let fq = if allow {
        Quota::per_second(1000)
            .unwrap()
            .with_limit(4_000_000_000)
            .unwrap()
    } else {
        Quota::per_hour(1).unwrap()
    };
    let gq = if allow {
        governor::Quota::per_second(NonZeroU32::new(1000).unwrap())
            .allow_burst(NonZeroU32::new(4_000_000_000).unwrap())
    } else {
        governor::Quota::per_hour(NonZeroU32::new(1).unwrap())
    };
    let recent = RecentClock::shared().unwrap();
    let upkeep = QuantaUpkeepClock::from_interval(RecentClock::DEFAULT_INTERVAL).unwrap();
    let f_real = Limiter::<u64>::builder(fq).capacity(1250).build().unwrap();
    let f_recent = Limiter::<u64>::builder(fq)
        .capacity(1250)
        .clock(recent.clone())
        .build()
        .unwrap();
    let g_real: RateLimiter<u64, _, GQ> =
        RateLimiter::dashmap_with_hasher(gq, ahash::RandomState::new());
    let g_upkeep =
        RateLimiter::dashmap_with_clock_and_hasher(gq, upkeep.clone(), ahash::RandomState::new());
    let clock = QuantaClock::new();
    for k in 0..1000u64 {
        f_real.check(&k);
        f_recent.check(&k);
        let _ = g_real.check_key(&k);
        let _ = g_upkeep.check_key(&k);
    }
    let names = [
        "funnel check_at",
        "funnel real",
        "funnel recent",
        "governor-ahash real",
        "governor-ahash upkeep",
    ];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for rep in 0..reps {
        for i in 0..names.len() {
            let v = (i + rep) % names.len();
            let seed = rep as u64 * 7 + v as u64;
            let ns = match v {
                0 => {
                    let mut now = clock.now();
                    let mut c = 0u32;
                    time(
                        |r| {
                            c = c.wrapping_add(1);
                            if c % 1024 == 0 {
                                now = clock.now();
                            }
                            f_real.check_at(&r.below(1000), now).is_allowed()
                        },
                        seed,
                    )
                }
                1 => time(|r| f_real.check(&r.below(1000)).is_allowed(), seed),
                2 => time(|r| f_recent.check(&r.below(1000)).is_allowed(), seed),
                3 => time(|r| g_real.check_key(&r.below(1000)).is_ok(), seed),
                _ => time(|r| g_upkeep.check_key(&r.below(1000)).is_ok(), seed),
            };
            res[v].push(ns);
        }
    }
    for (i, n) in names.iter().enumerate() {
        let mut v = res[i].clone();
        v.sort_by(f64::total_cmp);
        println!(
            "{} {n}: median {:.2} ns (min {:.2}, max {:.2}, {} runs)",
            if allow { "allow" } else { "deny" },
            v[v.len() / 2],
            v[0],
            v[v.len() - 1],
            v.len()
        );
    }
}
