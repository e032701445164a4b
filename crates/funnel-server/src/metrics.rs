//! Counters and their Prometheus text exposition.
//!
//! Per rule, with envoyproxy/ratelimit's names: `total_hits`, `over_limit`, `near_limit`,
//! `within_limit`, `shadow_mode` (in hits, that is units asked for), as
//! `ratelimit_service_rate_limit_<stat>{domain="..",key=".."}`. Per table: keys held and
//! evictions. For the server: configuration loads and errors, requests refused as invalid,
//! and with `--redis` the limiters' round trips, timeouts and failure-policy answers.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::limits::MAX_DETAILED_VALUES;
use crate::rules::{Kind, Rules};

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
    /// Allowed, with less than 20% of the limit left.
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
}

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

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text exposition of everything.
pub fn render(server: &ServerStats, rules: &Rules) -> String {
    let mut out = String::new();
    let g = |v: &AtomicU64| v.load(Ordering::Relaxed);
    for (name, v) in [
        (
            "ratelimit_service_config_load_success",
            &server.config_load_success,
        ),
        (
            "ratelimit_service_config_load_error",
            &server.config_load_error,
        ),
        (
            "funnel_server_invalid_requests_total",
            &server.invalid_requests,
        ),
        ("funnel_server_requests_total", &server.requests),
        (
            "ratelimit_service_global_shadow_mode",
            &server.global_shadow_mode,
        ),
    ] {
        let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", g(v));
    }
    let mut domains: Vec<_> = rules.domains.iter().collect();
    domains.sort_by(|a, b| a.0.cmp(b.0));
    let stats = [
        "total_hits",
        "over_limit",
        "near_limit",
        "within_limit",
        "shadow_mode",
    ];
    let pick = |c: &Counters, i: usize| match i {
        0 => g(&c.total_hits),
        1 => g(&c.over_limit),
        2 => g(&c.near_limit),
        3 => g(&c.within_limit),
        _ => g(&c.shadow_mode),
    };
    for (i, stat) in stats.iter().enumerate() {
        let _ = writeln!(out, "# TYPE ratelimit_service_rate_limit_{stat} counter");
        for (domain, d) in &domains {
            for r in d.rules() {
                let labels = format!("domain=\"{}\",key=\"{}\"", esc(domain), esc(&r.stat_key));
                let _ = writeln!(
                    out,
                    "ratelimit_service_rate_limit_{stat}{{{labels}}} {}",
                    pick(&r.stats.total, i)
                );
                if r.detailed_metric {
                    let map = r.stats.detailed.lock().unwrap_or_else(|e| e.into_inner());
                    let mut values: Vec<_> = map.iter().collect();
                    values.sort_by(|a, b| a.0.cmp(b.0));
                    for (v, c) in values {
                        let _ = writeln!(
                            out,
                            "ratelimit_service_rate_limit_{stat}{{{labels},value=\"{}\"}} {}",
                            esc(v),
                            pick(c, i)
                        );
                    }
                }
            }
        }
    }
    let tables = [
        ("funnel_server_table_keys", "gauge"),
        ("funnel_server_table_evictions_total", "counter"),
        ("funnel_server_table_max_keys", "gauge"),
    ];
    for (name, kind) in tables {
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (domain, d) in &domains {
            for r in d.rules() {
                if let Kind::Local(t) = &r.kind {
                    let s = t.stats();
                    let v = match name {
                        "funnel_server_table_keys" => s.keys as u64,
                        "funnel_server_table_evictions_total" => {
                            s.recovered_evictions + s.forced_evictions
                        }
                        _ => t.max_keys() as u64,
                    };
                    let _ = writeln!(
                        out,
                        "{name}{{domain=\"{}\",key=\"{}\"}} {v}",
                        esc(domain),
                        esc(&r.stat_key)
                    );
                }
            }
            let s = d.overrides.stats();
            let v = match name {
                "funnel_server_table_keys" => s.keys as u64,
                "funnel_server_table_evictions_total" => s.recovered_evictions + s.forced_evictions,
                _ => d.overrides.max_keys() as u64,
            };
            let _ = writeln!(
                out,
                "{name}{{domain=\"{}\",key=\"(override)\"}} {v}",
                esc(domain)
            );
        }
    }
    crate::fleet::render(&mut out, rules);
    out
}
