//! What can go wrong, typed: [`Failure`] (Redis cannot decide now: answered by the failure
//! policy) and [`Error`] (a setting, or a reply that retrying will not fix).
//!
//! Where each Redis reply goes, and why:
//!
//! | reply | goes to | why |
//! |---|---|---|
//! | no reply within the timeout | [`Failure::Timeout`] | a frozen, overloaded or far server |
//! | refused, reset, closed, not yet connected | [`Failure::Connection`] | the server is down or restarting |
//! | `LOADING` | [`Failure::Loading`] | a restarted server reading its data set; passes by itself |
//! | `READONLY` | [`Failure::ReadOnly`] | a failover demoted our server to a replica; the limiter reconnects |
//! | `OOM` | [`Failure::OutOfMemory`] | `maxmemory` reached under `noeviction`: Redis cannot store an arrival time now, and nothing about the request is wrong |
//! | not sent: `max_pending` requests already waiting on Redis | [`Failure::Overloaded`] | a slow or frozen server: requests do not queue without bound |
//! | `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`, `BUSY` | [`Failure::Unavailable`] | replication or cluster state, a resharding slot, another script running too long: all pass by themselves |
//! | `WRONGTYPE` (also the script's own, for a string that is not an arrival time) | [`Error::WrongType`] | another program owns the key: answering by policy would hide it forever |
//! | a script error | [`Error::Script`] | the script or its arguments are wrong |
//! | `MOVED`, `ASK`, `CROSSSLOT` | [`Error::WrongNode`] | a Redis Cluster behind a single-node connection: a deployment error that never passes by itself (with the `cluster` feature and `Builder::cluster` the client follows redirections itself) |
//! | `NOPERM`, `NOAUTH`, `WRONGPASS`, a connection refused for them (or for a database index out of range) | [`Error::NoPermission`] | credentials or ACL: never pass by themselves |
//! | `ERR unknown command 'CL.THROTTLE'` | [`Error::CellModuleMissing`] | [`Backend::Cell`](crate::Backend::Cell) without the module |
//! | anything else | [`Error::Server`] or [`Error::UnexpectedReply`] | a reply this crate does not know how to read |
//!
//! The script answers a key's own error (`WRONGTYPE`, a refused write's `OOM` or `READONLY`)
//! as a value, `{3, message}`, which the limiter turns back into the reply `message` before
//! sorting it here: it goes where that reply goes (see `script.rs` for why).
//!
//! The line between the two: a [`Failure`] is a state of Redis that passes by itself or by an
//! operator fixing Redis, during which no answer for any key can be had, so the policy the user
//! chose (open, closed, local) applies; an [`Error`] says something is wrong with this key, this
//! deployment or this crate, and answering it by a policy would hide it.

use funnel::Decision;

/// Why Redis could not decide a request: answered by the [`OnFailure`](crate::OnFailure)
/// policy, or returned as [`Error::Unavailable`] under [`OnFailure::Report`](crate::OnFailure::Report).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Failure {
    /// No reply within the limiter's timeout. The request may still reach Redis and be charged
    /// there: a frozen server runs it when it thaws ([`Stats::late_charges`](crate::Stats::late_charges)
    /// counts those whose reply still came).
    Timeout,
    /// No connection: refused, reset or closed, or not established yet.
    Connection,
    /// `LOADING`: a restarted server is reading its data set.
    Loading,
    /// `READONLY`: the server is a replica now (a failover demoted it); the limiter drops the
    /// connection and connects again, which reaches the new primary when the address follows
    /// it (a DNS name, a virtual IP, a proxy).
    ReadOnly,
    /// `OOM`: `maxmemory` is reached and the eviction policy is `noeviction`.
    OutOfMemory,
    /// `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN` or `BUSY`: replication or cluster state, a slot
    /// being resharded, or another script running past the busy limit.
    Unavailable,
    /// Not sent: [`Builder::max_pending`](crate::Builder::max_pending) requests of this limiter
    /// were already waiting on Redis (a slow or frozen server), so this one was answered at
    /// once rather than queued.
    Overloaded,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Failure::Timeout => "no reply from Redis within the timeout",
            Failure::Connection => "no connection to Redis",
            Failure::Loading => "Redis is loading its data set (LOADING)",
            Failure::ReadOnly => "Redis is a read-only replica (READONLY)",
            Failure::OutOfMemory => "Redis is out of memory (OOM)",
            Failure::Unavailable => {
                "Redis is not serving (MASTERDOWN, CLUSTERDOWN, TRYAGAIN or BUSY)"
            }
            Failure::Overloaded => "too many requests are already waiting on Redis",
        })
    }
}

/// Why a [`RedisLimiter`](crate::RedisLimiter) could not be built or could not answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The quota's emission interval is not a whole number of microseconds, the resolution of
    /// the script's arithmetic (Lua numbers are exact only to 2^53) and of `CL.THROTTLE`'s
    /// `remaining`.
    SubMicrosecondQuota {
        /// The emission interval, ns.
        emission_interval_ns: u128,
    },
    /// [`Backend::Cell`](crate::Backend::Cell): no `CL.THROTTLE <max_burst> <count>
    /// <period_s>` (whole seconds, at most 10,000 s tried) gives the quota's emission interval
    /// exactly.
    NotCellQuota {
        /// The emission interval, ns.
        emission_interval_ns: u128,
    },
    /// A quota or table setting funnel rejected.
    Funnel(funnel::Error),
    /// A [`Builder`](crate::Builder) setting out of its range.
    InvalidSetting {
        /// The builder method.
        setting: &'static str,
        /// Why.
        reason: String,
    },
    /// The Redis URL (or a cluster seed) could not be parsed.
    InvalidUrl(redis::RedisError),
    /// [`OnFailure::Report`](crate::OnFailure::Report) and Redis could not be reached while
    /// building the limiter.
    Connect {
        /// What the client said.
        reason: String,
    },
    /// [`OnFailure::Report`](crate::OnFailure::Report): Redis could not decide.
    Unavailable(Failure),
    /// `WRONGTYPE`: the Redis key holds another type (another program uses it); it was left
    /// alone.
    WrongType {
        /// The Redis key.
        redis_key: String,
    },
    /// The script failed inside Redis.
    Script {
        /// Redis's message.
        message: String,
    },
    /// `MOVED`, `ASK` or `CROSSSLOT`: the server is a Redis Cluster node and the limiter was
    /// built for a single server.
    WrongNode {
        /// Redis's message.
        message: String,
    },
    /// `NOPERM`, `NOAUTH`, `WRONGPASS`, or authentication failed.
    NoPermission {
        /// Redis's message.
        message: String,
    },
    /// [`Backend::Cell`](crate::Backend::Cell), and the server does not know `CL.THROTTLE`
    /// (the redis-cell module is not loaded).
    CellModuleMissing,
    /// `RedisLimiter::check_n_at` (cargo feature `injected-time`) with
    /// [`Backend::Cell`](crate::Backend::Cell): `CL.THROTTLE` always reads the server's clock.
    InjectedTimeUnsupported,
    /// Another error reply from Redis.
    Server {
        /// Its first word (`ERR`, `EXECABORT`, ...).
        code: String,
        /// The rest.
        detail: String,
    },
    /// A reply of a shape this crate does not expect (a number out of range, a wrong length).
    UnexpectedReply {
        /// The reply, as read.
        reply: String,
    },
    /// The script's verdict (allowed or not) and funnel's decision rebuilt from the same
    /// arrival time disagree: the script and the crate are out of step.
    Disagreement {
        /// The script's code (0 limited, 1 allowed, 2 cost over the limit).
        verdict: i64,
        /// funnel's decision.
        decision: Decision,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::SubMicrosecondQuota {
                emission_interval_ns,
            } => write!(
                f,
                "the quota's emission interval ({emission_interval_ns} ns) is not a whole number \
                 of microseconds, the resolution of the Redis script and of CL.THROTTLE"
            ),
            Error::NotCellQuota {
                emission_interval_ns,
            } => write!(
                f,
                "no CL.THROTTLE count and whole-second period give an emission interval of \
                 exactly {emission_interval_ns} ns"
            ),
            Error::Funnel(e) => write!(f, "{e}"),
            Error::InvalidSetting { setting, reason } => write!(f, "{setting}: {reason}"),
            Error::InvalidUrl(e) => write!(f, "invalid Redis URL: {e}"),
            Error::Connect { reason } => write!(f, "cannot connect to Redis: {reason}"),
            Error::Unavailable(failure) => write!(f, "{failure}"),
            Error::WrongType { redis_key } => {
                write!(
                    f,
                    "the Redis key {redis_key:?} holds another type (WRONGTYPE)"
                )
            }
            Error::Script { message } => write!(f, "the script failed in Redis: {message}"),
            Error::WrongNode { message } => write!(
                f,
                "a Redis Cluster node answered a single-server limiter: {message}"
            ),
            Error::NoPermission { message } => write!(f, "Redis refused: {message}"),
            Error::CellModuleMissing => f.write_str(
                "CL.THROTTLE is not a command on this server (the redis-cell module is not loaded)",
            ),
            Error::InjectedTimeUnsupported => {
                f.write_str("CL.THROTTLE reads the server's clock; a time cannot be passed to it")
            }
            Error::Server { code, detail } => write!(f, "Redis answered {code} {detail}"),
            Error::UnexpectedReply { reply } => write!(f, "unexpected Redis reply: {reply}"),
            Error::Disagreement { verdict, decision } => write!(
                f,
                "the script's verdict {verdict} differs from funnel's {decision:?}"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Funnel(e) => Some(e),
            Error::InvalidUrl(e) => Some(e),
            _ => None,
        }
    }
}

impl From<funnel::Error> for Error {
    fn from(e: funnel::Error) -> Error {
        Error::Funnel(e)
    }
}

/// A Redis error sorted: a failure for the policy, a missing script to load, or an error.
#[derive(Debug)]
pub(crate) enum Sorted {
    Failure(Failure),
    NoScript,
    Error(Error),
}

/// Sorts `e`, the reply to a request on `redis_key` (see the module's table).
pub(crate) fn sort(e: &redis::RedisError, redis_key: &str) -> Sorted {
    use redis::ErrorKind as K;
    let detail = || e.detail().unwrap_or_default().to_string();
    if e.is_timeout() {
        return Sorted::Failure(Failure::Timeout);
    }
    if e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error() {
        return Sorted::Failure(Failure::Connection);
    }
    match e.kind() {
        K::NoScriptError => Sorted::NoScript,
        K::BusyLoadingError => Sorted::Failure(Failure::Loading),
        K::ReadOnly => Sorted::Failure(Failure::ReadOnly),
        K::MasterDown | K::ClusterDown | K::TryAgain => Sorted::Failure(Failure::Unavailable),
        K::ClusterConnectionNotFound => Sorted::Failure(Failure::Connection),
        K::Moved | K::Ask | K::CrossSlot => Sorted::Error(Error::WrongNode {
            message: e.to_string(),
        }),
        K::AuthenticationFailed => Sorted::Error(Error::NoPermission {
            message: e.to_string(),
        }),
        K::TypeError | K::ParseError => Sorted::Error(Error::UnexpectedReply {
            reply: e.to_string(),
        }),
        K::ExtensionError => match e.code().unwrap_or_default() {
            "OOM" => Sorted::Failure(Failure::OutOfMemory),
            "BUSY" => Sorted::Failure(Failure::Unavailable),
            "WRONGTYPE" => Sorted::Error(Error::WrongType {
                redis_key: redis_key.to_string(),
            }),
            "NOPERM" | "NOAUTH" | "WRONGPASS" => Sorted::Error(Error::NoPermission {
                message: e.to_string(),
            }),
            code => Sorted::Error(Error::Server {
                code: code.to_string(),
                detail: detail(),
            }),
        },
        K::ResponseError => {
            let d = detail();
            if d.contains("unknown command") && d.to_ascii_lowercase().contains("cl.throttle") {
                Sorted::Error(Error::CellModuleMissing)
            } else if d.contains("script") {
                Sorted::Error(Error::Script { message: d })
            } else {
                Sorted::Error(Error::Server {
                    code: "ERR".into(),
                    detail: d,
                })
            }
        }
        _ => Sorted::Error(Error::Server {
            code: e.code().unwrap_or("?").to_string(),
            detail: e.to_string(),
        }),
    }
}

/// Whether the request that failed with `e` reached Redis and was answered (an error reply),
/// as opposed to a connection or a timeout error: such a reply was one round trip.
pub(crate) fn came_back(e: &redis::RedisError) -> bool {
    !(e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error())
        && e.kind() != redis::ErrorKind::ClusterConnectionNotFound
}
