//! The cost of the policies over a plain decision, single thread, 1,000 present `u64` keys
//! walked in a fixed pseudo-random order, the always-allowing keyed quota of `funnel_testkit::workload`:
//!
//! * `limiter/check`: [`funnel::Limiter::check`], the single-limit hot path (unchanged by the
//!   policies: this is the baseline);
//! * `live/check`: [`funnel::LiveLimiter::check`], the same plus a live quota load;
//! * `check_all/1` and `check_all/2`: [`funnel::check_all`] with one and two entries;
//! * `near/check`: a decision and its near-limit test.
//!
//! Run: `cargo bench --bench policies` (smoke: `-- --test`).

use criterion::{black_box, Criterion, Throughput};
use funnel::{check_all, Limiter, LiveLimiter};

use funnel_testkit::workload;

const KEYS: usize = 1_000;

fn benches(c: &mut Criterion) {
    let keys = workload::u64_keys(KEYS, 0xF00D);
    let order: Vec<u64> = (0..1u64 << 16)
        .map(|i| keys[(workload::mix(i) % KEYS as u64) as usize])
        .collect();
    let quota = workload::funnel_keyed_quota();
    let limiter = Limiter::<u64>::new(quota);
    let second = Limiter::<u64>::new(quota);
    let live = LiveLimiter::new(Limiter::<u64>::new(quota));
    for k in &keys {
        let _ = limiter.check(k);
        let _ = second.check(k);
        let _ = live.current().check(k);
    }
    let mut g = c.benchmark_group("policies/u64/1000");
    g.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    let mut next = move || {
        i = (i + 1) & (order.len() - 1);
        order[i]
    };
    g.bench_function("limiter/check", |b| {
        b.iter(|| black_box(limiter.check(&next()).is_allowed()))
    });
    g.bench_function("live/check", |b| {
        b.iter(|| black_box(live.current().check(&next()).is_allowed()))
    });
    g.bench_function("check_all/1", |b| {
        b.iter(|| {
            let k = next();
            black_box(check_all(&[&limiter.cost(&k, 1)], limiter.now()).is_allowed())
        })
    });
    g.bench_function("check_all/2", |b| {
        b.iter(|| {
            let k = next();
            let now = limiter.now();
            black_box(check_all(&[&limiter.cost(&k, 1), &second.cost(&k, 1)], now).is_allowed())
        })
    });
    g.bench_function("near/check", |b| {
        b.iter(|| black_box(limiter.check(&next()).is_near_limit(80)))
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    benches(&mut c);
    c.final_summary();
}
