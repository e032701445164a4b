//! The server binary, started as a process, called over loopback with a gRPC client: what a
//! request is answered, descriptor by descriptor.

use crate::common::*;
use tonic::Code;

const CONFIG: &str = r#"
domain: shop
descriptors:
  # Each client its own 3 per minute (GCRA, burst = 3).
  - key: client
    rate_limit:
      unit: minute
      requests_per_unit: 3
  # One route, 1 per minute, whatever else.
  - key: route
    value: /checkout
    rate_limit:
      name: checkout
      unit: minute
      requests_per_unit: 1
  # Nested: a database's users table, per user.
  - key: database
    value: users
    rate_limit:
      unit: minute
      requests_per_unit: 100
    descriptors:
      - key: user
        rate_limit:
          unit: hour
          requests_per_unit: 2
      - key: user
        value: admin
        rate_limit:
          unlimited: true
  - key: banned
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: trial
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  # A value prefix.
  - key: path
    value: /api/*
    rate_limit:
      unit: minute
      requests_per_unit: 2
  # A replaced rule: when both match, `vip` wins and `checkout` is not applied.
  - key: tier
    value: vip
    rate_limit:
      unit: minute
      requests_per_unit: 5
      replaces:
        - name: checkout
  - key: windowed
    rate_limit:
      unit: minute
      requests_per_unit: 4
      algorithm: fixed_window
  - key: bursty
    rate_limit:
      unit: hour
      requests_per_unit: 3600
      burst: 2
"#;

fn start() -> Server {
    let dir = scratch("grpc");
    let path = write_config(&dir, "shop.yaml", CONFIG);
    Server::start(&path, &["--no-watch"])
}

#[tokio::test]
async fn each_value_of_a_key_gets_its_own_limit() {
    let s = start();
    let mut c = s.client().await;
    let a = desc(&[("client", "a")]);
    assert_eq!(admitted(&mut c, "shop", &a, 5).await, 3);
    assert_eq!(
        admitted(&mut c, "shop", &desc(&[("client", "b")]), 5).await,
        3
    );
    let r = call(&mut c, req("shop", vec![a])).await;
    let st = &r.statuses[0];
    assert_eq!((st.code, st.limit_remaining), (OVER, 0));
    let limit = st.current_limit.as_ref().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (3, 2)); // MINUTE = 2
                                                               // The wait is one emission interval at most: 20 s.
    let wait = st.duration_until_reset.as_ref().unwrap();
    assert!(
        wait.seconds <= 20 && (wait.seconds, wait.nanos) > (0, 0),
        "{wait:?}"
    );
}

#[tokio::test]
async fn nested_descriptors_match_the_most_specific_rule() {
    let s = start();
    let mut c = s.client().await;
    let table = desc(&[("database", "users")]);
    let user = desc(&[("database", "users"), ("user", "ann")]);
    let admin = desc(&[("database", "users"), ("user", "admin")]);
    assert_eq!(admitted(&mut c, "shop", &user, 4).await, 2);
    let r = call(&mut c, req("shop", vec![admin.clone(), table])).await;
    assert_eq!(codes(&r), (OK, vec![OK, OK]));
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX, "unlimited");
    assert_eq!(r.statuses[1].limit_remaining, 99);
    assert_eq!(
        r.statuses[1]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        100
    );
    // A walk that stops before the last entry matches nothing: OK, no limit shown.
    let r = call(
        &mut c,
        req(
            "shop",
            vec![desc(&[("database", "orders"), ("user", "ann")])],
        ),
    )
    .await;
    assert_eq!(codes(&r), (OK, vec![OK]));
    assert!(r.statuses[0].current_limit.is_none());
}

#[tokio::test]
async fn a_request_denied_by_one_descriptor_is_charged_to_none() {
    let s = start();
    let mut c = s.client().await;
    let client = desc(&[("client", "c")]);
    let route = desc(&[("route", "/checkout")]);
    let both = || req("shop", vec![client.clone(), route.clone()]);
    assert_eq!(codes(&call(&mut c, both()).await), (OK, vec![OK, OK]));
    // The route is spent: denied, and the client's limit is not charged for it.
    for _ in 0..5 {
        let r = call(&mut c, both()).await;
        assert_eq!(codes(&r), (OVER, vec![OK, OVER]));
        assert_eq!(r.statuses[0].limit_remaining, 2, "the client keeps 2 of 3");
    }
    assert_eq!(admitted(&mut c, "shop", &client, 5).await, 2);
}

#[tokio::test]
async fn hits_addend_zero_checks_without_charging() {
    let s = start();
    let mut c = s.client().await;
    let d = desc(&[("client", "z")]);
    for _ in 0..10 {
        let r = call(&mut c, req("shop", vec![with_hits(d.clone(), 0)])).await;
        assert_eq!(codes(&r), (OK, vec![OK]));
        assert_eq!(r.statuses[0].limit_remaining, 3);
    }
    // A descriptor's own hits_addend: 2 units, then 1 fits, then nothing.
    let r = call(&mut c, req("shop", vec![with_hits(d.clone(), 2)])).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 1));
    let r = call(&mut c, req("shop", vec![with_hits(d.clone(), 2)])).await;
    assert_eq!(r.overall_code, OVER, "2 units do not fit in 1");
    // The request's hits_addend applies to descriptors without their own.
    let mut r2 = req("shop", vec![d.clone()]);
    r2.hits_addend = 1;
    assert_eq!(call(&mut c, r2).await.overall_code, OK);
    let r = call(&mut c, req("shop", vec![with_hits(d, 0)])).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
}

#[tokio::test]
async fn shadow_mode_answers_ok_and_counts() {
    let s = start();
    let mut c = s.client().await;
    let d = desc(&[("trial", "t1")]);
    assert_eq!(admitted(&mut c, "shop", &d, 4).await, 4);
    assert_eq!(
        s.metric(r#"ratelimit_service_rate_limit_shadow_mode_total{domain="shop",key="trial"}"#),
        3
    );
    assert_eq!(
        s.metric(r#"ratelimit_service_rate_limit_over_limit_total{domain="shop",key="trial"}"#),
        3
    );
    assert_eq!(
        s.metric(r#"ratelimit_service_rate_limit_total_hits_total{domain="shop",key="trial"}"#),
        4
    );
    assert!(
        s.log().contains("shadow mode"),
        "a shadowed denial is logged"
    );
}

#[tokio::test]
async fn an_unknown_domain_or_an_unmatched_descriptor_is_ok_and_uncharged() {
    let s = start();
    let mut c = s.client().await;
    let r = call(&mut c, req("nowhere", vec![desc(&[("client", "a")])])).await;
    assert_eq!(codes(&r), (OK, vec![OK]));
    assert!(r.statuses[0].current_limit.is_none());
    let r = call(&mut c, req("shop", vec![desc(&[("color", "blue")])])).await;
    assert_eq!(codes(&r), (OK, vec![OK]));
    assert!(r.statuses[0].current_limit.is_none());
}

#[tokio::test]
async fn zero_requests_per_unit_blocks_and_a_prefix_value_matches() {
    let s = start();
    let mut c = s.client().await;
    let r = call(
        &mut c,
        req(
            "shop",
            vec![desc(&[("banned", "x")]), desc(&[("client", "q")])],
        ),
    )
    .await;
    assert_eq!(codes(&r), (OVER, vec![OVER, OK]));
    assert_eq!(
        r.statuses[1].limit_remaining, 3,
        "nothing charged to the client"
    );
    assert_eq!(
        admitted(&mut c, "shop", &desc(&[("path", "/api/users")]), 3).await,
        2
    );
    assert_eq!(
        admitted(&mut c, "shop", &desc(&[("path", "/api/orders")]), 3).await,
        2
    );
    assert_eq!(
        admitted(&mut c, "shop", &desc(&[("path", "/static/x")]), 3).await,
        3
    );
}

#[tokio::test]
async fn a_replacing_rule_drops_the_replaced_one() {
    let s = start();
    let mut c = s.client().await;
    let both = || {
        req(
            "shop",
            vec![desc(&[("route", "/checkout")]), desc(&[("tier", "vip")])],
        )
    };
    for _ in 0..5 {
        let r = call(&mut c, both()).await;
        assert_eq!(codes(&r), (OK, vec![OK, OK]));
        assert!(
            r.statuses[0].current_limit.is_none(),
            "the replaced rule is not applied"
        );
    }
    assert_eq!(call(&mut c, both()).await.overall_code, OVER);
}

#[tokio::test]
async fn a_limit_sent_with_the_descriptor_replaces_the_configured_one() {
    let s = start();
    let mut c = s.client().await;
    let d = with_limit(desc(&[("client", "o")]), 5, 3); // 5 per HOUR
    assert_eq!(admitted(&mut c, "shop", &d, 7).await, 5);
    let r = call(&mut c, req("shop", vec![d])).await;
    let l = r.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!((l.requests_per_unit, l.unit), (5, 3));
    // The configured limit for the same value is untouched.
    assert_eq!(
        admitted(&mut c, "shop", &desc(&[("client", "o")]), 4).await,
        3
    );
}

#[tokio::test]
async fn burst_and_fixed_windows_count_as_configured() {
    let s = start();
    let mut c = s.client().await;
    // 3,600 an hour but at most 2 at once.
    assert_eq!(
        admitted(&mut c, "shop", &desc(&[("bursty", "b")]), 4).await,
        2
    );
    // A fixed window of a minute aligned on Unix minutes, as envoyproxy/ratelimit counts.
    let d = desc(&[("windowed", "w")]);
    let r = call(&mut c, req("shop", vec![d.clone()])).await;
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let reset = r.statuses[0].duration_until_reset.as_ref().unwrap();
    let expected = 60 - unix.as_secs() % 60;
    assert!(
        (reset.seconds as u64).abs_diff(expected) <= 1,
        "the window ends on the next Unix minute: {reset:?}, expected ~{expected}s"
    );
    if expected > 2 {
        // Not racing a minute boundary: the window holds 4.
        assert_eq!(r.statuses[0].limit_remaining, 3);
        assert_eq!(admitted(&mut c, "shop", &d, 5).await, 3);
    }
}

#[tokio::test]
async fn bad_requests_are_invalid_argument() {
    let s = start();
    let mut c = s.client().await;
    let long = "x".repeat(1025);
    let too_many: Vec<_> = (0..65)
        .map(|i| desc(&[("client", &i.to_string())]))
        .collect();
    let too_deep: Vec<(&str, &str)> = (0..17).map(|_| ("k", "v")).collect();
    let bad = vec![
        ("empty domain", req("", vec![desc(&[("client", "a")])])),
        ("no descriptors", req("shop", vec![])),
        ("65 descriptors", req("shop", too_many)),
        ("17 entries", req("shop", vec![desc(&too_deep)])),
        ("long value", req("shop", vec![desc(&[("client", &long)])])),
        ("long key", req("shop", vec![desc(&[(&long, "v")])])),
        ("empty key", req("shop", vec![desc(&[("", "v")])])),
        (
            "long domain",
            req(&"d".repeat(257), vec![desc(&[("client", "a")])]),
        ),
        (
            "unknown unit",
            req("shop", vec![with_limit(desc(&[("client", "a")]), 5, 0)]),
        ),
    ];
    for (what, r) in bad {
        let e = c.should_rate_limit(r).await.expect_err(what);
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e:?}");
    }
    // A request above the size limit is refused by the transport, before any decision.
    let huge: Vec<_> = (0..60)
        .map(|_| desc(&[("client", &"y".repeat(1000)), ("k", &"z".repeat(1000))]))
        .collect();
    assert!(c.should_rate_limit(req("shop", huge)).await.is_err());
    assert_eq!(s.metric("funnel_server_invalid_requests_total"), 9);
    // The server is still up.
    assert_eq!(
        call(&mut c, req("shop", vec![desc(&[("client", "fine")])]))
            .await
            .overall_code,
        OK
    );
}

#[tokio::test]
async fn a_flood_of_distinct_values_stays_within_the_table_bound() {
    let dir = scratch("bound");
    let path = write_config(&dir, "shop.yaml", CONFIG);
    let s = Server::start(&path, &["--no-watch", "--max-keys", "2000"]);
    let mut c = s.client().await;
    for chunk in 0..160 {
        let ds: Vec<_> = (0..64)
            .map(|i| desc(&[("client", &format!("v{chunk}-{i}"))]))
            .collect();
        assert_eq!(call(&mut c, req("shop", ds)).await.overall_code, OK);
    }
    let keys = s.metric(r#"funnel_server_table_keys{domain="shop",key="client"}"#);
    let max = s.metric(r#"funnel_server_table_max_keys{domain="shop",key="client"}"#);
    assert!(
        keys <= max && max <= 4_096,
        "keys {keys}, table bound {max}"
    );
    let evicted = s.metric(r#"funnel_server_table_evictions_total{domain="shop",key="client"}"#);
    assert!(evicted > 0, "keys {keys}, bound {max}, evictions {evicted}");
}

#[tokio::test]
async fn a_window_denial_rolls_back_the_gcra_charge() {
    let s = start();
    let mut c = s.client().await;
    let w = desc(&[("windowed", "rb")]);
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    if 60 - unix.as_secs() % 60 < 3 {
        return; // too close to a minute boundary for the window to hold still
    }
    assert_eq!(admitted(&mut c, "shop", &w, 4).await, 4);
    let client = desc(&[("client", "rb")]);
    for _ in 0..3 {
        let r = call(&mut c, req("shop", vec![client.clone(), w.clone()])).await;
        assert_eq!(codes(&r), (OVER, vec![OK, OVER]));
        assert_eq!(
            r.statuses[0].limit_remaining, 3,
            "the GCRA charge was rolled back"
        );
    }
}

#[tokio::test]
async fn detailed_metric_and_response_headers() {
    let dir = scratch("detailed");
    let path = write_config(
        &dir,
        "d.yaml",
        "domain: d\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {name: per_user, unit: minute, requests_per_unit: 2}\n",
    );
    let s = Server::start(&path, &["--no-watch", "--response-headers"]);
    let mut c = s.client().await;
    let r = call(&mut c, req("d", vec![desc(&[("user", "ann")])])).await;
    let headers: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(
        headers,
        vec![
            (
                "RateLimit-Policy".to_owned(),
                "\"per_user\";q=2;w=60".to_owned()
            ),
            ("RateLimit".to_owned(), "\"per_user\";r=1;t=30".to_owned()),
        ]
    );
    call(&mut c, req("d", vec![desc(&[("user", "bob")])])).await;
    call(&mut c, req("d", vec![desc(&[("user", "bob")])])).await;
    call(&mut c, req("d", vec![desc(&[("user", "bob")])])).await;
    assert_eq!(
        s.metric(
            r#"ratelimit_service_rate_limit_total_hits_total{domain="d",key="user",value="user_bob"}"#
        ),
        3
    );
    assert_eq!(
        s.metric(
            r#"ratelimit_service_rate_limit_over_limit_total{domain="d",key="user",value="user_bob"}"#
        ),
        1
    );
    assert_eq!(
        s.metric(
            r#"ratelimit_service_rate_limit_total_hits_total{domain="d",key="user",value="user_ann"}"#
        ),
        1
    );
    assert_eq!(
        s.metric(r#"ratelimit_service_rate_limit_total_hits_total{domain="d",key="user"}"#),
        4
    );
}

#[tokio::test]
async fn the_recent_clock_keeps_limits_and_bad_intervals_refuse_to_start() {
    let dir = scratch("grpc-recent");
    let path = write_config(&dir, "shop.yaml", CONFIG);
    let s = Server::start(&path, &["--no-watch", "--recent-clock", "500us"]);
    let mut c = s.client().await;
    let a = desc(&[("client", "a")]);
    assert_eq!(admitted(&mut c, "shop", &a, 5).await, 3);
    for bad in ["0us", "2s", "1.5ms", "fast"] {
        let err = Server::try_start(&path, &["--no-watch", "--recent-clock", bad])
            .err()
            .unwrap_or_else(|| panic!("--recent-clock {bad} started"));
        assert!(err.contains("recent-clock"), "{bad}: {err}");
    }
}
