//! Fleet mode: two server processes on one real `redis-server` (started here on a free
//! loopback port, no persistence) share each limit exactly.

mod common;

use common::*;
use funnel_testkit::redis_server::server;

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
