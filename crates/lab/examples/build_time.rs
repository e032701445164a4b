//! How long building a fixed table takes, on huge pages and on small ones: builds a table of
//! `slots` slots `rounds` times each way, the two alternating, and prints each build's wall time,
//! whether the kernel took the advice (`Stats::huge_pages`) and how much of the process's memory
//! is on huge pages (`AnonHugePages` of `/proc/self/smaps_rollup`, Linux only).
//!
//! ```sh
//! cargo run --release -p funnel-lab --example build_time -- [slots, default 12500005] [rounds, default 5]
//! ```
//!
//! A fixed table is touched whole when it is built (`Table::with_capacity`), so the build is where
//! its page faults happen: one per 4 KiB page, or one per 2 MiB page when the kernel backs the
//! table with huge pages, which it may first have to make by compacting memory
//! (`/sys/kernel/mm/transparent_hugepage/defrag`).

use funnel::{Limiter, Quota};
use std::time::Instant;

fn main() -> Result<(), funnel::Error> {
    let mut args = std::env::args().skip(1);
    let slots: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12_500_005);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    for _ in 0..rounds {
        for huge in [true, false] {
            let started = Instant::now();
            let limiter = Limiter::<u64>::builder(Quota::per_second(1)?)
                .capacity(slots)
                .huge_pages(huge)
                .build()?;
            let took = started.elapsed();
            let on_huge = std::fs::read_to_string("/proc/self/smaps_rollup")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("AnonHugePages"))
                        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
                })
                .unwrap_or_else(|| "unknown".into());
            println!(
                "{slots} slots ({:.1} MB), huge pages asked {huge}: built in {:.1} ms; advice taken {}; AnonHugePages {on_huge}",
                limiter.memory_bytes() as f64 / 1e6,
                took.as_secs_f64() * 1e3,
                limiter.stats().huge_pages,
            );
            drop(limiter);
        }
    }
    Ok(())
}
