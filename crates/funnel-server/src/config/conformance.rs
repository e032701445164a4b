//! envoyproxy/ratelimit's configuration cases, on fixtures of our own
//! (`tests/config/`): each file loads or is refused as there, and each lookup finds the rule
//! it finds there, with the statistics' name it gives and the count it shares.

use std::path::PathBuf;

use super::*;
use crate::clock::UnixClock;
use crate::rules::{Registry, Rules};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/config")
        .join(name)
}

fn compile(config: &Config) -> Rules {
    let registry = Registry::new(UnixClock::new(), 64, None);
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime")
        .block_on(registry.compile(config))
        .expect("the configuration compiles")
}

fn load(name: &str) -> Rules {
    compile(&Config::load(&fixture(name), false).unwrap_or_else(|e| panic!("{e}")))
}

fn inline(text: &str) -> Rules {
    let domain = parse_domain(text, Path::new("inline.yaml")).unwrap_or_else(|e| panic!("{e}"));
    compile(&Config {
        domains: vec![domain],
    })
}

/// What a lookup finds, in the terms envoyproxy/ratelimit's tests check.
#[derive(Debug, PartialEq)]
struct Found {
    requests_per_unit: u32,
    unit: Unit,
    stat_key: String,
}

fn found(requests_per_unit: u32, unit: Unit, stat_key: &str) -> Option<Found> {
    Some(Found {
        requests_per_unit,
        unit,
        stat_key: stat_key.to_owned(),
    })
}

fn lookup(rules: &Rules, domain: &str, entries: &[(&str, &str)]) -> Option<Found> {
    let m = rules.domains.get(domain)?.lookup(entries.iter().copied())?;
    Some(Found {
        requests_per_unit: m.rule.limit.requests_per_unit,
        unit: m.rule.limit.unit,
        stat_key: m.stat_key(entries.iter().copied()).into_owned(),
    })
}

/// The values a request's entries are counted under.
fn counted(rules: &Rules, domain: &str, entries: &[(&str, &str)]) -> Vec<String> {
    let m = rules.domains[domain]
        .lookup(entries.iter().copied())
        .expect("a rule");
    entries
        .iter()
        .enumerate()
        .map(|(i, (k, v))| m.counted_value(i, k, v).to_owned())
        .collect()
}

#[test]
fn a_tree_of_defaults_and_overrides() {
    use Unit::*;
    let r = load("accepted/tree.yaml");
    let d = "shop";
    assert!(!r.domains.contains_key("nowhere"));
    // Nothing for an unknown value, a level without a limit, a request deeper than the tree.
    assert_eq!(lookup(&r, d, &[("tenant", "other")]), None);
    assert_eq!(lookup(&r, d, &[("tenant", "acme")]), None);
    assert_eq!(lookup(&r, d, &[("client", "mobile"), ("x", "y")]), None);
    assert_eq!(
        lookup(&r, d, &[("plan", "gold"), ("feature", "other")]),
        None
    );
    assert_eq!(lookup(&r, d, &[]), None);
    assert_eq!(
        lookup(&r, d, &[("tenant", "acme"), ("path", "/cart")]),
        found(4, Second, "shop.tenant_acme.path")
    );
    assert_eq!(
        lookup(&r, d, &[("tenant", "acme"), ("path", "/checkout")]),
        found(8, Second, "shop.tenant_acme.path_/checkout")
    );
    assert_eq!(
        lookup(&r, d, &[("client", "web")]),
        found(40, Minute, "shop.client")
    );
    assert_eq!(
        lookup(&r, d, &[("client", "mobile")]),
        found(60, Minute, "shop.client_mobile")
    );
    // A value listed without a limit shields it from the key's default.
    assert_eq!(lookup(&r, d, &[("client", "monitor")]), None);
    assert_eq!(
        lookup(&r, d, &[("region", "eu")]),
        found(2, Hour, "shop.region")
    );
    let account = r.domains[d].find([("account", "a1")].into_iter()).unwrap();
    assert_eq!(account.limit.name.as_deref(), Some("per_account"));
    assert_eq!(
        lookup(&r, d, &[("plan", "gold"), ("feature", "export")]),
        found(24, Day, "shop.plan_gold.feature_export")
    );
    let internal = r.domains[d].find([("internal", "x")].into_iter()).unwrap();
    assert!(internal.limit.unlimited);
    // detailed_metric: the value as sent enters the statistics' name.
    assert_eq!(
        lookup(&r, d, &[("partner", "p1")]),
        found(90, Minute, "shop.partner_p1")
    );
    assert_eq!(
        lookup(&r, d, &[("partner", "p2")]).unwrap().stat_key,
        "shop.partner_p2"
    );
}

#[test]
fn shadow_mode_is_per_rule() {
    let r = load("accepted/shadow.yaml");
    let shadow = |entries: &[(&str, &str)]| {
        r.domains["shop"]
            .find(entries.iter().copied())
            .unwrap()
            .shadow_mode
    };
    assert!(!shadow(&[("tenant", "acme"), ("path", "/cart")]));
    assert!(shadow(&[("tenant", "acme"), ("path", "/checkout")]));
    assert!(shadow(&[("client", "web")]));
    assert!(!shadow(&[("client", "mobile")]));
}

#[test]
fn wildcards_anywhere_in_a_value() {
    let r = load("accepted/wildcards.yaml");
    let d = "shop";
    let key = |e: &[(&str, &str)]| lookup(&r, d, e).map(|f| f.stat_key);
    // A key without a value: any value, one statistics' name.
    assert_eq!(key(&[("anything", "1")]).as_deref(), Some("shop.anything"));
    assert_eq!(key(&[("anything", "2")]).as_deref(), Some("shop.anything"));
    // A trailing `*`; the statistics' name keeps the pattern.
    assert_eq!(key(&[("sku", "tea-1")]).as_deref(), Some("shop.sku_tea-*"));
    assert_eq!(key(&[("sku", "tea-")]).as_deref(), Some("shop.sku_tea-*"));
    assert_eq!(
        key(&[("store", "paris"), ("sku", "cake-9")]).as_deref(),
        Some("shop.store_paris.sku_cake-*")
    );
    assert_eq!(key(&[("sku", "coffee")]), None);
    // No `*`, no prefix match.
    assert_eq!(key(&[("exact", "tea1")]), None);
    // A `*` in the middle, matching the empty run too.
    for v in ["abz", "a123z", "az"] {
        assert_eq!(
            key(&[("between", v)]).as_deref(),
            Some("shop.between_a*z"),
            "{v}"
        );
    }
    for v in ["ab", "baz", "za"] {
        assert_eq!(key(&[("between", v)]), None, "{v}");
    }
    // Several, in order.
    for v in ["red1green2blue", "redgreenblue"] {
        assert_eq!(
            key(&[("several", v)]).as_deref(),
            Some("shop.several_red*green*blue"),
            "{v}"
        );
    }
    for v in ["red1blue", "green-blue", "redbluegreenblue2"] {
        assert_eq!(key(&[("several", v)]), None, "{v}");
    }
}

#[test]
fn share_threshold_shares_one_count_per_pattern() {
    let r = load("accepted/shared.yaml");
    let d = "shop";
    let key = |e: &[(&str, &str)]| lookup(&r, d, e).unwrap().stat_key;
    for v in ["docs/a", "docs/b/c", "docs/"] {
        assert_eq!(
            lookup(&r, d, &[("doc", v)]),
            found(100, Unit::Minute, "shop.doc_docs/*")
        );
        assert_eq!(counted(&r, d, &[("doc", v)]), ["docs/*"]);
    }
    // Sharing wins over value_to_metric in the name.
    assert_eq!(
        key(&[("api", "v1/x"), ("verb", "GET")]),
        "shop.api_v1/*.verb"
    );
    assert_eq!(
        counted(&r, d, &[("api", "v1/x"), ("verb", "GET")]),
        ["v1/*", "GET"]
    );
    // And over detailed_metric, for the shared entry.
    assert_eq!(
        key(&[("backend", "pod-7"), ("call", "get")]),
        "shop.backend_pod-*.call_get"
    );
    // Nested.
    assert_eq!(
        lookup(&r, d, &[("team", "blue"), ("doc", "drafts/1")]),
        found(200, Unit::Minute, "shop.team_blue.doc_drafts/*")
    );
    assert_eq!(
        counted(&r, d, &[("team", "blue"), ("doc", "drafts/1")]),
        ["blue", "drafts/*"]
    );
    // The same key at two levels.
    assert_eq!(
        lookup(&r, d, &[("doc", "public/1"), ("doc", "drafts/2")]),
        found(300, Unit::Minute, "shop.doc_public/*.doc_drafts/*")
    );
    assert_eq!(
        counted(&r, d, &[("doc", "public/1"), ("doc", "drafts/2")]),
        ["public/*", "drafts/*"]
    );
    // A shared wildcard above one that is not: only the first shares.
    let e = [("bucket", "b/1"), ("object", "o/2"), ("kind", "pdf")];
    assert_eq!(key(&e), "shop.bucket_b/*.object_o/*.kind");
    assert_eq!(counted(&r, d, &e), ["b/*", "o/2", "pdf"]);
    let e = [("org", "org/x"), ("repo", "repo/y"), ("op", "push")];
    assert_eq!(key(&e), "shop.org_org/*.repo_repo/*.op");
    assert_eq!(counted(&r, d, &e), ["org/*", "repo/*", "push"]);
    // A value given exactly keeps its own limit and count.
    assert_eq!(
        lookup(&r, d, &[("item", "box1")]),
        found(50, Unit::Minute, "shop.item_box1")
    );
    assert_eq!(counted(&r, d, &[("item", "box1")]), ["box1"]);
    for v in ["box2", "box", "boxes"] {
        assert_eq!(
            lookup(&r, d, &[("item", v)]),
            found(100, Unit::Minute, "shop.item_box*")
        );
        assert_eq!(counted(&r, d, &[("item", v)]), ["box*"]);
    }
    // Middle and several wildcards.
    for v in ["/v1/users", "/v22/users"] {
        assert_eq!(key(&[("route", v)]), "shop.route_/v*/users");
        assert_eq!(counted(&r, d, &[("route", v)]), ["/v*/users"]);
    }
    assert_eq!(lookup(&r, d, &[("route", "/v1/orders")]), None);
    for v in ["a1b2c", "abc"] {
        assert_eq!(key(&[("rpc", v)]), "shop.rpc_a*b*c");
    }
    assert_eq!(lookup(&r, d, &[("rpc", "a1c")]), None);
    assert_eq!(key(&[("route2", "/v3/orders")]), "shop.route2_/v*/orders");
    let e = [("env", "e1live"), ("table", "tAx")];
    assert_eq!(key(&e), "shop.env_e*live.table_t*x");
    assert_eq!(counted(&r, d, &e), ["e*live", "t*x"]);
    assert_eq!(key(&[("env", "e99live"), ("table", "tBBx")]), key(&e));
}

#[test]
fn metadata_is_kept_on_its_rule() {
    let r = load("accepted/metadata.yaml");
    let rule = |e: &[(&str, &str)]| r.domains["shop"].find(e.iter().copied()).unwrap().clone();
    let owner = rule(&[("tenant", "acme"), ("path", "/cart")]);
    assert_eq!(
        owner.metadata,
        struct_of(serde_json::json!({"owner": "storefront"}))
    );
    assert!(rule(&[("tenant", "acme"), ("path", "/checkout")])
        .metadata
        .is_none());
    let client = rule(&[("client", "web")]);
    assert_eq!(
        client.metadata,
        struct_of(
            serde_json::json!({"quota": {"owner": "payments", "weight": 2, "ratio": 0.5, "tags": ["a", "7"], "enabled": true}})
        )
    );
}

/// The response's form of a `metadata` written as JSON.
fn struct_of(v: serde_json::Value) -> Option<prost_types::Struct> {
    v.as_object().map(crate::dynamic_metadata::from_config)
}

#[test]
fn quota_mode_is_kept_on_its_rule() {
    let r = load("accepted/quota.yaml");
    assert!(
        r.domains["shop"]
            .find([("budget", "b")].into_iter())
            .unwrap()
            .quota_mode
    );
}

#[test]
fn empty_descriptors_load() {
    let r = load("accepted/no_descriptors.yaml");
    assert!(r.domains["idle"].rules().next().is_none());
    assert_eq!(lookup(&r, "idle", &[("k", "v")]), None);
}

#[test]
fn refused_files_name_what_and_where() {
    use ConfigErrorKind as K;
    type Check = fn(&ConfigErrorKind) -> bool;
    let cases: &[(&str, usize, Check)] = &[
        (
            "bad_unit.yaml",
            6,
            |k| matches!(k, K::UnknownUnit(u) if u == "fortnight"),
        ),
        ("not_yaml.yaml", 1, |k| matches!(k, K::Syntax(_))),
        (
            "duplicate_descriptor.yaml",
            6,
            |k| matches!(k, K::DuplicateDescriptor { path, first } if path == "shop.client_mobile" && first.ends_with(":3")),
        ),
        ("no_domain.yaml", 1, |k| matches!(k, K::EmptyDomain)),
        ("no_key.yaml", 3, |k| matches!(k, K::EmptyKey)),
        ("misspelled_block.yaml", 5, |k| matches!(k, K::Shape { .. })),
        ("misspelled_field.yaml", 7, |k| matches!(k, K::Shape { .. })),
        ("list_of_scalars.yaml", 3, |k| matches!(k, K::Shape { .. })),
        ("numeric_key.yaml", 1, |k| matches!(k, K::Shape { .. })),
        ("replaces_blank.yaml", 10, |k| matches!(k, K::EmptyReplaces)),
        (
            "replaces_itself.yaml",
            10,
            |k| matches!(k, K::ReplacesItself(n) if n == "mine"),
        ),
        ("unlimited_with_unit.yaml", 6, |k| {
            matches!(k, K::UnitWithUnlimited)
        }),
        (
            "share_without_wildcard.yaml",
            3,
            |k| matches!(k, K::ShareThresholdWithoutWildcard(c) if c == "doc_docs"),
        ),
    ];
    for (name, line, check) in cases {
        let path = fixture(&format!("refused/{name}"));
        let e = Config::load(&path, false).expect_err(name);
        assert!(check(&e.kind), "{name}: {e}");
        assert_eq!(
            (e.file.as_path(), e.line),
            (path.as_path(), *line),
            "{name}: {e}"
        );
        assert!(
            e.to_string()
                .starts_with(&format!("{}:{line}: ", path.display())),
            "{e}"
        );
    }
}

#[test]
fn a_domain_in_two_files_is_refused_unless_merged() {
    for dir in ["merge", "twice"] {
        let e = Config::load(&fixture(dir), false).unwrap_err();
        assert!(
            matches!(e.kind, ConfigErrorKind::DuplicateDomain { ref domain, .. } if domain == "shop"),
            "{e}"
        );
    }
    let r = compile(&Config::load(&fixture("merge"), true).unwrap());
    assert_eq!(
        lookup(&r, "shop", &[("client", "mobile")]),
        found(10, Unit::Minute, "shop.client_mobile")
    );
    assert_eq!(
        lookup(&r, "shop", &[("client", "desktop")]),
        found(20, Unit::Minute, "shop.client_desktop")
    );
    let r = compile(&Config::load(&fixture("twice"), true).unwrap());
    assert_eq!(
        lookup(&r, "shop", &[("client", "x")]),
        found(40, Unit::Minute, "shop.client")
    );
}

#[test]
fn merged_files_may_not_define_one_descriptor_twice() {
    let dir = std::env::temp_dir().join(format!("funnel-server-merge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(fixture("merge/1-first.yaml")).unwrap();
    std::fs::write(dir.join("a.yaml"), &text).unwrap();
    std::fs::write(dir.join("b.yaml"), &text).unwrap();
    let e = Config::load(&dir, true).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        (e.file.file_name().unwrap(), e.line),
        ("b.yaml".as_ref(), 4),
        "{e}"
    );
    assert!(
        matches!(e.kind, ConfigErrorKind::DuplicateDescriptor { ref path, .. } if path == "shop.client_mobile"),
        "{e}"
    );
}

const DETAILED: &str = "domain: deep
descriptors:
  - key: a
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: b
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: d
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: e
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: e
    value: fixed
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: f
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: g
        detailed_metric: true
      - key: g
        value: chosen
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
";

#[test]
fn detailed_metric_names_statistics_by_the_values_sent() {
    let r = inline(DETAILED);
    let key = |e: &[(&str, &str)]| lookup(&r, "deep", e).unwrap().stat_key;
    assert_eq!(key(&[("a", "1")]), "deep.a_1");
    assert_eq!(key(&[("a", "1"), ("b", "2")]), "deep.a_1.b_2");
    assert_eq!(key(&[("c", "1")]), "deep.c");
    assert_eq!(key(&[("c", "1"), ("d", "2")]), "deep.c.d");
    assert_eq!(key(&[("e", "other")]), "deep.e_other");
    assert_eq!(key(&[("f", "x")]), "deep.f_x");
    assert_eq!(key(&[("f", "x"), ("g", "chosen")]), "deep.f_x.g_chosen");
    // An empty value still takes its separator.
    assert_eq!(key(&[("a", "")]), "deep.a_");
}

#[test]
fn value_to_metric_names_statistics_by_the_values_matched() {
    let r = inline(
        "domain: v
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        descriptors:
          - key: subject
            rate_limit: {unit: minute, requests_per_unit: 60}
          - key: detail
            detailed_metric: true
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: k1
    value_to_metric: true
    descriptors:
      - key: k2
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: m1
    descriptors:
      - key: m2
        value_to_metric: true
        descriptors:
          - key: m3
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: n1
    descriptors:
      - key: n2
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: api
    value_to_metric: true
    descriptors:
      - key: verb
        value: GET
        value_to_metric: true
        descriptors:
          - key: who
            rate_limit: {unit: minute, requests_per_unit: 60}
      - key: verb
        value: POST
        value_to_metric: true
        descriptors:
          - key: who
            rate_limit: {unit: minute, requests_per_unit: 30}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: thing
            rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plain
    value: p*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: runtime
    value: p*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: shared
    value: p*
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: mid
    value: x*y*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: midrun
    value: x*y*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: wild
    value: w*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - key: last
            rate_limit: {unit: minute, requests_per_unit: 20}
",
    );
    let key = |e: &[(&str, &str)]| lookup(&r, "v", e).unwrap().stat_key;
    assert_eq!(
        key(&[("route", "draw"), ("method", "GET"), ("subject", "123")]),
        "v.route_draw.method_GET.subject"
    );
    // detailed_metric on the rule wins.
    assert_eq!(
        key(&[("route", "draw"), ("method", "GET"), ("detail", "123")]),
        "v.route_draw.method_GET.detail_123"
    );
    assert_eq!(key(&[("k1", "A"), ("k2", "foo")]), "v.k1_A.k2");
    assert_eq!(
        key(&[("m1", "X"), ("m2", "Y"), ("m3", "Z")]),
        "v.m1.m2_Y.m3"
    );
    assert_eq!(key(&[("n1", "X"), ("n2", "Y")]), "v.n1.n2");
    assert_eq!(
        key(&[("api", "a"), ("verb", "GET"), ("who", "u1")]),
        "v.api_a.verb_GET.who"
    );
    let post = lookup(&r, "v", &[("api", "a"), ("verb", "POST"), ("who", "u2")]).unwrap();
    assert_eq!(
        (post.requests_per_unit, post.stat_key.as_str()),
        (30, "v.api_a.verb_POST.who")
    );
    assert_eq!(
        key(&[("user", "alice"), ("action", "readfile"), ("thing", "docs")]),
        "v.user_alice.action_readfile.thing"
    );
    // Empty values: no separator.
    assert_eq!(
        key(&[("route", ""), ("method", "GET"), ("subject", "1")]),
        "v.route.method_GET.subject"
    );
    assert_eq!(
        key(&[("route", ""), ("method", ""), ("subject", "1")]),
        "v.route.method.subject"
    );
    // Wildcards: the pattern, the value with value_to_metric, the pattern again when shared.
    assert_eq!(key(&[("plain", "p1")]), "v.plain_p*");
    assert_eq!(key(&[("runtime", "p1")]), "v.runtime_p1");
    assert_eq!(key(&[("shared", "p1")]), "v.shared_p*");
    assert_eq!(key(&[("mid", "x1y2")]), "v.mid_x*y*");
    assert_eq!(key(&[("midrun", "x1y2")]), "v.midrun_x1y2");
    assert_eq!(
        key(&[("wild", "w1"), ("other", "bar"), ("last", "X")]),
        "v.wild_w*.other_bar.last"
    );
}

#[test]
fn what_envoyproxy_accepts_quietly_loads() {
    let r = inline(
        "domain: q
descriptors:
  # No requests_per_unit: zero, every request over the limit.
  - key: blocked
    rate_limit: {unit: second}
  # An unlimited rule whose unit is not a unit: the unit is never read.
  - key: open
    rate_limit: {unlimited: true, unit: whenever}
  # replaces may name a rule that does not exist.
  - key: ghost
    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: nobody}]}
  # A value left empty is no value.
  - key: blank
    value: \"\"
    rate_limit: {unit: second, requests_per_unit: 2}
",
    );
    let rule = |k: &str| r.domains["q"].find([(k, "x")].into_iter()).unwrap().clone();
    assert_eq!(rule("blocked").limit.requests_per_unit, 0);
    assert!(rule("open").limit.unlimited);
    assert_eq!(rule("ghost").limit.replaces, ["nobody"]);
    assert_eq!(rule("blank").stat_key, "blank");
}
