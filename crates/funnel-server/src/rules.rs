//! The configuration compiled for lookups: per domain a tree of descriptors, each level
//! indexed as envoyproxy/ratelimit indexes it, and per rule its counts (a table in process,
//! or a Redis limiter) and its statistics.
//!
//! Matching follows envoyproxy/ratelimit: a request descriptor of N entries walks N levels;
//! at each level the entry's `key_value` is tried first, then the level's wildcards in the
//! order the configuration gives them (each `*` matching any run of characters, the empty
//! one too), then the key alone; the rule found at the last entry applies, and a walk that
//! stops early matches nothing. A [`Match`] remembers how each entry matched: that decides
//! the count a `share_threshold` wildcard shares ([`Match::counted_value`]) and the name
//! envoyproxy/ratelimit gives the statistics ([`Match::stat_key`]).
//!
//! A [`Registry`] outlives configurations: a rule that keeps its identity (its `name`, or its
//! path of keys and values when unnamed) and its quota keeps its table, so every key's debt
//! survives a reload; statistics are kept per domain and path.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::clock::UnixClock;
use crate::config::{Algorithm, Config, Descriptor, RateLimit, Unit};
use crate::limits::MAX_ENTRIES;
use crate::stats::RuleStats;
use crate::store::Table;

/// How a matched rule decides.
pub enum Kind {
    /// `unlimited: true`: OK, nothing counted.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over the limit.
    Blocked,
    /// Counted in this process.
    Local(Arc<Table>),
    /// Counted in Redis, shared by the fleet.
    Redis(Arc<funnel_redis::RedisLimiter>),
}

/// One configured rate limit.
pub struct Rule {
    /// The domain.
    pub domain: String,
    /// The path of keys and values leading to it (`key_value.key`), as envoyproxy/ratelimit
    /// names its statistics, without the domain.
    pub stat_key: String,
    /// The limit.
    pub limit: RateLimit,
    /// Answer OK whatever the decision.
    pub shadow_mode: bool,
    /// `quota_mode`: over the limit only if every quota-mode descriptor of the request is.
    pub quota_mode: bool,
    /// Statistics per matched value ([`Match::stat_key`]).
    pub detailed_metric: bool,
    /// The descriptor's `metadata`: what the response's dynamic metadata carries when this
    /// rule passes.
    pub metadata: Option<prost_types::Struct>,
    /// Names of the rules this one replaces.
    pub replaces: Vec<String>,
    /// Where it counts.
    pub kind: Kind,
    /// Its counters.
    pub stats: Arc<RuleStats>,
    /// `domain.stat_key`: the statistics' name when no value enters it.
    pub(crate) full_key: String,
}

/// A wildcard of one level: its `key_value` split on `*`.
struct Wildcard {
    parts: Vec<String>,
    node: usize,
}

/// One level of the tree.
#[derive(Default)]
struct Level {
    /// By `key_value`, or by `key` for a descriptor without a value.
    by_key: HashMap<String, usize>,
    /// The descriptors whose `key_value` holds a `*`, in configuration order.
    wildcards: Vec<Wildcard>,
}

struct Node {
    rule: Option<Arc<Rule>>,
    children: Level,
    /// `key_value` (or `key`) as configured.
    composite: String,
    share_threshold: bool,
    value_to_metric: bool,
}

/// How one entry of a request found its descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Via {
    /// Its `key_value`.
    #[default]
    Value,
    /// A wildcard.
    Wildcard,
    /// Its key alone.
    Key,
}

#[derive(Clone, Copy, Default)]
struct Step<'r> {
    via: Via,
    node: Option<&'r Node>,
}

/// A request descriptor's rule, and how each of its entries found it.
pub struct Match<'r> {
    /// The rule.
    pub rule: &'r Arc<Rule>,
    steps: [Step<'r>; MAX_ENTRIES],
    len: usize,
}

/// `pattern` without its `key_` prefix, as envoyproxy/ratelimit writes a wildcard's value.
fn wildcard_value<'p>(pattern: &'p str, key: &str) -> &'p str {
    pattern
        .strip_prefix(key)
        .and_then(|rest| rest.strip_prefix('_'))
        .unwrap_or(pattern)
}

impl<'r> Match<'r> {
    fn step(&self, i: usize) -> Option<(Via, &'r Node)> {
        let s = self.steps.get(i).filter(|_| i < self.len)?;
        Some((s.via, s.node?))
    }

    /// The `share_threshold` pattern entry `i` (with key `key`) counts under, if any.
    fn shared(&self, i: usize, key: &str) -> Option<&'r str> {
        match self.step(i) {
            Some((Via::Wildcard, node)) if node.share_threshold => {
                Some(wildcard_value(&node.composite, key))
            }
            _ => None,
        }
    }

    /// The value entry `i` is counted under: the wildcard's pattern when it matched a
    /// `share_threshold` wildcard (every such value shares one count), else its own value.
    pub fn counted_value<'v>(&self, i: usize, key: &str, value: &'v str) -> &'v str
    where
        'r: 'v,
    {
        self.shared(i, key).unwrap_or(value)
    }

    /// The statistics' name of this match, exactly as envoyproxy/ratelimit builds it
    /// (`domain.key_value.key`), for the request's `entries` (the ones matched):
    ///
    /// * `detailed_metric` on the rule: every entry as `key_value`, the value as sent (a
    ///   `share_threshold` entry as its pattern; then an entry with an empty value as `key`);
    /// * else, per entry: matched by value, `key_value`; by a wildcard, `key_pattern` (the
    ///   value as sent when that descriptor has `value_to_metric` and no `share_threshold`);
    ///   by key alone, `key` (`key_value` with `value_to_metric`).
    pub fn stat_key<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Cow<'r, str> {
        let rule: &'r Rule = self.rule;
        let steps = &self.steps[..self.len];
        let dynamic = rule.detailed_metric
            || steps.iter().any(|s| {
                s.via == Via::Wildcard
                    || (s.via == Via::Key && s.node.is_some_and(|n| n.value_to_metric))
            });
        if !dynamic {
            return Cow::Borrowed(&rule.full_key);
        }
        let entries: Vec<(&str, &str)> = entries.into_iter().take(self.len).collect();
        let mut out = String::with_capacity(rule.full_key.len() + 32);
        out.push_str(&rule.domain);
        if rule.detailed_metric {
            let shares = entries
                .iter()
                .enumerate()
                .any(|(i, (k, _))| self.shared(i, k).is_some());
            for (i, &(key, value)) in entries.iter().enumerate() {
                out.push('.');
                out.push_str(key);
                match self.shared(i, key) {
                    Some(p) => {
                        out.push('_');
                        out.push_str(p);
                    }
                    None if shares && value.is_empty() => {}
                    None => {
                        out.push('_');
                        out.push_str(value);
                    }
                }
            }
            return Cow::Owned(out);
        }
        for (i, &(key, value)) in entries.iter().enumerate() {
            out.push('.');
            out.push_str(key);
            let shown = match self.step(i) {
                Some((Via::Wildcard, node)) if node.share_threshold => {
                    wildcard_value(&node.composite, key)
                }
                Some((Via::Wildcard, node)) if node.value_to_metric => value,
                Some((Via::Wildcard, node)) => wildcard_value(&node.composite, key),
                Some((Via::Value, _)) => value,
                Some((Via::Key, node)) if node.value_to_metric => value,
                _ => "",
            };
            if !shown.is_empty() {
                out.push('_');
                out.push_str(shown);
            }
        }
        Cow::Owned(out)
    }
}

/// Whether `s` matches a pattern split on `*` (`parts`): it starts with the first part, ends
/// with the last, and holds the others in order between them, each `*` standing for any run
/// of characters, the empty one too.
fn wildcard_match(parts: &[String], s: &str) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return s.is_empty();
    };
    let Some((last, middle)) = rest.split_last() else {
        return first == s;
    };
    let fixed: usize = parts.iter().map(String::len).sum();
    if s.len() < fixed || !s.starts_with(first.as_str()) || !s.ends_with(last.as_str()) {
        return false;
    }
    // Within bounds and on character boundaries: the prefix and suffix matched and do not
    // overlap (the length check).
    let mut between = &s[first.len()..s.len() - last.len()];
    for part in middle {
        match between.find(part.as_str()) {
            Some(at) => between = &between[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// One domain's tree.
pub struct DomainRules {
    root: Level,
    nodes: Vec<Node>,
    /// The table of limits sent in requests (`descriptor.limit`): one GCRA table per domain,
    /// each key carrying the override's quota so that different overrides never share a count.
    pub overrides: Arc<Table>,
}

impl DomainRules {
    /// The rule for a descriptor's entries, as `(key, value)` pairs, and how it was found.
    pub fn lookup<'a>(
        &self,
        entries: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    ) -> Option<Match<'_>> {
        let len = entries.len();
        if len == 0 || len > MAX_ENTRIES {
            return None;
        }
        let mut steps = [Step::default(); MAX_ENTRIES];
        let mut level = &self.root;
        let mut composite = String::new();
        for (i, (key, value)) in entries.enumerate() {
            composite.clear();
            composite.push_str(key);
            composite.push('_');
            composite.push_str(value);
            let (index, via) = if let Some(&n) = level.by_key.get(composite.as_str()) {
                (n, Via::Value)
            } else if let Some(w) = level
                .wildcards
                .iter()
                .find(|w| wildcard_match(&w.parts, &composite))
            {
                (w.node, Via::Wildcard)
            } else {
                (*level.by_key.get(key)?, Via::Key)
            };
            let node = &self.nodes[index];
            steps[i] = Step {
                via,
                node: Some(node),
            };
            if i + 1 == len {
                return node.rule.as_ref().map(|rule| Match { rule, steps, len });
            }
            level = &node.children;
        }
        None
    }

    /// The rule for a descriptor's entries, as `(key, value)` pairs (the tests' view of
    /// [`lookup`](Self::lookup)).
    #[cfg(test)]
    pub fn find<'a>(
        &self,
        entries: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    ) -> Option<&Arc<Rule>> {
        self.lookup(entries).map(|m| m.rule)
    }

    /// Every rule of the domain.
    pub fn rules(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.nodes.iter().filter_map(|n| n.rule.as_ref())
    }
}

/// Why a configuration could not be compiled: the rule, and what failed.
#[derive(Debug)]
pub struct CompileError {
    /// The file of the rule.
    pub file: PathBuf,
    /// Its line; 0 for the domain as a whole.
    pub line: usize,
    /// What failed.
    pub kind: CompileErrorKind,
}

/// What failed when compiling a rule.
#[derive(Debug)]
#[non_exhaustive]
pub enum CompileErrorKind {
    /// The in-process table could not be built.
    Table(String),
    /// The quota is out of funnel's range.
    Quota(funnel::Error),
    /// The Redis limiter could not be built.
    Redis(funnel_redis::Error),
    /// A window algorithm in fleet mode, which counts with GCRA only.
    FleetNeedsGcra(Algorithm),
    /// `--redis` does not fit `--redis-type`, or a TLS file cannot be read.
    RedisSettings(String),
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: ", self.file.display())?;
        } else {
            write!(f, "{}:{}: ", self.file.display(), self.line)?;
        }
        match &self.kind {
            CompileErrorKind::Table(e) => write!(f, "{e}"),
            CompileErrorKind::Quota(e) => write!(f, "{e}"),
            CompileErrorKind::Redis(e) => write!(f, "redis: {e}"),
            CompileErrorKind::FleetNeedsGcra(a) => write!(
                f,
                "algorithm {} is not available with --redis (gcra only)",
                a.name()
            ),
            CompileErrorKind::RedisSettings(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CompileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            CompileErrorKind::Quota(e) => Some(e),
            CompileErrorKind::Redis(e) => Some(e),
            _ => None,
        }
    }
}

/// A compiled configuration.
pub struct Rules {
    /// The domains by name.
    pub domains: HashMap<String, DomainRules>,
}

/// Where rules count in a fleet: the Redis URL and the limiter settings.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// `--redis`: a URL or `host:port`, a list of them, or a master name and sentinels, by
    /// `redis_type` (see `fleet.rs`).
    pub url: String,
    /// Single server, cluster or sentinel.
    pub redis_type: crate::fleet::RedisType,
    /// `password` or `user:password` for every server (`--redis-auth`, `REDIS_AUTH`).
    pub auth: Option<String>,
    /// `password` or `user:password` for the sentinels (`--redis-sentinel-auth`,
    /// `REDIS_SENTINEL_AUTH`).
    pub sentinel_auth: Option<String>,
    /// `rediss://` for every `host:port` of `url` (`--redis-tls`, `REDIS_TLS`).
    pub tls: bool,
    /// The certificate authority (PEM file) TLS servers must chain to, instead of the system's
    /// roots (`--redis-tls-ca-cert`, `REDIS_TLS_CACERT`).
    pub tls_ca_cert: Option<std::path::PathBuf>,
    /// The client certificate and its private key (PEM files) shown to TLS servers
    /// (`--redis-tls-client-cert` and `--redis-tls-client-key`, `REDIS_TLS_CLIENT_CERT` and
    /// `REDIS_TLS_CLIENT_KEY`).
    pub tls_client_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Accept a TLS certificate for another name, its chain still checked
    /// (`--redis-tls-skip-hostname-verification`, `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`).
    pub tls_skip_hostname_verification: bool,
    /// Where a request's keys land on a cluster.
    pub hash_tag: crate::fleet::HashTag,
    /// What to answer when Redis cannot.
    pub on_failure: funnel_redis::OnFailure,
    /// Keys kept in the local deny cache (0 = none).
    pub deny_cache: usize,
    /// How long a decision waits for Redis before the failure policy answers (None: the
    /// funnel-redis default).
    pub timeout: Option<std::time::Duration>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Identity {
    domain: String,
    rule: String,
    algorithm: Algorithm,
    requests_per_unit: u32,
    unit: Unit,
    burst: Option<u32>,
}

enum Counts {
    Local(Arc<Table>),
    Redis(Arc<funnel_redis::RedisLimiter>),
}

/// What outlives a configuration: rules' tables and counters, the overrides' tables.
pub struct Registry {
    clock: UnixClock,
    max_keys: usize,
    redis: Option<RedisSettings>,
    counts: Mutex<HashMap<Identity, Counts>>,
    stats: Mutex<HashMap<(String, String), Arc<RuleStats>>>,
    overrides: Mutex<HashMap<String, Arc<Table>>>,
}

impl Registry {
    /// A registry whose tables hold at most `max_keys` keys each, counting in Redis when
    /// `redis` is given.
    pub fn new(clock: UnixClock, max_keys: usize, redis: Option<RedisSettings>) -> Registry {
        Registry {
            clock,
            max_keys,
            redis,
            counts: Mutex::new(HashMap::new()),
            stats: Mutex::new(HashMap::new()),
            overrides: Mutex::new(HashMap::new()),
        }
    }

    /// The clock every table reads.
    pub fn clock(&self) -> &UnixClock {
        &self.clock
    }

    /// Compiles `config`, reusing the tables of rules that kept their identity and quota and
    /// dropping the others. Nothing changes when it fails.
    pub async fn compile(&self, config: &Config) -> Result<Rules, CompileError> {
        let mut kept: HashMap<Identity, Counts> = HashMap::new();
        let mut stats: HashMap<(String, String), Arc<RuleStats>> = HashMap::new();
        let mut overrides: HashMap<String, Arc<Table>> = HashMap::new();
        let mut domains = HashMap::new();
        for d in &config.domains {
            let mut b = TreeBuilder {
                reg: self,
                domain: &d.domain,
                nodes: Vec::new(),
                kept: &mut kept,
                stats: &mut stats,
            };
            let root = b.level(&d.descriptors, "").await?;
            let nodes = b.nodes;
            let table = self
                .override_table(&d.domain)
                .map_err(|kind| CompileError {
                    file: d.file.clone(),
                    line: 0,
                    kind,
                })?;
            overrides.insert(d.domain.clone(), table.clone());
            domains.insert(
                d.domain.clone(),
                DomainRules {
                    root,
                    nodes,
                    overrides: table,
                },
            );
        }
        *self.counts.lock().unwrap_or_else(|e| e.into_inner()) = kept;
        *self.stats.lock().unwrap_or_else(|e| e.into_inner()) = stats;
        *self.overrides.lock().unwrap_or_else(|e| e.into_inner()) = overrides;
        Ok(Rules { domains })
    }

    fn override_table(&self, domain: &str) -> Result<Arc<Table>, CompileErrorKind> {
        if let Some(t) = self
            .overrides
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(domain)
        {
            return Ok(t.clone());
        }
        // The table's own quota is never used: every override entry brings its quota.
        let q = funnel::Quota::per_second(1).map_err(CompileErrorKind::Quota)?;
        let t = funnel::Limiter::<str>::builder(q)
            .capacity(1_024.min(self.max_keys))
            .max_capacity(self.max_keys)
            .clock(self.clock.clone())
            .build()
            .map_err(CompileErrorKind::Quota)?;
        Ok(Arc::new(Table::Gcra(t)))
    }

    async fn counts(&self, id: &Identity, limit: &RateLimit) -> Result<Counts, CompileErrorKind> {
        if let Some(c) = self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
        {
            return Ok(match c {
                Counts::Local(t) => Counts::Local(t.clone()),
                Counts::Redis(r) => Counts::Redis(r.clone()),
            });
        }
        match &self.redis {
            None => Ok(Counts::Local(Arc::new(
                Table::build(limit, self.max_keys, self.clock.clone())
                    .map_err(CompileErrorKind::Table)?,
            ))),
            Some(r) => {
                if limit.algorithm != Algorithm::Gcra {
                    return Err(CompileErrorKind::FleetNeedsGcra(limit.algorithm));
                }
                let rpu = limit.requests_per_unit;
                let q = crate::store::gcra_quota(rpu, limit.unit, limit.burst.unwrap_or(rpu))
                    .map_err(CompileErrorKind::Quota)?;
                let quota = format!(
                    "{}:{}:{}",
                    rpu,
                    limit.unit.envoy_number(),
                    limit.burst.unwrap_or(rpu)
                );
                let mut builder = crate::fleet::builder(r, q)
                    .map_err(CompileErrorKind::RedisSettings)?
                    .prefix(crate::fleet::prefix(r, &id.domain, &id.rule, &quota))
                    .deny_cache(r.deny_cache)
                    .on_failure(r.on_failure);
                if let Some(t) = r.timeout {
                    builder = builder.timeout(t);
                }
                let limiter = builder.build().await.map_err(CompileErrorKind::Redis)?;
                Ok(Counts::Redis(Arc::new(limiter)))
            }
        }
    }
}

struct TreeBuilder<'a> {
    reg: &'a Registry,
    domain: &'a str,
    nodes: Vec<Node>,
    kept: &'a mut HashMap<Identity, Counts>,
    stats: &'a mut HashMap<(String, String), Arc<RuleStats>>,
}

impl TreeBuilder<'_> {
    async fn level(&mut self, list: &[Descriptor], parent: &str) -> Result<Level, CompileError> {
        let mut level = Level::default();
        for d in list {
            let composite = d.composite_key();
            let path = if parent.is_empty() {
                composite.clone()
            } else {
                format!("{parent}.{composite}")
            };
            let rule = match &d.rate_limit {
                None => None,
                Some(limit) => Some(Arc::new(self.rule(d, limit, &path).await.map_err(
                    |kind| CompileError {
                        file: d.file.to_path_buf(),
                        line: d.line,
                        kind,
                    },
                )?)),
            };
            let children = Box::pin(self.level(&d.descriptors, &path)).await?;
            let index = self.nodes.len();
            if composite.contains('*') {
                level.wildcards.push(Wildcard {
                    parts: composite.split('*').map(str::to_owned).collect(),
                    node: index,
                });
            }
            level.by_key.insert(composite.clone(), index);
            self.nodes.push(Node {
                rule,
                children,
                composite,
                share_threshold: d.share_threshold,
                value_to_metric: d.value_to_metric,
            });
        }
        Ok(level)
    }

    async fn rule(
        &mut self,
        d: &Descriptor,
        limit: &RateLimit,
        path: &str,
    ) -> Result<Rule, CompileErrorKind> {
        let kind = if limit.unlimited {
            Kind::Unlimited
        } else if limit.requests_per_unit == 0 {
            Kind::Blocked
        } else {
            let mut id = Identity {
                domain: self.domain.to_owned(),
                rule: limit.name.clone().unwrap_or_else(|| path.to_owned()),
                algorithm: limit.algorithm,
                requests_per_unit: limit.requests_per_unit,
                unit: limit.unit,
                burst: limit.burst,
            };
            if self.kept.contains_key(&id) {
                // A name given to two rules: each keeps its own counts, under its path.
                id.rule = format!("{path}#path");
            }
            let counts = self.reg.counts(&id, limit).await?;
            let kind = match &counts {
                Counts::Local(t) => Kind::Local(t.clone()),
                Counts::Redis(r) => Kind::Redis(r.clone()),
            };
            self.kept.insert(id, counts);
            kind
        };
        let skey = (self.domain.to_owned(), path.to_owned());
        let stats = self
            .reg
            .stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&skey)
            .cloned()
            .unwrap_or_default();
        self.stats.insert(skey, stats.clone());
        Ok(Rule {
            domain: self.domain.to_owned(),
            stat_key: path.to_owned(),
            full_key: format!("{}.{path}", self.domain),
            limit: limit.clone(),
            shadow_mode: d.shadow_mode,
            quota_mode: d.quota_mode,
            detailed_metric: d.detailed_metric,
            metadata: d
                .metadata
                .as_ref()
                .map(crate::dynamic_metadata::from_config),
            replaces: limit.replaces.clone(),
            kind,
            stats,
        })
    }
}
