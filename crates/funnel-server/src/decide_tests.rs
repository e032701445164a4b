//! The decision's answers where the rules carry what the YAML cannot give them here: rules
//! built in the test with `quota_mode` and `metadata`, decided through the same charge and
//! response steps as a request.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use prost_types::value::Kind as ValueKind;
use prost_types::{Struct, Value};

use super::*;
use crate::clock::UnixClock;
use crate::config::parse_domain;
use crate::proto::RateLimitDescriptor;
use crate::stats::RuleStats;

/// A rule of `requests_per_unit` a minute (GCRA), in quota mode or not, with `metadata`.
fn rule(
    name: &str,
    requests_per_unit: u32,
    quota_mode: bool,
    metadata: Option<Struct>,
) -> Arc<Rule> {
    let yaml = format!(
        "domain: d\ndescriptors:\n  - key: {name}\n    rate_limit: {{unit: minute, requests_per_unit: {requests_per_unit}}}\n"
    );
    let domain = parse_domain(&yaml, Path::new("t.yaml")).expect("the rule parses");
    let limit = domain.descriptors[0]
        .rate_limit
        .clone()
        .expect("it has a limit");
    let table = Table::build(&limit, 64, UnixClock::new()).expect("a table");
    Arc::new(Rule {
        domain: "d".into(),
        stat_key: name.into(),
        full_key: format!("d.{name}"),
        limit,
        shadow_mode: false,
        detailed_metric: false,
        quota_mode,
        metadata,
        replaces: Vec::new(),
        kind: Kind::Local(Arc::new(table)),
        stats: Arc::new(RuleStats::default()),
    })
}

fn decider(answers: Answers) -> Decider {
    let registry = Registry::new(UnixClock::new(), 64, None);
    let rules = Rules {
        domains: HashMap::new(),
    };
    Decider::new(rules, registry, false).with_answers(answers)
}

/// Decides one request whose descriptor `i` (`rules[i]`'s key, value "v") matched `rules[i]`.
async fn decide(decider: &Decider, rules: &[&Arc<Rule>]) -> RateLimitResponse {
    let req = RateLimitRequest {
        domain: "d".into(),
        descriptors: rules
            .iter()
            .map(|r| RateLimitDescriptor {
                entries: vec![ProtoEntry {
                    key: r.stat_key.clone(),
                    value: "v".into(),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    };
    let plans: Vec<Plan<'_>> = rules
        .iter()
        .zip(&req.descriptors)
        .map(|(r, d)| {
            let Kind::Local(table) = &r.kind else {
                unreachable!("the test's rules count in process")
            };
            Plan::Count(Counted {
                rule: Some(r),
                shown: Shown {
                    name: r.stat_key.clone(),
                    requests_per_unit: r.limit.requests_per_unit,
                    unit: r.limit.unit,
                },
                where_: Where::Local(table),
                key: table_key(&d.entries, ""),
                n: 1,
                refund: false,
                shadow: r.shadow_mode,
                quota: None,
                value: None,
            })
        })
        .collect();
    let quota = decider.quota_modes(&plans);
    let now = decider.registry.clock().now();
    let outcomes = if decider.answers.charge_denied {
        decider.charge_each(&plans, now).await
    } else {
        decider.charge(&plans, &quota, now).await
    };
    decider.respond(&req, &plans, &quota, &outcomes, now, false)
}

fn codes(r: &RateLimitResponse) -> (i32, Vec<i32>) {
    (r.overall_code, r.statuses.iter().map(|s| s.code).collect())
}

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

fn text(s: &str) -> Value {
    Value {
        kind: Some(ValueKind::StringValue(s.into())),
    }
}

fn one_field(k: &str, v: Value) -> Struct {
    Struct {
        fields: BTreeMap::from([(k.to_owned(), v)]),
    }
}

#[tokio::test]
async fn a_request_is_over_only_when_every_quota_descriptor_is() {
    let d = decider(Answers::default());
    let (a, b) = (rule("a", 1, true, None), rule("b", 2, true, None));
    assert_eq!(codes(&decide(&d, &[&a, &b]).await), (OK, vec![OK, OK]));
    // `a` is spent: it is left out, `b` takes the request.
    let r = decide(&d, &[&a, &b]).await;
    assert_eq!(codes(&r), (OK, vec![OVER, OK]));
    assert_eq!(r.statuses[0].limit_remaining, 0);
    // Both spent: over the limit, and nothing charged.
    assert_eq!(
        codes(&decide(&d, &[&a, &b]).await),
        (OVER, vec![OVER, OVER])
    );
    let fresh = rule("c", 5, false, None);
    let r = decide(&d, &[&fresh, &a, &b]).await;
    assert_eq!(codes(&r), (OVER, vec![OK, OVER, OVER]));
    assert_eq!(
        r.statuses[0].limit_remaining, 5,
        "the rate-limit descriptor of a request denied by its quotas was not charged"
    );
}

#[tokio::test]
async fn a_rate_limit_denial_wins_over_quota_room() {
    let d = decider(Answers::default());
    let (limit, quota) = (rule("r", 1, false, None), rule("q", 5, true, None));
    assert_eq!(
        codes(&decide(&d, &[&limit, &quota]).await),
        (OK, vec![OK, OK])
    );
    let r = decide(&d, &[&limit, &quota]).await;
    assert_eq!(codes(&r), (OVER, vec![OVER, OK]));
    assert_eq!(
        r.statuses[1].limit_remaining, 4,
        "the quota was not charged for the denied request"
    );
}

#[tokio::test]
async fn global_quota_mode_puts_every_descriptor_in_quota_mode() {
    let d = decider(Answers {
        quota_mode: true,
        ..Default::default()
    });
    let (a, b) = (rule("a", 1, false, None), rule("b", 1, false, None));
    decide(&d, &[&a]).await;
    assert_eq!(codes(&decide(&d, &[&a, &b]).await), (OK, vec![OVER, OK]));
    assert_eq!(
        codes(&decide(&d, &[&a, &b]).await),
        (OVER, vec![OVER, OVER])
    );
}

#[tokio::test]
async fn metadata_comes_from_the_rules_that_passed() {
    let d = decider(Answers {
        dynamic_metadata: true,
        ..Default::default()
    });
    let first = rule("a", 1, true, Some(one_field("name", text("service_1"))));
    let second = rule("b", 5, true, Some(one_field("name", text("service_2"))));
    let other = rule("c", 5, true, Some(one_field("other", text("x"))));
    let r = decide(&d, &[&first, &second, &other]).await;
    let meta = r.dynamic_metadata.expect("dynamic metadata");
    let Some(ValueKind::StructValue(merged)) = &meta.fields["metadata"].kind else {
        panic!("no metadata struct in {meta:?}")
    };
    assert_eq!(merged.fields["name"], text("service_1"), "the first stays");
    assert_eq!(merged.fields["other"], text("x"));
    // `a` is spent: only the others' metadata.
    let r = decide(&d, &[&first, &second]).await;
    assert_eq!(codes(&r), (OK, vec![OVER, OK]));
    let meta = r.dynamic_metadata.expect("dynamic metadata");
    let Some(ValueKind::StructValue(merged)) = &meta.fields["metadata"].kind else {
        panic!("no metadata struct in {meta:?}")
    };
    assert_eq!(merged.fields["name"], text("service_2"));
    assert_eq!(meta.fields["domain"], text("d"));
}

#[tokio::test]
async fn charge_denied_charges_each_descriptor_on_its_own() {
    for (charge_denied, left) in [(false, 3), (true, 2)] {
        let d = decider(Answers {
            charge_denied,
            ..Default::default()
        });
        let (roomy, tight) = (rule("r", 3, false, None), rule("t", 1, false, None));
        decide(&d, &[&tight]).await;
        let r = decide(&d, &[&roomy, &tight]).await;
        assert_eq!(codes(&r), (OVER, vec![OK, OVER]));
        assert_eq!(
            r.statuses[0].limit_remaining, left,
            "charge_denied {charge_denied}"
        );
    }
}

#[tokio::test]
async fn global_shadow_mode_answers_ok_and_keeps_the_statuses() {
    let d = decider(Answers {
        shadow_mode: true,
        ..Default::default()
    });
    let a = rule("a", 1, false, None);
    decide(&d, &[&a]).await;
    let r = decide(&d, &[&a]).await;
    assert_eq!(codes(&r), (OK, vec![OVER]));
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert_eq!(d.stats.global_shadow_mode.load(Ordering::Relaxed), 1);
}

#[test]
fn durations_round_up_to_whole_seconds() {
    let d = |s, n| whole_seconds(Duration::new(s, n));
    assert_eq!((d(0, 0).seconds, d(0, 0).nanos), (0, 0));
    assert_eq!(d(0, 1).seconds, 1);
    assert_eq!(d(4, 999_999_999).seconds, 5);
    assert_eq!(d(5, 0).seconds, 5);
    assert_eq!(d(u64::MAX, 1).seconds, i64::MAX);
}

#[test]
fn a_window_ends_on_its_unix_boundary() {
    let at = |secs: u64, nanos: u32| Timestamp::ZERO.saturating_add(Duration::new(secs, nanos));
    assert_eq!(
        window_end(Unit::Minute, at(120, 0)),
        Duration::from_secs(60)
    );
    assert_eq!(
        window_end(Unit::Minute, at(125, 500_000_000)),
        Duration::from_millis(54_500)
    );
    assert_eq!(
        whole_seconds(window_end(Unit::Minute, at(125, 500_000_000))).seconds,
        55
    );
    assert_eq!(
        window_end(Unit::Second, at(7, 250_000_000)),
        Duration::from_millis(750)
    );
}

#[tokio::test]
async fn a_quota_spent_between_its_estimate_and_the_charge_is_left_out() {
    let d = decider(Answers::default());
    // Twice the same key of a limit of 1: both estimates see room, the charge finds one.
    let a = rule("a", 1, true, None);
    let r = decide(&d, &[&a, &a]).await;
    assert_eq!(codes(&r), (OK, vec![OK, OVER]));
    assert_eq!(
        codes(&decide(&d, &[&a]).await),
        (OVER, vec![OVER]),
        "the admitted request was charged"
    );
}
