//! The hardware floors under a keyed decision, measured on the machine at hand: what one atomic
//! read-modify-write costs, how many cache misses overlap, and what reading the TSC does to
//! that overlap. BENCHMARKS.md argues from these figures where a target sits
//! against the hardware rather than against funnel's code.
//!
//! ```sh
//! cargo run --release -p funnel-lab --example floors -- cas     # one CAS per step, 1,000 words in cache
//! cargo run --release -p funnel-lab --example floors -- loads   # random loads over 512 MB, then a chase
//! cargo run --release -p funnel-lab --example floors -- clock   # one clock read per step
//! ```
//!
//! Each line prints nanoseconds per step of a loop that does only that (wall time: it means
//! something on an idle machine only). x86_64 only: the `rdtsc` and `lfence` rows use their
//! intrinsics.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use funnel_testkit::Rng;

/// Steps per timed loop of `cas` (the loads loops take their own).
const STEPS: usize = 1 << 24;

/// Runs `f` over `0..steps` once to warm up, then three times timed; prints the best
/// nanoseconds per step (the least disturbed run).
fn time(label: &str, steps: usize, mut f: impl FnMut(usize) -> u64) {
    let mut sink = 0u64;
    let mut best = f64::INFINITY;
    for round in 0..4 {
        let started = Instant::now();
        for i in 0..steps {
            sink = sink.wrapping_add(f(i));
        }
        let per = started.elapsed().as_nanos() as f64 / steps as f64;
        if round > 0 {
            best = best.min(per);
        }
    }
    black_box(sink);
    println!("{label:<58} {best:6.1} ns");
}

/// `len` indices below `below`, uniformly at random, fixed by the seed.
fn random_indices(len: usize, below: usize) -> Vec<u32> {
    let mut rng = Rng::new(0x5EED_F100_2026_1125);
    (0..len).map(|_| rng.below(below as u64) as u32).collect()
}

/// One CAS per step: on 1,000 words visited in random order (the hot-1k workload's floor for an
/// allowed decision, which writes its funnel with one CAS), on one word, and the
/// `Mutex<HashMap>` competitor's two locked instructions (an uncontended lock and unlock).
fn cas() {
    let words: Vec<AtomicU64> = (0..1000).map(AtomicU64::new).collect();
    let order = random_indices(1 << 20, words.len());
    let mask = order.len() - 1;
    time("load + CAS, 1,000 words in random order", STEPS, |i| {
        let w = &words[order[i & mask] as usize];
        // Relaxed: a single thread; only the instruction's cost is measured (on x86_64
        // every ordering compiles to the same `lock cmpxchg`).
        let v = w.load(Ordering::Relaxed);
        u64::from(
            w.compare_exchange(v, v + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok(),
        )
    });
    time("load only, 1,000 words in random order", STEPS, |i| {
        // Relaxed: as above.
        words[order[i & mask] as usize].load(Ordering::Relaxed)
    });
    let one = AtomicU64::new(0);
    time("load + CAS, one word", STEPS, |_| {
        // Relaxed: as above.
        let v = one.load(Ordering::Relaxed);
        u64::from(
            one.compare_exchange(v, v + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok(),
        )
    });
    let mutex = Mutex::new(0u64);
    time("std Mutex lock + unlock, uncontended", STEPS, |_| {
        let mut g = mutex.lock().unwrap_or_else(|e| e.into_inner());
        *g += 1;
        *g
    });
}

/// Random loads over 512 MB: independent (the core overlaps as many misses as it can hold),
/// with an `rdtsc` in each step, with an `lfence` in each step (no overlap at all), and a
/// dependent chase over 400 MB (one miss at a time, the latency itself).
fn loads() {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::_mm_lfence;
        let words = (512usize << 20) / 8;
        let data: Vec<u64> = (0..words as u64).collect();
        let order = random_indices(1 << 24, words);
        let steps = order.len();
        time("independent random loads, 512 MB", steps, |i| {
            data[order[i] as usize]
        });
        time(
            "independent random loads, 512 MB, rdtsc in each step",
            steps,
            |i| data[order[i] as usize].wrapping_add(tsc()),
        );
        time(
            "independent random loads, 512 MB, lfence in each step",
            steps / 16,
            |i| {
                // SAFETY: `_mm_lfence` is `unsafe` only as an SSE2 intrinsic (SSE2 is part of
                // the x86_64 baseline); the instruction takes no operands and touches no memory.
                #[allow(unsafe_code)]
                unsafe {
                    _mm_lfence()
                };
                data[order[i] as usize]
            },
        );
        drop(data);
        // A single cycle through 400 MB of "next" indices (Sattolo's shuffle), so every load
        // depends on the one before.
        let n = (400usize << 20) / 8;
        let mut next: Vec<u64> = (0..n as u64).collect();
        let mut rng = Rng::new(0xC4A5_E000_0000_0001);
        for i in (1..n).rev() {
            let j = rng.below(i as u64) as usize;
            next.swap(i, j);
        }
        let mut at = 0u64;
        time("dependent random loads (a chase), 400 MB", 1 << 21, |_| {
            at = next[at as usize];
            at
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    println!("the loads rows need x86_64 (rdtsc, lfence)");
}

/// One clock read per step: the bare `rdtsc` instruction, funnel's default clock (that
/// instruction scaled to nanoseconds with quanta's calibration, `QuantaClock`), and the
/// standard library's `Instant::now` (a vDSO call), for what a decision that reads the time
/// pays before anything else.
fn clock() {
    #[cfg(target_arch = "x86_64")]
    time("rdtsc alone", STEPS, |_| tsc());
    let quanta = funnel::clock::QuantaClock::new();
    time("funnel's default clock (QuantaClock::now)", STEPS, |_| {
        funnel::Clock::now(&quanta).as_nanos()
    });
    let origin = Instant::now();
    time(
        "std Instant::now (as time elapsed since a start)",
        STEPS / 4,
        |_| origin.elapsed().as_nanos() as u64,
    );
}

/// The bare `rdtsc` instruction, inlined into the timed loop.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tsc() -> u64 {
    // SAFETY: `_rdtsc` is `unsafe` only as an intrinsic; the instruction takes no operands,
    // touches no memory and exists on every x86_64 CPU.
    #[allow(unsafe_code)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("cas") => cas(),
        Some("loads") => loads(),
        Some("clock") => clock(),
        _ => {
            eprintln!("usage: floors cas | loads | clock");
            std::process::exit(2);
        }
    }
}
