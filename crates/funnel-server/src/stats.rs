//! The counters the server keeps: per rule (and per value for `detailed_metric`) with
//! envoyproxy/ratelimit's statistics, and server-wide. [`crate::metrics`] exposes them to
//! Prometheus, [`crate::statsd`] sends them to a statsd server, [`crate::debug`] prints them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::limits::MAX_DETAILED_VALUES;

/// One rule's (or one detailed value's) counters.
// Relaxed everywhere: each counter is an independent tally read only for reporting.
#[derive(Debug, Default)]
pub struct Counters {
    /// Hits asked for.
    pub total_hits: AtomicU64,
    /// Units of denied requests past the limit (shadow mode included).
    pub over_limit: AtomicU64,
    /// Hits past the near-limit ratio of the limit (`NEAR_LIMIT_RATIO`, 80% by default) and
    /// within it, allowed or not.
    pub near_limit: AtomicU64,
    /// Hits allowed.
    pub within_limit: AtomicU64,
    /// Hits over the limit that shadow mode let through.
    pub shadow_mode: AtomicU64,
}

/// What one descriptor's decision adds to the counters, split as envoyproxy/ratelimit splits
/// the units of a request that crosses a threshold.
#[derive(Clone, Copy, Debug)]
pub struct Hit {
    /// Units asked.
    pub hits: u64,
    /// Over the limit (before shadow mode).
    pub over: bool,
    /// Of the units, those past the near-limit threshold and within the limit.
    pub near: u64,
    /// Of the units, those past the limit (all of them once the limit was reached before).
    pub past_limit: u64,
    /// Let through by shadow mode.
    pub shadow: bool,
}

impl Hit {
    /// `hits` units asked of `limit`, `used` of it already used before them, the near-limit
    /// statistic starting past `near_threshold` units: allowed, the units past the threshold
    /// are near; over the limit, the units past the limit are over and those between the
    /// threshold and the limit near. (A request of one unit is near or over whole.)
    pub fn new(hits: u64, used: u64, limit: u64, near_threshold: u64, over: bool) -> Hit {
        let after = used.saturating_add(hits);
        let (near, past_limit) = if !over {
            (after.saturating_sub(near_threshold.max(used)).min(hits), 0)
        } else if used >= limit {
            (0, hits)
        } else {
            (
                limit.saturating_sub(near_threshold.max(used)),
                after.saturating_sub(limit).min(hits),
            )
        };
        Hit {
            hits,
            over,
            near,
            past_limit,
            shadow: false,
        }
    }

    /// The same hit, let through by shadow mode when `shadow`.
    pub fn shadowed(self, shadow: bool) -> Hit {
        Hit { shadow, ..self }
    }
}

impl Counters {
    /// Adds one decision: every unit to `total_hits`; an allowed request's units to
    /// `within_limit`, a denied one's past the limit to `over_limit` (and all of them to
    /// `shadow_mode` when shadow mode let it through); the units near the limit to
    /// `near_limit`, allowed or not.
    pub fn add(&self, h: Hit) {
        self.total_hits.fetch_add(h.hits, Ordering::Relaxed);
        if h.over {
            self.over_limit.fetch_add(h.past_limit, Ordering::Relaxed);
            if h.shadow {
                self.shadow_mode.fetch_add(h.hits, Ordering::Relaxed);
            }
        } else {
            self.within_limit.fetch_add(h.hits, Ordering::Relaxed);
        }
        if h.near > 0 {
            self.near_limit.fetch_add(h.near, Ordering::Relaxed);
        }
    }
}

/// A rule's counters, and per value when the rule asks for `detailed_metric`.
#[derive(Debug, Default)]
pub struct RuleStats {
    /// The rule's totals.
    pub total: Counters,
    detailed: Mutex<HashMap<String, Arc<Counters>>>,
}

impl RuleStats {
    /// Adds one decision to the totals, and to `value`'s counters when given (at most
    /// [`MAX_DETAILED_VALUES`] values are tracked on their own).
    pub fn add(&self, h: Hit, value: Option<&str>) {
        self.total.add(h);
        if let Some(v) = value {
            let mut map = self.detailed.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(c) = map.get(v) {
                c.add(h);
            } else if map.len() < MAX_DETAILED_VALUES {
                let c = Arc::new(Counters::default());
                c.add(h);
                map.insert(v.to_owned(), c);
            }
        }
    }

    /// The values counted on their own (`detailed_metric`), sorted by value.
    pub fn detailed(&self) -> Vec<(String, Arc<Counters>)> {
        let map = self.detailed.lock().unwrap_or_else(|e| e.into_inner());
        let mut values: Vec<_> = map.iter().map(|(v, c)| (v.clone(), c.clone())).collect();
        values.sort_by(|a, b| a.0.cmp(&b.0));
        values
    }
}

/// One of a rule's statistics: envoyproxy/ratelimit's name for it, what it counts, and where
/// [`Counters`] keeps it.
pub struct RuleStat {
    /// The statistic's last name component (`total_hits`).
    pub name: &'static str,
    /// What it counts, for Prometheus' `HELP`.
    pub help: &'static str,
    /// Its counter.
    pub counter: fn(&Counters) -> &AtomicU64,
}

impl RuleStat {
    /// The counter's value in `c`.
    pub fn read(&self, c: &Counters) -> u64 {
        // Relaxed: an independent tally read for reporting; no other memory depends on it.
        (self.counter)(c).load(Ordering::Relaxed)
    }
}

/// Every statistic of a rule, in envoyproxy/ratelimit's order.
pub const RULE_STATS: [RuleStat; 5] = [
    RuleStat {
        name: "total_hits",
        help: "Hits asked of the rule (units, hits_addend included).",
        counter: |c| &c.total_hits,
    },
    RuleStat {
        name: "over_limit",
        help: "Hits of denied requests past the rule's limit, shadow mode included.",
        counter: |c| &c.over_limit,
    },
    RuleStat {
        name: "near_limit",
        help: "Hits past the near-limit ratio of the limit and within it (20% left, by default).",
        counter: |c| &c.near_limit,
    },
    RuleStat {
        name: "within_limit",
        help: "Hits allowed by the rule.",
        counter: |c| &c.within_limit,
    },
    RuleStat {
        name: "shadow_mode",
        help: "Hits over the limit that shadow mode let through.",
        counter: |c| &c.shadow_mode,
    },
];

/// Server-wide counters.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Configurations loaded (the first included).
    pub config_load_success: AtomicU64,
    /// Configurations rejected.
    pub config_load_error: AtomicU64,
    /// Requests answered INVALID_ARGUMENT.
    pub invalid_requests: AtomicU64,
    /// Requests decided.
    pub requests: AtomicU64,
    /// Requests over the limit answered OK by the global shadow mode (`--shadow-mode`).
    pub global_shadow_mode: AtomicU64,
}

/// One server-wide counter: its Prometheus family, its statsd name (envoyproxy/ratelimit's),
/// what it counts, and where [`ServerStats`] keeps it.
pub struct ServerStat {
    /// The Prometheus family (a counter: the exposition adds `_total`).
    pub family: &'static str,
    /// The statsd name.
    pub statsd: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Its counter.
    pub counter: fn(&ServerStats) -> &AtomicU64,
}

impl ServerStat {
    /// The counter's value in `s`.
    pub fn read(&self, s: &ServerStats) -> u64 {
        // Relaxed: as `RuleStat::read`.
        (self.counter)(s).load(Ordering::Relaxed)
    }
}

/// Every server-wide counter.
pub const SERVER_STATS: [ServerStat; 5] = [
    ServerStat {
        family: "ratelimit_service_config_load_success",
        statsd: "ratelimit.service.config_load_success",
        help: "Configurations loaded, the first included.",
        counter: |s| &s.config_load_success,
    },
    ServerStat {
        family: "ratelimit_service_config_load_error",
        statsd: "ratelimit.service.config_load_error",
        help: "Configurations rejected (the one in force stayed).",
        counter: |s| &s.config_load_error,
    },
    ServerStat {
        family: "funnel_server_invalid_requests",
        statsd: "ratelimit.service.call.should_rate_limit.service_error",
        help: "Requests answered INVALID_ARGUMENT.",
        counter: |s| &s.invalid_requests,
    },
    ServerStat {
        family: "funnel_server_requests",
        statsd: "ratelimit_server.ShouldRateLimit.total_requests",
        help: "Requests decided.",
        counter: |s| &s.requests,
    },
    ServerStat {
        family: "ratelimit_service_global_shadow_mode",
        statsd: "ratelimit.service.global_shadow_mode",
        help: "Requests over the limit answered OK by the global shadow mode.",
        counter: |s| &s.global_shadow_mode,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// (near, past the limit) of `hits` units with `used` of 10 used, near past 8.
    fn split(hits: u64, used: u64, over: bool) -> (u64, u64) {
        let h = Hit::new(hits, used, 10, 8, over);
        (h.near, h.past_limit)
    }

    #[test]
    fn a_request_crossing_a_threshold_is_split_at_it_as_envoyproxy_splits_it() {
        // Allowed: only the units past the threshold are near.
        assert_eq!(split(6, 0, false), (0, 0));
        assert_eq!(split(3, 6, false), (1, 0));
        assert_eq!(split(1, 8, false), (1, 0));
        assert_eq!(split(2, 8, false), (2, 0));
        // Over: the units past the limit are over, those between the threshold (or what was
        // used) and the limit near.
        assert_eq!(split(6, 8, true), (2, 4));
        assert_eq!(split(6, 9, true), (1, 5));
        assert_eq!(split(12, 0, true), (2, 2));
        // The limit reached before: every unit over, none near.
        assert_eq!(split(3, 10, true), (0, 3));
        // One unit: near or over whole.
        assert_eq!(split(1, 7, false), (0, 0));
        assert_eq!(split(1, 9, false), (1, 0));
        assert_eq!(split(1, 10, true), (0, 1));
    }

    #[test]
    fn the_counters_take_each_part_where_envoyproxy_puts_it() {
        let c = Counters::default();
        c.add(Hit::new(3, 6, 10, 8, false));
        c.add(Hit::new(6, 9, 10, 8, true));
        c.add(Hit::new(2, 10, 10, 8, true).shadowed(true));
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!(read(&c.total_hits), 11);
        assert_eq!(read(&c.within_limit), 3);
        assert_eq!(read(&c.near_limit), 2);
        assert_eq!(read(&c.over_limit), 7);
        assert_eq!(read(&c.shadow_mode), 2);
    }
}
