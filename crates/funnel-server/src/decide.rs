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
//! * Quota mode (a rule's `quota_mode`, or every descriptor with `--quota-mode`): the request
//!   is over the limit when a descriptor in rate-limit mode is, or when every quota-mode
//!   descriptor is (envoyproxy/ratelimit's rule). A quota-mode descriptor that cannot take
//!   the request is left out of the charge; the others are charged all or nothing.
//! * A status over the limit shows 0 remaining; `duration_until_reset` is in whole seconds,
//!   rounded up, so that a client never retries early.
//! * [`Answers`] holds the other switches: global shadow mode, envoyproxy's limit headers,
//!   dynamic metadata, and `charge_denied` (each descriptor charged on its own).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use funnel::{check_all, Charge, Clock, Decision, Quota, Timestamp};

use crate::answers::{closest, Answered, Answers};
use crate::config::Unit;
use crate::limits::*;
use crate::proto::rate_limit_descriptor::Entry as ProtoEntry;
use crate::proto::rate_limit_response::{
    rate_limit::Unit as ProtoUnit, Code, DescriptorStatus, RateLimit as ProtoLimit,
};
use crate::proto::{HeaderValue, RateLimitRequest, RateLimitResponse};
use crate::rules::{Kind, Match, Registry, Rule, Rules};
use crate::stats::{Hit, ServerStats};
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
    rules: ArcSwap<Rules>,
    /// Tables and counters kept across reloads.
    registry: Registry,
    /// Server-wide counters.
    stats: ServerStats,
    /// Write the IETF `RateLimit-Policy` / `RateLimit` fields into `response_headers_to_add`.
    response_headers: bool,
    /// The switches taken from envoyproxy/ratelimit.
    answers: Answers,
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
        // A descriptor with no entries matches no rule: OK, as envoyproxy/ratelimit answers.
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

/// The table key of a descriptor matched to a rule: as [`table_key`], with each value that
/// matched a `share_threshold` wildcard replaced by the pattern, so all such values share one
/// count.
fn shared_table_key(found: &Match<'_>, entries: &[ProtoEntry]) -> String {
    let mut k = String::with_capacity(entries.iter().map(|e| e.value.len() + 4).sum::<usize>());
    for (i, e) in entries.iter().enumerate() {
        let value = found.counted_value(i, &e.key, &e.value);
        k.push_str(&value.len().to_string());
        k.push(':');
        k.push_str(value);
    }
    k
}

/// The statistics' name of a match past its domain when the request's values enter it
/// (`detailed_metric`, `value_to_metric`, a wildcard: [`Match::stat_key`]); `None` when it is
/// the rule's own.
fn detailed_value(found: &Match<'_>, rule: &Rule, entries: &[ProtoEntry]) -> Option<String> {
    let name = found.stat_key(entries.iter().map(|e| (e.key.as_str(), e.value.as_str())));
    let own = name.strip_prefix(rule.domain.as_str())?.strip_prefix('.')?;
    (own != rule.stat_key).then(|| own.to_owned())
}

/// What one descriptor needs.
enum Plan<'r> {
    /// No rule (or a replaced one): OK, nothing counted.
    Nothing,
    /// `unlimited`.
    Unlimited,
    /// `requests_per_unit: 0` (with its rule, when configured).
    Blocked(Shown, Option<&'r Arc<Rule>>),
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
    /// Units of the limit used before this request's (for the statistics' split).
    used: u64,
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
            used: now.limit().saturating_sub(now.remaining()),
        }
    }

    /// What `e` would get, charging nothing: a window's estimate ignores the units, so its
    /// denial is read from what is left.
    fn estimated(e: &Entry<'_>, now: Timestamp) -> Outcome {
        let asked = e.peek(now);
        if e.table.is_window() {
            Outcome {
                over: asked.remaining() < e.n,
                remaining: asked.remaining(),
                limit: asked.limit(),
                reset: asked.reset_after(),
                used: asked.limit().saturating_sub(asked.remaining()),
            }
        } else {
            Outcome::uncharged(&asked, &e.table.estimate(e.key, 0, now, e.quota))
        }
    }

    /// The outcome of `d`, a decision on `n` units (charged when allowed).
    fn of(d: &Decision, n: u64) -> Outcome {
        let charged = if d.is_allowed() { n } else { 0 };
        Outcome {
            over: !d.is_allowed(),
            remaining: d.remaining(),
            limit: d.limit(),
            reset: until_reset(d),
            used: d
                .limit()
                .saturating_sub(d.remaining())
                .saturating_sub(charged),
        }
    }

    /// Over the limit without a decision (Redis failed): the whole limit counted as used.
    fn failed(limit: u64, reset: Duration) -> Outcome {
        Outcome {
            over: true,
            remaining: 0,
            limit,
            reset,
            used: limit,
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
            answers: Answers::default(),
        }
    }

    /// The same decider with envoyproxy/ratelimit's switches set as `answers` says.
    pub fn with_answers(mut self, answers: Answers) -> Decider {
        self.answers = answers;
        self
    }

    /// The configuration in force.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.load_full()
    }

    /// Puts `rules` in force: requests already deciding finish on the rules they loaded.
    pub fn set_rules(&self, rules: Rules) {
        self.rules.store(Arc::new(rules));
    }

    /// Tables and counters kept across reloads.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Server-wide counters.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// Decides one request.
    pub async fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, Invalid> {
        self.decide_with_headers(req, self.response_headers).await
    }

    /// As [`decide`](Self::decide), writing the `RateLimit-Policy`/`RateLimit` fields when
    /// `headers` whatever `--response-headers` says (the forward-auth endpoint always does).
    pub async fn decide_with_headers(
        &self,
        req: &RateLimitRequest,
        headers: bool,
    ) -> Result<RateLimitResponse, Invalid> {
        if let Err(e) = validate(req) {
            self.stats.invalid_requests.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let rules = self.rules.load_full();
        let plans = self.plan(&rules, req)?;
        let quota = self.quota_modes(&plans);
        let now = self.registry.clock().now();
        let outcomes = if self.answers.charge_denied {
            self.charge_each(&plans, now).await
        } else {
            self.charge(&plans, &quota, now).await
        };
        Ok(self.respond(req, &plans, &quota, &outcomes, now, headers))
    }

    /// Which descriptors are in quota mode: every one but `unlimited` under `--quota-mode`
    /// (a descriptor without a rule counts, as in envoyproxy/ratelimit, as one that passes),
    /// else those whose rule says so.
    fn quota_modes(&self, plans: &[Plan<'_>]) -> Vec<bool> {
        plans
            .iter()
            .map(|p| match p {
                Plan::Unlimited => false,
                _ if self.answers.quota_mode => true,
                Plan::Blocked(_, rule) => rule.is_some_and(|r| r.quota_mode),
                Plan::Count(c) => c.rule.is_some_and(|r| r.quota_mode),
                Plan::Nothing => false,
            })
            .collect()
    }

    fn plan<'r>(&self, rules: &'r Rules, req: &RateLimitRequest) -> Result<Vec<Plan<'r>>, Invalid> {
        let Some(domain) = rules.domains.get(&req.domain) else {
            return Ok(req.descriptors.iter().map(|_| Plan::Nothing).collect());
        };
        let request_hits = u64::from(req.hits_addend.max(1));
        let matched: Vec<Option<Match<'r>>> = req
            .descriptors
            .iter()
            .map(|d| domain.lookup(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()))))
            .collect();
        let replaced: Vec<&str> = matched
            .iter()
            .flatten()
            .flat_map(|m| m.rule.replaces.iter().map(String::as_str))
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
                    plans.push(Plan::Blocked(shown, None));
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
            let Some(found) = rule else {
                plans.push(Plan::Nothing);
                continue;
            };
            let rule = found.rule;
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
                    plans.push(Plan::Blocked(shown, Some(rule)));
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
                key: shared_table_key(found, &d.entries),
                n,
                refund,
                shadow: rule.shadow_mode,
                quota: None,
                value: detailed_value(found, rule, &d.entries),
            }));
        }
        Ok(plans)
    }

    async fn charge(
        &self,
        plans: &[Plan<'_>],
        quota: &[bool],
        now: Timestamp,
    ) -> Vec<Option<Outcome>> {
        let mut out: Vec<Option<Outcome>> = plans.iter().map(|_| None).collect();
        // The descriptors that decide the request: counted, not shadowed, units to charge.
        let deciding = |c: &Counted<'_>| !c.shadow && !c.refund && c.n > 0;
        // Quota mode: a quota-mode descriptor that cannot take the request is left out of the
        // charge (answered over the limit); the request goes on while one of them can.
        let mut quota_descriptors = 0;
        // Room in a quota-mode descriptor that is not charged through `check_all` below.
        let mut quota_room_elsewhere = false;
        let mut quota_candidates = 0;
        let mut left_out = vec![false; plans.len()];
        for (i, p) in plans.iter().enumerate() {
            if !quota[i] {
                continue;
            }
            quota_descriptors += 1;
            match p {
                Plan::Nothing | Plan::Unlimited => quota_room_elsewhere = true,
                Plan::Blocked(..) => {}
                Plan::Count(c) => match c.where_ {
                    Where::Local(table) if deciding(c) => {
                        let o = Outcome::estimated(&entry(c, table), now);
                        left_out[i] = o.over;
                        if o.over {
                            out[i] = Some(o);
                        } else {
                            quota_candidates += 1;
                        }
                    }
                    Where::Local(table) if !c.shadow && !c.refund => {
                        quota_room_elsewhere |= !Outcome::estimated(&entry(c, table), now).over;
                    }
                    // Shadowed or refunded: never over. Redis: known only once charged.
                    _ => quota_room_elsewhere = true,
                },
            }
        }
        let blocked = plans
            .iter()
            .zip(quota)
            .any(|(p, q)| matches!(p, Plan::Blocked(..)) && !q);
        let mut local: Vec<(usize, Entry<'_>)> = Vec::new();
        let mut fleet: Vec<usize> = Vec::new();
        for (i, p) in plans.iter().enumerate() {
            if let Plan::Count(c) = p {
                if deciding(c) && !left_out[i] {
                    match c.where_ {
                        Where::Local(table) => local.push((i, entry(c, table))),
                        Where::Redis(_) => fleet.push(i),
                    }
                }
            }
        }
        // GCRA entries first: a denial by a window then rolls them back (store.rs).
        local.sort_by_key(|(_, e)| e.table.is_window());
        let windows = local.iter().filter(|(_, e)| e.table.is_window()).count();
        let mut admitted =
            !blocked && (quota_descriptors == 0 || quota_room_elsewhere || quota_candidates > 0);
        if admitted && windows >= 2 {
            // Every window checked before any is charged: they cannot be rolled back.
            for (i, e) in local.iter().filter(|(_, e)| e.table.is_window()) {
                let o = Outcome::estimated(e, now);
                if o.over {
                    admitted = false;
                    out[*i] = Some(o);
                }
            }
        }
        // The local entries' charged decisions, to give back if Redis denies the request.
        let mut charged_here: Vec<Decision> = Vec::new();
        while admitted && !local.is_empty() {
            let entries: Vec<&dyn Charge> = local.iter().map(|(_, e)| e as &dyn Charge).collect();
            let multi = check_all(&entries, now);
            if let Some(j) = multi.denied_by() {
                let i = local[j].0;
                // A quota-mode descriptor spent since its estimate (a concurrent request took
                // its room): left out like the others, and charged without it while another
                // quota-mode descriptor has room.
                if quota[i] && (quota_room_elsewhere || quota_candidates > 1) {
                    out[i] = Some(Outcome::of(&multi.decisions()[j], local[j].1.n));
                    quota_candidates -= 1;
                    local.remove(j);
                    continue;
                }
            }
            admitted = multi.is_allowed();
            if admitted {
                charged_here = multi.decisions().to_vec();
            }
            for (j, ((i, e), d)) in local.iter().zip(multi.decisions()).enumerate() {
                out[*i] = Some(if admitted || multi.denied_by() == Some(j) {
                    Outcome::of(d, e.n)
                } else {
                    Outcome::estimated(e, now)
                });
            }
            break;
        }
        if !admitted {
            for (i, e) in &local {
                if out[*i].is_none() {
                    out[*i] = Some(Outcome::estimated(e, now));
                }
            }
        }
        let redis_quota = fleet.iter().any(|&i| quota[i]);
        if redis_quota {
            // Quota mode in Redis: one descriptor after the other, since a quota-mode
            // descriptor over its limit must not deny the others; a denial in rate-limit mode
            // stops the charging (funnel-redis has no refund, so the descriptors charged
            // before it stay charged).
            for &i in &fleet {
                let Plan::Count(c) = &plans[i] else { continue };
                let Where::Redis(r) = c.where_ else { continue };
                let n = if admitted { c.n } else { 0 };
                let o = redis_outcome(r, &c.key, n).await;
                if o.over && !quota[i] {
                    admitted = false;
                }
                out[i] = Some(o);
            }
            // Known only now: every quota-mode descriptor over the limit denies the request.
            let every_quota_over =
                plans
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| quota[*i])
                    .all(|(i, p)| {
                        matches!(p, Plan::Blocked(..)) || out[i].as_ref().is_some_and(|o| o.over)
                    });
            admitted &= !every_quota_over;
        } else if !fleet.is_empty() {
            // Redis: every deciding descriptor in one script, all or nothing (`fleet.rs`); a
            // denial there gives back the local charges above.
            let entries: Vec<(&funnel_redis::RedisLimiter, &str, u64)> = fleet
                .iter()
                .filter_map(|&i| match &plans[i] {
                    Plan::Count(c) => match c.where_ {
                        Where::Redis(r) => Some((r, c.key.as_str(), c.n)),
                        Where::Local(_) => None,
                    },
                    _ => None,
                })
                .collect();
            let answers = crate::fleet::charge(&entries, admitted).await;
            for ((&i, a), &(_, _, n)) in fleet.iter().zip(&answers.entries).zip(&entries) {
                out[i] = Some(match a {
                    crate::fleet::Answer::Decided(d) => Outcome::of(d, n),
                    crate::fleet::Answer::Uncharged { asked, before } => {
                        Outcome::uncharged(asked, before)
                    }
                    crate::fleet::Answer::Failed { limit, reset } => {
                        Outcome::failed(*limit, *reset)
                    }
                });
            }
            if admitted && !answers.admitted {
                admitted = false;
                for ((i, e), d) in local.iter().zip(&charged_here) {
                    let undone = e.undo(d, now);
                    out[*i] = Some(Outcome::uncharged(
                        &undone,
                        &e.table.estimate(e.key, 0, now, e.quota),
                    ));
                }
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
                    let e = entry(c, table);
                    if c.refund && admitted {
                        table.refund(&c.key, c.n, now, c.quota);
                        Outcome::of(&table.estimate(&c.key, 0, now, c.quota), 0)
                    } else if c.shadow && admitted && c.n > 0 {
                        Outcome::of(&e.charge(now), c.n)
                    } else {
                        Outcome::estimated(&e, now)
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

    /// envoyproxy/ratelimit's way (`--charge-denied`): every descriptor decided and charged on
    /// its own, whatever the others decide. A descriptor's own denial charges nothing, as
    /// funnel's limits never record units they refused.
    async fn charge_each(&self, plans: &[Plan<'_>], now: Timestamp) -> Vec<Option<Outcome>> {
        let mut out = Vec::with_capacity(plans.len());
        for p in plans {
            let Plan::Count(c) = p else {
                out.push(None);
                continue;
            };
            out.push(Some(match c.where_ {
                Where::Local(table) => {
                    let e = entry(c, table);
                    if c.refund {
                        table.refund(&c.key, c.n, now, c.quota);
                        Outcome::of(&table.estimate(&c.key, 0, now, c.quota), 0)
                    } else if c.n == 0 {
                        Outcome::estimated(&e, now)
                    } else {
                        Outcome::of(&e.charge(now), c.n)
                    }
                }
                Where::Redis(r) => redis_outcome(r, &c.key, c.n).await,
            }));
        }
        out
    }

    fn respond(
        &self,
        req: &RateLimitRequest,
        plans: &[Plan<'_>],
        quota: &[bool],
        outcomes: &[Option<Outcome>],
        now: Timestamp,
        headers: bool,
    ) -> RateLimitResponse {
        let mut statuses = Vec::with_capacity(plans.len());
        let mut closest_ietf: Option<(&Shown, &Outcome)> = None;
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
                (Plan::Blocked(s, _), _) => DescriptorStatus {
                    code: Code::OverLimit as i32,
                    current_limit: Some(limit_of(s)),
                    limit_remaining: 0,
                    duration_until_reset: Some(whole_seconds(window_end(s.unit, now))),
                },
                (Plan::Count(c), Some(o)) => {
                    let near = self.answers.near_limit_ratio.threshold(o.limit);
                    let hit = Hit::new(c.n, o.used, o.limit, near, o.over).shadowed(c.shadow);
                    if let Some(rule) = c.rule {
                        if c.n > 0 && !c.refund {
                            rule.stats.add(hit, c.value.as_deref());
                        }
                        if o.over && c.shadow {
                            tracing::info!(domain = %rule.domain, rule = %rule.stat_key, key = %c.key, "over the limit in shadow mode: allowed");
                        }
                    }
                    let over = o.over && !c.shadow;
                    if !c.shadow && closest_ietf.is_none_or(|(_, b)| o.remaining < b.remaining) {
                        closest_ietf = Some((&c.shown, o));
                    }
                    DescriptorStatus {
                        code: if over { Code::OverLimit } else { Code::Ok } as i32,
                        current_limit: Some(limit_of(&c.shown)),
                        // Over the limit: nothing left, shadow mode included.
                        limit_remaining: if o.over {
                            0
                        } else {
                            u32::try_from(o.remaining).unwrap_or(u32::MAX)
                        },
                        duration_until_reset: Some(whole_seconds(reset_of(c, o, now))),
                    }
                }
            };
            statuses.push(status);
        }
        let over_all = over_the_limit(plans, quota, &statuses);
        let mut response_headers_to_add = Vec::new();
        if headers {
            if let Some((s, o)) = closest_ietf {
                response_headers_to_add.extend(ietf_headers(s, o));
            }
        }
        if let Some(names) = &self.answers.limit_headers {
            let answered: Vec<Answered<'_>> = statuses
                .iter()
                .zip(plans)
                .zip(quota)
                .map(|((status, p), q)| Answered {
                    status,
                    unlimited: matches!(p, Plan::Unlimited),
                    quota_mode: *q,
                })
                .collect();
            if let Some(status) = closest(&answered) {
                response_headers_to_add.extend(names.headers(status));
            }
        }
        let dynamic_metadata = self.answers.dynamic_metadata.then(|| {
            let passed = plans.iter().zip(&statuses).filter_map(|(p, s)| match p {
                Plan::Count(c) if s.code != Code::OverLimit as i32 => {
                    c.rule.and_then(|r| r.metadata.as_ref())
                }
                _ => None,
            });
            crate::dynamic_metadata::build(req, passed)
        });
        let overall_code = if over_all && self.answers.shadow_mode {
            self.stats
                .global_shadow_mode
                .fetch_add(1, Ordering::Relaxed);
            Code::Ok
        } else if over_all {
            Code::OverLimit
        } else {
            Code::Ok
        };
        RateLimitResponse {
            overall_code: overall_code as i32,
            statuses,
            response_headers_to_add,
            request_headers_to_add: Vec::new(),
            dynamic_metadata,
        }
    }
}

/// envoyproxy/ratelimit's overall code: over the limit when a descriptor in rate-limit mode
/// is, or when every quota-mode descriptor is (`unlimited` ones take no part).
fn over_the_limit(plans: &[Plan<'_>], quota: &[bool], statuses: &[DescriptorStatus]) -> bool {
    let (mut rate_over, mut quota_over, mut quota_all) = (0, 0, 0);
    for ((p, q), s) in plans.iter().zip(quota).zip(statuses) {
        if matches!(p, Plan::Unlimited) {
            continue;
        }
        let over = s.code == Code::OverLimit as i32;
        match (q, over) {
            (true, true) => quota_over += 1,
            (false, true) => rate_over += 1,
            _ => {}
        }
        quota_all += usize::from(*q);
    }
    rate_over > 0 || (quota_all > 0 && quota_over == quota_all)
}

/// The IETF `RateLimit-Policy` and `RateLimit` fields (`--response-headers`).
fn ietf_headers(s: &Shown, o: &Outcome) -> [HeaderValue; 2] {
    let name = if s.name.is_empty() {
        "limit"
    } else {
        s.name.as_str()
    };
    let name = name.replace(['"', '\\'], "");
    let window = s.unit.duration().as_secs();
    let t = whole_seconds(o.reset).seconds;
    [
        HeaderValue {
            key: "RateLimit-Policy".into(),
            value: format!("\"{name}\";q={};w={window}", o.limit),
            ..Default::default()
        },
        HeaderValue {
            key: "RateLimit".into(),
            value: format!("\"{name}\";r={};t={t}", o.remaining),
            ..Default::default()
        },
    ]
}

/// The reset a status shows: the outcome's, except where it is zero: for a fixed window key not
/// yet counted in this window it is still the window's end (as envoyproxy/ratelimit reports
/// it), and for a denial of more units than the limit holds (which no wait admits) one whole
/// unit, never "now".
fn reset_of(c: &Counted<'_>, o: &Outcome, now: Timestamp) -> Duration {
    if !o.reset.is_zero() {
        return o.reset;
    }
    match c.where_ {
        Where::Local(Table::Fixed(_)) => window_end(c.shown.unit, now),
        _ if o.over => c.shown.unit.duration(),
        _ => o.reset,
    }
}

/// The time from `now` to the end of the current window of `unit` on Unix time, as
/// envoyproxy/ratelimit reports the reset of every limit.
fn window_end(unit: Unit, now: Timestamp) -> Duration {
    let window = unit.duration().as_nanos();
    let now = u128::from(now.as_nanos());
    // The remainder is under one window (at most a year), so it fits in u64.
    Duration::from_nanos(u64::try_from(window - now % window).unwrap_or(u64::MAX))
}

/// The charge entry of a counted descriptor in `table`.
fn entry<'a>(c: &'a Counted<'_>, table: &'a Table) -> Entry<'a> {
    Entry {
        table,
        key: &c.key,
        n: c.n,
        quota: c.quota,
    }
}

async fn redis_outcome(r: &funnel_redis::RedisLimiter, key: &str, n: u64) -> Outcome {
    match r.check_n(key, n).await {
        Ok(c) => Outcome::of(&c.decision, n),
        Err(e) => {
            // Only OnFailure::Report or an error retrying cannot fix reaches here: deny.
            tracing::warn!(error = %e, "redis could not decide: answered over the limit");
            Outcome::failed(r.quota().limit(), r.quota().emission_interval())
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

/// `d` in whole seconds, rounded up: a client told to wait never retries early.
fn whole_seconds(d: Duration) -> prost_types::Duration {
    let seconds = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    prost_types::Duration {
        seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
