//! Running the server: HTTP (`/healthcheck`, `/metrics`, `POST /json`), the gRPC health
//! service, live reload (under load, debt kept, a broken file rejected), a configuration error
//! refusing the start, SIGTERM.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;

fn config(client_per_minute: u32, name: &str) -> String {
    format!(
        "domain: ops\ndescriptors:\n  - key: client\n    rate_limit:\n      name: {name}\n      unit: minute\n      requests_per_unit: {client_per_minute}\n  - key: other\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1000000\n"
    )
}

#[tokio::test]
async fn http_answers_health_metrics_and_json() {
    let dir = scratch("http");
    let s = Server::start(
        &write_config(&dir, "ops.yaml", &config(2, "per_client")),
        &["--no-watch"],
    );
    assert_eq!(s.get("/healthcheck"), (200, "OK\n".into()));
    let body = r#"{"domain":"ops","descriptors":[{"entries":[{"key":"client","value":"j"}]}]}"#;
    let (code, json) = s.post_json(body);
    assert_eq!(code, 200, "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["overallCode"], "OK");
    assert_eq!(v["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);
    assert_eq!(v["statuses"][0]["currentLimit"]["unit"], "MINUTE");
    assert_eq!(v["statuses"][0]["currentLimit"]["name"], "per_client");
    assert_eq!(v["statuses"][0]["limitRemaining"], 1);
    assert!(v["statuses"][0]["durationUntilReset"]
        .as_str()
        .unwrap()
        .ends_with('s'));
    assert_eq!(s.post_json(body).0, 200);
    let (code, json) = s.post_json(body);
    assert_eq!(code, 429, "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["overallCode"], "OVER_LIMIT");
    // hitsAddend in camelCase, and the same limits as gRPC.
    let (code, _) = s.post_json(r#"{"domain":"ops","hitsAddend":5,"descriptors":[{"entries":[{"key":"client","value":"k"}]}]}"#);
    assert_eq!(code, 429, "5 units never fit a burst of 2");
    assert_eq!(s.post_json(r#"{"domain":"","descriptors":[]}"#).0, 400);
    assert_eq!(s.post_json("{not json").0, 400);
    let (code, metrics) = s.get("/metrics");
    assert_eq!(code, 200);
    // Near past 1 unit of 2: the second call of `j` is near, its third over; of `k`'s 5
    // units, 3 are past the limit and 1 between the threshold and the limit.
    for series in [
        r#"ratelimit_service_rate_limit_total_hits_total{domain="ops",key="client"} 8"#,
        r#"ratelimit_service_rate_limit_over_limit_total{domain="ops",key="client"} 4"#,
        r#"ratelimit_service_rate_limit_within_limit_total{domain="ops",key="client"} 2"#,
        r#"ratelimit_service_rate_limit_near_limit_total{domain="ops",key="client"} 2"#,
        r#"funnel_server_table_keys{domain="ops",key="client"} 1"#,
        "ratelimit_service_config_load_success_total 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} in\n{metrics}"
        );
    }
}

#[tokio::test]
async fn grpc_health_reports_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let dir = scratch("health");
    let s = Server::start(
        &write_config(&dir, "ops.yaml", &config(2, "c")),
        &["--no-watch"],
    );
    let channel = tonic::transport::Endpoint::new(format!("http://{}", s.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(channel);
    let r = h
        .check(HealthCheckRequest {
            service: "envoy.service.ratelimit.v3.RateLimitService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, ServingStatus::Serving as i32);
}

#[test]
fn a_broken_configuration_refuses_the_start_naming_file_and_line() {
    let dir = scratch("broken");
    let path = write_config(
        &dir,
        "bad.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
    );
    let e = Server::try_start(&path, &["--no-watch"])
        .err()
        .expect("refused");
    assert!(e.contains("bad.yaml:5:") && e.contains("fortnight"), "{e}");
    assert!(e.contains("exit status: 1"), "{e}");
}

#[tokio::test]
async fn a_reload_swaps_limits_keeps_debt_and_rejects_a_broken_file() {
    let dir = scratch("reload");
    let path = write_config(&dir, "ops.yaml", &config(3, "per_client"));
    let s = Server::start(&path, &[]);
    let mut c = s.client().await;
    let d = desc(&[("client", "r")]);
    assert_eq!(admitted(&mut c, "ops", &d, 2).await, 2);

    // Same name, same quota, another rule added: the key keeps its debt (1 left of 3).
    let grown = config(3, "per_client")
        + "  - key: extra\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n";
    write_config(&dir, "ops.yaml", &grown);
    s.wait_metric("ratelimit_service_config_load_success_total", 2);
    assert_eq!(
        admitted(&mut c, "ops", &d, 3).await,
        1,
        "the debt survived the reload"
    );
    assert_eq!(
        admitted(&mut c, "ops", &desc(&[("extra", "e")]), 2).await,
        1,
        "the new rule applies"
    );

    // A broken file: rejected, counted, logged; the configuration in force stays.
    write_config(&dir, "ops.yaml", "domain: ops\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 1, typo: 1}\n");
    s.wait_metric("ratelimit_service_config_load_error_total", 1);
    assert!(s.log().contains("unknown field `typo`"), "{}", s.log());
    assert_eq!(
        admitted(&mut c, "ops", &desc(&[("extra", "f")]), 2).await,
        1,
        "the old rules stay"
    );

    // A new quota: a new count.
    write_config(&dir, "ops.yaml", &config(5, "per_client"));
    s.wait_metric("ratelimit_service_config_load_success_total", 3);
    assert_eq!(admitted(&mut c, "ops", &d, 6).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_load_fail_no_call() {
    let dir = scratch("reload-load");
    let path = write_config(&dir, "ops.yaml", &config(3, "per_client"));
    let s = Server::start(&path, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..4 {
        let mut c = s.client().await;
        let (stop, calls) = (stop.clone(), calls.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            // Bounded in count and in time (the main task stops it).
            while !stop.load(Ordering::Relaxed) && i < 200_000 {
                let d = desc(&[("other", &format!("{t}-{}", i % 50))]);
                let r = c.should_rate_limit(req("ops", vec![d])).await;
                let r = r.unwrap_or_else(|e| panic!("call {i} of task {t} failed: {e:?}"));
                assert_eq!(r.into_inner().overall_code, OK);
                calls.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    for round in 0..6u32 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        if round % 2 == 0 {
            write_config(&dir, "ops.yaml", &config(3 + round, "per_client"));
        } else {
            write_config(&dir, "ops.yaml", "domain: ops\ndescriptors: [oops\n");
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("no call failed");
    }
    assert!(calls.load(Ordering::Relaxed) > 100, "the load ran");
    assert!(s.metric("ratelimit_service_config_load_success_total") >= 2);
    assert!(s.metric("ratelimit_service_config_load_error_total") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_exits_zero() {
    let dir = scratch("sigterm");
    let mut s = Server::start(
        &write_config(&dir, "ops.yaml", &config(3, "c")),
        &["--no-watch"],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..4 {
        let mut c = s.client().await;
        let (stop, ok) = (stop.clone(), ok.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..100_000u64 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                match c
                    .should_rate_limit(req("ops", vec![desc(&[("other", &format!("{t}-{i}"))])]))
                    .await
                {
                    Ok(r) => {
                        assert_eq!(r.into_inner().overall_code, OK);
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    // After the drain the connection closes: a call then fails to be sent,
                    // never with an answer other than the transport's. A call opened as the
                    // server's GOAWAY crosses it is refused by HTTP/2 itself (never processed),
                    // which tonic reports as `Internal` with the transport error as its source.
                    Err(e) => {
                        let transport = std::error::Error::source(&e)
                            .is_some_and(|s| s.is::<tonic::transport::Error>());
                        assert!(
                            transport
                                || matches!(
                                    e.code(),
                                    tonic::Code::Unavailable
                                        | tonic::Code::Unknown
                                        | tonic::Code::Cancelled
                                ),
                            "{e:?}"
                        );
                        break;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = ok.load(Ordering::Relaxed);
    assert!(before > 0, "calls were flowing");
    s.terminate();
    let code = s.wait_exit(Duration::from_secs(15));
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(code, Some(0), "{}", s.log());
    assert!(s.log().contains("draining in-flight calls"));
}

#[tokio::test]
async fn a_directory_holds_one_domain_per_file_and_refuses_a_domain_twice() {
    let dir = scratch("dir");
    write_config(&dir, "a.yaml", &config(1, "a"));
    write_config(&dir, "b.yml", "domain: other\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 2}\n");
    std::fs::write(dir.join("notes.txt"), "not read").unwrap();
    let s = Server::start(&dir, &["--no-watch"]);
    let mut c = s.client().await;
    assert_eq!(
        admitted(&mut c, "ops", &desc(&[("client", "x")]), 3).await,
        1
    );
    assert_eq!(
        admitted(&mut c, "other", &desc(&[("client", "x")]), 3).await,
        2
    );
    drop(s);
    write_config(&dir, "c.yaml", &config(7, "c"));
    let e = Server::try_start(&dir, &["--no-watch"])
        .err()
        .expect("refused");
    assert!(
        e.contains("c.yaml") && e.contains("already defined in") && e.contains("a.yaml"),
        "{e}"
    );
}

/// Reads HTTP/2 frames from `tcp` until it closes: when the first GOAWAY came and when the
/// connection closed, both measured from `opened`.
fn goaway_then_close(
    mut tcp: std::net::TcpStream,
    opened: std::time::Instant,
    limit: Duration,
) -> (Option<Duration>, Option<Duration>) {
    use std::io::Read;
    tcp.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let (mut goaway, mut buf, mut pending) = (None, [0u8; 4096], Vec::new());
    while opened.elapsed() < limit {
        match tcp.read(&mut buf) {
            Ok(0) => return (goaway, Some(opened.elapsed())),
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (goaway, Some(opened.elapsed())),
        }
        // Each frame: a 24-bit length, a type (GOAWAY is 7), flags, a stream id, the payload.
        while pending.len() >= 9 {
            let len = usize::from(pending[0]) << 16
                | usize::from(pending[1]) << 8
                | usize::from(pending[2]);
            if pending.len() < 9 + len {
                break;
            }
            if pending[3] == 7 && goaway.is_none() {
                goaway = Some(opened.elapsed());
            }
            pending.drain(..9 + len);
        }
    }
    (goaway, None)
}

/// Opens an HTTP/2 connection to `addr` that sends nothing after its preface and settings.
fn idle_http2(addr: std::net::SocketAddr) -> (std::net::TcpStream, std::time::Instant) {
    use std::io::Write;
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    let opened = std::time::Instant::now();
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    // An empty SETTINGS frame.
    tcp.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).unwrap();
    (tcp, opened)
}

#[test]
fn aged_connections_get_a_goaway_then_close_after_the_grace() {
    let dir = scratch("connection-age");
    let path = write_config(&dir, "age.yaml", &config(10, "age"));
    let s = Server::start(
        &path,
        &[
            "--grpc-max-connection-age",
            "1s",
            "--grpc-max-connection-age-grace",
            "2s",
        ],
    );
    let (tcp, opened) = idle_http2(s.grpc);
    let (goaway, closed) = goaway_then_close(tcp, opened, Duration::from_secs(20));
    let goaway = goaway.expect("a GOAWAY at the connection's age");
    let closed = closed.expect("the connection closed after the grace");
    // The age is drawn within ±10% of 1s; the client never answers the server's PING, so
    // the connection stays open for the whole grace, then is closed.
    assert!(goaway >= Duration::from_millis(900), "GOAWAY at {goaway:?}");
    assert!(goaway < Duration::from_secs(5), "GOAWAY at {goaway:?}");
    assert!(
        closed >= goaway + Duration::from_millis(1900),
        "closed at {closed:?}, GOAWAY at {goaway:?}"
    );

    // envoyproxy/ratelimit's variable alone does the same.
    let mut command = Server::command(Some(&path), &[]);
    command.env("GRPC_MAX_CONNECTION_AGE", "1s");
    let s = Server::launch(command, dir.join("age-env.stderr")).unwrap();
    let (tcp, opened) = idle_http2(s.grpc);
    let (goaway, _) = goaway_then_close(tcp, opened, Duration::from_secs(5));
    let goaway = goaway.expect("a GOAWAY from GRPC_MAX_CONNECTION_AGE");
    assert!(goaway >= Duration::from_millis(900), "GOAWAY at {goaway:?}");

    // Without an age a connection is never sent away.
    let s = Server::start(&path, &[]);
    let (tcp, opened) = idle_http2(s.grpc);
    let (goaway, closed) = goaway_then_close(tcp, opened, Duration::from_millis(2500));
    assert_eq!((goaway, closed), (None, None));
}

#[tokio::test]
async fn one_worker_thread_serves_and_zero_is_refused() {
    let dir = scratch("worker-threads");
    let path = write_config(&dir, "threads.yaml", &config(5, "threads"));
    for threads in ["1", "3"] {
        let s = Server::start(&path, &["--worker-threads", threads]);
        let mut c = s.client().await;
        let n = admitted(&mut c, "ops", &desc(&[("client", "a")]), 8).await;
        assert_eq!(n, 5, "--worker-threads {threads}");
    }
    let e = Server::try_start(&path, &["--worker-threads", "0"])
        .err()
        .expect("0 threads refused");
    assert!(e.contains("--worker-threads"), "{e}");
}

#[tokio::test]
async fn the_near_limit_statistic_starts_at_the_ratio_given() {
    let dir = scratch("near-limit");
    let path = write_config(&dir, "near.yaml", &config(10, "near"));
    let series = r#"ratelimit_service_rate_limit_near_limit_total{domain="ops",key="client"}"#;
    let flag = Server::start(&path, &["--no-watch", "--near-limit-ratio", "0.5"]);
    let mut command = Server::command(Some(&path), &["--no-watch"]);
    command.env("NEAR_LIMIT_RATIO", "0.5");
    let variable = Server::launch(command, dir.join("near-env.stderr")).unwrap();
    let default = Server::start(&path, &["--no-watch"]);
    for s in [&flag, &variable, &default] {
        let mut c = s.client().await;
        assert_eq!(
            admitted(&mut c, "ops", &desc(&[("client", "a")]), 7).await,
            7
        );
    }
    // Half of 10 is 5: the sixth and seventh calls are near; at 0.8 none of the seven is.
    assert_eq!(flag.metric(series), 2);
    assert_eq!(variable.metric(series), 2);
    assert_eq!(default.metric(series), 0);
}

#[tokio::test]
async fn a_request_of_several_units_is_split_between_the_statistics_at_each_threshold() {
    let dir = scratch("near-split");
    let path = write_config(
        &dir,
        "split.yaml",
        "domain: ops\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 10}\n",
    );
    let s = Server::start(&path, &["--no-watch"]);
    let mut c = s.client().await;
    let units = |n: u64| req("ops", vec![with_hits(desc(&[("client", "a")]), n)]);
    // 6 of 10 (nothing near: 8 is the threshold), 3 more (to 9: one unit past 8), then 6 with
    // 1 left: denied, 5 units past the limit and 1 between 9 and 10.
    assert_eq!(call(&mut c, units(6)).await.overall_code, OK);
    assert_eq!(call(&mut c, units(3)).await.overall_code, OK);
    assert_eq!(call(&mut c, units(6)).await.overall_code, OVER);
    let stat = |name: &str| {
        s.metric(&format!(
            r#"ratelimit_service_rate_limit_{name}_total{{domain="ops",key="client"}}"#
        ))
    };
    assert_eq!(stat("total_hits"), 15);
    assert_eq!(stat("within_limit"), 9);
    assert_eq!(stat("near_limit"), 2);
    assert_eq!(stat("over_limit"), 5);
}
