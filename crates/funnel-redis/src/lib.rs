//! # funnel-redis
//!
//! funnel's limiter shared by a fleet through Redis: every instance of a proxy fleet decides
//! on the same funnel per key, with CL.THROTTLE's answer (the same [`funnel::Decision`] the
//! in-process [`funnel::Limiter`] gives), a local deny cache, and an explicit policy for when
//! Redis cannot decide.
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
//!     .await?; // Redis being down does not fail this: the policy answers meanwhile
//! let checked = limiter.check("client-42").await?;
//! if !checked.decision.is_allowed() {
//!     // 429, Retry-After from checked.decision.retry_after()
//! }
//! # Ok(()) }
//! ```
//!
//! ## Where a decision happens
//!
//! `limiter.rs`: the deny cache first (`cache.rs`), then one round trip to Redis within the
//! timeout (`link.rs` holds the connection), then, when Redis cannot decide, the failure policy
//! (`policy.rs`). Errors are sorted in `error.rs`.
//!
//! ## Backends
//!
//! * [`Backend::Script`] (the default): a Lua script, loaded once and called with `EVALSHA`
//!   (resent as `EVAL`, which loads it, on `NOSCRIPT`), runs the funnel arithmetic on the
//!   key's stored arrival time with the server's clock (`TIME`: one clock for the whole fleet,
//!   so the instances' clock skew plays no part). It returns the arrival time and the server's
//!   time, and the decision is rebuilt here with [`funnel::Quota::decide_at`], the function the
//!   in-process limiter uses: the five integers are the in-process ones at the server's time,
//!   to the nanosecond.
//! * [`Backend::Cell`]: redis-cell's `CL.THROTTLE`, where the module is loaded
//!   ([`RedisLimiter::redis_cell_loaded`] asks `MODULE LIST`; [`Builder::build`] refuses
//!   [`Backend::Cell`] when Redis answers and the module is not listed). Its reply is five
//!   integers with whole seconds and no clock, so the decision built from it has the module's
//!   `allowed`, `limit` and `remaining` exactly and gives back the same five integers, but its
//!   `reset_after()` and `retry_after()` are the **earliest** durations those whole seconds
//!   allow: up to a second below the module's true values, never above. The deny cache keeps
//!   that earliest arrival time, on the local clock from when the request was sent, so it still
//!   denies only what the module denies. `Checked::server_now` is `None`. The script and the
//!   module store arrival times differently (µs and ns): never point both at one key prefix.
//!
//! Both need a quota whose emission interval is a whole number of microseconds
//! ([`Error::SubMicrosecondQuota`]).
//!
//! ## The deny cache
//!
//! A denial from Redis tells us the key's arrival time; in Redis an arrival time only grows,
//! so until the request would fit again the key stays denied, and later requests for it are
//! answered here ([`Source::DenyCache`]) with no round trip, from a bounded funnel table
//! ([`Builder::deny_cache`]; the least indebted key is evicted when it is full). A flood from
//! abusive keys then costs Redis nothing. The cache never admits anything, and reads the
//! server's time as an upper bound (see `cache.rs`), so while Redis keeps what it decided it
//! never denies what Redis would allow.
//!
//! ### Where the deny cache differs from Redis
//!
//! It denies a request Redis would now allow when the key's arrival time in Redis moved back
//! without this instance seeing it:
//!
//! * **a reset elsewhere**: another instance's [`RedisLimiter::reset`], or any `DEL` of the key;
//! * **Redis losing state**: a restart without persistence, a failover to a replica that had
//!   not received the last writes, eviction of the key under `maxmemory`, a `FLUSHALL`: until
//!   the limiter sees it (next section), or for an evicted key, until its entry expires;
//! * **the server's clock stepping forward**: the cache reads the server's time through the
//!   offset it learned before the step, until the next reply from Redis (for any key) teaches
//!   it the new one. A step of this machine's wall clock changes nothing: the cache measures
//!   time on the monotonic clock.
//!
//! Each lasts at most until the cached arrival time passes (the key's retry-after when it was
//! cached, at most the quota's tolerance). The way out is [`RedisLimiter::invalidate`] for one
//! key, [`RedisLimiter::invalidate_all`] for all.
//!
//! ## When Redis loses its data
//!
//! A Redis that restarts with an empty data set (no persistence), gets `FLUSHALL`, or is
//! replaced by a replica that missed the last writes forgives every key it lost: each starts
//! again from an empty funnel, so **the fleet admits up to a full burst (the quota's limit)
//! again for every lost key**, on top of what it admitted before the loss; keys Redis still
//! holds are limited as before. The limiter sees the loss by itself and empties its deny cache,
//! so that it stops denying what Redis now admits, and counts it ([`Stats::data_losses`]):
//!
//! * **a data-set marker**: the script keeps one small key beside the funnels
//!   (`<prefix>\0marker`, on a cluster one per hash slot) holding the server's time when it was
//!   created, and returns it with every decision. An emptied data set creates a new one, so
//!   the first reply from it, for any key, shows the loss ([`Backend::Script`] only);
//! * **the server's identity**: every second the limiter reads `run_id` and `master_replid`
//!   (`INFO`), which change when a server restarts or a replica is promoted; a promoted replica
//!   kept the marker but not the primary's replication id (single server only: on a cluster
//!   `INFO` reaches one node).
//!
//! Until then (the next reply, or at most about a second), the cache goes on denying lost keys
//! it holds, never admitting anything Redis would not. A promotion that lost nothing empties
//! the cache too (a few more round trips, no wrong answer). Not seen: a failover on a cluster
//! shard that kept the marker (call [`RedisLimiter::invalidate_all`] from your failover
//! hook), and [`Backend::Cell`] emptied by `FLUSHALL` on the same server (no marker). Under
//! `maxmemory` with `allkeys-lru` or `allkeys-random`, Redis may evict funnels like any key:
//! an evicted key is forgiven (a full burst again) and not detected, unless the marker is
//! evicted with it; a `volatile-*` policy evicts only keys with a time to live, which every
//! funnel has and the marker has not.

//! ## When Redis cannot decide
//!
//! A [`Failure`] (no reply within the timeout, default 10 ms; no connection; `LOADING`,
//! `READONLY`, `OOM`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`, `BUSY`) is answered by the
//! [`OnFailure`] policy, and the answer says so ([`Checked::failure`], [`Checked::source`]):
//!
//! * [`OnFailure::Open`]: allow, as a fresh funnel would: no limit while Redis is down;
//! * [`OnFailure::Closed`] (the default): deny: an outage blocks traffic. The denial's
//!   retry-after is the outage's, [`Builder::outage_retry_after`] (default 1 s, the longest
//!   reconnect backoff), not the quota's emission interval (an hour for one an hour);
//! * [`OnFailure::Local`]: decide on a local funnel with the quota divided by the fleet's
//!   size, so the fleet stays near its limit (keys' debts in Redis are not carried over);
//! * [`OnFailure::Report`]: return [`Error::Unavailable`] and let the caller choose.
//!
//! A reply that retrying will not fix (`WRONGTYPE`, a script error, `MOVED` on a single-server
//! connection, `NOPERM`, ...) is an [`Error`] of its own variant, never a policy's guess (the
//! table in `error.rs` argues each). So is a server that refuses the connection (a wrong
//! password, a missing ACL permission): [`Error::NoPermission`], from `build` and from every
//! request, whatever the policy. The connection is made lazily: [`Builder::build`] waits
//! for one attempt at most and, except under [`OnFailure::Report`], succeeds with Redis down;
//! the limiter connects in the background and reconnects when Redis comes back. [`Stats`]
//! counts every path.
//!
//! ### Requests waiting on Redis
//!
//! * **A request that timed out may still be charged.** Once sent it is in Redis's queue, and
//!   a frozen server runs it when it thaws (a slow one, when it gets to it): the key is charged
//!   although the caller got the policy's answer. The limiter keeps reading the reply after
//!   the timeout and counts it: [`Stats::late_replies`], and [`Stats::late_charges`] for the
//!   requests Redis admitted, so charged (see [`Builder::timeout`]).
//! * **The number waiting is bounded.** At most [`Builder::max_pending`] requests of a limiter
//!   (default 1,024) wait on Redis at once; one that finds no place is not sent, and the policy
//!   answers it at once as [`Failure::Overloaded`] ([`Stats::overloaded`]). So a server slower
//!   than the timeout for seconds makes nothing queue without bound, here or in Redis, and at
//!   most that many requests can be charged late.
//! * **A stale connection is replaced.** A request unanswered at four times the timeout makes
//!   the limiter drop its connection and make a new one: a frozen server gets nothing more
//!   from this limiter until it answers a new connection. Requests already sent are given up
//!   10 s after they were sent (or four times the timeout if longer): their places are freed
//!   and a reply after that is not counted.
//! * **A connection killed mid-request** (`CLIENT KILL`, a proxy or a network failure): its
//!   requests are answered by the policy as [`Failure::Connection`], and the next request
//!   connects again. One that Redis had already run was charged although the caller got the
//!   policy's answer: the caller may be denied what Redis admitted, never admitted what Redis
//!   denied.
//!
//! ## Several limits, all or nothing
//!
//! [`check_all`] decides one request against several limiters' keys together, in one script
//! where the keys share a hash slot (see `joint.rs`); [`peek_all`] answers without charging.
//!
//! ## Sentinel, credentials, TLS
//!
//! [`Builder::sentinel`] asks the sentinels for the primary at every connection and checks it
//! with `ROLE`; behind sentinels a lost connection, like `READONLY`, makes the limiter connect
//! again through them, so it follows a failover. [`Builder::auth`] sets the credentials of
//! every server. With the cargo feature `tls`, `rediss://` URLs are reached through rustls:
//! `Builder::tls_root_certificate` trusts a private authority, `Builder::tls_client_certificate`
//! shows a client certificate to servers that require one, and
//! `Builder::tls_skip_hostname_verification` accepts a certificate that does not name the host
//! dialed while still checking its chain (the `redis` crate's `#insecure` URLs, which check
//! nothing, are refused). Every kind of target takes them: a server, a cluster's nodes, the
//! sentinels and the primary they name.
//!
//! ## Redis Cluster
//!
//! With the cargo feature `cluster`, `Builder::cluster` connects to a Redis Cluster through
//! the `redis` crate's async cluster connection (it follows `MOVED`/`ASK` and keeps the slot
//! map). Each request touches one key, so any key works; [`RedisLimiter::check_many`] sends one
//! pipeline per hash slot, concurrently. Without the feature, a cluster node answers `MOVED`
//! for most keys: [`Error::WrongNode`].
//!
//! The `redis` crate reports a cluster pipeline's first error reply for every command in it.
//! So that one key's error stays that key's, the script answers it as a value, `{3,
//! message}`, never as an error reply: a foreign value at the key (another type, or a string
//! that is not an arrival time: [`Error::WrongType`]) or a write Redis refused (`OOM`,
//! `READONLY`: answered by the failure policy). The limiter turns it back into the error reply
//! `message` before sorting it, so [`RedisLimiter::check`], and `check_many` on a single server
//! or on a cluster, give a key the same answer, and the other keys of its hash slot get their
//! own decisions. [`Backend::Cell`] cannot do this: `CL.THROTTLE` answers a foreign key with a
//! `WRONGTYPE` error reply, and on a cluster every key of that slot in a `check_many` gets
//! it, although the module decided, and may have charged, the others.
//!
//! A cluster pipeline that ran in part can run again whole, so `check_many` on a cluster may
//! charge a key twice, which only ever denies more, never admits more: the `redis` crate
//! resends a whole pipeline after an I/O error or a redirection of one of its commands
//! (`MOVED`, `ASK`, `TRYAGAIN`, while a slot migrates), by which time the others may have run;
//! and a `NOSCRIPT` for part of a pipeline (a `SCRIPT FLUSH` on the node in the middle of it)
//! makes this crate resend the whole slot as `EVAL`. On a single server each command answers
//! for itself, and only those that found no script are sent again.

mod builder;
mod cache;
mod cell;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod joint;
mod limiter;
mod link;
mod marker;
mod policy;
mod remote;
mod reply;
mod script;
#[cfg(feature = "tls")]
mod tls;

pub use builder::Builder;
pub use error::{Error, Failure};
pub use joint::{check_all, peek_all, Joint, JointEntry};
pub use limiter::RedisLimiter;
pub use policy::{OnFailure, Stats};

/// The README's example, compiled as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use funnel::{Decision, Timestamp};

/// How Redis decides (see the crate documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// This crate's Lua script: the in-process arithmetic, to the nanosecond, on the server's
    /// clock.
    #[default]
    Script,
    /// redis-cell's `CL.THROTTLE`, where the module is loaded: whole seconds.
    Cell,
}

/// Where an answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// Redis (the script or `CL.THROTTLE`).
    Redis,
    /// The local deny cache, with no round trip.
    DenyCache,
    /// Redis could not decide: [`OnFailure::Open`].
    FailedOpen,
    /// Redis could not decide: [`OnFailure::Closed`].
    FailedClosed,
    /// Redis could not decide: [`OnFailure::Local`].
    LocalFallback,
}

/// One answer: the decision and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Checked {
    /// The decision, as the in-process limiter would give it.
    pub decision: Decision,
    /// Where it came from.
    pub source: Source,
    /// The server's time of the decision, ns since the Unix epoch, when the script decided.
    pub server_now: Option<Timestamp>,
    /// Why Redis could not decide, when the policy answered.
    pub failure: Option<Failure>,
}
