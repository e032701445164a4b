//! The Redis-backed competitors (through `redis_side`): each script with one connection,
//! several connections, and several pipelined connections, on the 1,000-key workload with the
//! same String keys as the in-process hot-1k rows; the non-atomic hash's over-admission; and
//! memory per key in Redis. The redis-cell module's `CL.THROTTLE` gets the same rows beside
//! the scripts where the module is built (`bash .ci/redis-cell.sh`), loaded into the same
//! server; otherwise its rows are skipped with a notice. Also the in-process counterpart of
//! the over-admission test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

use funnel::clock::QuantaClock;
use funnel::Limiter;
use governor::RateLimiter;

use crate::keys::{request_arrays, Dist};
use crate::limiters::{nz, Limit, MutexMap, QuotaKind};
use crate::numbers::fmt_int;
use crate::redis_side::{self, RedisAlgo, RedisQuota, RedisServer};
use crate::report::{Row, Section};
use crate::runner::Run;
use crate::Ctx;
use funnel_testkit::mutex_map::MutexMapLimiter;

/// Pipeline depth of the pipelined rows.
pub const PIPELINE: usize = 64;
/// Over-admission test: threads, requests per thread, limit (the usual over-admission demo: 100 threads
/// against a limit of 10).
pub const OVER_THREADS: usize = 100;
pub const OVER_PER_THREAD: u64 = 10;
pub const OVER_LIMIT: u64 = 10;

#[derive(Clone, Debug)]
pub struct OverRow {
    pub who: String,
    pub admitted_over_limit: u64,
    pub method: String,
}

/// (connections, pipeline depth) of the Redis rows.
pub fn settings(max_threads: usize) -> Vec<(usize, usize)> {
    let mut v = vec![(1, 1), (max_threads, 1), (max_threads, PIPELINE)];
    v.dedup();
    v
}

pub fn redis_keys_in_memory_test(quick: bool) -> u64 {
    if quick {
        10_000
    } else {
        100_000
    }
}

pub fn plan_weight(o: &crate::cli::Options) -> f64 {
    // The module's rows are planned for whether or not it is built: a missing module
    // advances the bar by their weight.
    (RedisAlgo::ALL.len() + 1) as f64 * algo_weight(o) + 2.0 + crate::fleet_rows::plan_weight(o)
}

/// The progress weight of one algorithm's rows, over-admission and memory per key.
fn algo_weight(o: &crate::cli::Options) -> f64 {
    settings(o.max_threads()).len() as f64 * 2.0 * o.runs as f64 * o.redis_duration.as_secs_f64()
        + 1.5
}

/// What the Redis rows run on: every script, and `CL.THROTTLE` where the module is built.
fn algos(cell: bool) -> Vec<RedisAlgo> {
    let mut v = RedisAlgo::ALL.to_vec();
    if cell {
        v.push(RedisAlgo::Cell);
    }
    v
}

pub fn run(ctx: &mut Ctx) -> Result<(), String> {
    ctx.progress.begin("redis: starting redis-server");
    if RedisServer::binary().is_none() {
        let msg = "redis-server is not installed: the Redis rows are skipped and only the in-process rows \
                   are reported (install it with: apt-get install -y redis-server)";
        ctx.progress.log(&format!("note: {msg}"));
        ctx.redis_status = msg.to_string();
        ctx.progress.advance(plan_weight(&ctx.opts));
        return Ok(());
    }
    let module = funnel_testkit::redis_cell::library();
    let server = match &module {
        Ok(path) => {
            let path = path
                .to_str()
                .ok_or_else(|| format!("the module's path {} is not UTF-8", path.display()))?;
            RedisServer::start_with(&["--loadmodule", path])
        }
        Err(_) => RedisServer::start(),
    }
    .map_err(|e| format!("starting redis-server: {e}"))?;
    let version = server.version().to_string();
    let cell = match &module {
        Ok(path) => format!("the redis-cell module loaded from {}", path.display()),
        Err(why) => {
            let msg = format!("the redis-cell rows are skipped: {why}");
            ctx.progress.log(&format!("note: {msg}"));
            ctx.progress.advance(algo_weight(&ctx.opts));
            msg
        }
    };
    ctx.redis_status = format!(
        "Redis {version}, started by the harness on loopback (the test kit's launcher); {cell}"
    );
    ctx.redis_version = Some(version);
    let o = ctx.opts.clone();
    let conns = o.max_threads();
    // The same key stream as the in-process hot-1k String rows (same seed, a shorter prefix).
    let arrays = request_arrays::<String>(&Dist::Uniform(1000), conns, 1 << 16, 0xF00D + 1000);
    for algo in algos(module.is_ok()) {
        for quota in [QuotaKind::Allow, QuotaKind::Deny] {
            let (limit, count, period_ms) = quota.redis();
            let rq = RedisQuota {
                limit,
                count,
                period_ms,
            };
            server.flushall()?;
            for (threads, pipeline) in settings(conns) {
                let mut runs = Vec::with_capacity(o.runs);
                for r in 0..o.runs {
                    ctx.progress.begin(format!(
                        "redis {} {} {threads} conn × pipeline {pipeline} run {}/{}",
                        algo.label(),
                        quota.label(),
                        r + 1,
                        o.runs
                    ));
                    let rr = redis_side::run(
                        &server,
                        algo,
                        rq,
                        &arrays[..threads],
                        pipeline,
                        o.redis_duration,
                    )
                    .map_err(|e| {
                        format!(
                            "redis {} {threads} conns pipeline {pipeline}: {e}",
                            algo.label()
                        )
                    })?;
                    if rr.decisions == 0 {
                        return Err(format!(
                            "redis {} {threads} conns pipeline {pipeline}: no decisions",
                            algo.label()
                        ));
                    }
                    runs.push(Run {
                        decisions: rr.decisions,
                        allowed: rr.allowed,
                        elapsed: rr.elapsed,
                        cpu_share: f64::NAN,
                        ..Run::default()
                    });
                    ctx.progress.advance(o.redis_duration.as_secs_f64());
                }
                ctx.rows.push(Row {
                    section: Section::Redis,
                    workload: "hot-1k".into(),
                    key_space: 1000,
                    key_type: "String",
                    quota: quota.label().into(),
                    threads,
                    pipeline,
                    competitor: format!("redis-{}", algo.label()),
                    clock: match algo {
                        RedisAlgo::NaiveHash => "client ms".into(),
                        // The module reads the wall clock itself, in nanoseconds.
                        RedisAlgo::Cell => "server clock".into(),
                        _ => "server TIME".into(),
                    },
                    capacity: "server".into(),
                    runs,
                    note: String::new(),
                    prefill: None,
                    table_prefill: None,
                    table_end: None,
                    held_end: None,
                });
            }
        }
        ctx.progress.begin(format!(
            "redis {}: over-admission and memory per key",
            algo.label()
        ));
        let admitted =
            redis_side::over_admission(&server, algo, OVER_THREADS, OVER_PER_THREAD, OVER_LIMIT)
                .map_err(|e| format!("redis {} over-admission: {e}", algo.label()))?;
        ctx.over.push(OverRow {
            who: format!("redis-{}", algo.label()),
            admitted_over_limit: admitted.saturating_sub(OVER_LIMIT),
            method: format!(
                "redis_side::over_admission: {OVER_THREADS} threads (one connection each) × {OVER_PER_THREAD} requests on one key, \
                 limit {OVER_LIMIT} (refill 1/hour), one request per round trip; {} admitted",
                fmt_int(admitted)
            ),
        });
        let n = redis_keys_in_memory_test(o.quick);
        let (limit, count, period_ms) = QuotaKind::Deny.redis();
        let per_key = redis_side::memory_per_key(
            &server,
            algo,
            RedisQuota {
                limit,
                count,
                period_ms,
            },
            n,
        )
        .map_err(|e| format!("redis {} memory per key: {e}", algo.label()))?;
        ctx.memory.push(crate::memory::MemRow {
            store: format!("Redis {}", algo.label()),
            key_type: "String".into(),
            keys: n,
            bytes_per_key: per_key,
            peak_per_key: None,
            method: "redis_side::memory_per_key: INFO memory used_memory growth (less client buffers) ÷ keys; \
                     keys `user:` + 11 digits, one allowed request each, deny quota"
                .into(),
        });
        ctx.progress.advance(1.5);
    }
    crate::fleet_rows::run(ctx, &server)?;
    server.flushall()?;
    drop(server);
    ctx.progress.advance(2.0);
    Ok(())
}

/// The same over-admission test in process: `OVER_THREADS` threads released together, each
/// making `OVER_PER_THREAD` requests for one key limited to `OVER_LIMIT` per minute.
pub fn inproc_over_admission(ctx: &mut Ctx) -> Result<(), String> {
    ctx.progress.begin("over-admission, in process");
    let per_minute = OVER_LIMIT;
    let fq = funnel::Quota::per_minute(per_minute).map_err(|e| e.to_string())?;
    let funnel = Limiter::<str>::builder(fq)
        .build()
        .map_err(|e| e.to_string())?;
    let admitted = hammer(|| funnel.check("user:42:login").is_allowed());
    push_over(ctx, "funnel", admitted);
    let gov =
        RateLimiter::<String, _, _>::keyed(governor::Quota::per_minute(nz(per_minute as u32)));
    let key = "user:42:login".to_string();
    let admitted = hammer(|| gov.check_key(&key).is_ok());
    push_over(ctx, "governor-keyed", admitted);
    // The Mutex<HashMap> funnel with limit OVER_LIMIT, one unit every 60 s / OVER_LIMIT.
    let mm = MutexMap {
        map: MutexMapLimiter::<String, ahash::RandomState>::new(
            per_minute,
            60_000_000_000 / per_minute,
        ),
        clock: QuantaClock::new(),
    };
    let admitted = hammer(|| mm.check(&key));
    push_over(ctx, "mutex-map", admitted);
    ctx.progress.advance(1.0);
    Ok(())
}

fn push_over(ctx: &mut Ctx, who: &str, admitted: u64) {
    ctx.over.push(OverRow {
        who: who.into(),
        admitted_over_limit: admitted.saturating_sub(OVER_LIMIT),
        method: format!(
            "in process: {OVER_THREADS} threads × {OVER_PER_THREAD} requests on one key, limit {OVER_LIMIT}/min; {} admitted",
            fmt_int(admitted)
        ),
    });
}

fn hammer(check: impl Fn() -> bool + Sync) -> u64 {
    let admitted = AtomicU64::new(0);
    let barrier = Barrier::new(OVER_THREADS);
    std::thread::scope(|s| {
        for _ in 0..OVER_THREADS {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..OVER_PER_THREAD {
                    if check() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    admitted.into_inner()
}
