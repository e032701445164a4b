//! The configuration compiled for lookups: per domain a tree of descriptors, each level
//! indexed by key and value, and per rule its counts (a table in process, or a Redis limiter)
//! and its statistics.
//!
//! Matching follows envoyproxy/ratelimit: a request descriptor of N entries walks N levels;
//! at each level the entry's key with its value is tried first, then a value ending in `*` as
//! a prefix, then the key alone; the rule found at the last entry applies, and a walk that
//! stops early matches nothing.
//!
//! A [`Registry`] outlives configurations: a rule that keeps its identity (its `name`, or its
//! path of keys and values when unnamed) and its quota keeps its table, so every key's debt
//! survives a reload; statistics are kept per domain and path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::clock::UnixClock;
use crate::config::{Algorithm, Config, Descriptor, RateLimit, Unit};
use crate::metrics::RuleStats;
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
    /// names its statistics.
    pub stat_key: String,
    /// The limit.
    pub limit: RateLimit,
    /// Answer OK whatever the decision.
    pub shadow_mode: bool,
    /// Count per matched value too.
    pub detailed_metric: bool,
    /// Names of the rules this one replaces.
    pub replaces: Vec<String>,
    /// Where it counts.
    pub kind: Kind,
    /// Its counters.
    pub stats: Arc<RuleStats>,
}

#[derive(Default)]
struct Level {
    exact: HashMap<String, HashMap<String, usize>>,
    prefix: Vec<(String, String, usize)>,
    any: HashMap<String, usize>,
}

struct Node {
    rule: Option<Arc<Rule>>,
    children: Level,
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
    /// The rule for a descriptor's entries, as `(key, value)` pairs.
    pub fn find<'a>(
        &self,
        entries: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    ) -> Option<&Arc<Rule>> {
        let last = entries.len().checked_sub(1)?;
        let mut level = &self.root;
        for (i, (key, value)) in entries.enumerate() {
            let next = level
                .exact
                .get(key)
                .and_then(|m| m.get(value))
                .or_else(|| {
                    level
                        .prefix
                        .iter()
                        .find(|(k, p, _)| k == key && value.starts_with(p.as_str()))
                        .map(|(_, _, i)| i)
                })
                .or_else(|| level.any.get(key))?;
            let node = &self.nodes[*next];
            if i == last {
                return node.rule.as_ref();
            }
            level = &node.children;
        }
        None
    }

    /// Every rule of the domain.
    pub fn rules(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.nodes.iter().filter_map(|n| n.rule.as_ref())
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
    /// `rediss://` for every `host:port` of `url` (`--redis-tls`, `REDIS_TLS`).
    pub tls: bool,
    /// The certificate authority (PEM file) TLS servers must chain to, instead of the system's
    /// roots (`--redis-tls-ca-cert`, `REDIS_TLS_CACERT`).
    pub tls_ca_cert: Option<std::path::PathBuf>,
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

    /// The Redis settings, in fleet mode.
    pub fn redis(&self) -> Option<&RedisSettings> {
        self.redis.as_ref()
    }

    /// The most keys a table holds.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Compiles `config`, reusing the tables of rules that kept their identity and quota and
    /// dropping the others. Nothing changes when it fails.
    pub async fn compile(&self, config: &Config) -> Result<Rules, String> {
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
            let root = b
                .level(&d.descriptors, "")
                .await
                .map_err(|e| format!("{}: {e}", d.file.display()))?;
            let nodes = b.nodes;
            let table = self.override_table(&d.domain)?;
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

    fn override_table(&self, domain: &str) -> Result<Arc<Table>, String> {
        if let Some(t) = self
            .overrides
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(domain)
        {
            return Ok(t.clone());
        }
        // The table's own quota is never used: every override entry brings its quota.
        let q = funnel::Quota::per_second(1).map_err(|e| e.to_string())?;
        let t = funnel::Limiter::<str>::builder(q)
            .capacity(1_024.min(self.max_keys))
            .max_capacity(self.max_keys)
            .clock(self.clock.clone())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(Table::Gcra(t)))
    }

    async fn counts(&self, id: &Identity, limit: &RateLimit) -> Result<Counts, String> {
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
            None => Ok(Counts::Local(Arc::new(Table::build(
                limit,
                self.max_keys,
                self.clock.clone(),
            )?))),
            Some(r) => {
                if limit.algorithm != Algorithm::Gcra {
                    return Err(format!(
                        "algorithm {} is not available with --redis (gcra only)",
                        limit.algorithm.name()
                    ));
                }
                let rpu = limit.requests_per_unit;
                let q = crate::store::gcra_quota(rpu, limit.unit, limit.burst.unwrap_or(rpu))
                    .map_err(|e| e.to_string())?;
                let quota = format!(
                    "{}:{}:{}",
                    rpu,
                    limit.unit.envoy_number(),
                    limit.burst.unwrap_or(rpu)
                );
                let mut builder = crate::fleet::builder(r, q)?
                    .prefix(crate::fleet::prefix(r, &id.domain, &id.rule, &quota))
                    .deny_cache(r.deny_cache)
                    .on_failure(r.on_failure);
                if let Some(t) = r.timeout {
                    builder = builder.timeout(t);
                }
                let limiter = builder.build().await.map_err(|e| format!("redis: {e}"))?;
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
    async fn level(&mut self, list: &[Descriptor], parent: &str) -> Result<Level, String> {
        let mut level = Level::default();
        for d in list {
            let part = match &d.value {
                Some(v) => format!("{}_{}", d.key, v),
                None => d.key.clone(),
            };
            let path = if parent.is_empty() {
                part
            } else {
                format!("{parent}.{part}")
            };
            let rule = match &d.rate_limit {
                None => None,
                Some(limit) => Some(Arc::new(
                    self.rule(d, limit, &path)
                        .await
                        .map_err(|e| format!("line {}: {e}", d.line))?,
                )),
            };
            let children = Box::pin(self.level(&d.descriptors, &path)).await?;
            let idx = self.nodes.len();
            self.nodes.push(Node { rule, children });
            match &d.value {
                Some(v) if v.ends_with('*') => {
                    level
                        .prefix
                        .push((d.key.clone(), v[..v.len() - 1].to_owned(), idx));
                }
                Some(v) => {
                    level
                        .exact
                        .entry(d.key.clone())
                        .or_default()
                        .insert(v.clone(), idx);
                }
                None => {
                    level.any.insert(d.key.clone(), idx);
                }
            }
        }
        Ok(level)
    }

    async fn rule(
        &mut self,
        d: &Descriptor,
        limit: &RateLimit,
        path: &str,
    ) -> Result<Rule, String> {
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
            limit: limit.clone(),
            shadow_mode: d.shadow_mode,
            detailed_metric: d.detailed_metric,
            replaces: limit.replaces.clone(),
            kind,
            stats,
        })
    }
}
