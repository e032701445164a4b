//! The answers envoyproxy/ratelimit gives, from the binary over gRPC and `/json`: whole seconds
//! until reset, nothing remaining over the limit, a descriptor without entries, and the
//! switches `--shadow-mode`, `--quota-mode`, `--response-dynamic-metadata`,
//! `--limit-response-headers` (with its header names) and `--charge-denied`.

use crate::common::*;
use prost_types::value::Kind;

const CONFIG: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: plan
    value: free
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: plan
    value: paid
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: trial
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: everyone
    rate_limit:
      unlimited: true
"#;

fn start(extra: &[&str]) -> Server {
    let dir = scratch("answers");
    let path = write_config(&dir, "api.yaml", CONFIG);
    let mut args = vec!["--no-watch"];
    args.extend_from_slice(extra);
    Server::start(&path, &args)
}

fn headers(r: &proto::RateLimitResponse) -> Vec<(String, String)> {
    r.response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

#[tokio::test]
async fn over_the_limit_leaves_nothing_and_resets_in_whole_seconds() {
    let s = start(&[]);
    let mut c = s.client().await;
    // 6 asked of a limit of 5: over, 0 left (not the 5 still there).
    let r = call(
        &mut c,
        req("api", vec![with_hits(desc(&[("user", "u1")]), 6)]),
    )
    .await;
    assert_eq!(codes(&r), (OVER, vec![OVER]));
    assert_eq!(r.statuses[0].limit_remaining, 0);
    let wait = r.statuses[0].duration_until_reset.unwrap();
    assert_eq!(wait.nanos, 0, "whole seconds: {wait:?}");
    assert!((1..=60).contains(&wait.seconds), "{wait:?}");
    // Allowed: what is left, and a whole number of seconds too.
    let r = call(&mut c, req("api", vec![desc(&[("user", "u1")])])).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 4));
    let reset = r.statuses[0].duration_until_reset.unwrap();
    assert_eq!(reset.nanos, 0, "{reset:?}");
    assert!(
        (1..=12).contains(&reset.seconds),
        "one unit back in 12 s at most, rounded up: {reset:?}"
    );
    // A rule in shadow mode over its limit: OK, and 0 left.
    let trial = desc(&[("trial", "t")]);
    call(&mut c, req("api", vec![trial.clone()])).await;
    let r = call(&mut c, req("api", vec![trial])).await;
    assert_eq!(codes(&r), (OK, vec![OK]));
    assert_eq!(r.statuses[0].limit_remaining, 0);
}

#[tokio::test]
async fn a_descriptor_without_entries_is_ok_with_no_limit() {
    let s = start(&[]);
    let mut c = s.client().await;
    let r = call(
        &mut c,
        req("api", vec![desc(&[]), desc(&[("plan", "paid")])]),
    )
    .await;
    assert_eq!(codes(&r), (OK, vec![OK, OK]));
    assert_eq!(r.statuses[0].current_limit, None);
    assert_eq!(r.statuses[0].duration_until_reset, None);
    assert_eq!(r.statuses[1].limit_remaining, 1);
    let (code, body) = s.post_json(r#"{"domain":"api","descriptors":[{}]}"#);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""overallCode":"OK""#), "{body}");
}

#[tokio::test]
async fn global_shadow_mode_answers_ok_and_counts_the_overrides() {
    let s = start(&["--shadow-mode"]);
    let mut c = s.client().await;
    let free = desc(&[("plan", "free")]);
    assert_eq!(
        call(&mut c, req("api", vec![free.clone()]))
            .await
            .overall_code,
        OK
    );
    let r = call(
        &mut c,
        req("api", vec![free.clone(), desc(&[("user", "s")])]),
    )
    .await;
    assert_eq!(
        codes(&r),
        (OK, vec![OVER, OK]),
        "the statuses keep their codes"
    );
    let (code, body) = s.post_json(
        r#"{"domain":"api","descriptors":[{"entries":[{"key":"plan","value":"free"}]}]}"#,
    );
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""overallCode":"OK""#), "{body}");
    assert!(body.contains(r#""code":"OVER_LIMIT""#), "{body}");
    assert_eq!(s.metric("ratelimit_service_global_shadow_mode_total"), 2);
    assert_eq!(
        s.metric(r#"ratelimit_service_rate_limit_over_limit_total{domain="api",key="plan_free"}"#),
        2
    );
}

#[tokio::test]
async fn global_quota_mode_denies_only_when_every_descriptor_is_over() {
    let s = start(&["--quota-mode"]);
    let mut c = s.client().await;
    let (free, paid) = (desc(&[("plan", "free")]), desc(&[("plan", "paid")]));
    let both = || req("api", vec![free.clone(), paid.clone()]);
    assert_eq!(codes(&call(&mut c, both()).await), (OK, vec![OK, OK]));
    let r = call(&mut c, both()).await;
    assert_eq!(
        codes(&r),
        (OK, vec![OVER, OK]),
        "free is spent, paid has room"
    );
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert_eq!(codes(&call(&mut c, both()).await), (OVER, vec![OVER, OVER]));
    // Without quota mode the same state denies on the first descriptor alone.
    let s = start(&[]);
    let mut c = s.client().await;
    call(&mut c, req("api", vec![free.clone()])).await;
    assert_eq!(codes(&call(&mut c, both()).await), (OVER, vec![OVER, OK]));
}

#[tokio::test]
async fn dynamic_metadata_describes_the_request() {
    let s = start(&["--response-dynamic-metadata"]);
    let mut c = s.client().await;
    let mut r = req(
        "api",
        vec![with_hits(desc(&[("user", "m"), ("x", "y")]), 2)],
    );
    r.hits_addend = 3;
    let resp = call(&mut c, r).await;
    let meta = resp.dynamic_metadata.expect("dynamic metadata");
    let field = |k: &str| meta.fields.get(k).and_then(|v| v.kind.clone());
    assert_eq!(field("domain"), Some(Kind::StringValue("api".into())));
    assert_eq!(field("hitsAddend"), Some(Kind::NumberValue(3.0)));
    let Some(Kind::ListValue(list)) = field("descriptors") else {
        panic!("no descriptors in {meta:?}")
    };
    let Some(Kind::StructValue(d)) = &list.values[0].kind else {
        panic!("{list:?}")
    };
    let Some(Kind::ListValue(entries)) = &d.fields["entries"].kind else {
        panic!("{d:?}")
    };
    let entries: Vec<_> = entries.values.iter().map(|v| v.kind.clone()).collect();
    assert_eq!(
        entries,
        vec![
            Some(Kind::StringValue("user=m".into())),
            Some(Kind::StringValue("x=y".into()))
        ]
    );
    assert_eq!(d.fields["hitsAddend"].kind, Some(Kind::NumberValue(2.0)));
    let (_, body) =
        s.post_json(r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"j"}]}]}"#);
    for part in [
        r#""dynamicMetadata":{"#,
        r#""descriptors":[{"entries":["user=j"]}]"#,
        r#""domain":"api""#,
    ] {
        assert!(body.contains(part), "{part} in {body}");
    }
    // Off by default.
    let s = start(&[]);
    let mut c = s.client().await;
    let resp = call(&mut c, req("api", vec![desc(&[("user", "m")])])).await;
    assert_eq!(resp.dynamic_metadata, None);
}

#[tokio::test]
async fn limit_headers_describe_the_descriptor_closest_to_its_limit() {
    let s = start(&[
        "--limit-response-headers",
        "--limit-remaining-header",
        "X-Left",
    ]);
    let mut c = s.client().await;
    let three = || {
        req(
            "api",
            vec![
                desc(&[("user", "h")]),
                desc(&[("plan", "paid")]),
                desc(&[("everyone", "e")]),
            ],
        )
    };
    let r = call(&mut c, three()).await;
    let reset = r.statuses[1].duration_until_reset.unwrap().seconds;
    assert_eq!(
        headers(&r),
        vec![
            ("RateLimit-Limit".to_owned(), "2".to_owned()),
            ("X-Left".to_owned(), "1".to_owned()),
            ("RateLimit-Reset".to_owned(), reset.to_string()),
        ],
        "paid has 1 left of 2; user 4 of 5; unlimited has no limit"
    );
    call(&mut c, three()).await;
    // paid is spent: the denial is described.
    let r = call(&mut c, three()).await;
    assert_eq!(codes(&r), (OVER, vec![OK, OVER, OK]));
    assert_eq!(
        headers(&r)[..2].to_vec(),
        vec![
            ("RateLimit-Limit".to_owned(), "2".to_owned()),
            ("X-Left".to_owned(), "0".to_owned()),
        ]
    );
    // Off by default; the IETF fields are funnel's own switch.
    let s = start(&["--response-headers"]);
    let mut c = s.client().await;
    let r = call(&mut c, req("api", vec![desc(&[("plan", "paid")])])).await;
    let names: Vec<String> = headers(&r).into_iter().map(|(k, _)| k).collect();
    assert_eq!(names, vec!["RateLimit-Policy", "RateLimit"]);
}

#[tokio::test]
async fn charge_denied_charges_the_other_descriptors_as_envoyproxy_does() {
    for (flags, left) in [(&[][..], 4), (&["--charge-denied"][..], 3)] {
        let s = start(flags);
        let mut c = s.client().await;
        let (user, free) = (desc(&[("user", "c")]), desc(&[("plan", "free")]));
        call(&mut c, req("api", vec![free.clone()])).await;
        call(&mut c, req("api", vec![user.clone()])).await;
        let r = call(&mut c, req("api", vec![user.clone(), free.clone()])).await;
        assert_eq!(codes(&r), (OVER, vec![OK, OVER]), "{flags:?}");
        assert_eq!(r.statuses[0].limit_remaining, left, "{flags:?}");
    }
}

#[test]
fn a_bad_header_name_refuses_to_start() {
    let dir = scratch("answers-bad");
    let path = write_config(&dir, "api.yaml", CONFIG);
    let err = Server::try_start(&path, &["--limit-limit-header", "X Limit"])
        .err()
        .expect("refused");
    assert!(err.contains("cannot be in a header name"), "{err}");
}
