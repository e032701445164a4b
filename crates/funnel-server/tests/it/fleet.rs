//! Fleet mode: server processes on real `redis-server`s (started here on free loopback ports,
//! no persistence) share each limit exactly: two on one server; eight racing on one server and
//! on a three-master cluster, where a denied request charges none of its descriptors; one
//! through Redis Sentinel, and one on a server that requires a password; over TLS, with a
//! private authority, a client certificate (started from envoyproxy/ratelimit's variables
//! alone) and a certificate for another name, on a single server, a cluster and through
//! sentinels.

use std::path::Path;

use crate::common::*;
use funnel_testkit::redis_server::{
    cluster, sentinel, server, server_with, tls_cluster, tls_server, tls_server_with, Certificates,
    RedisSentinel, RedisTls, TlsOptions,
};

const CONFIG: &str = "domain: fleet\ndescriptors:\n  - key: client\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n";

#[tokio::test]
async fn two_instances_on_one_redis_admit_exactly_the_limit_together() {
    let Some(redis) = server() else { return };
    let dir = scratch("fleet");
    let path = write_config(&dir, "fleet.yaml", CONFIG);
    let url = redis.url();
    // A generous timeout: on a loaded machine a slow reply must not become a policy answer.
    let common = ["--no-watch", "--redis", &url, "--redis-timeout-ms", "5000"];
    let a = Server::start(&path, &common);
    let b = Server::start(&path, &[&common[..], &["--deny-cache", "0"]].concat());
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    for key in ["k1", "k2"] {
        let d = desc(&[("client", key)]);
        let mut ok = 0;
        for i in 0..40 {
            let c = if i % 2 == 0 { &mut ca } else { &mut cb };
            if call(c, req("fleet", vec![d.clone()])).await.overall_code == OK {
                ok += 1;
            }
        }
        assert_eq!(
            ok, 10,
            "{key}: the two instances admitted {ok} of a limit of 10"
        );
    }
    assert_eq!(a.metric("funnel_server_redis_timeouts_total"), 0);
    assert_eq!(b.metric("funnel_server_redis_timeouts_total"), 0);
    // Both went to Redis; the instance with a deny cache answered some denials itself.
    assert!(a.metric("funnel_server_redis_round_trips_total") > 0);
    assert!(b.metric("funnel_server_redis_round_trips_total") >= 20);
    assert!(a.metric("funnel_server_redis_deny_cache_answers_total") > 0);
    assert_eq!(b.metric("funnel_server_redis_deny_cache_answers_total"), 0);
}

#[test]
fn window_rules_are_refused_in_fleet_mode() {
    let Some(redis) = server() else { return };
    let dir = scratch("fleet-window");
    let path = write_config(
        &dir,
        "w.yaml",
        "domain: w\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: fixed_window}\n",
    );
    let e = Server::try_start(&path, &["--no-watch", "--redis", &redis.url()])
        .err()
        .expect("refused");
    assert!(e.contains("not available with --redis"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_call_in_flight_finish() {
    let Some(redis) = server() else { return };
    let dir = scratch("drain");
    let path = write_config(&dir, "fleet.yaml", CONFIG);
    let url = redis.url();
    let mut s = Server::start(
        &path,
        &["--no-watch", "--redis", &url, "--redis-timeout-ms", "10000"],
    );
    let mut c = s.client().await;
    let d = desc(&[("client", "drain")]);
    assert_eq!(
        call(&mut c, req("fleet", vec![d.clone()]))
            .await
            .overall_code,
        OK
    );
    // Redis holds every command for 1.5 s: the next call waits inside the server.
    let mut admin = redis.connection().unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .query(&mut admin)
        .unwrap();
    let started = std::time::Instant::now();
    let in_flight = tokio::spawn(async move { c.should_rate_limit(req("fleet", vec![d])).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    s.terminate();
    let answer = in_flight
        .await
        .unwrap()
        .expect("the call in flight is answered");
    assert_eq!(answer.into_inner().overall_code, OK);
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(1000),
        "it waited for Redis"
    );
    assert_eq!(
        s.wait_exit(std::time::Duration::from_secs(15)),
        Some(0),
        "{}",
        s.log()
    );
}

/// Two limits; a request carries both, and `client` (5 an hour) denies long before `route`
/// (1,000 an hour).
const TWO_LIMITS: &str = "domain: pair\ndescriptors:\n  - key: route\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";

/// Eight instances started with `args`, racing 80 two-descriptor requests for one client:
/// exactly the client's limit is admitted across them, and the route's count holds the
/// admitted requests only.
async fn eight_race(name: &str, args: &[&str]) {
    let dir = scratch(name);
    let path = write_config(&dir, "pair.yaml", TWO_LIMITS);
    // A generous timeout: on a loaded machine a slow reply must not become a policy answer.
    let common = [&["--no-watch", "--redis-timeout-ms", "5000"][..], args].concat();
    let fleet: Vec<Server> = (0..8).map(|_| Server::start(&path, &common)).collect();
    let mut tasks = Vec::new();
    for s in &fleet {
        let mut c = s.client().await;
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..10 {
                let r = call(
                    &mut c,
                    req(
                        "pair",
                        vec![desc(&[("route", "r")]), desc(&[("client", "c")])],
                    ),
                )
                .await;
                if r.overall_code == OK {
                    admitted += 1;
                } else {
                    assert_eq!(codes(&r), (OVER, vec![OK, OVER]), "only the client denies");
                }
            }
            admitted
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    assert_eq!(
        admitted, 5,
        "exactly the client's limit across eight instances"
    );
    let mut c = fleet[0].client().await;
    let peek = call(
        &mut c,
        req("pair", vec![with_hits(desc(&[("route", "r")]), 0)]),
    )
    .await;
    assert_eq!(
        peek.statuses[0].limit_remaining, 995,
        "the route was charged for the admitted requests only"
    );
    for s in &fleet {
        assert_eq!(s.metric("funnel_server_redis_timeouts_total"), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_instances_on_one_redis_charge_nothing_for_a_denied_request() {
    let Some(redis) = server() else { return };
    eight_race("eight-single", &["--redis", &redis.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_instances_on_a_cluster_with_the_domain_hash_tag_charge_nothing_for_a_denied_request()
{
    let Some(cluster) = cluster(3) else { return };
    // envoyproxy/ratelimit's REDIS_URL for a cluster: host:port seeds, comma-separated.
    let seeds: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let seeds = seeds.join(",");
    eight_race(
        "eight-cluster",
        &[
            "--redis",
            &seeds,
            "--redis-type",
            "cluster",
            "--redis-hash-tag",
            "domain",
        ],
    )
    .await;
}

/// envoyproxy/ratelimit's REDIS_URL for sentinel (`master_name,host:port`): `group`'s.
fn sentinel_url(group: &RedisSentinel) -> String {
    format!(
        "{},127.0.0.1:{}",
        RedisSentinel::MASTER_NAME,
        group.sentinel_port()
    )
}

/// The flags of a server that finds its primary through the sentinel of `url`, with the
/// sentinel's own password when given.
fn through_sentinel<'a>(url: &'a str, sentinel_password: Option<&'a str>) -> Vec<&'a str> {
    let mut args = vec!["--no-watch", "--redis-type", "sentinel", "--redis", url];
    args.extend(["--redis-timeout-ms", "5000"]);
    if let Some(password) = sentinel_password {
        args.extend(["--redis-sentinel-auth", password]);
    }
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_through_sentinel_admits_exactly_the_limit() {
    let Some(group) = sentinel() else { return };
    let dir = scratch("sentinel");
    let path = write_config(&dir, "fleet.yaml", CONFIG);
    let url = sentinel_url(&group);
    let s = Server::start(&path, &through_sentinel(&url, None));
    let mut c = s.client().await;
    let d = desc(&[("client", "s")]);
    assert_eq!(admitted(&mut c, "fleet", &d, 15).await, 10);
    // Replication is asynchronous: the replica receives the writes soon after.
    let mut con = group.replica().connection().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("funnel-server:*")
            .query(&mut con)
            .unwrap();
        if !keys.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the writes went to the primary the sentinel names, and reach its replica"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_that_require_a_password_are_asked_with_redis_sentinel_auth() {
    if !funnel_testkit::redis_server::available_or_skip() {
        return;
    }
    let group = RedisSentinel::start_with_sentinel_password(Some("pw-for-sentinels"))
        .unwrap_or_else(|e| panic!("a sentinel group: {e}"));
    let dir = scratch("sentinel-auth");
    let path = write_config(&dir, "fleet.yaml", CONFIG);
    let url = sentinel_url(&group);
    let e = Server::try_start(&path, &through_sentinel(&url, None))
        .err()
        .expect("the sentinel refuses a client without its password");
    assert!(e.to_lowercase().contains("redis"), "{e}");
    let s = Server::start(&path, &through_sentinel(&url, Some("pw-for-sentinels")));
    let mut c = s.client().await;
    assert_eq!(
        admitted(&mut c, "fleet", &desc(&[("client", "p")]), 12).await,
        10
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_auth_opens_a_server_that_requires_a_password() {
    let Some(redis) = server_with(&["--requirepass", "pw-for-fleet"]) else {
        return;
    };
    let dir = scratch("auth");
    let path = write_config(&dir, "fleet.yaml", CONFIG);
    let host_port = format!("127.0.0.1:{}", redis.port());
    let with = [
        "--no-watch",
        "--redis",
        &host_port,
        "--redis-auth",
        "pw-for-fleet",
        "--redis-timeout-ms",
        "5000",
    ];
    let s = Server::start(&path, &with);
    let mut c = s.client().await;
    assert_eq!(
        admitted(&mut c, "fleet", &desc(&[("client", "a")]), 12).await,
        10
    );
    let e = Server::try_start(
        &path,
        &["--no-watch", "--redis", &host_port, "--redis-auth", "wrong"],
    )
    .err()
    .expect("a wrong password is refused at start");
    assert!(e.to_lowercase().contains("redis"), "{e}");
}

#[test]
fn a_redis_url_that_does_not_fit_the_type_is_refused() {
    let dir = scratch("bad-type");
    let path = write_config(&dir, "fleet.yaml", CONFIG);
    let e = Server::try_start(&path, &["--no-watch", "--redis", "127.0.0.1:1,127.0.0.1:2"])
        .err()
        .expect("two servers without --redis-type cluster");
    assert!(e.contains("--redis-type cluster"), "{e}");
    let e = Server::try_start(
        &path,
        &[
            "--no-watch",
            "--redis-type",
            "sentinel",
            "--redis",
            "127.0.0.1:26379",
        ],
    )
    .err()
    .expect("a sentinel list without a master name");
    assert!(e.contains("master_name,host:port"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_tls_reaches_a_server_over_tls_with_a_private_authority() {
    let Some(tls) = tls_server() else { return };
    let dir = scratch("tls");
    let path = write_config(&dir, "fleet.yaml", CONFIG);
    let s = start_on_tls(&path, &tls, &[]);
    let mut c = s.client().await;
    assert_eq!(
        admitted(&mut c, "fleet", &desc(&[("client", "t")]), 12).await,
        10
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("funnel-server:*")
        .query(&mut tls.server().connection().unwrap())
        .unwrap();
    // The funnel of client `t` (its value, length-prefixed) and the data-set marker.
    assert!(
        keys.iter().any(|k| k.ends_with(":1:t")),
        "the funnel is on the TLS server: {keys:?}"
    );
}

/// envoyproxy/ratelimit's variables for a Deployment on `tls` (a single server over TLS) with
/// the rules of `CONFIG` under `root`, every listener on a free loopback port, statsd off.
fn envoyproxy_tls_environment(root: &std::path::Path, tls: &RedisTls) -> Vec<(String, String)> {
    let config = root.join("ratelimit").join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("fleet.yaml"), CONFIG).unwrap();
    let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
    [
        ("RUNTIME_ROOT", path(root.to_path_buf())),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("HOST", "127.0.0.1".into()),
        ("PORT", "0".into()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("GRPC_PORT", "0".into()),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("DEBUG_PORT", "0".into()),
        ("USE_STATSD", "false".into()),
        ("BACKEND_TYPE", "redis".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", format!("127.0.0.1:{}", tls.tls_port())),
        ("REDIS_TLS", "true".into()),
        ("REDIS_TLS_CACERT", path(tls.ca_file())),
        ("REDIS_TLS_CLIENT_CERT", path(tls.client_cert_file())),
        ("REDIS_TLS_CLIENT_KEY", path(tls.client_key_file())),
        ("REDIS_TIMEOUT", "5s".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The binary with `vars` as its whole environment and no arguments.
fn from_environment(vars: &[(String, String)]) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_funnel-server"));
    c.env_clear().envs(vars.iter().map(|(k, v)| (k, v)));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoyproxy_variables_alone_reach_a_server_that_requires_a_client_certificate() {
    let Some(tls) = tls_server_with(&TlsOptions {
        require_client_certificates: true,
        ..TlsOptions::default()
    }) else {
        return;
    };
    let root = scratch("tls-client-cert");
    let vars = envoyproxy_tls_environment(&root, &tls);
    let s = Server::launch(from_environment(&vars), root.join("stderr"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut c = s.client().await;
    assert_eq!(
        admitted(&mut c, "fleet", &desc(&[("client", "m")]), 12).await,
        10
    );
    assert_eq!(s.metric("funnel_server_redis_timeouts_total"), 0);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("funnel-server:*")
        .query(&mut tls.server().connection().unwrap())
        .unwrap();
    assert!(
        keys.iter().any(|k| k.ends_with(":1:m")),
        "the funnel is on the TLS server: {keys:?}"
    );

    // The same Deployment without its certificate: the server refuses the connection, and
    // no request is admitted by Redis (closed: every one denied).
    let without: Vec<(String, String)> = vars
        .iter()
        .filter(|(k, _)| !k.starts_with("REDIS_TLS_CLIENT_"))
        .cloned()
        .collect();
    let s = Server::launch(from_environment(&without), root.join("stderr-without"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut c = s.client().await;
    assert_eq!(
        admitted(&mut c, "fleet", &desc(&[("client", "w")]), 3).await,
        0
    );

    // A certificate without its key stops the start, naming the variable.
    let half: Vec<(String, String)> = vars
        .iter()
        .filter(|(k, _)| k != "REDIS_TLS_CLIENT_KEY")
        .cloned()
        .collect();
    let e = Server::launch(from_environment(&half), root.join("stderr-half"))
        .err()
        .expect("a client certificate without its key");
    assert!(e.contains("REDIS_TLS_CLIENT_CERT"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_accepted_only_with_the_name_check_skipped() {
    let Some(tls) = tls_server_with(&TlsOptions {
        server_names: "DNS:redis.invalid".into(),
        ..TlsOptions::default()
    }) else {
        return;
    };
    let dir = scratch("tls-name");
    let path = write_config(&dir, "fleet.yaml", CONFIG);
    let checked = start_on_tls(&path, &tls, &[]);
    let mut c = checked.client().await;
    assert_eq!(
        admitted(&mut c, "fleet", &desc(&[("client", "n")]), 3).await,
        0,
        "a certificate for redis.invalid accepted at 127.0.0.1"
    );
    let skipped = start_on_tls(&path, &tls, &["--redis-tls-skip-hostname-verification"]);
    let mut c = skipped.client().await;
    assert_eq!(
        admitted(&mut c, "fleet", &desc(&[("client", "s")]), 12).await,
        10
    );
}

/// funnel-server on `config` with the TLS `redis-server` `tls` (at 127.0.0.1, its authority
/// trusted) and `extra` flags.
fn start_on_tls(config: &Path, tls: &RedisTls, extra: &[&str]) -> Server {
    let host_port = format!("127.0.0.1:{}", tls.tls_port());
    let ca = tls.ca_file();
    let mut args = vec![
        "--no-watch",
        "--redis",
        &host_port,
        "--redis-tls",
        "--redis-tls-ca-cert",
        ca.to_str().unwrap(),
        "--redis-timeout-ms",
        "5000",
    ];
    args.extend_from_slice(extra);
    Server::start(config, &args)
}

/// TLS servers that require a client certificate and whose certificates name a host no one
/// dials.
fn strict_tls() -> TlsOptions {
    TlsOptions {
        require_client_certificates: true,
        server_names: "DNS:redis.invalid".into(),
    }
}

/// The TLS flags for `certificates`: the authority, the client certificate, no name check.
fn tls_flags(certificates: &Certificates) -> Vec<String> {
    let path = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
    vec![
        "--redis-tls".into(),
        "--redis-tls-ca-cert".into(),
        path(certificates.ca_file()),
        "--redis-tls-client-cert".into(),
        path(certificates.client_cert_file()),
        "--redis-tls-client-key".into(),
        path(certificates.client_key_file()),
        "--redis-tls-skip-hostname-verification".into(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_and_tls_sentinels_take_the_client_certificate_and_the_name_check_flags() {
    let Some(cluster) = tls_cluster(3, &strict_tls()) else {
        return;
    };
    let Some(primary) = tls_server_with(&strict_tls()) else {
        return;
    };
    let sentinel = primary
        .start_sentinel()
        .unwrap_or_else(|e| panic!("a TLS sentinel: {e}"));
    let dir = scratch("tls-topologies");
    let path = write_config(&dir, "fleet.yaml", CONFIG);
    let seeds = cluster.tls_urls().join(",");
    let sentinels = format!(
        "{},127.0.0.1:{}",
        RedisSentinel::MASTER_NAME,
        sentinel.tls_port()
    );
    for (redis_type, redis, certificates) in [
        ("cluster", seeds.as_str(), cluster.certificates()),
        ("sentinel", sentinels.as_str(), primary.certificates()),
    ] {
        let mut args: Vec<String> = [
            "--no-watch",
            "--redis-type",
            redis_type,
            "--redis",
            redis,
            "--redis-timeout-ms",
            "5000",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(tls_flags(certificates));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let s = Server::start(&path, &args);
        let mut c = s.client().await;
        assert_eq!(
            admitted(&mut c, "fleet", &desc(&[("client", redis_type)]), 12).await,
            10,
            "{redis_type}"
        );
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("funnel-server:*")
        .query(&mut primary.server().connection().unwrap())
        .unwrap();
    assert!(
        keys.iter().any(|k| k.ends_with(":sentinel")),
        "the funnel is on the primary the sentinel named: {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_sent_in_a_descriptor_is_given_back_when_redis_denies() {
    let Some(redis) = server() else { return };
    let dir = scratch("override-rollback");
    let path = write_config(&dir, "fleet.yaml", CONFIG);
    let url = redis.url();
    let s = Server::start(
        &path,
        &["--no-watch", "--redis", &url, "--redis-timeout-ms", "5000"],
    );
    let mut c = s.client().await;
    // A limit of 100 an hour sent with the request (counted in process) beside the rule's 10
    // an hour in Redis: the Redis rule denies after 10.
    let sent = with_limit(desc(&[("tenant", "t")]), 100, 3);
    let mut admitted = 0;
    for _ in 0..15 {
        let r = call(
            &mut c,
            req("fleet", vec![sent.clone(), desc(&[("client", "o")])]),
        )
        .await;
        admitted += usize::from(r.overall_code == OK);
    }
    assert_eq!(admitted, 10);
    let peek = call(&mut c, req("fleet", vec![with_hits(sent, 0)])).await;
    assert_eq!(
        peek.statuses[0].limit_remaining, 90,
        "the sent limit holds the admitted requests only"
    );
}
