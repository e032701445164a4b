//! funnel-server started from envoyproxy/ratelimit's environment variables alone, on the
//! layout of its example Deployment (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml), and
//! answering over gRPC and /json, with its debug listener and its statsd statistics; a
//! variable it cannot honour refuses the start by name; a flag wins over its variable.

use std::net::UdpSocket;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// Files in the config directory, as envoyproxy/ratelimit's example lays them out: a domain
/// per file, one with a nested rule.
fn layout(root: &Path) {
    let config = root.join("ratelimit").join("config");
    std::fs::create_dir_all(&config).unwrap();
    for (name, yaml) in [
        (
            "config.yaml",
            "domain: db
descriptors:
  - key: database
    value: orders
    rate_limit:
      unit: second
      requests_per_unit: 3
",
        ),
        (
            "edge.yaml",
            "domain: edge
descriptors:
  - key: region
    value: north
    descriptors:
      - key: tenant
        rate_limit:
          unit: minute
          requests_per_unit: 1
",
        ),
        (
            "example.yaml",
            "domain: api
descriptors:
  - key: plan
    value: free
    rate_limit:
      unit: hour
      requests_per_unit: 2
",
        ),
    ] {
        std::fs::write(config.join(name), yaml).unwrap();
    }
}

/// The binary with an empty environment but `vars` (PATH kept for nothing: the binary needs
/// none).
fn command(vars: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_funnel-server"));
    c.env_clear();
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// Loopback addresses on free ports for every listener envoyproxy/ratelimit opens.
const LOOPBACK: [(&str, &str); 6] = [
    ("HOST", "127.0.0.1"),
    ("PORT", "0"),
    ("GRPC_HOST", "127.0.0.1"),
    ("GRPC_PORT", "0"),
    ("DEBUG_HOST", "127.0.0.1"),
    ("DEBUG_PORT", "0"),
];

#[tokio::test]
async fn starts_from_envoyproxy_variables_alone() {
    let root = scratch("env-root");
    layout(&root);
    let statsd = UdpSocket::bind("127.0.0.1:0").unwrap();
    statsd
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let statsd_port = statsd.local_addr().unwrap().port().to_string();
    let root_s = root.to_string_lossy().into_owned();
    let mut vars: Vec<(&str, &str)> = LOOPBACK.to_vec();
    vars.extend([
        ("RUNTIME_ROOT", root_s.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("LOG_LEVEL", "debug"),
        ("LOG_FORMAT", "json"),
        ("USE_STATSD", "true"),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", statsd_port.as_str()),
        ("STATS_FLUSH_INTERVAL", "100ms"),
        ("EXTRA_TAGS", "cluster:blue"),
        // In envoyproxy/ratelimit's example too, read only with BACKEND_TYPE=memcache.
        ("MEMCACHE_HOST_PORT", "memcached:11211"),
    ]);
    let s = Server::launch(command(&vars), root.join("stderr")).unwrap_or_else(|e| panic!("{e}"));

    // gRPC: the nested rule of the first file, one a minute.
    let mut c = s.client().await;
    let tenant = || req("edge", vec![desc(&[("region", "north"), ("tenant", "t1")])]);
    assert_eq!(call(&mut c, tenant()).await.overall_code, OK);
    assert_eq!(call(&mut c, tenant()).await.overall_code, OVER);
    // /json: the second file's domain, two an hour.
    let body = r#"{"domain":"api","descriptors":[{"entries":[{"key":"plan","value":"free"}]}]}"#;
    assert_eq!(s.post_json(body).0, 200);
    assert_eq!(s.post_json(body).0, 200);
    let (code, json) = s.post_json(body);
    assert_eq!(code, 429, "{json}");

    // The debug listener: the rules in force, and the statistics by statsd name.
    let debug = s.listening("debug").expect("a debug listener");
    let (code, rlconfig) = http(debug, "GET", "/rlconfig", "");
    assert_eq!(code, 200);
    for line in [
        "api.plan_free: unit=HOUR requests_per_unit=2, shadow_mode: false",
        "db.database_orders: unit=SECOND requests_per_unit=3, shadow_mode: false",
        "edge.region_north.tenant: unit=MINUTE requests_per_unit=1, shadow_mode: false",
    ] {
        assert!(rlconfig.lines().any(|l| l == line), "{line} in\n{rlconfig}");
    }
    let (code, stats) = http(debug, "GET", "/stats", "");
    assert_eq!(code, 200);
    assert!(
        stats
            .lines()
            .any(|l| l == "ratelimit.service.rate_limit.api.plan_free.over_limit: 1"),
        "{stats}"
    );

    // statsd: envoyproxy/ratelimit's names, the extra tag appended.
    let want =
        "ratelimit.service.rate_limit.edge.region_north.tenant.over_limit.__cluster=blue:1|c";
    let mut lines = Vec::new();
    let mut buf = [0u8; 65_536];
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < end && !lines.iter().any(|l: &String| l == want) {
        if let Ok(n) = statsd.recv(&mut buf) {
            lines.extend(
                String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .map(str::to_owned),
            );
        }
    }
    assert!(lines.iter().any(|l| l == want), "{want} not in {lines:#?}");

    // LOG_FORMAT=json: every log line is a JSON object; LOG_LEVEL=debug lets debug through.
    let log = s.log();
    assert!(!log.is_empty());
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v.get("level").is_some(), "{line}");
    }
    assert!(
        log.contains("MEMCACHE_HOST_PORT"),
        "the ignored variable is logged:\n{log}"
    );
}

#[test]
fn a_variable_it_cannot_honour_refuses_the_start_by_name() {
    let root = scratch("env-refused");
    layout(&root);
    let root_s = root.to_string_lossy().into_owned();
    for (var, value) in [
        ("BACKEND_TYPE", "memcache"),
        ("PROMETHEUS_MAPPER_YAML", "/etc/ratelimit/mapper.yaml"),
        ("NEAR_LIMIT_RATIO", "2"),
    ] {
        let mut vars: Vec<(&str, &str)> = LOOPBACK.to_vec();
        vars.extend([
            ("RUNTIME_ROOT", root_s.as_str()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("USE_STATSD", "false"),
            (var, value),
        ]);
        let out = command(&vars).output().unwrap();
        assert!(!out.status.success(), "{var}={value} started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(var), "{var} not named in: {err}");
    }
}

#[tokio::test]
async fn a_flag_wins_over_its_variable() {
    let root = scratch("env-flag");
    layout(&root);
    let root_s = root.to_string_lossy().into_owned();
    let mut vars: Vec<(&str, &str)> = LOOPBACK.to_vec();
    vars.extend([
        ("RUNTIME_ROOT", root_s.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("USE_STATSD", "false"),
        // An address no test can bind: the flag's must be the one used.
        ("GRPC_HOST", "192.0.2.1"),
    ]);
    let mut c = command(&vars);
    // The configuration by flag too: only the second file's directory.
    let only = root.join("only");
    std::fs::create_dir_all(&only).unwrap();
    std::fs::copy(
        root.join("ratelimit/config/example.yaml"),
        only.join("example.yaml"),
    )
    .unwrap();
    c.args(["--grpc", "127.0.0.1:0", "--config"]).arg(&only);
    let s = Server::launch(c, root.join("stderr-flag")).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.grpc.ip().is_loopback());
    let mut client = s.client().await;
    let r = call(
        &mut client,
        req("db", vec![desc(&[("database", "orders")])]),
    )
    .await;
    // No rule for `db` in the flag's directory: OK with no limit.
    assert_eq!(r.overall_code, OK);
    assert!(r.statuses[0].current_limit.is_none());
}
