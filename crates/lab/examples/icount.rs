//! A fixed, repeatable workload for counting instructions per keyed decision with callgrind
//! (instruction counts do not depend on what else the machine is doing):
//!
//! ```sh
//! cargo build --release -p funnel-lab --example icount
//! valgrind --tool=callgrind --toggle-collect='icount::decide_all' \
//!     target/release/examples/icount [keys] [rounds] [allow|deny] [u64|str|funnel|batch|u64clock]
//! valgrind --tool=callgrind --toggle-collect='icount::create_all' \
//!     target/release/examples/icount [keys] [rounds] deny new
//! ```
//!
//! (The exact name, not `decide_all*`: that pattern also matches `decide_all_stream`, which
//! calls `decide_all`, and the second toggle would switch collection off again.)
//!
//! Environment: `ICOUNT_ZIPF=<s>` draws the keys from a Zipf distribution with exponent `s`
//! (`0 < s < 1`) instead of uniformly; `ICOUNT_CAPACITY=<slots>` sizes the table (default 1.5x
//! the keys); `ICOUNT_CHUNK=<keys>` sets the `batch` mode's keys per call (default 32);
//! `ICOUNT_HUGE=1` puts the table on transparent huge pages, `ICOUNT_HUGE=0` keeps it off them
//! (`Builder::huge_pages`; unset, the builder's default: on for a table of 8 MiB or more).
//!
//! The collected total divided by `max(keys, 2^20) * rounds` (the stream length times the
//! rounds) is the cost of one decision (caller-supplied time, so no clock read is counted).
//! `funnel` runs the single-key `Funnel` for comparison; `batch` runs `u64` keys through
//! `check_batch_at`, `ICOUNT_CHUNK` keys a call (its time line is then per call: divide by
//! the keys a call); `u64clock` runs `u64` keys through `check`, which reads the limiter's
//! default clock (the TSC, read inline and scaled with quanta's calibration) on every
//! decision. `new` measures creation instead: each round builds a fresh table (`ICOUNT_CAPACITY`
//! slots, default 1.5x the keys) and decides the first request of `keys` keys never seen
//! before (use `deny`: one per hour, so every new key stays in debt and none frees a slot);
//! the collected total divided by `keys * rounds` is the cost of creating a key. The time
//! printed is wall time, which only means something on an idle machine; the instruction
//! counts mean something anywhere.

use std::hint::black_box;
use std::time::Duration;

use funnel::{Builder, Clock, Funnel, Limiter, Quota, QuotaKind, Timestamp};

/// Decides `rounds` passes over `order`, a pseudo-random stream of key indices fixed in advance
/// (as a proxy sees them).
#[inline(never)]
fn decide_all<F: Fn(usize) -> bool>(order: &[u32], rounds: usize, f: F) -> usize {
    let started = std::time::Instant::now();
    let mut allowed = 0;
    for _ in 0..rounds {
        for &i in order {
            allowed += usize::from(f(i as usize));
        }
    }
    let per = started.elapsed().as_nanos() as f64 / (order.len() * rounds) as f64;
    eprintln!("{per:.1} ns per decision (wall time)");
    allowed
}

/// Decides the first request of each of `keys` in a table that has never seen them: the cost
/// of creating a key (the `new` mode).
#[inline(never)]
fn create_all(l: &Limiter<u64>, keys: &[u64], now: Timestamp) -> usize {
    keys.iter()
        .filter(|&k| l.check_at(black_box(k), now).is_allowed())
        .count()
}

/// [`decide_all`] over positions `0..len` of a stream already in visiting order.
#[inline(never)]
fn decide_all_stream<F: Fn(usize) -> bool>(len: usize, rounds: usize, f: F) -> usize {
    let positions: Vec<u32> = (0..len as u32).collect();
    decide_all(&positions, rounds, f)
}

/// `max(n, 2^20)` keys drawn from `0..n`: long enough that a branch predictor cannot learn the
/// sequence by heart (a 1,000-key order repeated every round would let it). Uniform, or Zipf
/// with exponent `zipf` (key index = rank, as in the comparison harness's `zipf-1M`).
fn random_order(n: usize, zipf: Option<f64>) -> Vec<u32> {
    let mut rng = funnel_testkit::Rng::new(0x2545_F491_4F6C_DD1D);
    let zipf = zipf.map(|s| funnel_testkit::Zipf::new(n as u64, s));
    (0..n.max(1 << 20))
        .map(|_| match &zipf {
            Some(z) => z.sample(&mut rng) as u32,
            None => rng.below(n as u64) as u32,
        })
        .collect()
}

/// `Builder::huge_pages(on)` when `huge` says, the builder's default otherwise.
trait HugePagesIf {
    fn huge_pages_if(self, huge: Option<bool>) -> Self;
}

impl<K: ?Sized, C: Clock, Q: QuotaKind> HugePagesIf for Builder<K, C, Q> {
    fn huge_pages_if(self, huge: Option<bool>) -> Self {
        match huge {
            Some(on) => self.huge_pages(on),
            None => self,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1_000);
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);
    let deny = args.get(3).is_some_and(|s| s == "deny");
    let kind = args.get(4).map_or("u64", String::as_str);
    // Allow: bursts of 2^30 at 1/s, every decision allowed and written. Deny: 1 per hour,
    // limit 1, every decision after the first per key denied.
    let quota = if deny {
        Quota::per_hour(1).unwrap()
    } else {
        Quota::per_second(1).unwrap().with_limit(1 << 30).unwrap()
    };
    let now = Timestamp::from_nanos(1_000_000_000).unwrap();
    let keys: Vec<u64> = (0..n as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    // The table's capacity: 1.5 x the keys unless ICOUNT_CAPACITY says otherwise.
    let capacity = std::env::var("ICOUNT_CAPACITY")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(n * 3 / 2);
    // ICOUNT_HUGE=1 / 0: the table on transparent huge pages or not (`Builder::huge_pages`);
    // unset, the builder's default.
    let huge = std::env::var("ICOUNT_HUGE").ok().map(|v| v != "0");
    // Keys drawn uniformly unless ICOUNT_ZIPF gives a Zipf exponent (0 < s < 1; the harness's
    // `zipf-1M` is `ICOUNT_ZIPF=0.99` with 1,000,000 keys).
    let zipf = std::env::var("ICOUNT_ZIPF")
        .ok()
        .and_then(|s| s.parse().ok());
    let order = random_order(n, zipf);
    let allowed = match kind {
        "str" => {
            let skeys: Vec<String> = keys.iter().map(|k| format!("user:{k}")).collect();
            let l = Limiter::<str>::builder(quota)
                .capacity(capacity)
                .huge_pages_if(huge)
                .build()
                .unwrap();
            for k in &skeys {
                let _ = l.check_at(k, now);
            }
            decide_all(&order, rounds, |i| {
                l.check_at(black_box(&skeys[i]), now).is_allowed()
            })
        }
        "batch" => {
            // u64 keys through `check_batch_at`, ICOUNT_CHUNK keys a call (default 32).
            let l = Limiter::<u64>::builder(quota)
                .capacity(capacity)
                .huge_pages_if(huge)
                .build()
                .unwrap();
            for k in &keys {
                let _ = l.check_at(k, now);
            }
            let stream: Vec<u64> = order.iter().map(|&i| keys[i as usize]).collect();
            let chunk: usize = std::env::var("ICOUNT_CHUNK")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(32);
            let chunks: Vec<&[u64]> = stream.chunks(chunk).collect();
            let out = std::cell::RefCell::new(Vec::with_capacity(32));
            let allowed = std::cell::Cell::new(0);
            decide_all_stream(chunks.len(), rounds, |j| {
                let mut out = out.borrow_mut();
                out.clear();
                l.check_batch_at(black_box(chunks[j]), now, &mut out);
                allowed.set(allowed.get() + out.iter().filter(|d| d.is_allowed()).count());
                true
            });
            allowed.get()
        }
        "new" => {
            let mut allowed = 0;
            let mut elapsed = Duration::ZERO;
            for round in 0..rounds as u64 {
                let l = Limiter::<u64>::builder(quota)
                    .capacity(capacity)
                    .huge_pages_if(huge)
                    .build()
                    .unwrap();
                // New keys every round: `keys` shifted by the round (a bijection of i).
                let fresh: Vec<u64> = (0..n as u64)
                    .map(|i| (i + round * n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                    .collect();
                let started = std::time::Instant::now();
                allowed += create_all(&l, &fresh, now);
                elapsed += started.elapsed();
            }
            let per = elapsed.as_nanos() as f64 / (n * rounds) as f64;
            eprintln!("{per:.1} ns per new key (wall time)");
            println!("{allowed} of {} allowed", n * rounds);
            return;
        }
        "funnel" => {
            let f = Funnel::new(quota);
            decide_all(&order, rounds, |_| black_box(&f).check_at(now).is_allowed())
        }
        _ => {
            let l = Limiter::<u64>::builder(quota)
                .capacity(capacity)
                .huge_pages_if(huge)
                .build()
                .unwrap();
            for k in &keys {
                let _ = l.check_at(k, now);
            }
            // The keys in visiting order, read sequentially (as a proxy reads them from its
            // requests), so a large key space costs the table's misses, not the key array's.
            let stream: Vec<u64> = order.iter().map(|&i| keys[i as usize]).collect();
            if kind == "u64clock" {
                // Every decision reads the limiter's default clock (`check`).
                decide_all_stream(stream.len(), rounds, |j| {
                    l.check(black_box(&stream[j])).is_allowed()
                })
            } else {
                decide_all_stream(stream.len(), rounds, |j| {
                    l.check_at(black_box(&stream[j]), now).is_allowed()
                })
            }
        }
    };
    println!("{allowed} of {} allowed", order.len() * rounds);
}
