//! Tail latency of creating keys under oversubscription: 64 threads on however many
//! cores the machine has each create fresh keys in one shared limiter,
//! timing every call. A creator that holds a creation lock can be preempted, and every other
//! creator of a key behind the same lock then waits for the scheduler to run it again; the
//! p99.9 shows how often that happens.
//!
//! Two tables: a fixed one with room for every key, and a growable one that starts at 1,024
//! keys and doubles eleven times while the threads create (each growth's barrier takes every
//! creation lock once, and creations move the keys of the old size).
//!
//! Run: `cargo bench --bench creation_tail` (smoke: `-- --test`). Prints p50, p99, p99.9 and
//! the maximum per call, over every thread's calls, for each table.

use std::sync::Barrier;
use std::time::Instant;

use funnel::{Limiter, Quota, Timestamp};

const THREADS: usize = 64;

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let per_thread: usize = if smoke { 200 } else { 20_000 };
    let quota = Quota::per_hour(1).unwrap();
    let keys = THREADS * per_thread;
    let fixed = Limiter::<u64>::builder(quota)
        .capacity(keys * 2)
        .build()
        .unwrap();
    run("fixed", &fixed, per_thread);
    let growable = Limiter::<u64>::builder(quota)
        .capacity(1_024)
        .max_capacity(keys * 2)
        .build()
        .unwrap();
    run("growable", &growable, per_thread);
    assert!(
        smoke || growable.stats().growths >= 10,
        "{:?}",
        growable.stats()
    );
}

fn run(table: &str, limiter: &Limiter<u64>, per_thread: usize) {
    let now = Timestamp::from_nanos(1).unwrap();
    let barrier = Barrier::new(THREADS);
    let per_thread_lat: Vec<Vec<u32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (limiter, barrier) = (limiter, &barrier);
                s.spawn(move || {
                    let mut lat = Vec::with_capacity(per_thread);
                    barrier.wait();
                    for i in 0..per_thread {
                        let key = ((t * per_thread + i) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                        let start = Instant::now();
                        let d = limiter.check_at(&key, now);
                        lat.push(start.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
                        assert!(d.is_allowed());
                    }
                    lat
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let at = |v: &[u32], q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    // The worst thread's p99.9: what the unluckiest connection of a proxy sees.
    let worst_thread_p999 = per_thread_lat
        .iter()
        .map(|v| {
            let mut v = v.clone();
            v.sort_unstable();
            at(&v, 0.999)
        })
        .max()
        .unwrap_or(0);
    let mut all: Vec<u32> = per_thread_lat.into_iter().flatten().collect();
    all.sort_unstable();
    let stats = limiter.stats();
    println!(
        "creation_tail, {table} table: {THREADS} threads x {per_thread} new keys on {} cores: \
         p50 {} ns, p99 {} ns, p99.9 {} ns, worst thread's p99.9 {} ns, max {} ns; \
         forced evictions {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        at(&all, 0.5),
        at(&all, 0.99),
        at(&all, 0.999),
        worst_thread_p999,
        all[all.len() - 1],
        stats.forced_evictions,
    );
    assert_eq!(
        stats.keys as u64 + stats.forced_evictions,
        (THREADS * per_thread) as u64,
        "every key was created once: {stats:?}"
    );
}
