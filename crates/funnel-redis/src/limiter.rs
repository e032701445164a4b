//! [`RedisLimiter`]: where a decision happens. A request goes to the deny cache, then to Redis
//! (the script or `CL.THROTTLE`) within the timeout, then, when Redis cannot decide, to the
//! failure policy.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use funnel::{Outcome, Quota, Timestamp};
use redis::Value;

use crate::cache::{DenyCache, Monotonic};
use crate::error::{Error, Failure, Sorted};
use crate::link::{Conn, Link};
use crate::marker::Markers;
use crate::policy::{Counters, Policy};
use crate::remote::{Call, Remote};
use crate::script::Verdict;
use crate::{reply, Backend, Checked, Source, Stats};

/// A funnel limiter whose state lives in Redis, shared by every instance that uses the same
/// Redis and key prefix. See the crate documentation.
pub struct RedisLimiter {
    pub(crate) link: Arc<Link>,
    pub(crate) remote: Arc<Remote>,
    pub(crate) quota: Quota,
    pub(crate) prefix: String,
    pub(crate) hash_tag: bool,
    pub(crate) timeout: Duration,
    pub(crate) policy: Policy,
    pub(crate) cache: Option<Arc<DenyCache>>,
    pub(crate) clock: Monotonic,
    pub(crate) counters: Arc<Counters>,
    pub(crate) markers: Arc<Markers>,
    /// The servers reached (the URL, or the cluster's seeds), so that [`crate::check_all`]
    /// runs only limiters of one Redis on one connection.
    pub(crate) servers: String,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("backend", &self.backend())
            .field("quota", &self.quota)
            .field("prefix", &self.prefix)
            .field("hash_tag", &self.hash_tag)
            .field("timeout", &self.timeout)
            .field("on_failure", &self.policy.on_failure())
            .field("deny_cache", &self.cache.is_some())
            .field("connected", &self.link.current().is_some())
            .finish()
    }
}

/// One key's answer, or why there is none yet.
type Slot = Option<Result<Checked, Error>>;

impl RedisLimiter {
    /// One unit request for `key`.
    ///
    /// # Errors
    ///
    /// An [`Error`] when Redis answers with something retrying will not fix (a key of another
    /// type, a script error, ...); [`Error::Unavailable`] only under
    /// [`OnFailure::Report`](crate::OnFailure::Report). Every other [`Failure`] is answered by
    /// the policy, within the timeout.
    pub async fn check(&self, key: &str) -> Result<Checked, Error> {
        self.check_n(key, 1).await
    }

    /// A request of `n` units for `key` (`n = 0` peeks).
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check).
    pub async fn check_n(&self, key: &str, n: u64) -> Result<Checked, Error> {
        self.decide(key, n, None).await
    }

    /// [`check_n`](Self::check_n) with the script run at `now` (truncated to the microsecond)
    /// instead of the server's `TIME`: for tests that compare the script's arithmetic with a
    /// reference at given times. The deny cache is neither read nor written. Cargo feature
    /// `injected-time`; never for production, where one clock for the whole fleet is the point.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check); [`Error::InjectedTimeUnsupported`] with
    /// [`Backend::Cell`].
    #[cfg(feature = "injected-time")]
    pub async fn check_n_at(&self, key: &str, n: u64, now: Timestamp) -> Result<Checked, Error> {
        if matches!(self.remote.call, Call::Cell { .. }) {
            return Err(Error::InjectedTimeUnsupported);
        }
        self.decide(key, n, Some(now.as_nanos() / 1_000)).await
    }

    async fn decide(&self, key: &str, n: u64, now_us: Option<u64>) -> Result<Checked, Error> {
        let sent = self.clock.now();
        let epoch = self.cache_epoch();
        if now_us.is_none() {
            if let Some(checked) = self.cached(key, n, sent) {
                return Ok(checked);
            }
        }
        let redis_key = self.redis_key(key);
        let reply = tokio::time::timeout(self.timeout, self.one(redis_key, n, now_us)).await;
        let sorted = match reply {
            Ok(Ok(value)) => {
                return self.read(key, n, sent, value, now_us.is_none().then_some(epoch))
            }
            Ok(Err(sorted)) => sorted,
            Err(_elapsed) => Sorted::Failure(self.elapsed()),
        };
        self.failed(key, n, sorted)
    }

    /// One request to Redis, on a task of its own that keeps its place among the requests
    /// waiting on Redis until the reply (`remote.rs`).
    async fn one(&self, redis_key: String, n: u64, now_us: Option<u64>) -> Result<Value, Sorted> {
        let Some(conn) = self.link.get().await else {
            return Err(self.no_connection());
        };
        let place = self.remote.place(1)?;
        let reply = self.remote.send_one(place, conn, redis_key, n, now_us);
        reply
            .await
            .unwrap_or(Err(Sorted::Failure(Failure::Connection)))
    }

    /// Why the timeout ran out: waiting for a connection, or for a reply.
    pub(crate) fn elapsed(&self) -> Failure {
        if self.link.current().is_none() {
            Failure::Connection
        } else {
            Failure::Timeout
        }
    }

    /// Why there is no connection: the server refused the last attempt (a wrong password, a
    /// missing permission: [`Error::NoPermission`], never answered by the failure policy), or
    /// it could not be reached ([`Failure::Connection`], answered by the policy).
    pub(crate) fn no_connection(&self) -> Sorted {
        match self.link.refused() {
            Some(message) => Sorted::Error(Error::NoPermission { message }),
            None => Sorted::Failure(Failure::Connection),
        }
    }

    /// A request of `n` units for each of `keys`, in order: the keys the deny cache can answer
    /// are answered here, the others go to Redis in one pipeline, one round trip (each still
    /// decided atomically by Redis, in order). On a cluster connection, one pipeline per hash
    /// slot, sent concurrently. One answer per key, in order, the one [`check`](Self::check)
    /// would give: a key's error (a foreign value's [`Error::WrongType`], a write refused for
    /// `OOM`) is that key's alone, and the other keys get their decisions.
    ///
    /// On a cluster, the `redis` crate reports a pipeline's first error reply for every
    /// command in it. With [`Backend::Script`] the script answers a key's own error as a value
    /// (see the crate documentation, "Redis Cluster"), so the errors a slot's keys share are
    /// connection errors and those Redis gives before running the script: the node's state,
    /// the same for all of them (`LOADING`, `BUSY`, `CLUSTERDOWN`, ...; `NOSCRIPT` is resent
    /// as `EVAL`), and an ACL's `NOPERM`, which the slot's keys share when the ACL allows only
    /// some of them. With [`Backend::Cell`], `CL.THROTTLE`'s `WRONGTYPE` for a foreign key is
    /// an error reply: every other key of that hash slot gets the same [`Error::WrongType`]
    /// (naming its own Redis key) although the module decided, and may have charged, it; use
    /// [`check`](Self::check) for a key that may hold a foreign value there.
    ///
    /// The whole call is bounded by the timeout; a key whose pipeline did not come back is
    /// answered by the failure policy (its reply is still read, and counted, when it comes:
    /// see [`Builder::timeout`](crate::Builder::timeout)). The pipeline takes one of the
    /// [`max_pending`](crate::Builder::max_pending) places per key it sends; with none free,
    /// its keys are answered by the policy as [`Failure::Overloaded`] and nothing is sent.
    pub async fn check_many(&self, keys: &[&str], n: u64) -> Vec<Result<Checked, Error>> {
        let sent = self.clock.now();
        let epoch = self.cache_epoch();
        let mut out: Vec<Slot> = keys
            .iter()
            .map(|key| self.cached(key, n, sent).map(Ok))
            .collect();
        let remote: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
        if !remote.is_empty() {
            let answers: Mutex<Vec<Slot>> = Mutex::new(remote.iter().map(|_| None).collect());
            let round_trip = self.many(keys, &remote, n, (sent, epoch), &answers);
            if tokio::time::timeout(self.timeout, round_trip)
                .await
                .is_err()
            {
                // The round trips still out are dropped here; their keys get the policy below.
            }
            let answers = answers.into_inner().unwrap_or_else(|p| p.into_inner());
            for (&i, answer) in remote.iter().zip(answers) {
                out[i] =
                    Some(answer.unwrap_or_else(|| {
                        self.failed(keys[i], n, Sorted::Failure(Failure::Timeout))
                    }));
            }
        }
        out.into_iter()
            .map(|slot| {
                slot.unwrap_or(Err(Error::UnexpectedReply {
                    reply: "no answer".into(),
                }))
            })
            .collect()
    }

    /// The pipelines of `check_many`: fills `answers[j]` for `keys[remote[j]]` as replies come.
    async fn many(
        &self,
        keys: &[&str],
        remote: &[usize],
        n: u64,
        (sent, epoch): (Timestamp, u64),
        answers: &Mutex<Vec<Slot>>,
    ) {
        let Some(conn) = self.link.get().await else {
            let mut answers = answers.lock().unwrap_or_else(|p| p.into_inner());
            for (j, &i) in remote.iter().enumerate() {
                answers[j] = Some(self.failed(keys[i], n, self.no_connection()));
            }
            return;
        };
        let redis_keys: Vec<String> = remote.iter().map(|&i| self.redis_key(keys[i])).collect();
        let groups = groups(&conn.1, &redis_keys);
        let pipelines = groups.iter().map(|group| {
            let conn = conn.clone();
            let redis_keys = &redis_keys;
            async move {
                let results = match self.remote.place(group.len()) {
                    Ok(place) => {
                        let members = group.iter().map(|&j| redis_keys[j].clone()).collect();
                        let replies = self.remote.send_pipeline(place, conn, members, n);
                        replies.await.unwrap_or_else(|_| {
                            group
                                .iter()
                                .map(|_| Err(Sorted::Failure(Failure::Connection)))
                                .collect()
                        })
                    }
                    Err(_) => group
                        .iter()
                        .map(|_| Err(Sorted::Failure(Failure::Overloaded)))
                        .collect(),
                };
                let mut answers = answers.lock().unwrap_or_else(|p| p.into_inner());
                for (&j, result) in group.iter().zip(results) {
                    let key = keys[remote[j]];
                    answers[j] = Some(match result {
                        Ok(value) => self.read(key, n, sent, value, Some(epoch)),
                        Err(sorted) => self.failed(key, n, sorted),
                    });
                }
            }
        });
        join_all(pipelines).await;
    }

    /// The answer when Redis did not decide: the policy for a failure, the error otherwise.
    pub(crate) fn failed(&self, key: &str, n: u64, sorted: Sorted) -> Result<Checked, Error> {
        let error = match sorted {
            Sorted::Failure(failure) => {
                return self
                    .policy
                    .answer(key, n, failure, self.clock.now(), &self.counters)
            }
            Sorted::NoScript => Error::Script {
                message: "NOSCRIPT after EVAL".into(),
            },
            Sorted::Error(e) => e,
        };
        Counters::add(&self.counters.typed_errors, 1);
        Err(error)
    }

    /// The deny cache's answer, counted.
    fn cached(&self, key: &str, n: u64, sent: Timestamp) -> Option<Checked> {
        let decision = self.cache.as_ref()?.denial(key, n, sent)?;
        Counters::add(&self.counters.cache_denials, 1);
        Some(Checked {
            decision,
            source: Source::DenyCache,
            server_now: None,
            failure: None,
        })
    }

    /// The deny cache's invalidation count, read when a request is sent (0 without a cache).
    fn cache_epoch(&self) -> u64 {
        self.cache.as_ref().map_or(0, |cache| cache.epoch())
    }

    /// Reads Redis's reply into the decision, and teaches the deny cache (when `learn` holds
    /// the cache's epoch at sending: see `DenyCache::remember`).
    fn read(
        &self,
        key: &str,
        n: u64,
        sent: Timestamp,
        value: Value,
        learn: Option<u64>,
    ) -> Result<Checked, Error> {
        let read = match &self.remote.call {
            Call::Script { .. } => self.read_script(key, n, sent, value, learn),
            Call::Cell { .. } => self.read_cell(key, n, sent, value, learn),
        };
        match read {
            Ok(checked) => {
                Counters::add(&self.counters.redis_decisions, 1);
                Ok(checked)
            }
            Err(e) => {
                Counters::add(&self.counters.typed_errors, 1);
                Err(e)
            }
        }
    }

    fn read_script(
        &self,
        key: &str,
        n: u64,
        sent: Timestamp,
        value: Value,
        learn: Option<u64>,
    ) -> Result<Checked, Error> {
        let read = reply::script(&self.quota, n, &value)?;
        if let Some(epoch) = learn {
            let redis_key = self.redis_key(key);
            let lost = self
                .markers
                .for_key(&redis_key)
                .is_some_and(|(slot, _)| self.markers.lost(slot, read.epoch, read.now_us));
            if lost {
                // Redis lost writes this instance may have cached denials from: forget them
                // all. This reply, sent before the invalidation, is not remembered either.
                Counters::add(&self.counters.data_losses, 1);
                self.invalidate_all();
            }
            if let Some(cache) = &self.cache {
                cache.learn_offset(read.now, sent);
                if read.verdict == Verdict::Limited {
                    cache.remember(key, read.tat, read.now, epoch);
                }
            }
        }
        Ok(Checked {
            decision: read.decision,
            source: Source::Redis,
            server_now: Some(read.now),
            failure: None,
        })
    }

    fn read_cell(
        &self,
        key: &str,
        n: u64,
        sent: Timestamp,
        value: Value,
        learn: Option<u64>,
    ) -> Result<Checked, Error> {
        let (decision, r) = reply::cell(&self.quota, n, &value, sent)?;
        if let (Some(cache), Some(epoch)) = (&self.cache, learn) {
            if decision.outcome() == Outcome::Limited {
                // The earliest arrival time the reply allows, in the local frame (offset 0).
                cache.remember(
                    key,
                    sent.saturating_add(Duration::from_nanos(r)),
                    sent,
                    epoch,
                );
            }
        }
        Ok(Checked {
            decision,
            source: Source::Redis,
            server_now: None,
            failure: None,
        })
    }

    /// Forgets what the deny cache knows of `key`. Call it when the key's funnel in Redis was
    /// reset or lost without this instance doing it (see the crate documentation, "Where the
    /// deny cache differs from Redis"), or the cache goes on denying it until its cached
    /// arrival time passes.
    pub fn invalidate(&self, key: &str) {
        if let Some(cache) = &self.cache {
            cache.invalidate(key);
        }
    }

    /// Forgets everything the deny cache knows: after Redis lost its data (a restart without
    /// persistence, a failover to a replica that missed writes, a `FLUSHALL`). The limiter does
    /// it by itself when it sees the loss (see the crate documentation, "When Redis loses its
    /// data"); call it where it cannot (a failover on a cluster shard, [`Backend::Cell`] and a
    /// `FLUSHALL`).
    pub fn invalidate_all(&self) {
        if let Some(cache) = &self.cache {
            cache.invalidate_all();
        }
    }

    /// Empties `key`'s funnel in Redis (`DEL`) and in this instance's deny cache. Other
    /// instances' caches still hold it: they must [`invalidate`](Self::invalidate) it too.
    /// Returns whether Redis held the key.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when Redis cannot be reached within the timeout (whatever the
    /// policy: a reset is not a decision), or an error reply.
    pub async fn reset(&self, key: &str) -> Result<bool, Error> {
        // Invalidated before the `DEL`: a reply to a request sent before this point is then not
        // remembered (`DenyCache::remember`), so a denial answered after it cannot stay in the
        // cache, denying a key Redis no longer holds.
        self.invalidate(key);
        let redis_key = self.redis_key(key);
        let del = async {
            let Some((generation, mut conn)) = self.link.get().await else {
                return Err(self.no_connection());
            };
            let reply = conn.command(redis::cmd("DEL").arg(&redis_key)).await;
            self.remote.sorted(reply, &redis_key, generation)
        };
        match tokio::time::timeout(self.timeout, del).await {
            Ok(Ok(Value::Int(deleted))) => Ok(deleted > 0),
            Ok(Ok(other)) => Err(Error::UnexpectedReply {
                reply: format!("{other:?}"),
            }),
            Ok(Err(Sorted::Failure(f))) => Err(Error::Unavailable(f)),
            Ok(Err(Sorted::Error(e))) => Err(e),
            Ok(Err(Sorted::NoScript)) => Err(Error::Script {
                message: "NOSCRIPT from DEL".into(),
            }),
            Err(_elapsed) => Err(Error::Unavailable(Failure::Timeout)),
        }
    }

    /// Whether the redis-cell module (`CL.THROTTLE`) is loaded on the server, from `MODULE
    /// LIST` (on a cluster, on one node): to choose [`Backend::Cell`] at deployment.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when Redis cannot be reached within the timeout,
    /// [`Error::NoPermission`] where `MODULE LIST` is not allowed.
    pub async fn redis_cell_loaded(&self) -> Result<bool, Error> {
        let list = async {
            let Some((generation, mut conn)) = self.link.get().await else {
                return Err(self.no_connection());
            };
            let reply = conn
                .command(&redis::cmd("MODULE").arg("LIST").clone())
                .await;
            self.remote.sorted(reply, "", generation)
        };
        match tokio::time::timeout(self.timeout.max(Duration::from_secs(1)), list).await {
            Ok(Ok(value)) => Ok(crate::cell::lists_redis_cell(&value)),
            Ok(Err(Sorted::Failure(f))) => Err(Error::Unavailable(f)),
            Ok(Err(Sorted::Error(e))) => Err(e),
            Ok(Err(Sorted::NoScript)) => Ok(false),
            Err(_elapsed) => Err(Error::Unavailable(Failure::Timeout)),
        }
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// The quota.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        match self.remote.call {
            Call::Script { .. } => Backend::Script,
            Call::Cell { .. } => Backend::Cell,
        }
    }

    /// The Redis key holding `key`'s funnel: the prefix, then the key, inside a hash tag
    /// (`prefix{key}`) when [`Builder::hash_tag`](crate::Builder::hash_tag) is on.
    pub fn redis_key(&self, key: &str) -> String {
        if self.hash_tag {
            format!("{}{{{key}}}", self.prefix)
        } else {
            format!("{}{key}", self.prefix)
        }
    }
}

/// The pipelines of one `check_many`: one for all keys on a single server; on a cluster, one per
/// hash slot (a cluster pipeline must stay within one slot). Indices into `redis_keys`.
pub(crate) fn groups(conn: &Conn, redis_keys: &[String]) -> Vec<Vec<usize>> {
    #[cfg(feature = "cluster")]
    if let Conn::Cluster(_) = conn {
        let mut by_slot: std::collections::BTreeMap<u16, Vec<usize>> = Default::default();
        for (j, key) in redis_keys.iter().enumerate() {
            by_slot
                .entry(redis::cluster_routing::get_slot(key.as_bytes()))
                .or_default()
                .push(j);
        }
        return by_slot.into_values().collect();
    }
    let _ = conn;
    vec![(0..redis_keys.len()).collect()]
}

/// Runs the futures concurrently on this task and waits for all of them.
async fn join_all<F: std::future::Future<Output = ()>>(futures: impl Iterator<Item = F>) {
    let mut futures: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        futures.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if futures.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}
