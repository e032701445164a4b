//! envoyproxy/ratelimit's configuration features, end to end: the binary started on a
//! configuration that uses them, called over gRPC as Envoy calls it.

use crate::common::*;

const SHARED: &str = "domain: cfg
descriptors:
  # Every document under docs/ counts against one limit of 2.
  - key: doc
    value: docs/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  # Every value matching a*z has a limit of 2 of its own.
  - key: word
    value: a*m*z
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: open
    rate_limit:
      unlimited: true
  - key: quiet
    descriptors:
";

#[tokio::test]
async fn share_threshold_and_wildcards_count_as_envoyproxy_counts() {
    let dir = scratch("cfg-shared");
    let path = write_config(&dir, "cfg.yaml", SHARED);
    let s = Server::start(&path, &["--no-watch"]);
    let mut c = s.client().await;
    let n = |v: &'static str| desc(&[("doc", v)]);
    assert_eq!(admitted(&mut c, "cfg", &n("docs/a"), 1).await, 1);
    assert_eq!(admitted(&mut c, "cfg", &n("docs/b/c"), 1).await, 1);
    assert_eq!(
        admitted(&mut c, "cfg", &n("docs/d"), 1).await,
        0,
        "the third document finds the shared limit spent"
    );
    assert_eq!(admitted(&mut c, "cfg", &n("other"), 3).await, 3, "no rule");
    let w = |v: &'static str| desc(&[("word", v)]);
    assert_eq!(admitted(&mut c, "cfg", &w("amz"), 3).await, 2);
    assert_eq!(
        admitted(&mut c, "cfg", &w("a-m-z"), 3).await,
        2,
        "a count of its own"
    );
    assert_eq!(
        admitted(&mut c, "cfg", &w("az"), 3).await,
        3,
        "no m: no rule"
    );
    assert_eq!(admitted(&mut c, "cfg", &desc(&[("open", "x")]), 5).await, 5);
    assert_eq!(
        admitted(&mut c, "cfg", &desc(&[("quiet", "x")]), 5).await,
        5
    );
}

#[test]
fn refused_configurations_name_file_and_line() {
    let dir = scratch("cfg-refused");
    let path = write_config(
        &dir,
        "bad.yaml",
        "domain: cfg\ndescriptors:\n  - key: open\n    rate_limit:\n      unlimited: true\n      unit: hour\n",
    );
    let e = Server::try_start(&path, &["--no-watch"])
        .err()
        .expect("refused");
    assert!(e.contains("bad.yaml:6:") && e.contains("unlimited"), "{e}");
}

#[tokio::test]
async fn a_domain_split_over_files_needs_merge_domain_config() {
    let dir = scratch("cfg-merge");
    write_config(
        &dir,
        "a.yaml",
        "domain: cfg\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    );
    write_config(
        &dir,
        "b.yaml",
        "domain: cfg\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
    );
    let e = Server::try_start(&dir, &["--no-watch"])
        .err()
        .expect("refused");
    assert!(e.contains("b.yaml") && e.contains("already defined"), "{e}");
    let s = Server::start(&dir, &["--no-watch", "--merge-domain-config"]);
    let mut c = s.client().await;
    assert_eq!(admitted(&mut c, "cfg", &desc(&[("a", "x")]), 3).await, 1);
    assert_eq!(admitted(&mut c, "cfg", &desc(&[("b", "x")]), 3).await, 2);
}
