//! One hot funnel: [`funnel::Funnel`] against governor's direct (unkeyed) limiter.
//!
//! * `clock`: each side reads its default clock on every decision. Both are quanta's TSC clock
//!   (funnel's `QuantaClock`, governor's `QuantaClock`), so this compares the decision paths
//!   at the same clock cost.
//! * `caller-time`: funnel's `check_at(now)` with a `Timestamp` the caller already has (behind
//!   `black_box`, so the compiler cannot fold it), against governor on its `FakeRelativeClock`,
//!   the closest governor has to "the caller supplies the time": a relaxed atomic load.
//! * `allow`: a quota that never limits in a run (1 ns emission interval, bursts of
//!   `u32::MAX`); every decision is allowed and writes (one CAS on each side). In the
//!   caller-time benches the time stands still within a sample, so each sample first moves it
//!   on by an hour (outside the timing) and the funnel starts the sample recovered.
//! * `deny`: 1 per hour, exhausted by one request first; every decision is denied and writes
//!   nothing on either side.
//! * `contended`: the `allow` clock benches on 2 threads sharing the one funnel (aggregate
//!   decisions per second; every decision is a CAS on one shared cache line).
//!
//! Every bench keeps each decision's allowed/denied answer (`black_box` of a `bool`, the one
//! thing every caller reads) and times its own loop (`iter_custom`), so that `FUNNEL_BENCH_CLOCK=cpu` can switch
//! all of them to per-thread CPU time on a busy machine (`common/workload.rs`).
//!
//! Run: `cargo bench --bench funnel` (smoke: `cargo bench --bench funnel -- --test`).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use funnel::{Funnel, Quota, Timestamp};
use governor::clock::FakeRelativeClock;
use governor::RateLimiter;

use funnel_testkit::workload;

const HOUR: Duration = Duration::from_secs(3600);

fn allow_quotas() -> (Quota, governor::Quota) {
    let f = Quota::per_second(1_000_000_000)
        .and_then(|q| q.with_limit(u64::from(u32::MAX)))
        .expect("valid quota");
    let g = governor::Quota::per_second(NonZeroU32::new(1_000_000_000).expect("non-zero"))
        .allow_burst(NonZeroU32::new(u32::MAX).expect("non-zero"));
    (f, g)
}

fn deny_quotas() -> (Quota, governor::Quota) {
    let f = Quota::per_hour(1).expect("valid quota");
    let g = governor::Quota::per_hour(NonZeroU32::new(1).expect("non-zero"));
    (f, g)
}

fn short<M: criterion::measurement::Measurement>(g: &mut BenchmarkGroup<'_, M>) {
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
}

/// The four single-thread benches for one quota; `allowing` says which outcome every
/// decision must have (checked once after each sample, outside the timing).
fn one_funnel(c: &mut Criterion, name: &str, (fq, gq): (Quota, governor::Quota), allowing: bool) {
    let mut g = c.benchmark_group(format!("funnel/{name}"));
    short(&mut g);
    g.throughput(Throughput::Elements(1));

    // Both on their default quanta clock.
    let f = Funnel::new(fq);
    let gov = RateLimiter::direct(gq);
    if !allowing {
        assert!(f.check().is_allowed() && gov.check().is_ok());
    }
    g.bench_function("clock/funnel", |b| {
        b.iter_custom(|iters| workload::time_loop(iters, || f.check().is_allowed()));
        assert_eq!(f.check().is_allowed(), allowing);
    });
    g.bench_function("clock/governor", |b| {
        b.iter_custom(|iters| workload::time_loop(iters, || gov.check().is_ok()));
        assert_eq!(gov.check().is_ok(), allowing);
    });

    // The time handed in: funnel's `check_at`, governor's fake clock.
    let f = Funnel::new(fq);
    let mut now = Timestamp::from_duration(HOUR).expect("in range");
    let fake = FakeRelativeClock::default();
    fake.advance(HOUR);
    let gov = RateLimiter::direct_with_clock(gq, fake.clone());
    if !allowing {
        assert!(f.check_at(now).is_allowed() && gov.check().is_ok());
    }
    g.bench_function("caller-time/funnel", |b| {
        b.iter_custom(|iters| {
            if allowing {
                now = now.saturating_add(HOUR);
            }
            let elapsed = workload::time_loop(iters, || f.check_at(black_box(now)).is_allowed());
            assert_eq!(f.check_at(now).is_allowed(), allowing);
            elapsed
        });
    });
    g.bench_function("caller-time/governor-fake-clock", |b| {
        b.iter_custom(|iters| {
            if allowing {
                fake.advance(HOUR);
            }
            let elapsed = workload::time_loop(iters, || gov.check().is_ok());
            assert_eq!(gov.check().is_ok(), allowing);
            elapsed
        });
    });
    g.finish();
}

fn contended(c: &mut Criterion) {
    let (fq, gq) = allow_quotas();
    let mut g = c.benchmark_group("funnel/contended-allow");
    short(&mut g);
    for threads in [1, 2] {
        g.throughput(Throughput::Elements(threads as u64));
        let f = Funnel::new(fq);
        g.bench_function(format!("funnel/{threads}t"), |b| {
            b.iter_custom(|iters| {
                workload::run_threads(threads, iters, |_, _| f.check().is_allowed())
            });
            assert!(f.check().is_allowed());
        });
        let gov = RateLimiter::direct(gq);
        g.bench_function(format!("governor/{threads}t"), |b| {
            b.iter_custom(|iters| {
                workload::run_threads(threads, iters, |_, _| gov.check().is_ok())
            });
            assert!(gov.check().is_ok());
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    one_funnel(c, "allow", allow_quotas(), true);
    one_funnel(c, "deny", deny_quotas(), false);
    contended(c);
}

criterion_group!(funnel_benches, benches);
criterion_main!(funnel_benches);
