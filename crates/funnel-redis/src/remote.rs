//! The requests to Redis, each run on a task of its own so that it holds its place among the
//! requests waiting on Redis until its reply comes, even after the caller gave up at the timeout.
//!
//! * **A bound.** At most `max_pending` requests of a limiter wait on Redis at any time (a
//!   `check_many` pipeline takes one place per key). A request that finds no place is not sent:
//!   the failure policy answers it at once, as [`Failure::Overloaded`]. Nothing queues in this
//!   crate beyond the bound.
//! * **Late replies.** A request the caller stopped waiting for (the policy answered it at the
//!   timeout) is still in Redis's queue: a frozen server runs it when it thaws, and charges it.
//!   Its task reads the reply when it comes and counts it ([`Stats::late_replies`], and
//!   [`Stats::late_charges`] when Redis admitted it, so charged it).
//! * **A stale connection.** A request unanswered at four times the limiter's timeout makes the
//!   limiter drop its connection and make a new one (as for `READONLY`): a frozen server or a
//!   dead path gets no more requests from this limiter until it answers a new connection. The
//!   requests already sent keep waiting for their replies on the old connection.
//! * **Giving up.** A request unanswered at the connection's response timeout
//!   ([`GIVE_UP`], or four times the timeout if longer) is given up: its place is freed, and a
//!   reply after that, if the server runs it at all, is not counted.
//!
//! [`Stats::late_replies`]: crate::Stats::late_replies
//! [`Stats::late_charges`]: crate::Stats::late_charges

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use crate::error::{came_back, sort, Error, Failure, Sorted};
use crate::link::{Conn, Link};
use crate::marker::Markers;
use crate::policy::Counters;
use crate::reply;
use crate::script;

/// How long a request may wait for its reply before it is given up (the connection's response
/// timeout), unless four times the limiter's timeout is longer.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(10);

/// How a request is put to Redis.
pub(crate) enum Call {
    /// The script, with the quota's emission interval and tolerance in µs.
    Script { sha: String, t_us: u64, tau_us: u64 },
    /// `CL.THROTTLE` with `[max_burst, count, period_s]`.
    Cell { arguments: [i64; 3] },
}

/// What a request to Redis needs, shared with the tasks that carry it.
pub(crate) struct Remote {
    pub(crate) link: Arc<Link>,
    pub(crate) call: Call,
    /// The quota's limit (the script's `ARGV[3]`).
    pub(crate) limit: u64,
    pub(crate) markers: Arc<Markers>,
    pub(crate) counters: Arc<Counters>,
    /// One permit per request waiting on Redis (`max_pending`).
    pub(crate) pending: Arc<Semaphore>,
    /// Four times the limiter's timeout: a request unanswered for this long makes the
    /// connection stale.
    pub(crate) stale_after: Duration,
}

impl Remote {
    /// A place for `count` requests among those waiting on Redis, or `Failure::Overloaded`.
    pub(crate) fn place(&self, count: usize) -> Result<OwnedSemaphorePermit, Sorted> {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        self.pending
            .clone()
            .try_acquire_many_owned(count)
            .map_err(|_| Sorted::Failure(Failure::Overloaded))
    }

    /// Sends one request on a task of its own, holding `place` until the reply; the receiver
    /// gets the reply (see [`one`](Self::one)). Dropped, the reply is counted as late.
    pub(crate) fn send_one(
        self: &Arc<Self>,
        place: OwnedSemaphorePermit,
        (generation, conn): (u64, Conn),
        redis_key: String,
        n: u64,
        now_us: Option<u64>,
    ) -> oneshot::Receiver<Result<Value, Sorted>> {
        let (tx, rx) = oneshot::channel();
        let remote = self.clone();
        tokio::spawn(async move {
            let work = remote.one(conn, generation, &redis_key, n, now_us);
            let result = remote.watched(generation, work).await;
            if let Err(result) = tx.send(result) {
                remote.late(std::slice::from_ref(&result), n);
            }
            drop(place);
        });
        rx
    }

    /// Sends one pipeline on a task of its own, holding `place` until the replies; as
    /// [`send_one`](Self::send_one), for [`pipeline`](Self::pipeline).
    pub(crate) fn send_pipeline(
        self: &Arc<Self>,
        place: OwnedSemaphorePermit,
        (generation, conn): (u64, Conn),
        redis_keys: Vec<String>,
        n: u64,
    ) -> oneshot::Receiver<Vec<Result<Value, Sorted>>> {
        let (tx, rx) = oneshot::channel();
        let remote = self.clone();
        tokio::spawn(async move {
            let group: Vec<usize> = (0..redis_keys.len()).collect();
            let work = remote.pipeline(&conn, generation, &group, &redis_keys, n);
            let results = remote.watched(generation, work).await;
            if let Err(results) = tx.send(results) {
                remote.late(&results, n);
            }
            drop(place);
        });
        rx
    }

    /// Runs `work` to its end; if it takes longer than `stale_after`, the connection of
    /// `generation` is dropped and a new one made meanwhile (see the module documentation).
    async fn watched<T>(&self, generation: u64, work: impl Future<Output = T>) -> T {
        tokio::pin!(work);
        match tokio::time::timeout(self.stale_after, &mut work).await {
            Ok(done) => done,
            Err(_stale) => {
                self.link.reconnect(generation);
                work.await
            }
        }
    }

    /// Counts the replies to requests the caller no longer waited for: each one Redis
    /// answered, and those it admitted (so charged).
    fn late(&self, results: &[Result<Value, Sorted>], n: u64) {
        let answered = results
            .iter()
            .filter(|r| {
                !matches!(
                    r,
                    Err(Sorted::Failure(Failure::Timeout | Failure::Connection))
                )
            })
            .count();
        let admitted = results
            .iter()
            .filter(|r| match r {
                Ok(value) => n > 0 && reply::admitted(self.backend_is_cell(), value),
                Err(_) => false,
            })
            .count();
        Counters::add(&self.counters.late_replies, answered as u64);
        Counters::add(&self.counters.late_charges, admitted as u64);
    }

    fn backend_is_cell(&self) -> bool {
        matches!(self.call, Call::Cell { .. })
    }

    /// One request to Redis: the command, and when the script is not loaded (a new or
    /// restarted server), the same request as `EVAL`, which loads it.
    async fn one(
        &self,
        mut conn: Conn,
        generation: u64,
        redis_key: &str,
        n: u64,
        now_us: Option<u64>,
    ) -> Result<Value, Sorted> {
        let first = conn
            .command(&self.command(redis_key, n, now_us, false))
            .await
            .map(|value| self.restored(value));
        match self.sorted(first, redis_key, generation) {
            Err(Sorted::NoScript) => {
                let again = conn
                    .command(&self.command(redis_key, n, now_us, true))
                    .await
                    .map(|value| self.restored(value));
                self.sorted(again, redis_key, generation)
            }
            other => other,
        }
    }

    /// One pipeline for the keys `group` (indices into `redis_keys`); one result per key. The
    /// keys that found no script are sent again, as `EVAL`, in a second pipeline.
    async fn pipeline(
        &self,
        conn: &Conn,
        generation: u64,
        group: &[usize],
        redis_keys: &[String],
        n: u64,
    ) -> Vec<Result<Value, Sorted>> {
        let send = |conn: &Conn, members: Vec<usize>, eval: bool| {
            let mut pipe = redis::pipe();
            for &j in &members {
                pipe.add_command(self.command(&redis_keys[j], n, None, eval));
            }
            let mut conn = conn.clone();
            async move { (conn.pipeline(&pipe, members.len()).await, members) }
        };
        let mut results: Vec<Option<Result<Value, Sorted>>> = group.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..group.len()).collect();
        for eval in [false, true] {
            let members: Vec<usize> = pending.iter().map(|&g| group[g]).collect();
            let (replies, _) = send(conn, members, eval).await;
            let redis_key = &redis_keys[group[pending[0]]];
            match replies {
                Ok(values) if values.len() == pending.len() => {
                    Counters::add(&self.counters.round_trips, 1);
                    let mut again = Vec::new();
                    for (&g, value) in pending.iter().zip(values) {
                        match self.restored(value).extract_error() {
                            Ok(v) => results[g] = Some(Ok(v)),
                            Err(e) => match sort(&e, &redis_keys[group[g]]) {
                                Sorted::NoScript if !eval => again.push(g),
                                sorted => results[g] = Some(Err(self.noted(sorted, generation))),
                            },
                        }
                    }
                    pending = again;
                }
                Ok(values) => {
                    Counters::add(&self.counters.round_trips, 1);
                    let reply = format!(
                        "{} replies to a pipeline of {}",
                        values.len(),
                        pending.len()
                    );
                    for &g in &pending {
                        results[g] = Some(Err(Sorted::Error(Error::UnexpectedReply {
                            reply: reply.clone(),
                        })));
                    }
                    pending.clear();
                }
                Err(e) => {
                    if came_back(&e) {
                        Counters::add(&self.counters.round_trips, 1);
                    }
                    // A cluster pipeline reports its first error reply for all its commands
                    // (`Conn::pipeline`). The script answers a key's own error as a value, read
                    // above, so with it this is the node's or the connection's, the same for
                    // every key. `CL.THROTTLE`'s `WRONGTYPE` for one foreign key lands here too,
                    // and every key of the slot gets it (documented on `check_many`).
                    let retry = matches!(sort(&e, redis_key), Sorted::NoScript) && !eval;
                    if !retry {
                        for &g in &pending {
                            let sorted = sort(&e, &redis_keys[group[g]]);
                            results[g] = Some(Err(self.noted(sorted, generation)));
                        }
                        pending.clear();
                    }
                }
            }
            if pending.is_empty() {
                break;
            }
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or(Err(Sorted::Error(Error::Script {
                    message: "NOSCRIPT after EVAL".into(),
                })))
            })
            .collect()
    }

    /// A reply to the script with its `{3, message}` (a key's own error, as a value) turned
    /// back into the error reply it stands for (`script::reply`); `CL.THROTTLE`'s as it came.
    pub(crate) fn restored(&self, value: Value) -> Value {
        match self.call {
            Call::Script { .. } => script::reply(value),
            Call::Cell { .. } => value,
        }
    }

    /// The command for one request: the script (`EVALSHA`, or `EVAL` to load it) or
    /// `CL.THROTTLE`.
    pub(crate) fn command(&self, redis_key: &str, n: u64, now_us: Option<u64>, eval: bool) -> Cmd {
        match &self.call {
            Call::Script { sha, t_us, tau_us } => {
                let mut cmd = if eval {
                    let mut c = redis::cmd("EVAL");
                    c.arg(script::GCRA);
                    c
                } else {
                    let mut c = redis::cmd("EVALSHA");
                    c.arg(sha);
                    c
                };
                match self.markers.for_key(redis_key) {
                    Some((_, marker)) => cmd.arg(2).arg(redis_key).arg(marker),
                    None => cmd.arg(1).arg(redis_key),
                };
                cmd.arg(t_us).arg(tau_us).arg(self.limit).arg(n);
                if let Some(now) = now_us {
                    cmd.arg(now);
                }
                cmd
            }
            Call::Cell { arguments } => {
                let mut cmd = redis::cmd("CL.THROTTLE");
                cmd.arg(redis_key).arg(&arguments[..]).arg(n);
                cmd
            }
        }
    }

    /// A reply, counted as a round trip when it came back, with an error reply sorted.
    pub(crate) fn sorted(
        &self,
        result: redis::RedisResult<Value>,
        redis_key: &str,
        generation: u64,
    ) -> Result<Value, Sorted> {
        let result = match result {
            Ok(value) => {
                Counters::add(&self.counters.round_trips, 1);
                value.extract_error()
            }
            Err(e) => {
                if came_back(&e) {
                    Counters::add(&self.counters.round_trips, 1);
                }
                Err(e)
            }
        };
        result.map_err(|e| self.noted(sort(&e, redis_key), generation))
    }

    /// Acts on a sorted error: a `READONLY` reply, or no reply within the connection's response
    /// timeout (a frozen or very slow server), drops the connection and connects again.
    /// Behind sentinels, a lost connection too: the primary may have moved.
    fn noted(&self, sorted: Sorted, generation: u64) -> Sorted {
        let moved =
            self.link.follows_sentinels() && matches!(sorted, Sorted::Failure(Failure::Connection));
        if moved
            || matches!(
                sorted,
                Sorted::Failure(Failure::ReadOnly | Failure::Timeout)
            )
        {
            self.link.reconnect(generation);
        }
        sorted
    }
}
