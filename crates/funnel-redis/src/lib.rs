//! # funnel-redis
//!
//! funnel's limiter shared by a fleet through Redis: every instance of a proxy fleet decides
//! on the same funnel per key, with CL.THROTTLE's exact answer (the same [`funnel::Decision`]
//! the in-process [`funnel::Limiter`] gives), a local deny cache, and an explicit policy for
//! when Redis fails.
//!
//! * **One round trip, one script.** A Lua script (loaded once, called with `EVALSHA`, resent
//!   on `NOSCRIPT`) runs the funnel arithmetic on the key's stored arrival time with the
//!   server's clock (`script.rs` says why), and the answer is rebuilt here with
//!   [`funnel::Quota::decide_at`], so the five integers are the in-process ones.
//! * **Deny cache.** A denial tells us the key's arrival time, and in Redis that only grows
//!   (except for a reset): until it is reached, the key stays denied. Later requests for it are
//!   answered here, with no round trip, from a bounded funnel [`Limiter`] table. A flood from
//!   one abusive key then costs Redis nothing.
//! * **Failures.** A Redis error or a timeout (default 10 ms) answers by the [`OnFailure`]
//!   policy: fail open, fail closed, or decide locally on a funnel with the quota divided among
//!   the fleet's instances. Connections are re-established in the background when Redis comes
//!   back. A reply Redis should never give (a key of another type, a script error) is an
//!   [`Error`], never a guess.
//!
//! ```no_run
//! use std::time::Duration;
//! use funnel::Quota;
//! use funnel_redis::{OnFailure, RedisLimiter};
//!
//! # async fn demo() -> Result<(), funnel_redis::Error> {
//! let limiter = RedisLimiter::builder("redis://127.0.0.1:6379/", Quota::per_second(10)?)
//!     .prefix("rl:")
//!     .deny_cache(100_000)
//!     .on_failure(OnFailure::Local { instances: 4 })
//!     .build()
//!     .await?;
//! let checked = limiter.check("client-42").await?;
//! if !checked.decision.is_allowed() {
//!     // 429, Retry-After from checked.decision.retry_after()
//! }
//! # Ok(()) }
//! ```

mod script;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use funnel::{Decision, Limiter, Outcome, Quota, Timestamp, WhenFull};
use redis::aio::ConnectionManager;

use script::Verdict;

/// Why a [`RedisLimiter`] could not be built or could not answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The quota's emission interval is not a whole number of microseconds, the resolution of
    /// the script's arithmetic (Lua numbers are exact only to 2^53).
    SubMicrosecondQuota {
        /// The emission interval, ns.
        emission_interval_ns: u128,
    },
    /// A quota or table setting funnel rejected.
    Funnel(funnel::Error),
    /// Redis could not be reached while building the limiter.
    Connect(redis::RedisError),
    /// Redis answered with an error that retrying will not fix: the key holds another type
    /// (`WRONGTYPE`), the script failed, or a reply had an unexpected shape.
    Reply(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::SubMicrosecondQuota {
                emission_interval_ns,
            } => write!(
                f,
                "the quota's emission interval ({emission_interval_ns} ns) is not a whole number \
                 of microseconds, the resolution of the Redis script"
            ),
            Error::Funnel(e) => write!(f, "{e}"),
            Error::Connect(e) => write!(f, "cannot connect to Redis: {e}"),
            Error::Reply(m) => write!(f, "unexpected Redis reply: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<funnel::Error> for Error {
    fn from(e: funnel::Error) -> Error {
        Error::Funnel(e)
    }
}

/// What a [`RedisLimiter`] answers when Redis fails or does not answer within the timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnFailure {
    /// Allow the request as a fresh funnel would. Redis being down never blocks traffic, and
    /// no limit holds meanwhile.
    Open,
    /// Deny the request, with a retry after one emission interval per unit. Redis being down
    /// blocks all traffic.
    Closed,
    /// Decide on a local funnel whose limit and rate are the quota's divided by `instances`
    /// (the fleet's size), so the fleet as a whole stays near its limit while Redis is down.
    /// The local funnels start empty: a key's debt in Redis is not carried over.
    Local {
        /// Instances sharing the quota; at least 1.
        instances: u32,
    },
}

/// Where an answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The script in Redis.
    Redis,
    /// The local deny cache, with no round trip.
    DenyCache,
    /// Redis failed: [`OnFailure::Open`].
    FailedOpen,
    /// Redis failed: [`OnFailure::Closed`].
    FailedClosed,
    /// Redis failed: [`OnFailure::Local`].
    LocalFallback,
}

/// One answer: the decision and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The decision, as the in-process limiter would give it.
    pub decision: Decision,
    /// Where it came from.
    pub source: Source,
    /// The server's time of the decision, ns since the Unix epoch, when Redis decided.
    pub server_now: Option<Timestamp>,
}

/// Counters, each a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Round trips to Redis that came back (a [`RedisLimiter::check_many`] batch is one).
    pub round_trips: u64,
    /// Decisions taken by the script in Redis.
    pub redis_decisions: u64,
    /// Denials answered by the deny cache.
    pub cache_denials: u64,
    /// Redis errors and timeouts that fell back on the failure policy.
    pub failures: u64,
    /// Of those, timeouts.
    pub timeouts: u64,
}

#[derive(Default)]
struct Counters {
    round_trips: AtomicU64,
    redis_decisions: AtomicU64,
    cache_denials: AtomicU64,
    failures: AtomicU64,
    timeouts: AtomicU64,
}

/// A funnel limiter whose state lives in Redis, shared by every instance that uses the same
/// Redis and key prefix. See the crate documentation.
pub struct RedisLimiter {
    conn: ConnectionManager,
    script: redis::Script,
    quota: Quota,
    t_us: u64,
    tau_us: u64,
    prefix: String,
    hash_tag: bool,
    timeout: Duration,
    on_failure: OnFailure,
    fallback: Option<Limiter<str>>,
    cache: Option<Limiter<str>>,
    /// An upper bound of (server clock − local clock), ns, from the last reply: the deny cache
    /// reads the server's time as `local + offset`, never earlier than it is.
    offset_ns: AtomicI64,
    counters: Counters,
}

/// Builds a [`RedisLimiter`].
#[must_use]
pub struct Builder {
    url: String,
    quota: Quota,
    prefix: String,
    hash_tag: bool,
    timeout: Duration,
    on_failure: OnFailure,
    cache_capacity: usize,
}

impl RedisLimiter {
    /// A builder for a limiter on the Redis at `url` (`redis://host:port/db`) with `quota`.
    pub fn builder(url: impl Into<String>, quota: Quota) -> Builder {
        Builder {
            url: url.into(),
            quota,
            prefix: "funnel:".into(),
            hash_tag: false,
            timeout: Duration::from_millis(10),
            on_failure: OnFailure::Closed,
            cache_capacity: 0,
        }
    }

    /// One unit request for `key`.
    ///
    /// # Errors
    ///
    /// [`Error::Reply`] when Redis answers with something retrying will not fix; connection
    /// errors and timeouts are answered by the [`OnFailure`] policy instead.
    pub async fn check(&self, key: &str) -> Result<Checked, Error> {
        self.check_n(key, 1).await
    }

    /// A request of `n` units for `key` (`n = 0` peeks).
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    pub async fn check_n(&self, key: &str, n: u64) -> Result<Checked, Error> {
        let local = local_now_ns();
        if let Some(decision) = self.cached_denial(key, n, local) {
            // Relaxed: statistics.
            self.counters.cache_denials.fetch_add(1, Ordering::Relaxed);
            return Ok(Checked {
                decision,
                source: Source::DenyCache,
                server_now: None,
            });
        }
        let mut conn = self.conn.clone();
        let mut call = self.script.key(self.redis_key(key));
        call.arg(self.t_us)
            .arg(self.tau_us)
            .arg(self.quota.limit())
            .arg(n);
        let reply = tokio::time::timeout(
            self.timeout,
            call.invoke_async::<(i64, i64, i64)>(&mut conn),
        )
        .await;
        match reply {
            Ok(Ok((code, tat_us, now_us))) => {
                self.counters.round_trips.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .redis_decisions
                    .fetch_add(1, Ordering::Relaxed);
                self.decided(key, n, local, code, tat_us, now_us)
            }
            Ok(Err(e)) if !transient(&e) => Err(Error::Reply(e.to_string())),
            Ok(Err(_)) => Ok(self.failed(key, n, false)),
            Err(_elapsed) => Ok(self.failed(key, n, true)),
        }
    }

    /// A request of `n` units for each of `keys`, in order, in one round trip: the keys the deny
    /// cache can answer are answered here, the others go to Redis together in one pipeline
    /// (each still decided atomically by the script, in order). One answer per key, in order.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check); a failure of the round trip answers every key it carried by
    /// the [`OnFailure`] policy.
    pub async fn check_many(&self, keys: &[&str], n: u64) -> Result<Vec<Checked>, Error> {
        let local = local_now_ns();
        let mut out: Vec<Option<Checked>> = keys
            .iter()
            .map(|key| {
                let decision = self.cached_denial(key, n, local)?;
                // Relaxed: statistics.
                self.counters.cache_denials.fetch_add(1, Ordering::Relaxed);
                Some(Checked {
                    decision,
                    source: Source::DenyCache,
                    server_now: None,
                })
            })
            .collect();
        let remote: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
        if !remote.is_empty() {
            let pipeline = || {
                let mut p = redis::pipe();
                for &i in &remote {
                    p.cmd("EVALSHA")
                        .arg(self.script.get_hash())
                        .arg(1)
                        .arg(self.redis_key(keys[i]))
                        .arg(self.t_us)
                        .arg(self.tau_us)
                        .arg(self.quota.limit())
                        .arg(n);
                }
                p
            };
            let mut conn = self.conn.clone();
            let round_trip = async {
                match pipeline()
                    .query_async::<Vec<(i64, i64, i64)>>(&mut conn)
                    .await
                {
                    Err(e) if e.kind() == redis::ErrorKind::NoScriptError => {
                        // A new or restarted server: load the script, then send again.
                        redis::cmd("SCRIPT")
                            .arg("LOAD")
                            .arg(script::GCRA)
                            .query_async::<String>(&mut conn)
                            .await?;
                        pipeline().query_async(&mut conn).await
                    }
                    other => other,
                }
            };
            match tokio::time::timeout(self.timeout, round_trip).await {
                Ok(Ok(replies)) if replies.len() == remote.len() => {
                    self.counters.round_trips.fetch_add(1, Ordering::Relaxed);
                    let decisions = u64::try_from(replies.len()).unwrap_or(u64::MAX);
                    self.counters
                        .redis_decisions
                        .fetch_add(decisions, Ordering::Relaxed);
                    for (&i, (code, tat_us, now_us)) in remote.iter().zip(replies) {
                        out[i] = Some(self.decided(keys[i], n, local, code, tat_us, now_us)?);
                    }
                }
                Ok(Ok(replies)) => {
                    return Err(Error::Reply(format!(
                        "{} replies to a pipeline of {}",
                        replies.len(),
                        remote.len()
                    )))
                }
                Ok(Err(e)) if !transient(&e) => return Err(Error::Reply(e.to_string())),
                Ok(Err(_)) => {
                    for &i in &remote {
                        out[i] = Some(self.failed(keys[i], n, false));
                    }
                }
                Err(_elapsed) => {
                    for &i in &remote {
                        out[i] = Some(self.failed(keys[i], n, true));
                    }
                }
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// Forgets what the deny cache knows of `key`: call it after resetting the key in Redis
    /// (from this or another instance), or the cache goes on denying it until its old arrival
    /// time passes. The one case where the cache answers differently from Redis.
    pub fn invalidate(&self, key: &str) {
        if let Some(cache) = &self.cache {
            cache.reset(key);
        }
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        // Relaxed: a snapshot of statistics.
        Stats {
            round_trips: c.round_trips.load(Ordering::Relaxed),
            redis_decisions: c.redis_decisions.load(Ordering::Relaxed),
            cache_denials: c.cache_denials.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
        }
    }

    /// The quota.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The Redis key holding `key`'s funnel: the prefix, then the key, inside a hash tag
    /// (`prefix{key}`) when [`Builder::hash_tag`] is on, so Redis Cluster places it by the key.
    pub fn redis_key(&self, key: &str) -> String {
        if self.hash_tag {
            format!("{}{{{key}}}", self.prefix)
        } else {
            format!("{}{key}", self.prefix)
        }
    }

    /// The deny cache's answer: a denial when the cached arrival time still denies `n` units
    /// at an upper bound of the server's time; `None` sends the request to Redis.
    fn cached_denial(&self, key: &str, n: u64, local: u64) -> Option<Decision> {
        let cache = self.cache.as_ref()?;
        // Relaxed: any recent offset is an upper bound (see `decided`).
        let offset = self.offset_ns.load(Ordering::Relaxed);
        let now = Timestamp::from_nanos(local.saturating_add_signed(offset)).ok()?;
        let debt = cache.peek_at(key, now).reset_after();
        if debt.is_zero() {
            return None;
        }
        let tat = now.saturating_add(debt);
        let (decision, _) = self.quota.decide_at(tat, now, n);
        (decision.outcome() == Outcome::Limited).then_some(decision)
    }

    fn decided(
        &self,
        key: &str,
        n: u64,
        local_sent: u64,
        code: i64,
        tat_us: i64,
        now_us: i64,
    ) -> Result<Checked, Error> {
        let bad = || Error::Reply(format!("script returned {{{code}, {tat_us}, {now_us}}}"));
        let verdict = Verdict::from_code(code).ok_or_else(bad)?;
        let to_ts = |us: i64| {
            u64::try_from(us)
                .ok()
                .and_then(|us| us.checked_mul(1_000))
                .and_then(|ns| Timestamp::from_nanos(ns).ok())
        };
        let (tat, now) = (
            to_ts(tat_us).ok_or_else(bad)?,
            to_ts(now_us).ok_or_else(bad)?,
        );
        // The server's clock at the reply minus ours when we sent the request: an upper bound
        // of the true offset (the script ran after we sent), so `local + offset` never reads
        // the server's time as earlier than it is, and the cache never denies what Redis
        // would allow.
        let offset =
            i64::try_from(i128::from(now.as_nanos()) - i128::from(local_sent)).unwrap_or(i64::MAX);
        // Relaxed: a hint; every value stored is an upper bound.
        self.offset_ns.store(offset, Ordering::Relaxed);
        let (decision, _) = self.quota.decide_at(tat, now, n);
        let agrees = match verdict {
            Verdict::Allowed => decision.is_allowed(),
            Verdict::Limited => decision.outcome() == Outcome::Limited,
            Verdict::CostExceedsLimit => decision.cost_exceeds_limit(),
        };
        if !agrees {
            return Err(Error::Reply(format!(
                "the script's verdict {verdict:?} differs from funnel's {decision:?}"
            )));
        }
        if verdict == Verdict::Limited {
            if let Some(cache) = &self.cache {
                cache.raise_at(key, tat, now);
            }
        }
        Ok(Checked {
            decision,
            source: Source::Redis,
            server_now: Some(now),
        })
    }

    fn failed(&self, key: &str, n: u64, timed_out: bool) -> Checked {
        // Relaxed: statistics.
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        if timed_out {
            self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
        }
        let now = Timestamp::from_nanos(local_now_ns()).unwrap_or(Timestamp::MAX);
        let (decision, source) = match (&self.on_failure, &self.fallback) {
            (OnFailure::Local { .. }, Some(local)) => {
                (local.check_n_at(key, n, now), Source::LocalFallback)
            }
            (OnFailure::Closed, _) => {
                // A funnel filled to its tolerance: every unit request waits one interval.
                let full = now.saturating_add(self.quota.tolerance());
                (self.quota.decide_at(full, now, n).0, Source::FailedClosed)
            }
            _ => (
                self.quota.decide_at(Timestamp::ZERO, now, n).0,
                Source::FailedOpen,
            ),
        };
        Checked {
            decision,
            source,
            server_now: None,
        }
    }
}

impl Builder {
    /// The prefix of every Redis key (default `funnel:`); instances sharing limits share it.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Wraps the caller's key in a Redis Cluster hash tag (`prefix{key}`), so a key's funnel
    /// lives on the node its key hashes to.
    pub fn hash_tag(mut self, on: bool) -> Self {
        self.hash_tag = on;
        self
    }

    /// How long a decision may wait for Redis before the failure policy answers (default
    /// 10 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What to answer when Redis fails or times out (default [`OnFailure::Closed`]).
    pub fn on_failure(mut self, policy: OnFailure) -> Self {
        self.on_failure = policy;
        self
    }

    /// A local deny cache for up to `keys` keys (0, the default, turns it off).
    pub fn deny_cache(mut self, keys: usize) -> Self {
        self.cache_capacity = keys;
        self
    }

    /// Checks the settings and connects.
    ///
    /// # Errors
    ///
    /// [`Error::SubMicrosecondQuota`], [`Error::Funnel`] for a bad cache size or fallback
    /// quota, [`Error::Connect`] when Redis cannot be reached.
    pub async fn build(self) -> Result<RedisLimiter, Error> {
        let t_ns = self.quota.emission_interval().as_nanos();
        if t_ns % 1_000 != 0 {
            return Err(Error::SubMicrosecondQuota {
                emission_interval_ns: t_ns,
            });
        }
        let t_us = u64::try_from(t_ns / 1_000).unwrap_or(u64::MAX);
        let tau_us = u64::try_from(self.quota.tolerance().as_nanos() / 1_000).unwrap_or(u64::MAX);
        let fallback = match self.on_failure {
            OnFailure::Local { instances } => {
                let share = local_share(&self.quota, instances)?;
                Some(Limiter::<str>::builder(share).build()?)
            }
            _ => None,
        };
        let cache = match self.cache_capacity {
            0 => None,
            keys => Some(
                Limiter::<str>::builder(self.quota)
                    .capacity(keys)
                    .when_full(WhenFull::Evict)
                    .build()?,
            ),
        };
        let client = redis::Client::open(self.url).map_err(Error::Connect)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_secs(2))
            .set_response_timeout(self.timeout.max(Duration::from_millis(1)) * 4)
            .set_number_of_retries(2);
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(Error::Connect)?;
        Ok(RedisLimiter {
            conn,
            script: redis::Script::new(script::GCRA),
            quota: self.quota,
            t_us,
            tau_us,
            prefix: self.prefix,
            hash_tag: self.hash_tag,
            timeout: self.timeout,
            on_failure: self.on_failure,
            fallback,
            cache,
            offset_ns: AtomicI64::new(0),
            counters: Counters::default(),
        })
    }
}

/// The quota divided among `instances`: the limit divided (at least 1), the interval
/// multiplied.
fn local_share(quota: &Quota, instances: u32) -> Result<Quota, Error> {
    let n = u64::from(instances.max(1));
    let limit = (quota.limit() / n).max(1);
    let interval = quota
        .emission_interval()
        .checked_mul(instances.max(1))
        .ok_or(Error::Funnel(funnel::Error::ToleranceTooLarge {
            tolerance_nanos: quota.emission_interval().as_nanos() * u128::from(n),
            max_nanos: Quota::MAX_TOLERANCE_NANOS,
        }))?;
    Ok(Quota::new(limit - 1, 1, interval)?)
}

/// A Redis error that may pass by itself (the server unreachable, restarting, busy): answered
/// by the failure policy, not reported.
fn transient(e: &redis::RedisError) -> bool {
    e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_io_error()
        || matches!(
            e.kind(),
            redis::ErrorKind::BusyLoadingError
                | redis::ErrorKind::TryAgain
                | redis::ErrorKind::ClusterDown
                | redis::ErrorKind::MasterDown
        )
}

/// This machine's clock, ns since the Unix epoch.
fn local_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
