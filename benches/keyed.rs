//! Keyed decisions per second (issue 3): funnel's [`funnel::Limiter`] against governor's keyed
//! limiter (its default `DashMap` store with the default SipHash hasher, and the same store with
//! ahash) and the first article's `Mutex<HashMap>` funnel (with ahash, funnel's own hasher).
//!
//! Every competitor in a group gets the same pre-generated keys in the same order, the same
//! quota, the same number of threads, and reads the same clock (quanta's TSC clock) once per
//! decision: funnel and governor their own default `QuantaClock`, the mutex map funnel's.
//!
//! * Workloads: one hot key; 1,000 keys; 1,000,000 keys, each drawn uniformly at random from a
//!   pre-generated cycle of 2^22 accesses. Every key is inserted once before timing, so the
//!   runs measure steady-state decisions on present keys (`paths.rs` measures inserts).
//! * Keys: `u64` (distinct pseudo-random values) and `String` (`user:<id>`); funnel as
//!   `Limiter<u64>` and `Limiter<str>`.
//! * Each decision's allowed/denied answer is kept (`black_box` of a `bool`): the one thing
//!   every caller reads, and the same for every competitor.
//! * Threads: 1 and 2, released together by a barrier (`iter_custom`); throughput is the
//!   aggregate decisions per second.
//! * Quota: "mostly allowing", in fact always allowing: 1 per second with bursts of 2^30, so
//!   every decision is allowed and writes, and every key stays in debt (`workload.rs` explains
//!   why not 1e9/s). The group `keyed/u64/1M-recovering` runs the 1e9/s quota, under which
//!   every funnel recovers between two requests and funnel's table reuses its slots: a weak
//!   spot worth showing (funnel and governor only; the mutex map never forgets a key, so the
//!   regime changes nothing for it).
//! * funnel's capacity: the default 65,536 keys for the hot key and 1,000 keys; 2^21 slots
//!   (33.8 MB, about what governor's `u64` DashMap takes for the same 1M keys) at 1M keys.
//!   2^20 slots would be 95% full, past the ~70% at which two-choice placement first finds
//!   both candidate buckets full: measured with keys that never recover, 2^20 slots lose about
//!   21,000 of the 1M keys to forced evictions, 2^21 lose none. The table's counters are
//!   printed after each funnel run.
//!
//! Before the benches, each store's memory per key at 1M keys is measured in a fresh child
//! process (this binary re-run with `FUNNEL_BENCH_MEM_PROBE` set): `VmRSS` growth from just
//! before the store is built to after every key has been inserted, divided by the keys; the
//! key vector itself is built before the first reading and not counted. In `--test` mode the
//! probe runs with 10,000 keys to keep the smoke run quick.
//!
//! Run: `cargo bench --bench keyed` (smoke: `cargo bench --bench keyed -- --test`).

use criterion::{BenchmarkGroup, Criterion, Throughput};
use funnel::clock::{Clock, QuantaClock};
use funnel::Limiter;
use governor::state::keyed::DashMapStateStore;
use governor::RateLimiter;

#[path = "common/mutex_map.rs"]
mod mutex_map;
#[path = "common/workload.rs"]
mod workload;

use mutex_map::MutexMapLimiter;
use workload::{Stream, StringStream, U64Stream};

type Governor<K, S = std::hash::RandomState> =
    RateLimiter<K, DashMapStateStore<K, S>, governor::clock::QuantaClock>;

/// Accesses per cycle of the random streams (32 MiB of `u64` keys at 1M keys).
const STREAM_LEN: usize = 1 << 22;
const MILLION: usize = 1_000_000;

type Group<'a> = BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Benches `decide` on 1 and 2 threads over `stream`. Each sample continues the stream where
/// the previous one stopped, so repeated samples do not re-walk the same (cached) keys.
fn run<S, R>(g: &mut Group<'_>, name: &str, stream: &S, decide: impl Fn(&S::Key) -> R + Sync)
where
    S: Stream,
{
    for threads in [1usize, 2] {
        g.throughput(Throughput::Elements(threads as u64));
        let mut pos = 0usize;
        g.bench_function(format!("{name}/{threads}t"), |b| {
            b.iter_custom(|iters| {
                let base = pos;
                let elapsed = workload::run_threads(threads, iters, |t, i| {
                    decide(stream.key(base + stream.start(t, threads) + i as usize))
                });
                pos = pos.wrapping_add(iters as usize);
                elapsed
            });
        });
    }
}

/// Units charged to each key when it is inserted before timing: an hour of debt under the
/// keyed quota, so no funnel recovers (and frees its slot) while a slow setup is still running
/// or between benches. governor gets the same; the mutex map (unit requests only) gets one
/// unit, which changes nothing for a store that never forgets a key.
const PREFILL_UNITS: u64 = 3600;

fn prefill_units() -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(PREFILL_UNITS as u32).expect("non-zero")
}

/// Inserts every distinct key once.
fn prefill<'a, K: ?Sized + 'a, R>(keys: impl Iterator<Item = &'a K>, decide: impl Fn(&K) -> R) {
    for k in keys {
        std::hint::black_box(decide(k));
    }
}

fn funnel_capacity(distinct: usize) -> usize {
    if distinct >= MILLION {
        1 << 21
    } else {
        funnel::DEFAULT_CAPACITY
    }
}

fn report_funnel<K: ?Sized, C>(name: &str, l: &Limiter<K, C>) {
    let s = l.stats();
    println!(
        "  [{name}] capacity {} slots, {} B; keys held {}, forced evictions {}, recovered evictions {}",
        l.capacity(),
        l.memory_bytes(),
        s.keys,
        s.forced_evictions,
        s.recovered_evictions
    );
}

fn u64_group(c: &mut Criterion, label: &str, distinct: usize, recovering: bool) {
    let stream = U64Stream::new(distinct, STREAM_LEN, 0xF00D);
    let keys = &stream.keys;
    let mut g = c.benchmark_group(format!("keyed/u64/{label}"));
    workload::configure(&mut g);
    let (fq, gq) = if recovering {
        let g = governor::Quota::per_second(
            std::num::NonZeroU32::new(1_000_000_000).expect("non-zero"),
        );
        (workload::funnel_recovering_quota(), g)
    } else {
        (
            workload::funnel_keyed_quota(),
            workload::governor_keyed_quota(),
        )
    };
    {
        let l = Limiter::<u64>::builder(fq)
            .capacity(funnel_capacity(distinct))
            .build()
            .expect("table");
        prefill(keys.iter(), |k| l.check_n(k, PREFILL_UNITS));
        run(&mut g, "funnel", &stream, |k| l.check(k).is_allowed());
        report_funnel(&format!("u64/{label}/funnel"), &l);
    }
    {
        let l: Governor<u64> = RateLimiter::keyed(gq);
        prefill(keys.iter(), |k| l.check_key_n(k, prefill_units()));
        run(&mut g, "governor", &stream, |k| l.check_key(k).is_ok());
    }
    {
        let l: Governor<u64, ahash::RandomState> =
            RateLimiter::dashmap_with_hasher(gq, ahash::RandomState::new());
        prefill(keys.iter(), |k| l.check_key_n(k, prefill_units()));
        run(&mut g, "governor-ahash", &stream, |k| {
            l.check_key(k).is_ok()
        });
    }
    if !recovering {
        let (cap, t) = workload::mutex_map_keyed_quota();
        let l = MutexMapLimiter::<u64, ahash::RandomState>::new(cap, t);
        let clock = QuantaClock::new();
        prefill(keys.iter(), |k| l.check(k, clock.now().as_nanos()));
        run(&mut g, "mutex-map", &stream, |k| {
            l.check(k, clock.now().as_nanos())
        });
    }
    g.finish();
}

fn string_group(c: &mut Criterion, label: &str, distinct: usize) {
    let stream = StringStream::new(distinct, STREAM_LEN, 0xBEEF);
    let keys = &stream.keys;
    let mut g = c.benchmark_group(format!("keyed/string/{label}"));
    workload::configure(&mut g);
    let (fq, gq) = (
        workload::funnel_keyed_quota(),
        workload::governor_keyed_quota(),
    );
    {
        let l = Limiter::<str>::builder(fq)
            .capacity(funnel_capacity(distinct))
            .build()
            .expect("table");
        prefill(keys.iter(), |k: &String| l.check_n(k, PREFILL_UNITS));
        run(&mut g, "funnel", &stream, |k: &String| {
            l.check(k).is_allowed()
        });
        report_funnel(&format!("string/{label}/funnel"), &l);
    }
    {
        let l: Governor<String> = RateLimiter::keyed(gq);
        prefill(keys.iter(), |k| l.check_key_n(k, prefill_units()));
        run(&mut g, "governor", &stream, |k| l.check_key(k).is_ok());
    }
    {
        let l: Governor<String, ahash::RandomState> =
            RateLimiter::dashmap_with_hasher(gq, ahash::RandomState::new());
        prefill(keys.iter(), |k| l.check_key_n(k, prefill_units()));
        run(&mut g, "governor-ahash", &stream, |k| {
            l.check_key(k).is_ok()
        });
    }
    {
        let (cap, t) = workload::mutex_map_keyed_quota();
        let l = MutexMapLimiter::<String, ahash::RandomState>::new(cap, t);
        let clock = QuantaClock::new();
        prefill(keys.iter(), |k| l.check(k, clock.now().as_nanos()));
        run(&mut g, "mutex-map", &stream, |k| {
            l.check(k, clock.now().as_nanos())
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    for (label, n) in [("hot", 1), ("1k", 1_000), ("1M", MILLION)] {
        u64_group(c, label, n, false);
    }
    u64_group(c, "1M-recovering", MILLION, true);
    for (label, n) in [("hot", 1), ("1k", 1_000), ("1M", MILLION)] {
        string_group(c, label, n);
    }
}

// ----------------------------------------------------------------------------------------------
// Memory per key, each store in a fresh process.
// ----------------------------------------------------------------------------------------------

const PROBE_ENV: &str = "FUNNEL_BENCH_MEM_PROBE";
const PROBE_KEYS_ENV: &str = "FUNNEL_BENCH_MEM_KEYS";
const PROBES: [&str; 7] = [
    "funnel-u64",
    "funnel-str",
    "governor-u64",
    "governor-ahash-u64",
    "governor-string",
    "mutex-map-u64",
    "mutex-map-string",
];

/// Inserts `keys` into the store built by `build`, and prints the resident-memory growth.
fn probe<K: ?Sized, L>(
    what: &str,
    keys: &[&K],
    build: impl FnOnce() -> L,
    insert: impl Fn(&L, &K),
    note: impl Fn(&L) -> String,
) {
    let (rss0, _) = workload::rss_bytes().expect("/proc/self/status");
    let store = build();
    for k in keys {
        insert(&store, k);
    }
    let (rss1, hwm1) = workload::rss_bytes().expect("/proc/self/status");
    let n = keys.len() as f64;
    println!(
        "  {what:<20} {:>5} keys: RSS +{:>6.1} MiB = {:>6.1} B/key (peak +{:>6.1} B/key){}",
        keys.len(),
        (rss1 - rss0) as f64 / (1 << 20) as f64,
        (rss1 - rss0) as f64 / n,
        (hwm1.max(rss0) - rss0) as f64 / n,
        note(&store)
    );
    std::hint::black_box(&store);
}

fn run_probe(kind: &str, n: usize) {
    let capacity = if n >= MILLION {
        1 << 21
    } else {
        (2 * n).next_power_of_two()
    };
    let quota = workload::funnel_keyed_quota();
    let gq = workload::governor_keyed_quota();
    let (cap, t) = workload::mutex_map_keyed_quota();
    let u64s = workload::u64_keys(n, 0xF00D);
    let strings = workload::string_keys(n);
    let u64_refs: Vec<&u64> = u64s.iter().collect();
    let str_refs: Vec<&String> = strings.iter().collect();
    let funnel_note = |l: &Limiter<_>| {
        format!(
            "; memory_bytes {} B = {:.2} B/slot over {} slots, {:.1} B/key held ({} held)",
            l.memory_bytes(),
            l.memory_bytes() as f64 / l.capacity() as f64,
            l.capacity(),
            l.memory_bytes() as f64 / l.len() as f64,
            l.len()
        )
    };
    let clock = QuantaClock::new();
    match kind {
        "funnel-u64" => probe(
            kind,
            &u64_refs,
            || {
                Limiter::<u64>::builder(quota)
                    .capacity(capacity)
                    .build()
                    .expect("table")
            },
            |l, k| {
                l.check_n(k, PREFILL_UNITS);
            },
            funnel_note,
        ),
        "funnel-str" => {
            let refs: Vec<&str> = strings.iter().map(String::as_str).collect();
            probe(
                kind,
                &refs,
                || {
                    Limiter::<str>::builder(quota)
                        .capacity(capacity)
                        .build()
                        .expect("table")
                },
                |l, k| {
                    l.check_n(k, PREFILL_UNITS);
                },
                |l| {
                    format!(
                        "; memory_bytes {} B, {:.1} B/key held ({} held)",
                        l.memory_bytes(),
                        l.memory_bytes() as f64 / l.len() as f64,
                        l.len()
                    )
                },
            )
        }
        "governor-u64" => probe(
            kind,
            &u64_refs,
            || Governor::<u64>::keyed(gq),
            |l, k| drop(l.check_key_n(k, prefill_units())),
            none,
        ),
        "governor-ahash-u64" => probe(
            kind,
            &u64_refs,
            || {
                Governor::<u64, ahash::RandomState>::dashmap_with_hasher(
                    gq,
                    ahash::RandomState::new(),
                )
            },
            |l, k| drop(l.check_key_n(k, prefill_units())),
            none,
        ),
        "governor-string" => probe(
            kind,
            &str_refs,
            || Governor::<String>::keyed(gq),
            |l, k| drop(l.check_key_n(k, prefill_units())),
            none,
        ),
        "mutex-map-u64" => probe(
            kind,
            &u64_refs,
            || MutexMapLimiter::<u64, ahash::RandomState>::new(cap, t),
            |l, k| {
                l.check(k, clock.now().as_nanos());
            },
            none,
        ),
        "mutex-map-string" => probe(
            kind,
            &str_refs,
            || MutexMapLimiter::<String, ahash::RandomState>::new(cap, t),
            |l, k| {
                l.check(k, clock.now().as_nanos());
            },
            none,
        ),
        other => panic!("unknown probe {other}"),
    }
}

fn none<L>(_: &L) -> String {
    String::new()
}

/// Runs every probe in a child process of its own, so that no store reuses memory another
/// freed, and prints their lines.
fn memory_report(n: usize) {
    println!("Memory per key ({n} keys; VmRSS growth in a fresh process per store):");
    let exe = std::env::current_exe().expect("current exe");
    for kind in PROBES {
        let out = std::process::Command::new(&exe)
            .env(PROBE_ENV, kind)
            .env(PROBE_KEYS_ENV, n.to_string())
            .output()
            .expect("spawn probe");
        assert!(
            out.status.success(),
            "probe {kind} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

fn main() {
    if let Ok(kind) = std::env::var(PROBE_ENV) {
        let n = std::env::var(PROBE_KEYS_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(MILLION);
        run_probe(&kind, n);
        return;
    }
    memory_report(if workload::quick_mode() {
        10_000
    } else {
        MILLION
    });
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
