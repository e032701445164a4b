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
    /// Hits over the limit (shadow mode included).
    pub over_limit: AtomicU64,
    /// Hits allowed with less than 20% of the limit left after them.
    pub near_limit: AtomicU64,
    /// Hits allowed.
    pub within_limit: AtomicU64,
    /// Hits over the limit that shadow mode let through.
    pub shadow_mode: AtomicU64,
}

/// What one descriptor's decision adds to the counters.
#[derive(Clone, Copy, Debug)]
pub struct Hit {
    /// Units asked.
    pub hits: u64,
    /// Over the limit (before shadow mode).
    pub over: bool,
    /// Allowed, past the near-limit ratio of the limit (`NEAR_LIMIT_RATIO`, 80% by default).
    pub near: bool,
    /// Let through by shadow mode.
    pub shadow: bool,
}

impl Counters {
    /// Adds one decision.
    pub fn add(&self, h: Hit) {
        self.total_hits.fetch_add(h.hits, Ordering::Relaxed);
        if h.over {
            self.over_limit.fetch_add(h.hits, Ordering::Relaxed);
            if h.shadow {
                self.shadow_mode.fetch_add(h.hits, Ordering::Relaxed);
            }
        } else {
            self.within_limit.fetch_add(h.hits, Ordering::Relaxed);
            if h.near {
                self.near_limit.fetch_add(h.hits, Ordering::Relaxed);
            }
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
        help: "Hits over the rule's limit, shadow mode included.",
        counter: |c| &c.over_limit,
    },
    RuleStat {
        name: "near_limit",
        help: "Hits allowed with less than 20% of the limit left after them.",
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
