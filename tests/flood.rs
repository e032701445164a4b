//! A flood of distinct keys never grows the limiter, and never frees a key that is limited.
//! Alone in its test binary, so that no other test's allocations move the process's resident
//! memory, which it reads.
//!
//! Ten million distinct keys, one request each, through a limiter of 65,536 slots, from two
//! threads, under each [`WhenFull`] policy:
//!
//! * `len()` never exceeds the capacity, and resident memory (`VmRSS`) does not grow past a
//!   small slack once the table is built;
//! * a key limited before the flood (its whole burst spent: ten seconds of debt against the
//!   flood keys' one millisecond) is still limited after it: it has back exactly what leaked
//!   meanwhile, not a fresh burst;
//! * the counters add up: every flood key was bound (reusing a recovered slot or evicting an
//!   indebted one), turned away, or let through untracked.
//!
//! The clock moves 1 ms every 100,000 keys, so each window fills the table with funnels in
//! debt (forcing evictions, refusals or untracked admissions) and the next one finds them all
//! recovered.
//!
//! The three runs take seconds in release and about half a minute together in debug, where
//! they run too: arithmetic overflow panics there.

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use funnel::clock::ManualClock;
use funnel::{Clock, Limiter, Outcome, Quota, WhenFull};
use funnel_testkit::memory::rss_bytes;

const CAPACITY: usize = 65_536;
const MILLION: u64 = 1_000_000;
/// Keys per millisecond of the manual clock.
const WINDOW: u64 = 100_000;
/// The limited key: a fingerprint no flood key (`0..keys`) has.
const LIMITED: u64 = u64::MAX;
/// Resident memory the flood may add once the table is built, bytes: the table itself is 1 MiB.
const RSS_SLACK: u64 = 2 << 20;

/// RSS readings must not see another test's allocations: the tests of this file run one by one.
static SERIAL: Mutex<()> = Mutex::new(());

/// Resident memory of this process, bytes (the test kit's probe: `VmRSS`, Linux only).
fn rss() -> u64 {
    rss_bytes().expect("/proc/self/status with VmRSS (Linux)").0
}

/// 1,000 per second with bursts of 10,000: T = 1 ms, tolerance 10 s. A flood key owes 1 ms;
/// the limited key, having spent its burst, owes 10 s.
fn quota() -> Quota {
    Quota::per_second(1_000)
        .unwrap()
        .with_limit(10_000)
        .unwrap()
}

/// What one flood thread saw.
#[derive(Default)]
struct Seen {
    allowed: u64,
    turned_away: u64,
    untracked: u64,
    rss_max: u64,
    len_max: usize,
}

fn flood(when_full: WhenFull, keys: u64) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let started = Instant::now();
    let clock = ManualClock::new();
    let limiter = Limiter::<u64>::builder(quota())
        .capacity(CAPACITY)
        .clock(clock.clone())
        .seed(0x5eed)
        .when_full(when_full)
        .build()
        .unwrap();
    let capacity = limiter.capacity();
    assert!((CAPACITY..CAPACITY + 7).contains(&capacity));
    assert!(limiter.check_n(&LIMITED, 10_000).is_allowed());
    assert_eq!(limiter.check(&LIMITED).outcome(), Outcome::Limited);
    let rss_built = rss();

    // Two threads split the keys by parity; the first also moves the clock and reads memory.
    let seen: Vec<Seen> = thread::scope(|s| {
        let workers: Vec<_> = (0..2u64)
            .map(|parity| {
                let (limiter, clock) = (&limiter, &clock);
                s.spawn(move || {
                    let mut seen = Seen {
                        rss_max: rss_built,
                        ..Seen::default()
                    };
                    for key in (parity..keys).step_by(2) {
                        if parity == 0 && key > 0 && key % WINDOW == 0 {
                            clock.advance(Duration::from_millis(1));
                        }
                        let d = limiter.check(&key);
                        match d.outcome() {
                            Outcome::Allowed => seen.allowed += 1,
                            Outcome::TurnedAway => seen.turned_away += 1,
                            Outcome::AllowedUntracked => seen.untracked += 1,
                            other => panic!("a flood key's first request was {other:?}"),
                        }
                        if key % 8_192 < 2 {
                            seen.len_max = seen.len_max.max(limiter.len());
                            if parity == 0 && key % 262_144 == 0 {
                                seen.rss_max = seen.rss_max.max(rss());
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let total = |f: fn(&Seen) -> u64| seen.iter().map(f).sum::<u64>();
    let (allowed, turned_away, untracked) = (
        total(|s| s.allowed),
        total(|s| s.turned_away),
        total(|s| s.untracked),
    );
    let len_max = seen.iter().map(|s| s.len_max).max().unwrap();
    let rss_max = seen.iter().map(|s| s.rss_max).max().unwrap().max(rss());
    let stats = limiter.stats();
    let elapsed = clock.now().as_nanos();
    eprintln!(
        "{when_full:?}, {keys} keys in {:.2?}: {allowed} allowed, {turned_away} turned away, \
         {untracked} untracked; {stats:?}; RSS {} KiB after build, at most {} KiB during the \
         flood",
        started.elapsed(),
        rss_built >> 10,
        rss_max >> 10
    );

    // Bounded: never more keys than slots, and no memory beyond the table.
    assert!(len_max <= capacity, "len() reached {len_max}");
    assert_eq!(limiter.len(), capacity, "the flood filled every slot");
    assert!(
        rss_max <= rss_built + RSS_SLACK,
        "RSS grew from {} KiB to {} KiB during the flood",
        rss_built >> 10,
        rss_max >> 10
    );

    // The limited key kept its place and its debt, to the nanosecond: it has back only what
    // leaked during the flood (one unit a millisecond), not a fresh burst.
    let d = limiter.peek(&LIMITED);
    assert_eq!(
        d.reset_after(),
        Duration::from_nanos(10_000_000_000 - elapsed)
    );
    let leaked = elapsed / 1_000_000;
    assert_eq!(d.remaining(), leaked);
    assert_eq!(
        limiter.check_n(&LIMITED, leaked + 1).outcome(),
        Outcome::Limited
    );

    // The counters add up: every allowed new key (and the limited one) was bound exactly once.
    assert_eq!(allowed + turned_away + untracked, keys);
    assert_eq!(
        stats.keys as u64 + stats.recovered_evictions + stats.forced_evictions,
        allowed + 1
    );
    assert_eq!(
        (stats.turned_away, stats.admitted_untracked),
        (turned_away, untracked)
    );
    assert!(
        stats.recovered_evictions > 0,
        "each millisecond frees the last one's slots"
    );
    match when_full {
        WhenFull::Evict => assert!(stats.forced_evictions > 0 && turned_away + untracked == 0),
        WhenFull::Deny => assert!(turned_away > 0 && stats.forced_evictions + untracked == 0),
        WhenFull::Allow => assert!(untracked > 0 && stats.forced_evictions + turned_away == 0),
        _ => unreachable!(),
    }
    limiter.check_invariants().unwrap();
}

#[test]
fn ten_million_new_keys_evict_flood_keys_never_the_limited_one_and_memory_stays_flat() {
    flood(WhenFull::Evict, 10 * MILLION);
}

#[test]
fn ten_million_new_keys_are_turned_away_when_full_and_memory_stays_flat() {
    flood(WhenFull::Deny, 10 * MILLION);
}

#[test]
fn ten_million_new_keys_pass_untracked_when_full_and_memory_stays_flat() {
    flood(WhenFull::Allow, 10 * MILLION);
}

/// Memory per key: a 128-byte bucket per seven slots (18.3 bytes a slot: fingerprint, funnel
/// word, and a share of the tag word and the creation lock), plus 1 KiB of counters. Prints
/// the accounting and the resident memory the table actually added.
#[test]
fn a_million_keys_cost_about_eighteen_bytes_each() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let before = rss();
    let limiter = Limiter::<u64>::builder(quota())
        .capacity(1_000_000)
        .build()
        .unwrap();
    let added = rss().saturating_sub(before);
    let (bytes, capacity) = (limiter.memory_bytes(), limiter.capacity());
    assert_eq!(capacity, 1_000_006);
    let per_key = bytes as f64 / capacity as f64;
    eprintln!(
        "capacity {capacity}: memory_bytes() = {bytes} ({per_key:.3} bytes per key); \
         resident memory added by build(): {added} bytes ({:.3} per key)",
        added as f64 / capacity as f64
    );
    assert!((18.28..18.3).contains(&per_key), "{per_key} bytes per key");
    assert!(
        (added as usize) < bytes + bytes / 8,
        "build() added {added} bytes of RSS for a {bytes}-byte table"
    );
}
