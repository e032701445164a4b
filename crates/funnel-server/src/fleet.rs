//! Fleet mode: how `--redis` and its companions reach Redis, and the Redis limiters' counters
//! (round trips, deny-cache answers, timeouts, errors and failure-policy answers, summed over
//! the rules).
//!
//! `--redis` reads envoyproxy/ratelimit's `REDIS_URL` conventions as well as URLs, by
//! `--redis-type`:
//!
//! * `single`: one server, `host:port` or `redis://[user:password@]host:port[/db]`
//!   (`rediss://` for TLS);
//! * `cluster`: the seed nodes, comma-separated, each as above;
//! * `sentinel`: `master_name,host:port[,host:port...]`, the name the sentinels monitor the
//!   primary under, then the sentinels.
//!
//! `--redis-auth` (envoyproxy's `REDIS_AUTH`) is `password` or `user:password`, for every
//! server (over a URL's own credentials). The sentinels take `--redis-sentinel-auth`
//! (`REDIS_SENTINEL_AUTH`), of the same form, over their URLs' own. `--redis-tls`
//! (`REDIS_TLS`) turns a `host:port` into `rediss://host:port`; `--redis-tls-ca-cert`
//! (`REDIS_TLS_CACERT`) names the certificate authority to trust instead of the system's;
//! `--redis-tls-client-cert` and `--redis-tls-client-key` (`REDIS_TLS_CLIENT_CERT`,
//! `REDIS_TLS_CLIENT_KEY`) the certificate shown to servers that require one;
//! `--redis-tls-skip-hostname-verification` (`REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`) accepts a
//! certificate for another name, its chain still checked. The TLS settings apply to every
//! server of every `--redis-type`: the single server, a cluster's nodes, the sentinels and the
//! primary they name.

use clap::ValueEnum;
use funnel_redis::Stats;

use crate::rules::{Kind, RedisSettings, Rules};

/// How `--redis` reaches Redis (envoyproxy/ratelimit's `REDIS_TYPE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum RedisType {
    /// One server.
    #[default]
    Single,
    /// A Redis Cluster, through its seed nodes.
    Cluster,
    /// A primary found through Redis Sentinel.
    Sentinel,
}

/// Where each request's Redis keys land (`--redis-hash-tag`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum HashTag {
    /// No hash tag: on a cluster the keys of one request may land in several slots, where one
    /// script cannot charge them together (see the README, "Fleet mode").
    #[default]
    None,
    /// The domain as the hash tag (`{domain}`): every key of a domain in one slot, so that a
    /// request's descriptors are charged in one script on a cluster too.
    Domain,
}

/// A `host:port` made a URL; a URL left as it is.
fn url_of(endpoint: &str, tls: bool) -> String {
    if endpoint.contains("://") {
        endpoint.to_owned()
    } else if tls {
        format!("rediss://{endpoint}")
    } else {
        format!("redis://{endpoint}")
    }
}

/// `password` or `user:password` as a user (`None`: Redis's `default`) and a password.
fn credentials(auth: &str) -> (Option<String>, &str) {
    match auth.split_once(':') {
        Some((user, password)) => (Some(user.to_owned()), password),
        None => (None, auth),
    }
}

/// The comma-separated endpoints of `--redis`, trimmed, none empty.
fn endpoints(list: &str) -> Result<Vec<&str>, String> {
    let items: Vec<&str> = list.split(',').map(str::trim).collect();
    if items.iter().any(|i| i.is_empty()) {
        return Err(format!("--redis {list:?}: an empty item in the list"));
    }
    Ok(items)
}

/// A limiter builder for `quota` on the Redis of `settings`, before its per-rule settings.
///
/// # Errors
///
/// A `--redis` that does not fit `--redis-type`.
pub fn builder(
    settings: &RedisSettings,
    quota: funnel::Quota,
) -> Result<funnel_redis::Builder, String> {
    let tls = settings.tls;
    let items = endpoints(&settings.url)?;
    if settings.sentinel_auth.is_some() && settings.redis_type != RedisType::Sentinel {
        return Err("--redis-sentinel-auth: only with --redis-type sentinel".into());
    }
    let mut builder = match settings.redis_type {
        RedisType::Single => {
            let [one] = items.as_slice() else {
                return Err(format!(
                    "--redis: {} servers given; a cluster needs --redis-type cluster",
                    items.len()
                ));
            };
            funnel_redis::RedisLimiter::builder(url_of(one, tls), quota)
        }
        RedisType::Cluster => {
            let seeds: Vec<String> = items.iter().map(|i| url_of(i, tls)).collect();
            funnel_redis::RedisLimiter::builder(seeds[0].clone(), quota).cluster(seeds)
        }
        RedisType::Sentinel => {
            let [master, sentinels @ ..] = items.as_slice() else {
                unreachable!("split yields at least one item")
            };
            if sentinels.is_empty() || master.contains(':') {
                return Err(
                    "--redis with --redis-type sentinel: expected master_name,host:port[,host:port...]"
                        .into(),
                );
            }
            let urls: Vec<String> = sentinels.iter().map(|i| url_of(i, tls)).collect();
            let b =
                funnel_redis::RedisLimiter::builder(urls[0].clone(), quota).sentinel(*master, urls);
            match settings.sentinel_auth.as_deref().map(credentials) {
                Some((user, password)) => b.sentinel_auth(user, password),
                None => b,
            }
        }
    };
    if let Some(path) = &settings.tls_ca_cert {
        let pem = std::fs::read(path)
            .map_err(|e| format!("--redis-tls-ca-cert {}: {e}", path.display()))?;
        builder = builder.tls_root_certificate(pem);
    }
    if let Some((cert, key)) = &settings.tls_client_cert {
        let read = |flag: &str, path: &std::path::Path| {
            std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))
        };
        builder = builder.tls_client_certificate(
            read("--redis-tls-client-cert", cert)?,
            read("--redis-tls-client-key", key)?,
        );
    }
    if settings.tls_skip_hostname_verification {
        builder = builder.tls_skip_hostname_verification(true);
    }
    if let Some((user, password)) = settings.auth.as_deref().map(credentials) {
        builder = builder.auth(user, password);
    }
    Ok(builder)
}

/// The key prefix of a rule's funnels: the rule's identity and quota (a rule whose quota
/// changed starts afresh, as in process), inside a hash tag of the domain with
/// [`HashTag::Domain`].
pub fn prefix(settings: &RedisSettings, domain: &str, rule: &str, quota: &str) -> String {
    match settings.hash_tag {
        HashTag::None => format!("funnel-server:{domain}:{rule}:{quota}:"),
        HashTag::Domain => format!("funnel-server:{{{domain}}}:{rule}:{quota}:"),
    }
}

/// One descriptor's answer from Redis, for the response.
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    /// Decided by Redis (charged when the request was admitted) or by the failure policy.
    Decided(funnel::Decision),
    /// Left uncharged because another descriptor denied the request: what its units would get
    /// and what was left.
    Uncharged {
        /// Its units' decision, uncharged.
        asked: funnel::Decision,
        /// A zero-unit decision: what is left.
        before: funnel::Decision,
    },
    /// No decision (an error retrying will not fix, or `--on-redis-failure` with no answer):
    /// over the limit, with the rule's limit and one emission interval to wait.
    Failed {
        /// The rule's limit.
        limit: u64,
        /// One emission interval.
        reset: std::time::Duration,
    },
}

/// A request's Redis descriptors, decided together.
#[derive(Debug)]
pub struct Charged {
    /// Whether every descriptor admitted (false when `admit` was false).
    pub admitted: bool,
    /// One answer per descriptor, in order.
    pub entries: Vec<Answer>,
}

/// Decides a request's Redis descriptors `(limiter, key, units)` all or nothing: when `admit`
/// (nothing else denied the request), each charged only if every one admits, in one script
/// (funnel-redis's `check_all`); otherwise each only looked at (`peek_all`). One descriptor
/// alone takes its limiter's own path, with the deny cache.
pub async fn charge(entries: &[(&funnel_redis::RedisLimiter, &str, u64)], admit: bool) -> Charged {
    let failed = |e: &funnel_redis::Error| {
        // Only OnFailure::Report or an error retrying cannot fix reaches here: deny.
        tracing::warn!(error = %e, "redis could not decide: answered over the limit");
        Charged {
            admitted: false,
            entries: entries
                .iter()
                .map(|(r, _, _)| Answer::Failed {
                    limit: r.quota().limit(),
                    reset: r.quota().emission_interval(),
                })
                .collect(),
        }
    };
    if let ([(r, key, n)], true) = (entries, admit) {
        return match r.check_n(key, *n).await {
            Ok(c) => Charged {
                admitted: c.decision.is_allowed(),
                entries: vec![Answer::Decided(c.decision)],
            },
            Err(e) => failed(&e),
        };
    }
    let joint: Vec<funnel_redis::JointEntry<'_>> = entries
        .iter()
        .map(|&(limiter, key, n)| funnel_redis::JointEntry { limiter, key, n })
        .collect();
    let decided = if admit {
        funnel_redis::check_all(&joint).await
    } else {
        funnel_redis::peek_all(&joint).await
    };
    match decided {
        Ok(j) => {
            if !j.atomic {
                tracing::warn!(
                    "a request's Redis keys span several cluster slots and one denied after \
                     others were charged (--redis-hash-tag domain keeps them in one slot)"
                );
            }
            let admitted = admit && j.is_allowed();
            let entries = j
                .checked
                .iter()
                .zip(&j.before)
                .enumerate()
                .map(|(k, (c, before))| {
                    if admitted || (admit && j.denied_by == Some(k)) {
                        Answer::Decided(c.decision)
                    } else {
                        Answer::Uncharged {
                            asked: c.decision,
                            before: *before,
                        }
                    }
                })
                .collect();
            Charged { admitted, entries }
        }
        Err(e) => failed(&e),
    }
}

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
