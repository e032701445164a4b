//! Never more than the limit under contention: the classic over-admission demo (many threads
//! racing on one key), as tests.
//!
//! A hundred threads released together on one [`Funnel`] with a frozen [`ManualClock`] get
//! exactly its limit; after the clock moves by `k` emission intervals, exactly `k` more. The
//! same on a keyed [`Limiter`], several keys interleaved across the threads (each key exactly its
//! limit), including the race between creators of one new key. Every scenario is repeated, since
//! a lost update shows up only in some interleavings.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;

use funnel::clock::ManualClock;
use funnel::{Clock, Funnel, Limiter, Quota, Timestamp};

const THREADS: usize = 100;
/// Attempts per thread and phase: several, so that every thread retries after the funnel fills.
const TRIES: u64 = 4;
const REPS: usize = 12;

/// Runs `attempt(thread, try)` on `threads` threads released together by a barrier, each
/// `TRIES` times; returns the sum of what the attempts returned (units admitted).
fn hammer(threads: usize, attempt: impl Fn(usize, u64) -> u64 + Sync) -> u64 {
    let barrier = Barrier::new(threads);
    let admitted = AtomicU64::new(0);
    thread::scope(|s| {
        for i in 0..threads {
            let (barrier, admitted, attempt) = (&barrier, &admitted, &attempt);
            s.spawn(move || {
                barrier.wait();
                let mine: u64 = (0..TRIES).map(|try_| attempt(i, try_)).sum();
                // Relaxed: read only after the scope joins every thread.
                admitted.fetch_add(mine, Ordering::Relaxed);
            });
        }
    });
    admitted.into_inner()
}

/// The quotas the scenarios run under: 10 per second (T = 100 ms), and 3 per second with bursts
/// of 10 (T = 333,333,333 ns, not a whole number of anything).
fn quotas() -> [Quota; 2] {
    [
        Quota::per_second(10).unwrap(),
        Quota::per_second(3).unwrap().with_limit(10).unwrap(),
    ]
}

/// How many emission intervals the clock moves between phases: less than, equal to and more
/// than the limit (a drained funnel cannot bank more than its limit).
const STEPS: [u64; 4] = [1, 3, 10, 13];

#[test]
fn a_hundred_threads_on_a_frozen_clock_get_exactly_the_limit_then_one_per_interval() {
    for rep in 0..REPS {
        for quota in quotas() {
            let clock = ManualClock::new();
            let funnel = Funnel::with_clock(quota, clock.clone());
            let limit = quota.limit();
            let got = hammer(THREADS, |_, _| u64::from(funnel.check().is_allowed()));
            assert_eq!(got, limit, "rep {rep} {quota:?}: the first burst");
            let k = STEPS[rep % STEPS.len()];
            clock.advance(quota.emission_interval() * k as u32);
            let got = hammer(THREADS, |_, _| u64::from(funnel.check().is_allowed()));
            assert_eq!(
                got,
                k.min(limit),
                "rep {rep} {quota:?}: after {k} intervals"
            );
            assert_eq!(funnel.peek().remaining(), 0, "rep {rep} {quota:?}");
        }
    }
}

/// Costs of 1, 2 and 3 units racing: the units admitted never exceed the limit, and the funnel
/// afterwards holds exactly what was admitted (no allowed request lost its write).
#[test]
fn racing_requests_of_mixed_costs_are_each_charged_exactly_once() {
    for rep in 0..REPS {
        for quota in quotas() {
            let clock = ManualClock::new();
            let funnel = Funnel::with_clock(quota, clock.clone());
            // Units of debt the funnel should hold: what it admitted, less what leaked.
            let mut debt = 0;
            for phase in 0..3 {
                let admitted = hammer(THREADS, |i, try_| {
                    let n = (i as u64 + try_) % 3 + 1;
                    if funnel.check_n(n).is_allowed() {
                        n
                    } else {
                        0
                    }
                });
                debt += admitted;
                let ctx = format!("rep {rep} phase {phase} {quota:?}");
                assert!(
                    debt <= quota.limit(),
                    "{ctx}: {debt} units held, more than the limit"
                );
                let held = quota.limit() - funnel.peek().remaining();
                assert_eq!(
                    held, debt,
                    "{ctx}: {admitted} admitted, so a write was lost"
                );
                clock.advance(quota.emission_interval() * 4);
                debt = debt.saturating_sub(4);
            }
        }
    }
}

/// A Limiter whose table certainly never evicts: 8 keys in 16 slots (a key's two candidate
/// buckets hold 8 slots, so one is always free), on `clock`.
fn keyed(quota: Quota, clock: &ManualClock, capacity: usize) -> Limiter<str, ManualClock> {
    Limiter::<str>::builder(quota)
        .capacity(capacity)
        .clock(clock.clone())
        .build()
        .unwrap()
}

const KEYS: [&str; 8] = [
    "203.0.113.7",
    "198.51.100.1",
    "user:42:login",
    "user:43:login",
    "token:abc",
    "token:abd",
    "upstream-a",
    "upstream-b",
];

/// Each thread walks every key, starting at a different one, `TRIES` times; returns what each
/// key admitted.
fn hammer_keys(limiter: &Limiter<str, ManualClock>) -> [u64; KEYS.len()] {
    let per_key: [AtomicU64; KEYS.len()] = Default::default();
    hammer(64, |i, _| {
        for j in 0..KEYS.len() {
            let k = (i + j) % KEYS.len();
            if limiter.check(KEYS[k]).is_allowed() {
                // Relaxed: read only after the scope joins every thread.
                per_key[k].fetch_add(1, Ordering::Relaxed);
            }
        }
        0
    });
    per_key.map(AtomicU64::into_inner)
}

#[test]
fn many_threads_on_many_keys_each_key_gets_exactly_its_limit() {
    for rep in 0..REPS {
        for (quota, capacity) in quotas().into_iter().zip([16, 4096]) {
            let clock = ManualClock::new();
            let limiter = keyed(quota, &clock, capacity);
            let limit = quota.limit();
            let ctx = format!("rep {rep} {quota:?} capacity {capacity}");
            assert_eq!(
                hammer_keys(&limiter),
                [limit; KEYS.len()],
                "{ctx}: the first burst"
            );
            let k = STEPS[rep % STEPS.len()];
            clock.advance(quota.emission_interval() * k as u32);
            assert_eq!(
                hammer_keys(&limiter),
                [k.min(limit); KEYS.len()],
                "{ctx}: after {k} intervals"
            );
            let stats = limiter.stats();
            assert_eq!(
                (stats.keys, stats.forced_evictions),
                (KEYS.len(), 0),
                "{ctx}"
            );
            limiter
                .check_invariants()
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        }
    }
}

/// A hundred threads see the same new key at once: one of them binds it, the rest update the
/// bound funnel; exactly the limit passes and the key holds one slot.
#[test]
fn racing_creators_of_one_new_key_bind_one_slot_and_share_one_limit() {
    for rep in 0..REPS {
        for limit in [1, 7] {
            let quota = Quota::per_second(1).unwrap().with_limit(limit).unwrap();
            let clock = ManualClock::new();
            let limiter = keyed(quota, &clock, 64);
            let got = hammer(THREADS, |_, _| {
                u64::from(limiter.check("new-key").is_allowed())
            });
            assert_eq!(got, limit, "rep {rep} limit {limit}");
            assert_eq!(
                limiter.len(),
                1,
                "rep {rep} limit {limit}: the key was bound twice"
            );
            limiter
                .check_invariants()
                .unwrap_or_else(|e| panic!("rep {rep}: {e}"));
        }
    }
}

/// While one thread moves the clock forward, the others never get more than the limit plus one
/// unit per interval elapsed.
#[test]
fn a_clock_moving_under_contention_admits_no_more_than_the_time_elapsed_allows() {
    for rep in 0..REPS {
        for quota in quotas() {
            let clock = ManualClock::new();
            let funnel = Funnel::with_clock(quota, clock.clone());
            let half = quota.emission_interval() / 2;
            let advances = 40;
            let admitted = hammer(THREADS, |i, _| {
                if i == 0 {
                    // Thread 0 moves the clock: `advances` half-intervals over its tries.
                    for _ in 0..advances / TRIES {
                        clock.advance(half);
                        thread::yield_now();
                    }
                    0
                } else {
                    u64::from(funnel.check().is_allowed())
                }
            });
            let elapsed = clock.now().as_nanos() / quota.emission_interval().as_nanos() as u64;
            assert!(
                admitted <= quota.limit() + elapsed,
                "rep {rep} {quota:?}: {admitted} admitted with {elapsed} intervals elapsed"
            );
        }
    }
}

/// Releases `threads` threads into `rounds` rounds together, spinning rather than sleeping so
/// that even on a machine with few cores the threads overlap inside decisions; in round `r` each
/// calls `attempt(r)` `tries` times. Returns how many attempts succeeded in each round.
fn race_rounds(
    threads: usize,
    rounds: usize,
    tries: usize,
    attempt: impl Fn(usize) -> bool + Sync,
) -> Vec<u64> {
    let arrived = AtomicUsize::new(0);
    let wins: Vec<AtomicU64> = (0..rounds).map(|_| AtomicU64::new(0)).collect();
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for (r, wins) in wins.iter().enumerate() {
                    // A spinning barrier. AcqRel/Acquire: round r starts after every thread
                    // has finished round r - 1, which keeps the rounds apart.
                    arrived.fetch_add(1, Ordering::AcqRel);
                    let mut spins = 0u32;
                    while arrived.load(Ordering::Acquire) < (r + 1) * threads {
                        spins += 1;
                        if spins < 1_000 {
                            std::hint::spin_loop();
                        } else {
                            thread::yield_now(); // a peer lost its core: let it run
                        }
                    }
                    let won = (0..tries).filter(|_| attempt(r)).count() as u64;
                    // Relaxed: read only after the scope joins every thread.
                    wins.fetch_add(won, Ordering::Relaxed);
                }
            });
        }
    });
    wins.into_iter().map(AtomicU64::into_inner).collect()
}

/// The race a CAS loop exists for: two threads read the same arrival time, both find room, and
/// both write. One must fail its CAS and decide again. Many short rounds race for the last two
/// units; a few long ones keep the threads admitting side by side for 20,000 units (long
/// enough to span scheduler time slices on a busy machine).
#[test]
fn threads_racing_for_the_same_units_of_a_funnel_never_both_win() {
    for (limit, rounds, tries) in [(2, 2_000, 2), (20_000, 12, 6_000)] {
        let quota = Quota::per_second(1).unwrap().with_limit(limit).unwrap();
        let funnels: Vec<Funnel<ManualClock>> = (0..rounds)
            .map(|_| Funnel::with_clock(quota, ManualClock::new()))
            .collect();
        let wins = race_rounds(4, rounds, tries, |r| funnels[r].check().is_allowed());
        for (r, won) in wins.iter().enumerate() {
            assert_eq!(
                *won, limit,
                "round {r}: {won} units admitted from a funnel of {limit}"
            );
        }
    }
}

/// The same race on a keyed limiter, a new key per round: the racing creators and updaters of
/// one key never admit more than its limit between them. Each round runs at a later time, when
/// the earlier rounds' keys have recovered, in a table of 64 slots: so creators race to rebind
/// recovered slots too, and no funnel in debt is ever evicted.
#[test]
fn threads_racing_for_the_same_units_of_a_key_never_both_win() {
    for (limit, rounds, tries) in [(2, 1_500, 2), (20_000, 8, 6_000)] {
        let quota = Quota::per_second(1).unwrap().with_limit(limit).unwrap();
        let limiter = keyed(quota, &ManualClock::new(), 64);
        let keys: Vec<String> = (0..rounds).map(|r| format!("round-{r}")).collect();
        let time = |r: usize| Timestamp::from_nanos(r as u64 * 2 * limit * 1_000_000_000).unwrap();
        let wins = race_rounds(4, rounds, tries, |r| {
            limiter.check_at(&keys[r], time(r)).is_allowed()
        });
        for (r, won) in wins.iter().enumerate() {
            assert_eq!(
                *won, limit,
                "round {r}: {won} units admitted from a key of limit {limit}"
            );
        }
        let stats = limiter.stats();
        assert_eq!(stats.forced_evictions, 0);
        assert!(stats.recovered_evictions > 0 || rounds <= 64, "{stats:?}");
        limiter.check_invariants().unwrap();
    }
}
