//! Fleet mode's counters: the Redis limiters' round trips, deny-cache answers, timeouts,
//! errors and failure-policy answers, summed over the rules.

use std::fmt::Write as _;

use crate::rules::{Kind, Rules};

/// Appends the Redis counters (nothing without `--redis`).
pub fn render(out: &mut String, rules: &Rules) {
    let mut sum = [0u64; 7];
    let mut any = false;
    for d in rules.domains.values() {
        for r in d.rules() {
            if let Kind::Redis(l) = &r.kind {
                any = true;
                let s = l.stats();
                for (acc, v) in sum.iter_mut().zip([
                    s.round_trips,
                    s.cache_denials,
                    s.timeouts,
                    s.redis_errors,
                    s.failed_open,
                    s.failed_closed,
                    s.answered_locally,
                ]) {
                    *acc += v;
                }
            }
        }
    }
    if !any {
        return;
    }
    let names = [
        "funnel_server_redis_round_trips_total",
        "funnel_server_redis_deny_cache_answers_total",
        "funnel_server_redis_timeouts_total",
        "funnel_server_redis_errors_total",
        "funnel_server_redis_failed_open_total",
        "funnel_server_redis_failed_closed_total",
        "funnel_server_redis_answered_locally_total",
    ];
    for (name, v) in names.iter().zip(sum) {
        let _ = writeln!(out, "# TYPE {name} counter\n{name} {v}");
    }
}
