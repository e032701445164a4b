//! Where a `ShouldRateLimit` call is decided: the request checked against [`crate::limits`],
//! each descriptor matched to a rule, every counted descriptor charged all or nothing
//! ([`funnel::check_all`]), and the response built, one status per descriptor in order.
//!
//! * Units: a descriptor's `hits_addend` when set (0 = check without charging), else the
//!   request's `hits_addend`, where 0 (unset on the wire) means 1, as in Envoy's API.
//! * `is_negative_hits`: the units are given back (GCRA rules; windows have no refund).
//! * No rule, a replaced rule: OK, nothing counted. `unlimited`: OK, remaining `u32::MAX`.
//!   `requests_per_unit: 0`: over the limit. A `limit` in the descriptor: that quota (GCRA)
//!   for the descriptor's values, in the domain's override table.
//! * Shadow mode: the rule is decided and counted, the answer is OK; it takes no part in the
//!   request's all-or-nothing decision, and is charged only when the request is admitted.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use funnel::{check_all, Charge, Clock, Decision, Quota, Timestamp};

use crate::config::Unit;
use crate::limits::*;
use crate::metrics::{Hit, ServerStats};
use crate::proto::rate_limit_descriptor::Entry as ProtoEntry;
use crate::proto::rate_limit_response::{
    rate_limit::Unit as ProtoUnit, Code, DescriptorStatus, RateLimit as ProtoLimit,
};
use crate::proto::{HeaderValue, RateLimitRequest, RateLimitResponse};
use crate::rules::{Kind, Registry, Rule, Rules};
use crate::store::{gcra_quota, until_reset, Entry, Table};

/// A request refused before any decision, with the reason (answered `INVALID_ARGUMENT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The service's state: the live rules, what outlives them, the counters.
pub struct Decider {
    /// The configuration in force, swapped whole on reload.
    pub rules: ArcSwap<Rules>,
    /// Tables and counters kept across reloads.
    pub registry: Registry,
    /// Server-wide counters.
    pub stats: ServerStats,
    /// Write the IETF `RateLimit-Policy` / `RateLimit` fields into `response_headers_to_add`.
    pub response_headers: bool,
}

/// Checks a request against the documented bounds.
pub fn validate(req: &RateLimitRequest) -> Result<(), Invalid> {
    let bad = |m: String| Err(Invalid(m));
    if req.domain.is_empty() {
        return bad("the domain is empty".into());
    }
    if req.domain.len() > MAX_DOMAIN_BYTES {
        return bad(format!(
            "the domain is longer than {MAX_DOMAIN_BYTES} bytes"
        ));
    }
    if req.descriptors.is_empty() {
        return bad("the request has no descriptors".into());
    }
    if req.descriptors.len() > MAX_DESCRIPTORS {
        return bad(format!(
            "{} descriptors; at most {MAX_DESCRIPTORS}",
            req.descriptors.len()
        ));
    }
    for (i, d) in req.descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return bad(format!("descriptor {i} has no entries"));
        }
        if d.entries.len() > MAX_ENTRIES {
            return bad(format!(
                "descriptor {i} has {} entries; at most {MAX_ENTRIES}",
                d.entries.len()
            ));
        }
        for e in &d.entries {
            if e.key.is_empty() {
                return bad(format!("descriptor {i} has an entry with an empty key"));
            }
            if e.key.len() > MAX_ENTRY_BYTES || e.value.len() > MAX_ENTRY_BYTES {
                return bad(format!(
                    "descriptor {i} has a key or value longer than {MAX_ENTRY_BYTES} bytes"
                ));
            }
        }
        if let Some(l) = &d.limit {
            if Unit::from_envoy_number(l.unit).is_none() {
                return bad(format!(
                    "descriptor {i}'s limit has no valid unit ({})",
                    l.unit
                ));
            }
            if l.requests_per_unit > MAX_OVERRIDE {
                return bad(format!(
                    "descriptor {i}'s limit exceeds {MAX_OVERRIDE} requests per unit"
                ));
            }
        }
    }
    Ok(())
}

/// The table key of a descriptor: its values, each prefixed with its length (so no two
/// lists of values share a key).
fn table_key(entries: &[ProtoEntry], prefix: &str) -> String {
    let mut k = String::with_capacity(
        prefix.len() + entries.iter().map(|e| e.value.len() + 4).sum::<usize>(),
    );
    k.push_str(prefix);
    for e in entries {
        k.push_str(&e.value.len().to_string());
        k.push(':');
        k.push_str(&e.value);
    }
    k
}

/// The matched values as envoyproxy/ratelimit's detailed metrics write them.
fn detailed_value(entries: &[ProtoEntry]) -> String {
    let parts: Vec<String> = entries
        .iter()
        .map(|e| format!("{}_{}", e.key, e.value))
        .collect();
    parts.join(".")
}

/// What one descriptor needs.
enum Plan<'r> {
    /// No rule (or a replaced one): OK, nothing counted.
    Nothing,
    /// `unlimited`.
    Unlimited,
    /// `requests_per_unit: 0`.
    Blocked(Shown),
    /// Counted.
    Count(Counted<'r>),
}

/// The limit a status shows.
#[derive(Clone)]
struct Shown {
    name: String,
    requests_per_unit: u32,
    unit: Unit,
}

struct Counted<'r> {
    rule: Option<&'r Arc<Rule>>,
    shown: Shown,
    where_: Where<'r>,
    key: String,
    n: u64,
    refund: bool,
    shadow: bool,
    quota: Option<Quota>,
    value: Option<String>,
}

enum Where<'r> {
    Local(&'r Table),
    Redis(&'r funnel_redis::RedisLimiter),
}

/// One descriptor's outcome before it becomes a status.
struct Outcome {
    over: bool,
    remaining: u64,
    limit: u64,
    reset: Duration,
}

impl Outcome {
    /// The outcome of a descriptor left uncharged: over when `asked` (its units) would be
    /// denied, with what is left now (`now`, a zero-unit estimate).
    fn uncharged(asked: &Decision, now: &Decision) -> Outcome {
        Outcome {
            over: !asked.is_allowed(),
            remaining: now.remaining(),
            limit: now.limit(),
            reset: now.reset_after(),
        }
    }

    fn of(d: &Decision) -> Outcome {
        Outcome {
            over: !d.is_allowed(),
            remaining: d.remaining(),
            limit: d.limit(),
            reset: until_reset(d),
        }
    }
}

impl Decider {
    /// A decider over `rules`.
    pub fn new(rules: Rules, registry: Registry, response_headers: bool) -> Decider {
        Decider {
            rules: ArcSwap::from_pointee(rules),
            registry,
            stats: ServerStats::default(),
            response_headers,
        }
    }

    /// Decides one request.
    pub async fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, Invalid> {
        if let Err(e) = validate(req) {
            self.stats.invalid_requests.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let rules = self.rules.load_full();
        let plans = self.plan(&rules, req)?;
        let now = self.registry.clock().now();
        let outcomes = self.charge(&plans, now).await;
        Ok(self.respond(&plans, &outcomes))
    }

    fn plan<'r>(&self, rules: &'r Rules, req: &RateLimitRequest) -> Result<Vec<Plan<'r>>, Invalid> {
        let Some(domain) = rules.domains.get(&req.domain) else {
            return Ok(req.descriptors.iter().map(|_| Plan::Nothing).collect());
        };
        let request_hits = u64::from(req.hits_addend.max(1));
        let matched: Vec<Option<&Arc<Rule>>> = req
            .descriptors
            .iter()
            .map(|d| domain.find(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()))))
            .collect();
        let replaced: Vec<&str> = matched
            .iter()
            .flatten()
            .flat_map(|r| r.replaces.iter().map(String::as_str))
            .collect();
        let mut plans = Vec::with_capacity(req.descriptors.len());
        for (i, (d, rule)) in req.descriptors.iter().zip(&matched).enumerate() {
            let n = d.hits_addend.unwrap_or(request_hits);
            let refund = d.is_negative_hits;
            if let Some(l) = &d.limit {
                // Validated: the unit is known.
                let unit = Unit::from_envoy_number(l.unit).unwrap_or(Unit::Second);
                let shown = Shown {
                    name: String::new(),
                    requests_per_unit: l.requests_per_unit,
                    unit,
                };
                if l.requests_per_unit == 0 {
                    plans.push(Plan::Blocked(shown));
                    continue;
                }
                let q = gcra_quota(l.requests_per_unit, unit, l.requests_per_unit)
                    .map_err(|e| Invalid(format!("descriptor {i}'s limit: {e}")))?;
                // The keys too: one override table serves every descriptor of the domain.
                let mut prefix = format!("{}/{}|", l.requests_per_unit, l.unit);
                for e in &d.entries {
                    prefix.push_str(&format!("{}:{}|", e.key.len(), e.key));
                }
                plans.push(Plan::Count(Counted {
                    rule: None,
                    shown,
                    where_: Where::Local(&domain.overrides),
                    key: table_key(&d.entries, &prefix),
                    n,
                    refund,
                    shadow: false,
                    quota: Some(q),
                    value: None,
                }));
                continue;
            }
            let Some(rule) = rule else {
                plans.push(Plan::Nothing);
                continue;
            };
            if rule
                .limit
                .name
                .as_deref()
                .is_some_and(|name| replaced.contains(&name))
            {
                plans.push(Plan::Nothing);
                continue;
            }
            let shown = Shown {
                name: rule.limit.name.clone().unwrap_or_default(),
                requests_per_unit: rule.limit.requests_per_unit,
                unit: rule.limit.unit,
            };
            let where_ = match &rule.kind {
                Kind::Unlimited => {
                    plans.push(Plan::Unlimited);
                    continue;
                }
                Kind::Blocked => {
                    plans.push(Plan::Blocked(shown));
                    continue;
                }
                Kind::Local(t) => Where::Local(t),
                Kind::Redis(r) => Where::Redis(r),
            };
            if refund && !matches!(where_, Where::Local(Table::Gcra(_))) {
                return Err(Invalid(format!(
                    "descriptor {i}: is_negative_hits needs a gcra rule in process (a window or Redis has no refund)"
                )));
            }
            plans.push(Plan::Count(Counted {
                rule: Some(rule),
                shown,
                where_,
                key: table_key(&d.entries, ""),
                n,
                refund,
                shadow: rule.shadow_mode,
                quota: None,
                value: rule.detailed_metric.then(|| detailed_value(&d.entries)),
            }));
        }
        Ok(plans)
    }

    async fn charge(&self, plans: &[Plan<'_>], now: Timestamp) -> Vec<Option<Outcome>> {
        let mut out: Vec<Option<Outcome>> = plans.iter().map(|_| None).collect();
        // The descriptors that decide the request: counted, not shadowed, units to charge.
        let deciding = |c: &Counted<'_>| !c.shadow && !c.refund && c.n > 0;
        let blocked = plans.iter().any(|p| matches!(p, Plan::Blocked(_)));
        let mut local: Vec<(usize, Entry<'_>)> = Vec::new();
        let mut fleet: Vec<usize> = Vec::new();
        for (i, p) in plans.iter().enumerate() {
            if let Plan::Count(c) = p {
                if deciding(c) {
                    match c.where_ {
                        Where::Local(table) => local.push((
                            i,
                            Entry {
                                table,
                                key: &c.key,
                                n: c.n,
                                quota: c.quota,
                            },
                        )),
                        Where::Redis(_) => fleet.push(i),
                    }
                }
            }
        }
        // GCRA entries first: a denial by a window then rolls them back (store.rs).
        local.sort_by_key(|(_, e)| e.table.is_window());
        let windows = local.iter().filter(|(_, e)| e.table.is_window()).count();
        let mut admitted = !blocked;
        if admitted && windows >= 2 {
            // Every window checked before any is charged: they cannot be rolled back.
            for (i, e) in local.iter().filter(|(_, e)| e.table.is_window()) {
                let d = e.peek(now);
                if d.remaining() < e.n {
                    admitted = false;
                    out[*i] = Some(Outcome {
                        over: true,
                        remaining: 0,
                        limit: d.limit(),
                        reset: d.reset_after(),
                    });
                }
            }
        }
        if admitted && !local.is_empty() {
            let entries: Vec<&dyn Charge> = local.iter().map(|(_, e)| e as &dyn Charge).collect();
            let multi = check_all(&entries, now);
            admitted = multi.is_allowed();
            for (j, ((i, e), d)) in local.iter().zip(multi.decisions()).enumerate() {
                out[*i] = Some(if admitted || multi.denied_by() == Some(j) {
                    Outcome::of(d)
                } else {
                    Outcome::uncharged(d, &e.table.estimate(e.key, 0, now, e.quota))
                });
            }
        } else {
            for (i, e) in &local {
                if out[*i].is_none() {
                    let asked = e.peek(now);
                    out[*i] = Some(Outcome::uncharged(
                        &asked,
                        &e.table.estimate(e.key, 0, now, e.quota),
                    ));
                }
            }
        }
        // Redis: one descriptor after the other; a denial stops the charging (funnel-redis
        // has no refund, so the descriptors charged before it stay charged).
        for i in fleet {
            let Plan::Count(c) = &plans[i] else { continue };
            let Where::Redis(r) = c.where_ else { continue };
            let n = if admitted { c.n } else { 0 };
            out[i] = Some(redis_outcome(r, &c.key, n).await);
            if out[i].as_ref().is_some_and(|o| o.over) {
                admitted = false;
            }
        }
        // The rest: shadow mode, check-only, refunds.
        for (i, p) in plans.iter().enumerate() {
            let Plan::Count(c) = p else { continue };
            if out[i].is_some() {
                continue;
            }
            out[i] = Some(match c.where_ {
                Where::Local(table) => {
                    let e = Entry {
                        table,
                        key: &c.key,
                        n: c.n,
                        quota: c.quota,
                    };
                    if c.refund && admitted {
                        table.refund(&c.key, c.n, now, c.quota);
                        Outcome::of(&table.estimate(&c.key, 0, now, c.quota))
                    } else if c.shadow && admitted && c.n > 0 {
                        Outcome::of(&e.charge(now))
                    } else {
                        Outcome::uncharged(&e.peek(now), &table.estimate(&c.key, 0, now, c.quota))
                    }
                }
                Where::Redis(r) => {
                    let n = if c.shadow && admitted { c.n } else { 0 };
                    redis_outcome(r, &c.key, n).await
                }
            });
        }
        out
    }

    fn respond(&self, plans: &[Plan<'_>], outcomes: &[Option<Outcome>]) -> RateLimitResponse {
        let mut statuses = Vec::with_capacity(plans.len());
        let mut over_all = false;
        let mut closest: Option<(&Shown, &Outcome)> = None;
        for (p, o) in plans.iter().zip(outcomes) {
            let status = match (p, o) {
                (Plan::Nothing, _) | (Plan::Count(_), None) => DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                },
                (Plan::Unlimited, _) => DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: u32::MAX,
                    ..Default::default()
                },
                (Plan::Blocked(s), _) => {
                    over_all = true;
                    DescriptorStatus {
                        code: Code::OverLimit as i32,
                        current_limit: Some(limit_of(s)),
                        limit_remaining: 0,
                        duration_until_reset: Some(duration(s.unit.duration())),
                    }
                }
                (Plan::Count(c), Some(o)) => {
                    let hit = Hit {
                        hits: c.n,
                        over: o.over,
                        near: !o.over && o.remaining.saturating_mul(5) < o.limit,
                        shadow: c.shadow,
                    };
                    if let Some(rule) = c.rule {
                        if c.n > 0 && !c.refund {
                            rule.stats.add(hit, c.value.as_deref());
                        }
                        if o.over && c.shadow {
                            tracing::info!(domain = %rule.domain, rule = %rule.stat_key, key = %c.key, "over the limit in shadow mode: allowed");
                        }
                    }
                    let over = o.over && !c.shadow;
                    over_all |= over;
                    if !c.shadow && closest.is_none_or(|(_, b)| o.remaining < b.remaining) {
                        closest = Some((&c.shown, o));
                    }
                    DescriptorStatus {
                        code: if over { Code::OverLimit } else { Code::Ok } as i32,
                        current_limit: Some(limit_of(&c.shown)),
                        limit_remaining: u32::try_from(o.remaining).unwrap_or(u32::MAX),
                        duration_until_reset: Some(duration(o.reset)),
                    }
                }
            };
            statuses.push(status);
        }
        let mut response_headers_to_add = Vec::new();
        if self.response_headers {
            if let Some((s, o)) = closest {
                let name = if s.name.is_empty() {
                    "limit"
                } else {
                    s.name.as_str()
                };
                let name = name.replace(['"', '\\'], "");
                let window = s.unit.duration().as_secs();
                let t = o.reset.as_secs() + u64::from(o.reset.subsec_nanos() > 0);
                response_headers_to_add.push(HeaderValue {
                    key: "RateLimit-Policy".into(),
                    value: format!("\"{name}\";q={};w={window}", o.limit),
                    ..Default::default()
                });
                response_headers_to_add.push(HeaderValue {
                    key: "RateLimit".into(),
                    value: format!("\"{name}\";r={};t={t}", o.remaining),
                    ..Default::default()
                });
            }
        }
        RateLimitResponse {
            overall_code: if over_all { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add,
            request_headers_to_add: Vec::new(),
        }
    }
}

async fn redis_outcome(r: &funnel_redis::RedisLimiter, key: &str, n: u64) -> Outcome {
    match r.check_n(key, n).await {
        Ok(c) => Outcome::of(&c.decision),
        Err(e) => {
            // Only OnFailure::Report or an error retrying cannot fix reaches here: deny.
            tracing::warn!(error = %e, "redis could not decide: answered over the limit");
            Outcome {
                over: true,
                remaining: 0,
                limit: r.quota().limit(),
                reset: r.quota().emission_interval(),
            }
        }
    }
}

fn limit_of(s: &Shown) -> ProtoLimit {
    let unit = match s.unit {
        Unit::Second => ProtoUnit::Second,
        Unit::Minute => ProtoUnit::Minute,
        Unit::Hour => ProtoUnit::Hour,
        Unit::Day => ProtoUnit::Day,
        Unit::Week => ProtoUnit::Week,
        Unit::Month => ProtoUnit::Month,
        Unit::Year => ProtoUnit::Year,
    };
    ProtoLimit {
        name: s.name.clone(),
        requests_per_unit: s.requests_per_unit,
        unit: unit as i32,
    }
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}
