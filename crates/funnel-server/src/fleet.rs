//! Fleet mode's counters: the Redis limiters' round trips, deny-cache answers, timeouts,
//! errors and failure-policy answers, summed over the rules for [`crate::metrics`].

use funnel_redis::Stats;

use crate::rules::{Kind, Rules};

/// One Redis counter: its Prometheus family (a counter), what it counts, where [`Stats`]
/// keeps it.
pub struct RedisStat {
    /// The family.
    pub family: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Its value in one limiter's statistics.
    pub read: fn(&Stats) -> u64,
}

/// Every Redis counter.
pub const REDIS_STATS: [RedisStat; 7] = [
    RedisStat {
        family: "funnel_server_redis_round_trips",
        help: "Requests to Redis that came back with a reply, errors included.",
        read: |s| s.round_trips,
    },
    RedisStat {
        family: "funnel_server_redis_deny_cache_answers",
        help: "Denials answered by the local deny cache without a round trip.",
        read: |s| s.cache_denials,
    },
    RedisStat {
        family: "funnel_server_redis_timeouts",
        help: "Decisions Redis did not answer within the timeout.",
        read: |s| s.timeouts,
    },
    RedisStat {
        family: "funnel_server_redis_errors",
        help: "Decisions Redis answered with an error.",
        read: |s| s.redis_errors,
    },
    RedisStat {
        family: "funnel_server_redis_failed_open",
        help: "Calls allowed by the open failure policy.",
        read: |s| s.failed_open,
    },
    RedisStat {
        family: "funnel_server_redis_failed_closed",
        help: "Calls denied by the closed failure policy.",
        read: |s| s.failed_closed,
    },
    RedisStat {
        family: "funnel_server_redis_answered_locally",
        help: "Calls decided locally by the local failure policy.",
        read: |s| s.answered_locally,
    },
];

/// The statistics of every Redis limiter in force (none without `--redis`).
pub fn limiters(rules: &Rules) -> Vec<Stats> {
    rules
        .domains
        .values()
        .flat_map(|d| d.rules())
        .filter_map(|r| match &r.kind {
            Kind::Redis(l) => Some(l.stats()),
            _ => None,
        })
        .collect()
}
