//! Per-decision paths, single thread, each funnel path against the matching governor
//! path (governor's keyed limiter on its default `DashMap` store, with its default SipHash
//! hasher and with ahash, funnel's hasher). Every competitor reads the same quanta clock once per
//! decision, unless the bench says otherwise.
//!
//! * `hit`: an allowed request for a key already present (1,000 `u64` keys, cycled in a
//!   pre-generated random order; everything stays in cache).
//! * `deny`: a request for a present key that is limited (1 per hour, each key spent first).
//! * `recovered`: `hit` under 1e9 per second, where every funnel has recovered by its next
//!   request, so funnel re-creates the key each time (a weak spot, shown on purpose).
//! * `new-key`: the first request of a key never seen (quota 1 per hour, so it is allowed).
//!   funnel: into a table of 2^20 slots (16 MiB) that is never more than 1/8 full (a fresh
//!   table replaces it, outside the timing, after 2^17 new keys), and into one of 2^18 slots
//!   (4 MiB, at most half full), to show how much of the cost is the table's size in memory.
//!   governor: inserting into its DashMap, which starts empty and grows to 2^17 keys the same
//!   way, its growth included (that is what governor does); `governor-ahash-presized` gives it
//!   a map allocated for 2^17 keys up front, as funnel's table is (its pages are first touched
//!   inside the timing, funnel's when the table is built).
//! * `evict`: funnel: the first request of a never-seen key into a full table of 1,024 slots
//!   whose funnels are all in debt, so every request evicts one (forced evictions are counted
//!   and printed). governor has no eviction at all — its map grows without bound until the
//!   caller runs `retain_recent` — so the nearest governor path is its insert, repeated here.
//! * `time`: funnel's hit with the limiter's clock read (`check`) against the same hit with a
//!   time the caller already has (`check_at`). governor's keyed limiter has no caller-time
//!   variant.
//! * `clock`: the clock read alone: funnel's `QuantaClock::now`, governor's `QuantaClock::now`
//!   (both quanta), and `std::time::Instant::now` for scale.
//!
//! Every bench times its own loop (`iter_custom`), so that `FUNNEL_BENCH_CLOCK=cpu` can switch
//! all of them to per-thread CPU time on a busy machine (`common/workload.rs`).
//!
//! Run: `cargo bench --bench paths` (smoke: `cargo bench --bench paths -- --test`).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use funnel::clock::{Clock, QuantaClock};
use funnel::{Limiter, Quota};
use governor::clock::Clock as _;
use governor::state::keyed::DashMapStateStore;
use governor::RateLimiter;

use funnel_testkit::workload;

use workload::{Stamp, Stream, U64Stream};

type Governor<S = std::hash::RandomState> =
    RateLimiter<u64, DashMapStateStore<u64, S>, governor::clock::QuantaClock>;

const PRESENT_KEYS: usize = 1_000;
/// New keys per fresh store in `new-key`.
const NEW_KEYS_PER_STORE: usize = 1 << 17;
/// funnel's table in `new-key`: 8 times the keys it will take.
const NEW_KEY_CAPACITY: usize = 1 << 20;
/// funnel's full table in `evict`.
const EVICT_CAPACITY: usize = 1 << 10;

fn governor_default(q: governor::Quota) -> Governor {
    RateLimiter::keyed(q)
}

fn governor_ahash(q: governor::Quota) -> Governor<ahash::RandomState> {
    RateLimiter::dashmap_with_hasher(q, ahash::RandomState::new())
}

fn governor_ahash_presized(q: governor::Quota) -> Governor<ahash::RandomState> {
    let map =
        DashMapStateStore::with_capacity_and_hasher(NEW_KEYS_PER_STORE, ahash::RandomState::new());
    RateLimiter::new(q, map, governor::clock::QuantaClock::default())
}

fn per_hour() -> (Quota, governor::Quota) {
    (
        Quota::per_hour(1).expect("valid"),
        governor::Quota::per_hour(NonZeroU32::new(1).expect("non-zero")),
    )
}

/// `hit` and `deny`: decisions on present keys; `allowing` says which outcome they must have.
fn present(c: &mut Criterion, name: &str, (fq, gq): (Quota, governor::Quota), allowing: bool) {
    let stream = U64Stream::new(PRESENT_KEYS, 1 << 14, 0xC0DE);
    let mut g = c.benchmark_group(format!("paths/{name}"));
    workload::configure(&mut g);
    g.throughput(Throughput::Elements(1));

    let l = Limiter::<u64>::builder(fq).build().expect("table");
    let gov = governor_default(gq);
    let gov_ahash = governor_ahash(gq);
    for k in &stream.keys {
        let _ = l.check(k);
        let _ = gov.check_key(k);
        let _ = gov_ahash.check_key(k);
    }
    let mut i = 0usize;
    g.bench_function("funnel", |b| {
        b.iter_custom(|iters| {
            workload::time_loop(iters, || {
                i += 1;
                l.check(stream.key(i)).is_allowed()
            })
        });
        assert_eq!(l.check(stream.key(i)).is_allowed(), allowing);
    });
    g.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            workload::time_loop(iters, || {
                i += 1;
                gov.check_key(stream.key(i)).is_ok()
            })
        });
        assert_eq!(gov.check_key(stream.key(i)).is_ok(), allowing);
    });
    g.bench_function("governor-ahash", |b| {
        b.iter_custom(|iters| {
            workload::time_loop(iters, || {
                i += 1;
                gov_ahash.check_key(stream.key(i)).is_ok()
            })
        });
        assert_eq!(gov_ahash.check_key(stream.key(i)).is_ok(), allowing);
    });
    g.finish();
}

/// A store that takes `per_store` never-seen keys and is then replaced by a fresh one; keys and
/// stores are made outside the timing.
struct Fresh<L> {
    build: Box<dyn Fn() -> L>,
    store: L,
    used: usize,
    per_store: usize,
    next_key: u64,
    keys: Vec<u64>,
}

impl<L> Fresh<L> {
    fn new(build: impl Fn() -> L + 'static, per_store: usize) -> Self {
        let store = build();
        Fresh {
            build: Box::new(build),
            store,
            used: 0,
            per_store,
            next_key: 0,
            keys: Vec::new(),
        }
    }

    /// Times `insert` of `iters` never-seen keys.
    fn time<R>(&mut self, iters: u64, insert: impl Fn(&L, &u64) -> R) -> Duration {
        let mut total = Duration::ZERO;
        let mut left = iters as usize;
        while left > 0 {
            if self.used == self.per_store {
                self.store = (self.build)();
                self.used = 0;
            }
            let n = left.min(self.per_store - self.used);
            // `mix` is a bijection, so a counter never repeats a key, across stores too.
            self.keys.clear();
            self.keys
                .extend((self.next_key..self.next_key + n as u64).map(workload::mix));
            self.next_key += n as u64;
            let start = Stamp::now();
            for k in &self.keys {
                black_box(insert(&self.store, k));
            }
            total += start.until(Stamp::now());
            self.used += n;
            left -= n;
        }
        total
    }
}

fn governor_inserts(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    gq: governor::Quota,
) {
    let mut gov = Fresh::new(move || governor_default(gq), NEW_KEYS_PER_STORE);
    g.bench_function("governor-insert", |b| {
        b.iter_custom(|iters| gov.time(iters, |l, k| l.check_key(k).is_ok()))
    });
    let mut gov = Fresh::new(move || governor_ahash(gq), NEW_KEYS_PER_STORE);
    g.bench_function("governor-ahash-insert", |b| {
        b.iter_custom(|iters| gov.time(iters, |l, k| l.check_key(k).is_ok()))
    });
}

fn new_key(c: &mut Criterion) {
    // 1 per hour: the first request of a new key is allowed and leaves it in debt, so no
    // funnel recovers and frees its slot while a store is being filled.
    let (fq, gq) = per_hour();
    let mut g = c.benchmark_group("paths/new-key");
    workload::configure(&mut g);
    g.throughput(Throughput::Elements(1));
    for (name, capacity) in [
        ("funnel", NEW_KEY_CAPACITY),
        ("funnel-table-2^18", 2 * NEW_KEYS_PER_STORE),
    ] {
        let mut f = Fresh::new(
            move || {
                Limiter::<u64>::builder(fq)
                    .capacity(capacity)
                    .build()
                    .expect("table")
            },
            NEW_KEYS_PER_STORE,
        );
        g.bench_function(name, |b| {
            b.iter_custom(|iters| f.time(iters, |l, k| l.check(k).is_allowed()));
            let s = f.store.stats();
            assert_eq!(
                s.forced_evictions + s.recovered_evictions,
                0,
                "new-key must not evict"
            );
        });
    }
    governor_inserts(&mut g, gq);
    let mut gov = Fresh::new(move || governor_ahash_presized(gq), NEW_KEYS_PER_STORE);
    g.bench_function("governor-ahash-presized-insert", |b| {
        b.iter_custom(|iters| gov.time(iters, |l, k| l.check_key(k).is_ok()))
    });
    g.finish();
}

fn evict(c: &mut Criterion) {
    let (fq, gq) = per_hour();
    let mut g = c.benchmark_group("paths/evict");
    workload::configure(&mut g);
    g.throughput(Throughput::Elements(1));
    let l = Limiter::<u64>::builder(fq)
        .capacity(EVICT_CAPACITY)
        .build()
        .expect("table");
    // Fill every slot: keys that find both candidate buckets full already evict, so keep
    // adding until the last empty slot is taken.
    let mut next = u64::MAX / 2; // far from the keys `Fresh` will hand out
    while l.len() < l.capacity() {
        let _ = l.check(&workload::mix(next));
        next += 1;
    }
    let before = l.stats();
    let mut requests = 0u64;
    g.bench_function("funnel-evict", |b| {
        b.iter_custom(|iters| {
            requests += iters;
            let keys: Vec<u64> = (next..next + iters).map(workload::mix).collect();
            next += iters;
            let start = Stamp::now();
            for k in &keys {
                black_box(l.check(k).is_allowed());
            }
            start.until(Stamp::now())
        })
    });
    let after = l.stats();
    println!(
        "  [evict] {requests} requests: {} forced evictions, {} recovered, {} keys held of {}",
        after.forced_evictions - before.forced_evictions,
        after.recovered_evictions - before.recovered_evictions,
        after.keys,
        l.capacity()
    );
    // governor cannot evict: the nearest path is inserting into its ever-growing map.
    governor_inserts(&mut g, gq);
    g.finish();
}

fn time(c: &mut Criterion) {
    let stream = U64Stream::new(PRESENT_KEYS, 1 << 14, 0xC0DE);
    let fq = workload::funnel_keyed_quota();
    let mut g = c.benchmark_group("paths/time");
    workload::configure(&mut g);
    g.throughput(Throughput::Elements(1));
    let l = Limiter::<u64>::builder(fq).build().expect("table");
    for k in &stream.keys {
        let _ = l.check(k);
    }
    let mut i = 0usize;
    g.bench_function("funnel-check-clock-read", |b| {
        b.iter_custom(|iters| {
            workload::time_loop(iters, || {
                i += 1;
                l.check(stream.key(i)).is_allowed()
            })
        })
    });
    g.bench_function("funnel-check_at-caller-time", |b| {
        let now = l.now();
        b.iter_custom(|iters| {
            workload::time_loop(iters, || {
                i += 1;
                l.check_at(stream.key(i), black_box(now)).is_allowed()
            })
        })
    });
    g.finish();
}

fn clock(c: &mut Criterion) {
    let mut g = c.benchmark_group("paths/clock");
    workload::configure(&mut g);
    g.throughput(Throughput::Elements(1));
    let f = QuantaClock::new();
    g.bench_function("funnel-QuantaClock", |b| {
        b.iter_custom(|iters| workload::time_loop(iters, || f.now()))
    });
    let gc = governor::clock::QuantaClock::default();
    g.bench_function("governor-QuantaClock", |b| {
        b.iter_custom(|iters| workload::time_loop(iters, || gc.now()))
    });
    g.bench_function("std-Instant", |b| {
        b.iter_custom(|iters| workload::time_loop(iters, Instant::now))
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    present(
        c,
        "hit",
        (
            workload::funnel_keyed_quota(),
            workload::governor_keyed_quota(),
        ),
        true,
    );
    present(c, "deny", per_hour(), false);
    // A weak spot shown on purpose: under 1e9 per second every funnel has recovered 1 ns after
    // its request, funnel treats a recovered funnel as absent, so each request re-creates its
    // key in a reused slot; governor and the map just find theirs.
    present(
        c,
        "recovered",
        (
            workload::funnel_recovering_quota(),
            governor::Quota::per_second(NonZeroU32::new(1_000_000_000).expect("non-zero")),
        ),
        true,
    );
    new_key(c);
    evict(c);
    time(c);
    clock(c);
}

criterion_group!(paths_benches, benches);
criterion_main!(paths_benches);
