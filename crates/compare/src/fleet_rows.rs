//! funnel-redis next to the Redis scripts: the same funnel kept in Redis for a fleet, with and
//! without its local deny cache, one request in flight and 64 (the multiplexed connection
//! pipelines them), under the allowing quota on the hot-1k String keys and under an abusive
//! mix (90% of the requests from 10 abusive keys that are almost always denied, 10% from a
//! stream of legitimate keys that never repeat, so they are allowed). Each row also records Redis
//! round trips per decision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use funnel_redis::RedisLimiter;

use crate::limiters::QuotaKind;
use crate::redis_side::RedisServer;
use crate::report::{Row, Section};
use crate::runner::Run;
use crate::Ctx;

/// Requests in flight in the pipelined rows (as the scripts' pipeline depth).
const IN_FLIGHT: [usize; 2] = [1, 64];

/// One funnel-redis row's setting.
#[derive(Clone, Copy)]
struct Setting {
    abusive: bool,
    cache: bool,
    in_flight: usize,
}

/// The `i`-th request's key: the hot-1k String keys, or the abusive mix. Computed per request
/// (splitmix64 of `i`) so the legitimate keys of the abusive mix do not repeat within a run.
fn key(abusive: bool, i: u64) -> String {
    let x = funnel_testkit::mix(i);
    if !abusive {
        format!("user:{}", x % 1000)
    } else if x % 10 != 0 {
        format!("abuser:{}", (x >> 4) % 10)
    } else {
        format!("user:{}", x >> 8)
    }
}

fn quota(abusive: bool) -> Result<funnel::Quota, String> {
    if abusive {
        // 10 per hour per key: the abusers are denied after their first ten requests.
        funnel::Quota::new(9, 10, Duration::from_secs(3600)).map_err(|e| e.to_string())
    } else {
        Ok(QuotaKind::Allow.funnel())
    }
}

pub fn plan_weight(o: &crate::cli::Options) -> f64 {
    (2 * 2 * IN_FLIGHT.len() * o.runs) as f64 * o.redis_duration.as_secs_f64() + 1.0
}

/// Runs the funnel-redis rows against the harness's redis-server.
pub fn run(ctx: &mut Ctx, server: &RedisServer) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(ctx.opts.max_threads())
        .enable_all()
        .build()
        .map_err(|e| format!("starting tokio: {e}"))?;
    let o = ctx.opts.clone();
    for abusive in [false, true] {
        for in_flight in IN_FLIGHT {
            for cache in [false, true] {
                let s = Setting {
                    abusive,
                    cache,
                    in_flight,
                };
                let mut runs = Vec::with_capacity(o.runs);
                let mut trips = 0u64;
                for r in 0..o.runs {
                    ctx.progress.begin(format!(
                        "funnel-redis {} cache {} × {in_flight} in flight run {}/{}",
                        if abusive { "abusive" } else { "allow" },
                        if cache { "on" } else { "off" },
                        r + 1,
                        o.runs
                    ));
                    server.flushall()?;
                    let (run, round_trips) =
                        rt.block_on(one_run(server.url(), s, o.redis_duration))?;
                    trips += round_trips;
                    runs.push(run);
                    ctx.progress.advance(o.redis_duration.as_secs_f64());
                }
                let decisions: u64 = runs.iter().map(|r| r.decisions).sum();
                ctx.rows.push(Row {
                    section: Section::Redis,
                    workload: if abusive { "abusive" } else { "hot-1k" }.into(),
                    key_space: if abusive { 0 } else { 1000 },
                    key_type: "String",
                    quota: if abusive { "10/hour" } else { "allow" }.into(),
                    threads: 1,
                    pipeline: in_flight,
                    competitor: if cache {
                        "funnel-redis+cache"
                    } else {
                        "funnel-redis"
                    }
                    .into(),
                    clock: "server TIME".into(),
                    capacity: if cache {
                        "server + 100,000-key cache"
                    } else {
                        "server"
                    }
                    .into(),
                    runs,
                    note: format!(
                        "{:.4} Redis round trips per decision",
                        trips as f64 / decisions.max(1) as f64
                    ),
                    prefill: None,
                    table_prefill: None,
                    table_end: None,
                    held_end: None,
                });
            }
        }
    }
    ctx.progress.advance(1.0);
    Ok(())
}

/// One timed run: `in_flight` tasks on one limiter (one multiplexed connection), each walking
/// its share of the stream until the deadline. Returns the run and its Redis round trips.
async fn one_run(url: String, s: Setting, duration: Duration) -> Result<(Run, u64), String> {
    let limiter = Arc::new(
        RedisLimiter::builder(url, quota(s.abusive)?)
            .timeout(Duration::from_secs(2))
            .deny_cache(if s.cache { 100_000 } else { 0 })
            .build()
            .await
            .map_err(|e| format!("funnel-redis: {e}"))?,
    );
    let (decisions, allowed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(s.in_flight);
    for t in 0..s.in_flight {
        let limiter = limiter.clone();
        let (decisions, allowed) = (decisions.clone(), allowed.clone());
        tasks.push(tokio::spawn(async move {
            // Each task watches the deadline itself: a deny-cache answer is ready at once and
            // never yields to the runtime, so a timer could starve behind it.
            let mut i = t as u64;
            while started.elapsed() < duration {
                let c = limiter
                    .check(&key(s.abusive, i))
                    .await
                    .map_err(|e| format!("funnel-redis check: {e}"))?;
                decisions.fetch_add(1, Ordering::Relaxed);
                allowed.fetch_add(u64::from(c.decision.is_allowed()), Ordering::Relaxed);
                i += s.in_flight as u64;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| format!("funnel-redis task: {e}"))??;
    }
    let run = Run {
        decisions: decisions.load(Ordering::Relaxed),
        allowed: allowed.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
        cpu_share: f64::NAN,
        ..Run::default()
    };
    Ok((run, limiter.stats().round_trips))
}

/// What the deny cache changes: for each mix and requests in flight, decisions/s and Redis
/// round trips per decision without and with it.
pub fn cache_table(ctx: &Ctx) -> crate::tables::Table {
    use crate::report::{fmt_rate, fmt_ratio};
    let mut t = crate::tables::Table::new(
        &[
            "mix",
            "in flight",
            "decisions/s",
            "with cache",
            "round trips/decision",
            "with cache",
            "fewer trips",
        ],
        &[false, true, true, true, true, true, true],
    );
    let get = |wl: &str, p: usize, c: &str| {
        ctx.rows.iter().find(|r| {
            r.section == Section::Redis && r.workload == wl && r.pipeline == p && r.competitor == c
        })
    };
    let trips = |r: &Row| {
        r.note
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
    };
    for wl in ["hot-1k", "abusive"] {
        for p in IN_FLIGHT {
            let (Some(off), Some(on)) =
                (get(wl, p, "funnel-redis"), get(wl, p, "funnel-redis+cache"))
            else {
                continue;
            };
            let (a, b) = (trips(off), trips(on));
            t.rows.push(vec![
                wl.to_string(),
                p.to_string(),
                fmt_rate(off.median()),
                fmt_rate(on.median()),
                a.map_or("–".into(), |v| format!("{v:.4}")),
                b.map_or("–".into(), |v| format!("{v:.4}")),
                match (a, b) {
                    (Some(a), Some(b)) if b > 0.0 => fmt_ratio(a / b),
                    _ => "–".into(),
                },
            ]);
        }
    }
    t
}
