//! The debug listener (envoyproxy/ratelimit's `DEBUG_HOST`/`DEBUG_PORT`): `GET /rlconfig`
//! prints the rules in force one per line, `GET /stats` every statistic under its statsd name
//! with its total, and `GET /` lists both. envoyproxy/ratelimit's Go profiling endpoints have
//! no counterpart here.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::Router;

use crate::decide::Decider;
use crate::proto::rate_limit_response::rate_limit::Unit as ProtoUnit;
use crate::rules::Kind;

const ENDPOINTS: [(&str, &str); 2] = [
    (
        "/rlconfig",
        "print out the currently loaded configuration for debugging",
    ),
    ("/stats", "print out stats"),
];

/// The debug listener's routes.
pub(crate) fn router(decider: Arc<Decider>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/rlconfig", get(rlconfig))
        .route("/stats", get(stats))
        .with_state(decider)
}

async fn index() -> String {
    let mut out = String::new();
    for (path, what) in ENDPOINTS {
        let _ = writeln!(out, "{path}: {what}");
    }
    out
}

/// One line per rule: `<domain>.<key>: unit=<UNIT> requests_per_unit=<n>, shadow_mode: <b>`,
/// sorted.
async fn rlconfig(State(decider): State<Arc<Decider>>) -> String {
    let rules = decider.rules();
    let mut lines = Vec::new();
    for (domain, d) in &rules.domains {
        for r in d.rules() {
            let limit = match r.kind {
                Kind::Unlimited => "unlimited".to_owned(),
                _ => format!(
                    "unit={} requests_per_unit={}",
                    ProtoUnit::try_from(r.limit.unit.envoy_number())
                        .map_or("UNKNOWN", |u| u.as_str_name()),
                    r.limit.requests_per_unit
                ),
            };
            lines.push(format!(
                "{domain}.{}: {limit}, shadow_mode: {}\n",
                r.stat_key, r.shadow_mode
            ));
        }
    }
    lines.sort();
    lines.concat()
}

/// `<statsd name>: <total>`, one per line.
async fn stats(State(decider): State<Arc<Decider>>) -> String {
    let mut out = String::new();
    for (name, total) in crate::statsd::totals(&decider) {
        let _ = writeln!(out, "{name}: {total}");
    }
    out
}
