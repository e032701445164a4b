//! Statistics: the Prometheus exposition read back by a standard parser (every family with
//! HELP and TYPE, the values the calls made), and statsd lines with envoyproxy/ratelimit's
//! names received on a UDP socket of the test's.

use crate::common::*;

pub const CONFIG: &str = "domain: shop
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /cart
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 1}
";

#[tokio::test]
async fn the_exposition_parses_with_help_and_type_on_every_family() {
    let dir = scratch("metrics");
    let s = Server::start(&write_config(&dir, "shop.yaml", CONFIG), &["--no-watch"]);
    let mut c = s.client().await;
    for _ in 0..3 {
        call(&mut c, req("shop", vec![desc(&[("client", "ann")])])).await;
    }
    let (code, text) = s.get("/metrics");
    assert_eq!(code, 200);
    let scrape =
        prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("parses");
    // Every family has HELP, and every sample belongs to a family with TYPE.
    let typed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for family in &typed {
        assert!(
            scrape.docs.contains_key(*family),
            "{family} has no HELP in\n{text}"
        );
    }
    for sample in &scrape.samples {
        assert!(
            typed.iter().any(|f| sample.metric.starts_with(f)),
            "{} has no TYPE",
            sample.metric
        );
    }
    let value = |metric: &str, labels: &[(&str, &str)]| -> f64 {
        let found = scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .unwrap_or_else(|| panic!("no {metric} {labels:?} in\n{text}"));
        match found.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => panic!("{metric} is not a number"),
        }
    };
    let client = [("domain", "shop"), ("key", "client")];
    assert_eq!(
        value("ratelimit_service_rate_limit_total_hits_total", &client),
        3.0
    );
    assert_eq!(
        value("ratelimit_service_rate_limit_within_limit_total", &client),
        2.0
    );
    assert_eq!(
        value("ratelimit_service_rate_limit_over_limit_total", &client),
        1.0
    );
    assert_eq!(
        value("ratelimit_service_config_load_success_total", &[]),
        1.0
    );
    assert_eq!(value("funnel_server_requests_total", &[]), 3.0);
    assert_eq!(value("funnel_server_table_keys", &client), 1.0);
    let nested = [("domain", "shop"), ("key", "path_/cart.user")];
    assert_eq!(
        value("ratelimit_service_rate_limit_total_hits_total", &nested),
        0.0
    );
}

#[tokio::test]
async fn statsd_receives_envoyproxy_names_as_counter_increases() {
    let dir = scratch("statsd");
    let (s, socket) = start_with_statsd(&write_config(&dir, "shop.yaml", CONFIG), &[]);
    statsd_calls(&s).await;
    assert_received(
        &socket,
        &[
            "ratelimit.service.config_load_success:1|c",
            "ratelimit.service.rate_limit.shop.client.total_hits:3|c",
            "ratelimit.service.rate_limit.shop.client.within_limit:2|c",
            "ratelimit.service.rate_limit.shop.client.over_limit:1|c",
            "ratelimit.service.rate_limit.shop.path_/cart.user.total_hits:1|c",
            // The detailed value, its `:` cleaned as envoyproxy/ratelimit cleans names.
            "ratelimit.service.rate_limit.shop.path_/cart.user_bo_b.total_hits:1|c",
            "ratelimit_server.ShouldRateLimit.total_requests:4|c",
        ],
    );
    // Increases, not totals: two more calls arrive as 2, and nothing unchanged is resent.
    let mut c = s.client().await;
    for _ in 0..2 {
        call(&mut c, req("shop", vec![desc(&[("client", "other")])])).await;
    }
    let lines = receive_until(
        &socket,
        &["ratelimit.service.rate_limit.shop.client.total_hits:2|c"],
    );
    assert!(
        lines
            .iter()
            .any(|l| l == "ratelimit.service.rate_limit.shop.client.total_hits:2|c"),
        "{lines:#?}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("ratelimit.service.config_load_success")),
        "an unchanged counter was sent again: {lines:#?}"
    );
}
