//! `RecentClock` under contention, over real time: many threads hammer limiters on the recent
//! clock, and every key's admissions are counted against the documented bound: the exact
//! limit over the run's real interval `D` plus the clock's staleness `S` at the start,
//! `limit + (D + S) / T` (rounded down). The run also checks that the clock advanced, so that
//! the bound is not met by a clock that stood still.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use funnel::clock::{Clock, QuantaClock, RecentClock};
use funnel::{Funnel, Limiter, Quota};

const THREADS: usize = 4;
const KEYS: u64 = 4;
const LIMIT: u64 = 20;
/// The quota's emission interval: 2,000 per second.
const T_NS: u64 = 500_000;
const RUN: Duration = Duration::from_millis(300);

fn quota() -> Quota {
    Quota::per_second(2_000)
        .and_then(|q| q.with_limit(LIMIT))
        .expect("a valid quota")
}

/// What a run saw: real start and end, the recent time at the start, the latest recent time
/// any decision read.
struct Span {
    real_start: u64,
    real_end: u64,
    recent_start: u64,
    recent_max: u64,
}

impl Span {
    /// The documented bound: the exact limit over the real interval plus the start's staleness.
    fn bound(&self) -> u64 {
        let d = self.real_end - self.real_start;
        let s = self.real_start - self.recent_start;
        LIMIT + (d + s) / T_NS
    }
}

/// Runs `decide(key)` from [`THREADS`] threads, each over every key in turn, for [`RUN`];
/// counts admissions per key.
fn hammer(clock: &RecentClock, decide: impl Fn(u64) -> bool + Sync) -> (Vec<u64>, Span) {
    let exact = QuantaClock::new();
    let admitted: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    let recent_max = AtomicU64::new(0);
    // The recent time first: every decision reads a time at least this (it never goes back).
    let recent_start = clock.now().as_nanos();
    let real_start = exact.now().as_nanos();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (admitted, recent_max, decide) = (&admitted, &recent_max, &decide);
            s.spawn(move || {
                let started = std::time::Instant::now();
                let mut key = t as u64;
                while started.elapsed() < RUN {
                    for _ in 0..256 {
                        key = (key + 1) % KEYS;
                        if decide(key) {
                            admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    recent_max.fetch_max(clock.now().as_nanos(), Ordering::Relaxed);
                }
            });
        }
    });
    let real_end = exact.now().as_nanos();
    let counts = admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    let span = Span {
        real_start,
        real_end,
        recent_start,
        recent_max: recent_max.load(Ordering::Relaxed),
    };
    (counts, span)
}

fn check_counts(what: &str, counts: &[u64], span: &Span) {
    let staleness = span.real_start - span.recent_start;
    let advanced = span.recent_max - span.recent_start;
    let real = span.real_end - span.real_start;
    assert!(
        advanced >= real / 2,
        "{what}: the recent clock advanced {advanced} ns over {real} ns of real time"
    );
    for (key, &n) in counts.iter().enumerate() {
        assert!(
            n <= span.bound(),
            "{what}: key {key} admitted {n}, above limit + (D + S) / T = {} \
             (D = {real} ns, S = {staleness} ns)",
            span.bound()
        );
        // The threads never let a key rest: it was admitted as the clock refilled it.
        assert!(
            n >= LIMIT + advanced / T_NS / 2,
            "{what}: key {key} admitted only {n} while the clock advanced {advanced} ns"
        );
    }
}

#[test]
fn a_keyed_limiter_on_the_recent_clock_keeps_the_documented_bound() {
    let clock = RecentClock::shared().expect("an upkeep thread");
    let limiter = Limiter::<u64>::builder(quota())
        .clock(clock.clone())
        .build()
        .expect("a limiter");
    let (counts, span) = hammer(&clock, |k| limiter.check(&k).is_allowed());
    check_counts("Limiter", &counts, &span);
}

#[test]
fn single_funnels_on_the_recent_clock_keep_the_documented_bound() {
    // A coarser tick asked for by this handle: the clock ticks at the finest asked for.
    let clock = RecentClock::with_interval(Duration::from_millis(4)).expect("an upkeep thread");
    assert!(clock.interval() <= Duration::from_millis(4));
    let funnels: Vec<Funnel<RecentClock>> = (0..KEYS)
        .map(|_| Funnel::with_clock(quota(), clock.clone()))
        .collect();
    let (counts, span) = hammer(&clock, |k| funnels[k as usize].check().is_allowed());
    check_counts("Funnel", &counts, &span);
}
