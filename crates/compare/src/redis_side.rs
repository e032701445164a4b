//! Redis-backed competitors for funnel's comparison harness.
//!
//! * The server is the test kit's [`RedisServer`] (`funnel_testkit::redis_server`): a private
//!   `redis-server` on a free 127.0.0.1 port, no persistence, killed on drop.
//! * [`RedisAlgo`]: four ways people rate-limit with Redis, as commonly published:
//!   a Lua token bucket, a sorted-set sliding-window log, a GCRA script with CL.THROTTLE
//!   semantics, and a non-atomic read-compute-write of a funnel kept in a hash; and a fifth,
//!   the redis-cell module's own `CL.THROTTLE`, where the server has the module loaded.
//! * [`run`] (throughput), [`over_admission`] (exactness under contention), [`memory_per_key`].
//!
//! Conventions: every script reads the server's clock with `TIME` and works in integer
//! microseconds (Lua numbers are doubles, exact up to 2^53; epoch microseconds are ~1.8e15, epoch
//! nanoseconds would not be exact). Stored numbers are written with `%.0f` so they never turn into
//! `1.7e+15`. Scripts are loaded once with `SCRIPT LOAD` and called with `EVALSHA`. `run` and
//! `over_admission` put the algorithm's label (`tb:`, `sw:`, `gcra:`, `naive-hash:`, `cell:`) before the caller's
//! keys so the algorithms (which store different Redis types) never collide; `memory_per_key`
//! flushes the database and uses bare keys. All traffic stays on 127.0.0.1. NaiveHash has no
//! script: it computes in the client, with the client's wall clock in ms (as the usual Java funnel does).
//! Written for the `redis` crate 0.27 (sync `Connection`, `default-features = false, features = ["script"]`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::RwLock;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use funnel_testkit::redis_server::info_field_on;
pub use funnel_testkit::redis_server::RedisServer;
use redis::{Connection, Pipeline, Value};

// ---- Server memory ----

fn used_memory_on(con: &mut Connection) -> Result<u64, String> {
    let v = info_field_on(con, "memory", "used_memory")?;
    v.parse()
        .map_err(|e| format!("used_memory {v:?} is not an integer: {e}"))
}

/// `used_memory` less `mem_clients_normal` (client query/output buffers: a pipeline of 1000
/// EVALSHA leaves a ~100 KB query buffer behind for a while, 100 B/key at 1k keys), read until two
/// readings 50 ms apart agree (closed connections and buffers are freed asynchronously), 1 s at most.
fn data_memory_on(con: &mut Connection) -> Result<u64, String> {
    let mut read = || -> Result<u64, String> {
        let clients = info_field_on(con, "memory", "mem_clients_normal")?;
        let clients: u64 = clients
            .parse()
            .map_err(|e| format!("mem_clients_normal {clients:?} is not an integer: {e}"))?;
        Ok(used_memory_on(con)?.saturating_sub(clients))
    };
    let mut last = read()?;
    for _ in 0..20 {
        thread::sleep(Duration::from_millis(50));
        let now = read()?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last)
}

// ---- The algorithms (Lua scripts written for this harness after the common published forms) ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisAlgo {
    /// Lua token bucket via EVALSHA (bucket starts full, refill floor(elapsed*rate), timestamp only moves when >=1 token added).
    TokenBucket,
    /// Sorted-set sliding-window log (ZREMRANGEBYSCORE + ZCARD + ZADD in one Lua script via EVALSHA). Members must be unique per request.
    SlidingLog,
    /// GCRA Lua script with CL.THROTTLE semantics (returns the five integers; TAT in the key, PEXPIRE to reset-after), via EVALSHA.
    Gcra,
    /// The NON-atomic read-compute-write on a hash (HMGET fields, compute the funnel in the client, HMSET back) — no script, no lock, deliberately racy.
    NaiveHash,
    /// The redis-cell module's `CL.THROTTLE <key> <max_burst> <count> <period_s>` (the module
    /// must be loaded: `funnel_testkit::redis_cell`); GCRA in nanoseconds on the server's wall
    /// clock, the five integers as the reply. Not in [`RedisAlgo::ALL`]: its rows run only
    /// where the module is built.
    Cell,
}

impl RedisAlgo {
    pub const ALL: [RedisAlgo; 4] = [
        RedisAlgo::TokenBucket,
        RedisAlgo::SlidingLog,
        RedisAlgo::Gcra,
        RedisAlgo::NaiveHash,
    ];

    /// Short name: "tb", "sw", "gcra", "naive-hash" (the harness shows them as `redis-<label>`).
    /// `run` and `over_admission` also use `<label>:` as a key prefix.
    pub fn label(&self) -> &'static str {
        self.parts().0
    }

    /// (label, Lua script if any)
    fn parts(&self) -> (&'static str, Option<&'static str>) {
        match self {
            RedisAlgo::TokenBucket => ("tb", Some(TOKEN_BUCKET_LUA)),
            RedisAlgo::SlidingLog => ("sw", Some(SLIDING_LOG_LUA)),
            RedisAlgo::Gcra => ("gcra", Some(GCRA_LUA)),
            RedisAlgo::NaiveHash => ("naive-hash", None),
            RedisAlgo::Cell => ("cell", None),
        }
    }
}

/// Token bucket. Hash fields `tokens`, `ts` (µs). Capacity `limit`, refill `count` per
/// `period`. First use: full bucket. Refill floor(elapsed * rate); only when that is >= 1 does `ts`
/// move (to now, dropping the fraction, as the common script does). Config comes in ARGV instead of living
/// in the hash (one policy for all keys here), so the common script's "-1: no policy" case cannot occur.
/// Writes on every call, denial included; no expiry (as the common script).
/// ARGV: capacity, count, period_us, cost. Returns 1 allowed, 0 limited (the common script's convention).
const TOKEN_BUCKET_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cap, count, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local st = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(st[1]), tonumber(st[2])
local move = true
if tokens == nil or ts == nil then
  tokens = cap
else
  local add = math.floor((now - ts) * count / period)
  if add < 1 then add = 0; move = false end
  tokens = math.min(cap, tokens + add)
end
local ok = 0
if tokens >= cost then tokens = tokens - cost; ok = 1 end
if move then
  redis.call('HSET', KEYS[1], 'tokens', string.format('%.0f', tokens), 'ts', string.format('%.0f', now))
else
  redis.call('HSET', KEYS[1], 'tokens', string.format('%.0f', tokens))
end
return ok
"#;

/// Sliding-window log. One zset member per admitted request, scored by its time (µs).
/// Drop members with score <= now - window, count the rest, admit (ZADD) if fewer than `max`.
/// Member = `<now_us>-<client tag>`, the tag being unique per connection and request, so two
/// requests never share a member. Denials write nothing (ZREMRANGEBYSCORE aside); no expiry.
/// ARGV: max, window_us, tag. Returns 0 allowed, 1 limited (the common script's convention).
const SLIDING_LOG_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local max, window = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now - window))
if redis.call('ZCARD', KEYS[1]) < max then
  redis.call('ZADD', KEYS[1], string.format('%.0f', now), string.format('%.0f-%s', now, ARGV[3]))
  return 0
end
return 1
"#;

/// GCRA with CL.THROTTLE semantics, in integer MICROSECONDS (redis-cell uses ns; µs keeps every
/// value exact in Lua's doubles, and redis-cell computes `remaining` on truncated µs anyway).
/// T = `ARGV[1]` = trunc(period_us / count), limit = `ARGV[2]` (= max_burst + 1),
/// quantity = `ARGV[3]`.
/// tau = T*limit, inc = T*quantity, new = max(TAT, now) + inc; allowed iff new - tau <= now.
/// Allowed with quantity > 0: SET key new PX ceil((new - now) / 1 ms). Limited or quantity 0: no write.
/// Reply: {limited, limit, remaining, retry_after_s, reset_after_s}, seconds truncated then +1 when
/// the remainder is at least 1 ms; retry -1 when allowed or when inc > tau (can never pass).
const GCRA_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local T, limit, qty = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tau, inc = T * limit, T * qty
local tat = now
local raw = redis.call('GET', KEYS[1])
if raw then
  tat = tonumber(raw)
  if tat == nil then return redis.error_reply('ERR gcra: key does not hold an integer TAT') end
  if tat < now then tat = now end
end
local new = tat + inc
local limited, after = 0, tat
if new - tau <= now then
  if qty > 0 then
    after = new
    redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', string.format('%.0f', math.ceil((new - now) / 1000)))
  end
else
  limited = 1
end
local function secs(us)
  local s = math.floor(us / 1000000)
  if us - s * 1000000 >= 1000 then s = s + 1 end
  return s
end
local remaining = math.floor((tau - (after - now)) / T)
if remaining < 0 then remaining = 0 end
local retry = -1
if limited == 1 and inc <= tau then retry = secs(new - tau - now) end
return {limited, limit, remaining, retry, secs(after - now)}
"#;

/// count actions per period, bursts up to `limit` (limit = CL.THROTTLE max_burst + 1).
#[derive(Clone, Copy, Debug)]
pub struct RedisQuota {
    pub limit: u64,
    pub count: u64,
    pub period_ms: u64,
}

/// The quota turned into each algorithm's parameters. Largest value a script may see: 2^52 µs.
struct Params {
    /// ARGV after the key, identical for every request (SlidingLog appends a per-request tag).
    argv: Vec<String>,
    limit: i64,
    /// NaiveHash: units leaked per millisecond (the Java funnel's `leakingRate`).
    rate_per_ms: f64,
}

const LUA_EXACT: u128 = 1 << 52;

impl Params {
    fn new(algo: RedisAlgo, q: RedisQuota) -> Result<Params, String> {
        if q.limit == 0 || q.count == 0 || q.period_ms == 0 {
            return Err(format!(
                "bad quota {q:?}: limit, count and period_ms must all be >= 1"
            ));
        }
        let period_us = u128::from(q.period_ms) * 1000;
        if u128::from(q.limit) >= LUA_EXACT || period_us >= LUA_EXACT {
            return Err(format!(
                "quota {q:?} too large for Lua's doubles (limit and period must be < 2^52 µs)"
            ));
        }
        let argv = match algo {
            RedisAlgo::TokenBucket => vec![
                q.limit.to_string(),
                q.count.to_string(),
                period_us.to_string(),
                "1".into(),
            ],
            RedisAlgo::SlidingLog => {
                // Same burst and same long-run rate: `limit` requests per limit*period/count.
                let window = u128::from(q.limit) * period_us / u128::from(q.count);
                if window == 0 || window >= LUA_EXACT {
                    return Err(format!(
                        "quota {q:?}: sliding window of {window} µs is out of range"
                    ));
                }
                vec![q.limit.to_string(), window.to_string()]
            }
            RedisAlgo::Gcra => {
                let t = period_us / u128::from(q.count);
                if t == 0 {
                    return Err(format!("quota {q:?}: emission interval under 1 µs, the GCRA script can't represent it"));
                }
                if t * u128::from(q.limit) >= LUA_EXACT {
                    return Err(format!(
                        "quota {q:?}: T*limit overflows the script's exact range"
                    ));
                }
                vec![t.to_string(), q.limit.to_string(), "1".into()]
            }
            RedisAlgo::NaiveHash => Vec::new(),
            RedisAlgo::Cell => {
                // CL.THROTTLE takes whole seconds; `max_burst` is the limit less one; the
                // quantity is left out (1), as most callers send it.
                if q.period_ms % 1000 != 0 {
                    return Err(format!(
                        "quota {q:?}: CL.THROTTLE's period is whole seconds"
                    ));
                }
                vec![
                    (q.limit - 1).to_string(),
                    q.count.to_string(),
                    (q.period_ms / 1000).to_string(),
                ]
            }
        };
        let limit = i64::try_from(q.limit).map_err(|_| format!("quota {q:?}: limit too large"))?;
        Ok(Params {
            argv,
            limit,
            rate_per_ms: q.count as f64 / q.period_ms as f64,
        })
    }
}

/// SCRIPT LOAD the algorithm's script (if any) and return its SHA1 (empty for NaiveHash).
fn load_script(server: &RedisServer, algo: RedisAlgo) -> Result<String, String> {
    let Some(src) = algo.parts().1 else {
        return Ok(String::new());
    };
    let mut con = server.connection()?;
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(src)
        .query::<String>(&mut con)
        .map_err(|e| format!("SCRIPT LOAD for redis-{}: {e}", algo.label()))
}

/// Distinguishes connections in SlidingLog member tags.
static CONN_SEQ: AtomicU64 = AtomicU64::new(0);

/// One connection that decides batches of requests for one algorithm.
struct Decider<'a> {
    con: Connection,
    algo: RedisAlgo,
    sha: &'a str,
    params: &'a Params,
    pipe: Pipeline,
    conn_tag: u64,
    seq: u64,
}

impl<'a> Decider<'a> {
    fn new(
        server: &RedisServer,
        algo: RedisAlgo,
        sha: &'a str,
        params: &'a Params,
    ) -> Result<Self, String> {
        let con = server.connection()?;
        let conn_tag = CONN_SEQ.fetch_add(1, Ordering::Relaxed);
        Ok(Decider {
            con,
            algo,
            sha,
            params,
            pipe: Pipeline::new(),
            conn_tag,
            seq: 0,
        })
    }

    /// Decides one request per key, all in one round trip (NaiveHash: two, reads then writes).
    /// Returns how many were allowed.
    fn decide(&mut self, keys: &[&str]) -> Result<u64, String> {
        if self.algo == RedisAlgo::NaiveHash {
            return self.decide_naive(keys);
        }
        self.pipe.clear();
        for key in keys {
            if self.algo == RedisAlgo::Cell {
                self.pipe
                    .cmd("CL.THROTTLE")
                    .arg(*key)
                    .arg(&self.params.argv);
                continue;
            }
            let cmd = self
                .pipe
                .cmd("EVALSHA")
                .arg(self.sha)
                .arg(1)
                .arg(*key)
                .arg(&self.params.argv);
            if self.algo == RedisAlgo::SlidingLog {
                self.seq += 1;
                cmd.arg(format!("{}.{}", self.conn_tag, self.seq));
            }
        }
        let command = if self.algo == RedisAlgo::Cell {
            "CL.THROTTLE"
        } else {
            "EVALSHA"
        };
        let replies: Vec<Value> = self
            .pipe
            .query(&mut self.con)
            .map_err(|e| format!("redis-{} {command}: {e}", self.algo.label()))?;
        if replies.len() != keys.len() {
            return Err(format!(
                "redis-{}: {} replies for {} requests",
                self.algo.label(),
                replies.len(),
                keys.len()
            ));
        }
        replies
            .iter()
            .try_fold(0, |n, v| Ok(n + u64::from(self.is_allowed(v)?)))
    }

    fn is_allowed(&self, v: &Value) -> Result<bool, String> {
        match (self.algo, v) {
            (RedisAlgo::TokenBucket, Value::Int(r @ (0 | 1))) => Ok(*r == 1),
            (RedisAlgo::SlidingLog, Value::Int(r @ (0 | 1))) => Ok(*r == 0),
            (RedisAlgo::Gcra | RedisAlgo::Cell, Value::Array(items))
                if matches!(items.first(), Some(Value::Int(0 | 1))) =>
            {
                Ok(items[0] == Value::Int(0))
            }
            _ => Err(format!(
                "redis-{}: unexpected reply {v:?}",
                self.algo.label()
            )),
        }
    }

    /// The Java funnel distributed naively: HMGET the funnel's varying fields (`leftQuota`, `leakingTs`
    /// in ms), run `makeSpace` + `watering(1)` here with the CLIENT's wall clock (as the Java funnel's
    /// `System.currentTimeMillis()`), HMSET both back. Capacity and rate are the quota, not stored.
    /// Nothing stops another client from writing between our read and our write: lost updates.
    fn decide_naive(&mut self, keys: &[&str]) -> Result<u64, String> {
        self.pipe.clear();
        for key in keys {
            self.pipe
                .cmd("HMGET")
                .arg(*key)
                .arg("leftQuota")
                .arg("leakingTs");
        }
        let states: Vec<(Option<i64>, Option<i64>)> = self
            .pipe
            .query(&mut self.con)
            .map_err(|e| format!("redis-naive-hash HMGET: {e}"))?;
        if states.len() != keys.len() {
            return Err(format!(
                "redis-naive-hash: {} replies for {} reads",
                states.len(),
                keys.len()
            ));
        }
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| format!("system clock before 1970: {e}"))?
            .as_millis() as i64;
        self.pipe.clear();
        let mut allowed = 0;
        for (key, state) in keys.iter().zip(states) {
            let (ok, left, ts) =
                naive_funnel(state, now_ms, self.params.limit, self.params.rate_per_ms);
            allowed += u64::from(ok);
            self.pipe
                .cmd("HMSET")
                .arg(*key)
                .arg("leftQuota")
                .arg(left)
                .arg("leakingTs")
                .arg(ts)
                .ignore();
        }
        self.pipe
            .query::<()>(&mut self.con)
            .map_err(|e| format!("redis-naive-hash HMSET: {e}"))?;
        Ok(allowed)
    }
}

/// The usual Java `Funnel`: new funnels start full; `makeSpace` adds trunc(elapsed * rate) only
/// when that is >= 1 (then the timestamp moves to now); an elapsed time that is negative or whose
/// leak overflows an int resets to full. Returns (allowed, leftQuota, leakingTs).
fn naive_funnel(
    state: (Option<i64>, Option<i64>),
    now: i64,
    cap: i64,
    rate: f64,
) -> (bool, i64, i64) {
    let (mut left, mut ts) = match state {
        (Some(left), Some(ts)) => (left, ts),
        _ => (cap, now),
    };
    let leaked = now.saturating_sub(ts) as f64 * rate;
    if now < ts || leaked >= f64::from(i32::MAX) {
        (left, ts) = (cap, now);
    } else if leaked >= 1.0 {
        (left, ts) = (left.saturating_add(leaked as i64).min(cap), now);
    }
    if left >= 1 {
        (true, left - 1, ts)
    } else {
        (false, left, ts)
    }
}

// ---- Driving load ----

/// Totals of one `run` (all threads).
pub struct RedisRun {
    pub decisions: u64,
    pub allowed: u64,
    pub elapsed: Duration,
}

/// When a worker stops: at a deadline after the start, or after a number of requests.
#[derive(Clone, Copy)]
enum StopAt {
    Deadline(Duration),
    Requests(u64),
}

/// One thread per key list, each with its own connection, started together; each cycles through
/// its keys `pipeline` requests per round trip until `stop`. The first error stops every thread and
/// is returned. Keys get the `<label>:` prefix.
fn drive(
    server: &RedisServer,
    algo: RedisAlgo,
    quota: RedisQuota,
    keys_per_thread: &[Vec<String>],
    pipeline: usize,
    stop: StopAt,
) -> Result<RedisRun, String> {
    if keys_per_thread.is_empty() || keys_per_thread.iter().any(|k| k.is_empty()) {
        return Err("need at least one thread, each with at least one key".into());
    }
    if pipeline == 0 {
        return Err("pipeline must be >= 1".into());
    }
    let params = Params::new(algo, quota)?;
    let sha = load_script(server, algo)?;
    // Every connection is open and every key prefixed before any thread starts; an error here
    // returns before a thread exists.
    let mut work = Vec::with_capacity(keys_per_thread.len());
    for keys in keys_per_thread {
        let keys: Vec<String> = keys
            .iter()
            .map(|k| format!("{}:{k}", algo.label()))
            .collect();
        work.push((Decider::new(server, algo, &sha, &params)?, keys));
    }
    // The start barrier: we hold the write lock while spawning; each worker counts itself ready and
    // blocks on a read lock until we release it. Unlike std's Barrier this cannot hang if a spawn fails.
    let (gate, ready, failed) = (RwLock::new(()), AtomicUsize::new(0), AtomicBool::new(false));
    let (gate, ready, failed) = (&gate, &ready, &failed);
    thread::scope(|s| {
        let hold = gate.write().unwrap_or_else(|p| p.into_inner());
        let (mut handles, mut spawn_err) = (Vec::new(), None);
        for (i, (mut d, keys)) in work.into_iter().enumerate() {
            let spawned = thread::Builder::new()
                .name(format!("redis-{i}"))
                .spawn_scoped(s, move || {
                    ready.fetch_add(1, Ordering::AcqRel);
                    drop(gate.read().unwrap_or_else(|p| p.into_inner()));
                    worker(&mut d, &keys, pipeline, stop, failed)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    spawn_err = Some(format!("cannot spawn client thread {i}: {e}"));
                    break;
                }
            }
        }
        while spawn_err.is_none() && ready.load(Ordering::Acquire) < handles.len() {
            thread::yield_now();
        }
        drop(hold);
        let start = Instant::now();
        let (mut total, mut last) = (
            RedisRun {
                decisions: 0,
                allowed: 0,
                elapsed: Duration::ZERO,
            },
            start,
        );
        for h in handles {
            match h
                .join()
                .unwrap_or_else(|_| Err("a client thread panicked".into()))
            {
                Ok((d, a, end)) => {
                    (total.decisions, total.allowed, last) =
                        (total.decisions + d, total.allowed + a, last.max(end))
                }
                Err(e) => drop(spawn_err.get_or_insert(e)),
            }
        }
        match spawn_err {
            Some(e) if e.starts_with("redis-") => Err(e),
            Some(e) => Err(format!("redis-{}: {e}", algo.label())),
            None => Ok(RedisRun {
                elapsed: last - start,
                ..total
            }),
        }
    })
}

/// One client thread's loop; returns (decisions, allowed, finish time). Sets `failed` on error
/// and stops as soon as another thread has.
fn worker(
    d: &mut Decider,
    keys: &[String],
    pipeline: usize,
    stop: StopAt,
    failed: &AtomicBool,
) -> Result<(u64, u64, Instant), String> {
    let t0 = Instant::now();
    let (mut decisions, mut allowed, mut idx) = (0u64, 0u64, 0usize);
    let mut batch: Vec<&str> = Vec::with_capacity(pipeline);
    while !failed.load(Ordering::Relaxed) {
        let n = match stop {
            StopAt::Deadline(limit) if t0.elapsed() >= limit => break,
            StopAt::Deadline(_) => pipeline as u64,
            StopAt::Requests(r) if decisions >= r => break,
            StopAt::Requests(r) => (r - decisions).min(pipeline as u64),
        };
        batch.clear();
        for _ in 0..n {
            batch.push(&keys[idx]);
            idx = (idx + 1) % keys.len();
        }
        allowed += d
            .decide(&batch)
            .inspect_err(|_| failed.store(true, Ordering::Relaxed))?;
        decisions += n;
    }
    Ok((decisions, allowed, Instant::now()))
}

/// One thread per entry of `keys_per_thread`, each with its OWN connection, started together on a Barrier,
/// cycling through its pre-generated keys for `duration` (check the deadline every batch), each request cost 1.
/// `pipeline` = 1 means one request per round trip; >1 means send `pipeline` EVALSHA (or for NaiveHash: do the
/// reads pipelined then the writes pipelined) per round trip. Returns totals over all threads; elapsed is wall time
/// from the barrier to the last thread finishing. Time inside scripts comes from Redis TIME (server-side clock).
/// Keys are used as `<label>:<key>` (`tb:user:1`); state is left in Redis (FLUSHALL between runs for a fresh start).
pub fn run(
    server: &RedisServer,
    algo: RedisAlgo,
    quota: RedisQuota,
    keys_per_thread: &[Vec<String>],
    pipeline: usize,
    duration: Duration,
) -> Result<RedisRun, String> {
    drive(
        server,
        algo,
        quota,
        keys_per_thread,
        pipeline,
        StopAt::Deadline(duration),
    )
}

/// The naive hash's over-admission: `threads` threads (own connections, barrier start) each send `per_thread`
/// requests to ONE fresh key under a quota of `limit` with a very slow refill (1 per hour), using `algo`,
/// one request per round trip. Returns how many were admitted (an atomic design admits exactly `limit`
/// when threads*per_thread >= limit; NaiveHash admits more). The key is deleted afterwards.
pub fn over_admission(
    server: &RedisServer,
    algo: RedisAlgo,
    threads: usize,
    per_thread: u64,
    limit: u64,
) -> Result<u64, String> {
    if threads == 0 {
        return Err("over_admission needs at least one thread".into());
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let key = format!("overadmission:{}:{nanos}", std::process::id());
    let quota = RedisQuota {
        limit,
        count: 1,
        period_ms: 3_600_000,
    };
    let result = drive(
        server,
        algo,
        quota,
        &vec![vec![key.clone()]; threads],
        1,
        StopAt::Requests(per_thread),
    );
    let deleted = server.connection().and_then(|mut con| {
        redis::cmd("DEL")
            .arg(format!("{}:{key}", algo.label()))
            .query::<()>(&mut con)
            .map_err(|e| format!("DEL: {e}"))
    });
    let admitted = result?.allowed; // the run's error, if any, takes precedence over the clean-up's
    deleted?;
    Ok(admitted)
}

/// Redis memory per key for `algo`: FLUSHALL, read used_memory (less client buffers), make `n_keys` distinct keys ("user:" + 11
/// digits = 16 chars) each receive one allowed request (pipelined 1000 per round trip), read used_memory
/// again; returns bytes/key. The script is loaded and the connection opened before the first reading.
/// SlidingLog grows with requests per key (one zset member per admitted request): this is the 1-request figure.
/// (Measured on Redis 7.0.15: about 40 B per further request while a zset stays a listpack, up to 128
/// members, about 140 B per request beyond that, once it is a skiplist.)
/// Pass a slow quota: every key must still exist at the end (checked with DBSIZE, error otherwise).
pub fn memory_per_key(
    server: &RedisServer,
    algo: RedisAlgo,
    quota: RedisQuota,
    n_keys: u64,
) -> Result<f64, String> {
    if n_keys == 0 {
        return Err("memory_per_key needs n_keys >= 1".into());
    }
    let params = Params::new(algo, quota)?;
    let sha = load_script(server, algo)?;
    let mut d = Decider::new(server, algo, &sha, &params)?;
    redis::cmd("FLUSHALL")
        .query::<()>(&mut d.con)
        .map_err(|e| format!("FLUSHALL: {e}"))?;
    let before = data_memory_on(&mut d.con)?;
    for i in (0..n_keys).step_by(1000) {
        let keys: Vec<String> = (i..(i + 1000).min(n_keys))
            .map(|k| format!("user:{k:011}"))
            .collect();
        let allowed = d.decide(&keys.iter().map(String::as_str).collect::<Vec<_>>())?;
        if allowed != keys.len() as u64 {
            return Err(format!(
                "redis-{}: only {allowed} of {} first requests allowed; quota {quota:?}",
                algo.label(),
                keys.len()
            ));
        }
    }
    let after = data_memory_on(&mut d.con)?;
    // A key that expired during the measurement would make the figure meaningless (GCRA's key lives
    // for reset-after = T*cost: 1 µs at 1e6/s).
    let present: u64 = redis::cmd("DBSIZE")
        .query(&mut d.con)
        .map_err(|e| format!("DBSIZE: {e}"))?;
    if present != n_keys {
        return Err(format!(
            "redis-{}: only {present} of {n_keys} keys still exist after the measurement; \
            the quota {quota:?} lets state expire too soon (use a slow quota, e.g. 1 per hour)",
            algo.label()
        ));
    }
    Ok((after as f64 - before as f64) / n_keys as f64)
}
