//! funnel-redis next to the Redis scripts: the same funnel kept in Redis for a fleet, with and
//! without its local deny cache, one request in flight and 64 (the multiplexed connection
//! pipelines them), under the allowing quota on the hot-1k String keys and under two abusive
//! mixes: 90% and 99% of the requests from 10 abusive keys that are almost always denied, the
//! rest from a stream of legitimate keys that never repeat (so they are allowed, and always
//! cost a round trip). The cache can skip at most the abusers' share: its cut in round trips is
//! capped at about 10× on the 90% mix (the inverse of the legitimate share a run draws), about
//! 100× on the 99% mix. Each row keeps its raw
//! round trips (`Run::round_trips`); ratios are taken from the raw counts.

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

/// The workloads of the funnel-redis rows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// The hot-1k String keys under the allowing quota.
    Allowing,
    /// Percent of the requests from the 10 abusive keys.
    Abusive(u64),
}

pub const MIXES: [Mix; 3] = [Mix::Allowing, Mix::Abusive(90), Mix::Abusive(99)];

impl Mix {
    pub fn workload(self) -> String {
        match self {
            Mix::Allowing => "hot-1k".into(),
            Mix::Abusive(p) => format!("abusive-{p}"),
        }
    }

    /// Writes the `i`-th request's key into `key`, a buffer the caller reuses, so the timed
    /// loop allocates nothing (the Lua-script rows replay keys made before timing). Computed
    /// per request (splitmix64 of `i`, a bijection) so the legitimate keys of the abusive
    /// mixes do not repeat within a run.
    fn key_into(self, i: u64, key: &mut String) {
        use std::fmt::Write;
        let x = funnel_testkit::mix(i);
        key.clear();
        // Writing to a String cannot fail.
        let _ = match self {
            Mix::Allowing => write!(key, "user:{}", x % 1000),
            Mix::Abusive(p) if x % 100 < p => write!(key, "abuser:{}", (x >> 8) % 10),
            Mix::Abusive(_) => write!(key, "user:{x}"),
        };
    }

    fn quota(self) -> Result<funnel::Quota, String> {
        match self {
            Mix::Allowing => Ok(QuotaKind::Allow.funnel()),
            // 10 per hour per key: the abusers are denied after their first ten requests.
            Mix::Abusive(_) => funnel::Quota::per_hour(10).map_err(|e| e.to_string()),
        }
    }
}

/// One funnel-redis row's setting.
#[derive(Clone, Copy)]
struct Setting {
    mix: Mix,
    cache: bool,
    in_flight: usize,
}

pub fn plan_weight(o: &crate::cli::Options) -> f64 {
    (MIXES.len() * 2 * IN_FLIGHT.len() * o.runs) as f64 * o.redis_duration.as_secs_f64() + 1.0
}

/// Runs the funnel-redis rows against the harness's redis-server.
pub fn run(ctx: &mut Ctx, server: &RedisServer) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(ctx.opts.max_threads())
        .enable_all()
        .build()
        .map_err(|e| format!("starting tokio: {e}"))?;
    let o = ctx.opts.clone();
    for mix in MIXES {
        for in_flight in IN_FLIGHT {
            for cache in [false, true] {
                let s = Setting {
                    mix,
                    cache,
                    in_flight,
                };
                let mut runs = Vec::with_capacity(o.runs);
                for r in 0..o.runs {
                    ctx.progress.begin(format!(
                        "funnel-redis {} cache {} × {in_flight} in flight run {}/{}",
                        mix.workload(),
                        if cache { "on" } else { "off" },
                        r + 1,
                        o.runs
                    ));
                    server.flushall()?;
                    runs.push(rt.block_on(one_run(server.url(), s, o.redis_duration))?);
                    ctx.progress.advance(o.redis_duration.as_secs_f64());
                }
                let (trips, decisions) = raw_counts(&runs);
                let abusive = mix != Mix::Allowing;
                ctx.rows.push(Row {
                    section: Section::Redis,
                    workload: mix.workload(),
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

/// Round trips and decisions summed over runs.
fn raw_counts(runs: &[Run]) -> (u64, u64) {
    (
        runs.iter().map(|r| r.round_trips).sum(),
        runs.iter().map(|r| r.decisions).sum(),
    )
}

/// One timed run: `in_flight` tasks on one limiter (one multiplexed connection), each walking
/// its share of the stream until the deadline. The script is loaded before the clock starts;
/// the run's round trips are the ones after that.
async fn one_run(url: String, s: Setting, duration: Duration) -> Result<Run, String> {
    let limiter = Arc::new(
        RedisLimiter::builder(url, s.mix.quota()?)
            .timeout(Duration::from_secs(2))
            .deny_cache(if s.cache { 100_000 } else { 0 })
            .build()
            .await
            .map_err(|e| format!("funnel-redis: {e}"))?,
    );
    limiter
        .check_n("warm-up", 0)
        .await
        .map_err(|e| format!("funnel-redis warm-up: {e}"))?;
    let trips_before = limiter.stats().round_trips;
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
            let mut key = String::with_capacity(32);
            while started.elapsed() < duration {
                s.mix.key_into(i, &mut key);
                let c = limiter
                    .check(&key)
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
    Ok(Run {
        decisions: decisions.load(Ordering::Relaxed),
        allowed: allowed.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
        cpu_share: f64::NAN,
        round_trips: limiter.stats().round_trips - trips_before,
        ..Run::default()
    })
}

/// The factor by which the deny cache cuts round trips per decision, from the raw counts of
/// the two rows: (trips off ÷ decisions off) ÷ (trips on ÷ decisions on), nothing rounded
/// before the division. `None` when either row is missing or the cached row made no trip.
pub fn cut(off: &Row, on: &Row) -> Option<f64> {
    let (trips_off, decisions_off) = raw_counts(&off.runs);
    let (trips_on, decisions_on) = raw_counts(&on.runs);
    let num = u128::from(trips_off) * u128::from(decisions_on);
    let den = u128::from(trips_on) * u128::from(decisions_off);
    (den > 0).then(|| num as f64 / den as f64)
}

/// The funnel-redis rows without and with the cache for a mix and requests in flight.
pub fn pair(ctx: &Ctx, mix: Mix, in_flight: usize) -> Option<(&Row, &Row)> {
    let get = |c: &str| {
        ctx.rows.iter().find(|r| {
            r.section == Section::Redis
                && r.workload == mix.workload()
                && r.pipeline == in_flight
                && r.competitor == c
        })
    };
    Some((get("funnel-redis")?, get("funnel-redis+cache")?))
}

/// What the deny cache changes: for each mix and requests in flight, decisions/s and Redis
/// round trips per decision without and with it, and the cut from the raw counts.
pub fn cache_table(ctx: &Ctx) -> crate::table::Table {
    use crate::numbers::{fmt_rate, fmt_ratio};
    let mut t = crate::table::Table::new(
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
    let per_decision = |r: &Row| {
        let (trips, decisions) = raw_counts(&r.runs);
        format!("{:.4}", trips as f64 / decisions.max(1) as f64)
    };
    for mix in MIXES {
        for p in IN_FLIGHT {
            let Some((off, on)) = pair(ctx, mix, p) else {
                continue;
            };
            t.rows.push(vec![
                mix.workload(),
                p.to_string(),
                fmt_rate(off.median()),
                fmt_rate(on.median()),
                per_decision(off),
                per_decision(on),
                cut(off, on).map_or("–".into(), fmt_ratio),
            ]);
        }
    }
    t
}
