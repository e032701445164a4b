//! The Prometheus exposition, written by the `prometheus-client` crate from [`crate::stats`]
//! at each scrape (the rules in force change on reload, so the families are collected, not
//! registered once).
//!
//! Per rule, with envoyproxy/ratelimit's statistic names: `total_hits`, `over_limit`,
//! `near_limit`, `within_limit`, `shadow_mode` (in hits, that is units asked for), as the
//! counters `ratelimit_service_rate_limit_<stat>_total{domain="..",key=".."}` (and `value`
//! for `detailed_metric`). Per table: keys held, evictions, the most keys. For the server:
//! configuration loads and errors, requests refused as invalid, requests decided, and with
//! `--redis` the limiters' round trips, timeouts and failure-policy answers.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::decide::Decider;
use crate::fleet::REDIS_STATS;
use crate::rules::{Kind, Rules};
use crate::stats::{RULE_STATS, SERVER_STATS};
use crate::store::Table;

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The exposition of everything `decider` counts, in the OpenMetrics text format.
pub fn render(decider: &Arc<Decider>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exposition(decider.clone())));
    let mut out = String::new();
    // Writing to a String cannot fail; an encoder error would be a bug of ours (a name the
    // format refuses), reported in the text rather than by a panic.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::error!(error = %e, "cannot encode the metrics");
    }
    out
}

/// The collector the registry asks at each scrape.
struct Exposition(Arc<Decider>);

impl std::fmt::Debug for Exposition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exposition")
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let decider = &self.0;
        for stat in &SERVER_STATS {
            let family =
                encoder.encode_descriptor(stat.family, stat.help, None, MetricType::Counter)?;
            ConstCounter::new(stat.read(decider.stats())).encode(family)?;
        }
        let rules = decider.rules();
        let mut domains: Vec<_> = rules.domains.iter().collect();
        domains.sort_by(|a, b| a.0.cmp(b.0));
        for stat in &RULE_STATS {
            let name = format!("ratelimit_service_rate_limit_{}", stat.name);
            let mut family =
                encoder.encode_descriptor(&name, stat.help, None, MetricType::Counter)?;
            for (domain, d) in &domains {
                for r in d.rules() {
                    let labels = [("domain", domain.as_str()), ("key", r.stat_key.as_str())];
                    ConstCounter::new(stat.read(&r.stats.total))
                        .encode(family.encode_family(&labels)?)?;
                    {
                        for (value, c) in r.stats.detailed() {
                            let labels = [
                                ("domain", domain.as_str()),
                                ("key", r.stat_key.as_str()),
                                ("value", value.as_str()),
                            ];
                            ConstCounter::new(stat.read(&c))
                                .encode(family.encode_family(&labels)?)?;
                        }
                    }
                }
            }
        }
        tables(&mut encoder, &rules)?;
        let limiters = crate::fleet::limiters(&rules);
        if !limiters.is_empty() {
            for stat in &REDIS_STATS {
                let total: u64 = limiters.iter().map(stat.read).sum();
                let family =
                    encoder.encode_descriptor(stat.family, stat.help, None, MetricType::Counter)?;
                ConstCounter::new(total).encode(family)?;
            }
        }
        Ok(())
    }
}

/// The in-process tables: each rule's and each domain's override table.
fn tables(encoder: &mut DescriptorEncoder, rules: &Rules) -> Result<(), std::fmt::Error> {
    let mut domains: Vec<_> = rules.domains.iter().collect();
    domains.sort_by(|a, b| a.0.cmp(b.0));
    // (domain, key, table) for every table, in one order for the three families.
    let mut all: Vec<(&str, &str, &Table)> = Vec::new();
    for (domain, d) in &domains {
        for r in d.rules() {
            if let Kind::Local(t) = &r.kind {
                all.push((domain.as_str(), r.stat_key.as_str(), t));
            }
        }
        all.push((domain.as_str(), "(override)", &d.overrides));
    }
    let mut keys = encoder.encode_descriptor(
        "funnel_server_table_keys",
        "Keys held in the table.",
        None,
        MetricType::Gauge,
    )?;
    for (domain, key, t) in &all {
        let labels = [("domain", *domain), ("key", *key)];
        ConstGauge::new(t.stats().keys as i64).encode(keys.encode_family(&labels)?)?;
    }
    let mut evictions = encoder.encode_descriptor(
        "funnel_server_table_evictions",
        "Keys evicted from the full table (recovered and forced).",
        None,
        MetricType::Counter,
    )?;
    for (domain, key, t) in &all {
        let labels = [("domain", *domain), ("key", *key)];
        let s = t.stats();
        ConstCounter::new(s.recovered_evictions + s.forced_evictions)
            .encode(evictions.encode_family(&labels)?)?;
    }
    let mut max = encoder.encode_descriptor(
        "funnel_server_table_max_keys",
        "The most keys the table holds.",
        None,
        MetricType::Gauge,
    )?;
    for (domain, key, t) in &all {
        let labels = [("domain", *domain), ("key", *key)];
        ConstGauge::new(t.max_keys() as i64).encode(max.encode_family(&labels)?)?;
    }
    Ok(())
}
