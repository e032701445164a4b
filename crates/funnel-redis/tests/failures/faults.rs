//! Faults against a real `redis-server`: frozen (SIGSTOP), killed and restarted, down when the
//! limiter is built, demoted to a replica (`READONLY`), out of memory (`OOM`), its clients
//! killed mid-pipeline (`CLIENT KILL`), evicting funnels (`allkeys-lru`); and, from a fake
//! server, the replies a real one is hard to bring into (`LOADING`, `BUSY`, `MASTERDOWN`).
//! Each failure policy does what it says, nothing waits past the timeout by more than
//! `MARGIN`, and Redis decides, and counts, again once it is back.
//!
//! Each test holds [`SERIAL`]: its timing bounds measure the limiter, not other tests.

use std::future::Future;
use std::time::{Duration, Instant};

use funnel::Quota;
use funnel_redis::{Checked, Error, Failure, OnFailure, RedisLimiter, Source};
use funnel_testkit::redis_server::{info_field_on, inspect, server, server_with};

use crate::SERIAL;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The limiters' timeout in this file.
const TIMEOUT: Duration = Duration::from_millis(50);
/// How far past the timeout an answer may come: a timer tick, a scheduling delay on a shared
/// 2-core machine, and the policy's own work.
const MARGIN: Duration = Duration::from_millis(50);

const POLICIES: [OnFailure; 4] = [
    OnFailure::Open,
    OnFailure::Closed,
    OnFailure::Local { instances: 2 },
    OnFailure::Report,
];

/// Limit 4, one per hour: Redis's answers are predictable for the whole test.
fn quota() -> Quota {
    Quota::per_hour(1).unwrap().with_limit(4).unwrap()
}

async fn limiter(url: String, policy: OnFailure) -> RedisLimiter {
    RedisLimiter::builder(url, quota())
        .timeout(TIMEOUT)
        .on_failure(policy)
        .prefix(format!("{policy:?}:"))
        .build()
        .await
        .expect("a limiter")
}

/// Runs `f`, asserting it answered within the timeout and the margin.
async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = f.await;
    let took = started.elapsed();
    assert!(
        took <= TIMEOUT + MARGIN,
        "{what}: answered after {took:?} (timeout {TIMEOUT:?} + margin {MARGIN:?})"
    );
    out
}

/// Asserts that `answer` is what `policy` gives for `failure`; `nth` counts the failed
/// requests for this key so far (1 for the first), for the local share.
fn assert_policy(policy: OnFailure, answer: Result<Checked, Error>, failure: Failure, nth: u32) {
    match policy {
        OnFailure::Report => match answer {
            Err(Error::Unavailable(f)) => assert_eq!(f, failure),
            other => panic!("Report: expected Unavailable({failure:?}), got {other:?}"),
        },
        _ => {
            let c = answer.unwrap_or_else(|e| panic!("{policy:?}: {e}"));
            assert_eq!(c.failure, Some(failure), "{policy:?}");
            let expected = match policy {
                OnFailure::Open => (Source::FailedOpen, true),
                OnFailure::Closed => (Source::FailedClosed, false),
                // The local share of a limit of 4 over 2 instances is 2.
                _ => (Source::LocalFallback, nth <= 2),
            };
            assert_eq!(
                (c.source, c.decision.is_allowed()),
                expected,
                "{policy:?} #{nth}"
            );
        }
    }
}

/// Waits until Redis decides `key` for `limiter` again, peeking, for up to 10 s.
async fn until_redis_decides(limiter: &RedisLimiter, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(c) = limiter.check_n(key, 0).await {
            if c.source == Source::Redis {
                return;
            }
        }
        assert!(Instant::now() < deadline, "Redis never decided again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// After an outage: a new key counts from zero to the limit (4) and is denied after.
async fn assert_counting(limiter: &RedisLimiter, key: &str) {
    for i in 0..5 {
        let c = limiter.check(key).await.unwrap();
        assert_eq!(c.source, Source::Redis);
        assert_eq!(c.decision.is_allowed(), i < 4, "request #{i} for {key}");
    }
}

/// Every policy's counters add up: each failure counted once by cause, once by path.
fn assert_counted(limiter: &RedisLimiter, policy: OnFailure) {
    let s = limiter.stats();
    let paths = s.failed_open + s.failed_closed + s.answered_locally + s.reported;
    assert_eq!(s.timeouts + s.redis_errors, paths, "{policy:?}: {s:?}");
    let own = match policy {
        OnFailure::Open => s.failed_open,
        OnFailure::Closed => s.failed_closed,
        OnFailure::Local { .. } => s.answered_locally,
        _ => s.reported,
    };
    assert_eq!(own, paths, "{policy:?}: only its own path: {s:?}");
}

/// The server frozen: every policy answers single requests and batches within the timeout,
/// as a timeout; after the thaw Redis decides again and counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_policy_answers_within_the_timeout_while_the_server_is_frozen() {
    let _serial = SERIAL.lock().await;
    let Some(server) = server() else { return };
    let mut limiters = Vec::new();
    for policy in POLICIES {
        let l = limiter(server.url(), policy).await;
        assert_eq!(l.check("warm").await.unwrap().source, Source::Redis);
        limiters.push((policy, l));
    }
    server.pause();
    for (policy, l) in &limiters {
        for nth in 1..=3 {
            let answer = bounded(&format!("{policy:?} check"), l.check("k")).await;
            assert_policy(*policy, answer, Failure::Timeout, nth);
        }
        let batch = bounded(
            &format!("{policy:?} check_many"),
            l.check_many(&["x", "y"], 1),
        )
        .await;
        for answer in batch {
            assert_policy(*policy, answer, Failure::Timeout, 1);
        }
        assert_eq!(l.stats().timeouts, 5, "{policy:?}");
        assert_counted(l, *policy);
    }
    server.resume();
    for (_, l) in &limiters {
        until_redis_decides(l, "after").await;
        assert_counting(l, "after").await;
    }
}

/// The server killed, then restarted on the same port with nothing kept: every policy
/// answers within the timeout meanwhile (a refused connection, or a timeout while the
/// client reconnects), then the limiter reconnects by itself and counts from zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_policy_answers_while_the_server_is_killed_and_counting_resumes_after_restart() {
    let _serial = SERIAL.lock().await;
    let Some(mut server) = server() else { return };
    let mut limiters = Vec::new();
    for policy in POLICIES {
        let l = limiter(server.url(), policy).await;
        for _ in 0..4 {
            assert!(l.check("k").await.unwrap().decision.is_allowed());
        }
        limiters.push((policy, l));
    }
    server.kill();
    for (policy, l) in &limiters {
        for nth in 1..=3 {
            let answer = bounded(&format!("{policy:?} check"), l.check("k")).await;
            let failure = match &answer {
                Ok(c) => c.failure.expect("the policy answered"),
                Err(Error::Unavailable(f)) => *f,
                Err(e) => panic!("{policy:?}: {e}"),
            };
            assert!(matches!(failure, Failure::Connection | Failure::Timeout));
            assert_policy(*policy, answer, failure, nth);
        }
        let batch = bounded(&format!("{policy:?} check_many"), l.check_many(&["x"], 1)).await;
        assert_eq!(batch.len(), 1);
        assert!(match &batch[0] {
            Ok(c) => c.failure.is_some(),
            Err(e) => matches!(e, Error::Unavailable(_)),
        });
        assert_counted(l, *policy);
    }
    server.restart().unwrap();
    for (_, l) in &limiters {
        until_redis_decides(l, "k").await;
        // The restarted server kept nothing: "k" counts from zero again.
        assert_counting(l, "k").await;
    }
}

/// Redis down when the limiter is built: `build` succeeds under every policy but `Report`,
/// answers by the policy within the timeout, and decides once Redis is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limiter_built_while_redis_is_down_answers_by_policy_then_connects() {
    let _serial = SERIAL.lock().await;
    let Some(mut server) = server() else { return };
    server.kill();
    for policy in POLICIES {
        let started = Instant::now();
        let built = RedisLimiter::builder(server.url(), quota())
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_millis(500))
            .on_failure(policy)
            .build()
            .await;
        assert!(started.elapsed() < Duration::from_millis(500) + MARGIN);
        if policy == OnFailure::Report {
            assert!(matches!(built, Err(Error::Connect { .. })), "{built:?}");
            continue;
        }
        let l = built.unwrap_or_else(|e| panic!("{policy:?}: {e}"));
        let answer = bounded(&format!("{policy:?} check"), l.check("k")).await;
        let failure = answer.as_ref().unwrap().failure.unwrap();
        assert!(matches!(failure, Failure::Connection | Failure::Timeout));
        assert_policy(policy, answer, failure, 1);
    }
    let l = limiter(server.url(), OnFailure::Open).await;
    server.restart().unwrap();
    until_redis_decides(&l, "k").await;
    assert_counting(&l, "k").await;
}

/// Redis down for longer than the first retries when the limiter is built: once it is back,
/// the limiter decides within the link's longest backoff (1 s; the bound leaves 2 s for a
/// loaded machine), however long the outage was.
/// (With the `redis` crate's own retries inside the connection manager, the attempt after
/// about 1.5 s was followed by one about 2 minutes later, so this took minutes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_long_outage_at_startup_redis_decides_within_the_backoff_of_coming_back() {
    let _serial = SERIAL.lock().await;
    let Some(mut server) = server() else { return };
    server.kill();
    let l = limiter(server.url(), OnFailure::Open).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    server.restart().unwrap();
    let back = Instant::now();
    until_redis_decides(&l, "k").await;
    let took = back.elapsed();
    assert!(
        took < Duration::from_secs(1) + Duration::from_secs(2),
        "Redis decided {took:?} after it came back"
    );
    assert_counting(&l, "k").await;
}

/// The server demoted to a replica (`REPLICAOF` a primary that never answers, so no sync
/// starts): an allowed request, which must write, gets `READONLY`, answered by the policy as
/// `Failure::ReadOnly`; promoted again, it decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_server_is_a_read_only_failure_for_the_policy() {
    let _serial = SERIAL.lock().await;
    let Some(server) = server() else { return };
    let limiters = [
        limiter(server.url(), OnFailure::Closed).await,
        limiter(server.url(), OnFailure::Report).await,
    ];
    let mut con = inspect(&server);
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(1)
        .query(&mut con)
        .unwrap();
    for (l, policy) in limiters.iter().zip([OnFailure::Closed, OnFailure::Report]) {
        let answer = bounded("READONLY", l.check("k")).await;
        assert_policy(policy, answer, Failure::ReadOnly, 1);
        assert_eq!(l.stats().redis_errors, 1);
    }
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut con)
        .unwrap();
    for l in &limiters {
        until_redis_decides(l, "after").await;
        assert_counting(l, "after").await;
    }
}

/// `maxmemory` reached under `noeviction`: the script's write gets `OOM`, answered by the
/// policy as `Failure::OutOfMemory`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_is_an_out_of_memory_failure_for_the_policy() {
    let _serial = SERIAL.lock().await;
    let Some(server) = server() else { return };
    let l = limiter(server.url(), OnFailure::Local { instances: 2 }).await;
    let mut con = inspect(&server);
    let set = |con: &mut redis::Connection, bytes: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(bytes)
            .query(con)
            .unwrap();
    };
    set(&mut con, "1");
    let answer = bounded("OOM", l.check("k")).await;
    assert_policy(
        OnFailure::Local { instances: 2 },
        answer,
        Failure::OutOfMemory,
        1,
    );
    set(&mut con, "0");
    assert_counting(&l, "after").await;
}

/// Replies a real server is hard to bring into, from a fake one: each is a failure for the
/// policy, of the kind it names; `MOVED` on a single-server limiter is a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_busy_and_masterdown_replies_go_to_the_policy_and_moved_is_an_error() {
    let _serial = SERIAL.lock().await;
    for (reply, failure) in [
        (
            "LOADING Redis is loading the dataset in memory",
            Failure::Loading,
        ),
        ("BUSY Redis is busy running a script", Failure::Unavailable),
        ("MASTERDOWN Link with MASTER is down", Failure::Unavailable),
        (
            "TRYAGAIN Multiple keys request during rehashing of slot",
            Failure::Unavailable,
        ),
    ] {
        let url = fake_server(reply).await;
        for policy in POLICIES {
            let l = limiter(url.clone(), policy).await;
            let answer = bounded(reply, l.check("k")).await;
            assert_policy(policy, answer, failure, 1);
            for answer in l.check_many(&["a", "b"], 1).await {
                assert_policy(policy, answer, failure, 1);
            }
            assert_counted(&l, policy);
        }
    }
    let url = fake_server("MOVED 3999 127.0.0.1:6381").await;
    let l = limiter(url, OnFailure::Open).await;
    assert!(matches!(l.check("k").await, Err(Error::WrongNode { .. })));
    assert_eq!(l.stats().typed_errors, 1);
}

/// A fake Redis on a loopback port: `CLIENT ...` (the client's handshake) gets `+OK`, `PING`
/// `+PONG`, every other command the error line `reply` (say `LOADING Redis is loading`).
/// Returns its URL; it lives as long as the runtime.
pub async fn fake_server(reply: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(read) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if read == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..read]);
                    let mut out = Vec::new();
                    while let Some((name, used)) = parse_command(&buf) {
                        buf.drain(..used);
                        let line = match name.to_ascii_uppercase().as_str() {
                            "CLIENT" => "+OK".to_string(),
                            "PING" => "+PONG".to_string(),
                            _ => format!("-{reply}"),
                        };
                        out.extend_from_slice(line.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                    if socket.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// One RESP command (an array of bulk strings) at the start of `buf`: its name and length.
fn parse_command(buf: &[u8]) -> Option<(String, usize)> {
    let line = |at: usize| -> Option<(&[u8], usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((&buf[at..end], end + 2))
    };
    let (head, mut at) = line(0)?;
    let count: usize = std::str::from_utf8(head.strip_prefix(b"*")?)
        .ok()?
        .parse()
        .ok()?;
    let mut name = String::new();
    for i in 0..count {
        let (len, next) = line(at)?;
        let len: usize = std::str::from_utf8(len.strip_prefix(b"$")?)
            .ok()?
            .parse()
            .ok()?;
        if buf.len() < next + len + 2 {
            return None;
        }
        if i == 0 {
            name = String::from_utf8_lossy(&buf[next..next + len]).into_owned();
        }
        at = next + len + 2;
    }
    Some((name, at))
}

/// Under `OnFailure::Closed`, a denial during an outage (here a frozen server) carries the
/// outage's retry-after (the reconnect backoff by default, or the one set), not the quota's
/// emission interval (an hour); a denial by Redis carries the quota's. Zero is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_denial_during_an_outage_carries_the_outage_retry_after() {
    let _serial = SERIAL.lock().await;
    let Some(server) = server() else { return };
    let one_an_hour = Quota::per_hour(1).unwrap();
    let build = |retry: Option<Duration>| {
        let mut b = RedisLimiter::builder(server.url(), one_an_hour)
            .timeout(TIMEOUT)
            .on_failure(OnFailure::Closed);
        if let Some(retry) = retry {
            b = b.outage_retry_after(retry);
        }
        b.build()
    };
    let default = build(None).await.unwrap();
    let set = build(Some(Duration::from_millis(250))).await.unwrap();
    assert!(default.check("k").await.unwrap().decision.is_allowed());
    let by_redis = default.check("k").await.unwrap();
    assert_eq!(by_redis.source, Source::Redis);
    assert!(by_redis.decision.retry_after().unwrap() > Duration::from_secs(3_500));
    server.pause();
    for (l, retry) in [
        (&default, Duration::from_secs(1)),
        (&set, Duration::from_millis(250)),
    ] {
        let c = bounded("Closed", l.check("other")).await.unwrap();
        assert_eq!(
            (c.source, c.failure),
            (Source::FailedClosed, Some(Failure::Timeout))
        );
        assert_eq!(c.decision.retry_after(), Some(retry));
    }
    server.resume();
    let zero = build(Some(Duration::ZERO)).await;
    assert!(
        matches!(
            zero,
            Err(Error::InvalidSetting {
                setting: "outage_retry_after",
                ..
            })
        ),
        "{zero:?}"
    );
}

/// `CLIENT KILL` of the limiter's connections, again and again, while pipelines and single
/// requests are in flight: each request on a killed connection is answered by the policy
/// (`Closed`: denied) as a connection failure, never as an error, the limiter connects again
/// by itself, and no key is ever admitted beyond its limit: what Redis admitted is at most what
/// it charged (a request it ran whose reply the kill lost is charged, and denied by the
/// policy), and what it charged is at most the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_mid_pipeline_is_a_connection_failure_and_admits_nothing_beyond_the_limit() {
    let _serial = SERIAL.lock().await;
    let Some(server) = server() else { return };
    const LIMIT: u64 = 20;
    let quota = Quota::per_hour(1).unwrap().with_limit(LIMIT).unwrap();
    let l = std::sync::Arc::new(
        RedisLimiter::builder(server.url(), quota)
            .timeout(TIMEOUT)
            .on_failure(OnFailure::Closed)
            .build()
            .await
            .unwrap(),
    );
    let keys: Vec<String> = (0..16).map(|i| format!("key-{i}")).collect();
    let admitted: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, u64>>> =
        Default::default();
    let until = Instant::now() + Duration::from_millis(1_000);
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (l, keys, admitted) = (l.clone(), keys.clone(), admitted.clone());
            tokio::spawn(async move {
                let mut connection_failures = 0;
                let mut round = 0usize;
                while Instant::now() < until {
                    round += 1;
                    let batch: Vec<&str> = (0..8)
                        .map(|j| keys[(w * 3 + round + j) % keys.len()].as_str())
                        .collect();
                    let answers = if round % 4 == 0 {
                        vec![l.check(batch[0]).await]
                    } else {
                        l.check_many(&batch, 1).await
                    };
                    for (key, answer) in batch.iter().zip(answers) {
                        let c = answer.unwrap_or_else(|e| panic!("{key}: {e}"));
                        match c.source {
                            Source::Redis if c.decision.is_allowed() => {
                                *admitted.lock().unwrap().entry(key.to_string()).or_default() += 1;
                            }
                            Source::Redis => {}
                            Source::FailedClosed => {
                                assert!(!c.decision.is_allowed());
                                let failure = c.failure.unwrap();
                                assert!(
                                    matches!(failure, Failure::Connection | Failure::Timeout),
                                    "{failure:?}"
                                );
                                connection_failures += u64::from(failure == Failure::Connection);
                            }
                            other => panic!("{other:?}"),
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                connection_failures
            })
        })
        .collect();
    let mut killer = inspect(&server);
    let mut killed = 0;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let n: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query(&mut killer)
            .unwrap();
        killed += n;
    }
    let mut connection_failures = 0;
    for w in workers {
        connection_failures += w.await.unwrap();
    }
    assert!(killed >= 5, "{killed} connections killed");
    assert!(
        connection_failures > 0,
        "no request was caught by a kill: {:?}",
        l.stats()
    );
    for key in &keys {
        until_redis_decides(&l, key).await;
        let c = l.check_n(key, 0).await.unwrap();
        let charged = LIMIT - c.decision.remaining();
        let admitted = admitted.lock().unwrap().get(key).copied().unwrap_or(0);
        assert!(
            admitted <= charged && charged <= LIMIT,
            "{key}: admitted {admitted}, charged {charged}"
        );
    }
    assert_eq!(l.stats().typed_errors, 0);
}

/// `maxmemory` with `allkeys-lru`: Redis evicts funnels like any other key to make room. No
/// request fails (an eviction policy never answers `OOM` while it can evict), and an evicted
/// funnel is forgiven: its key gets a full burst again, decided by Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allkeys_lru_evicts_funnels_and_an_evicted_key_gets_a_full_burst_again() {
    let _serial = SERIAL.lock().await;
    let Some(server) = server_with(&["--maxmemory-policy", "allkeys-lru"]) else {
        return;
    };
    let l = limiter(server.url(), OnFailure::Closed).await;
    let mut con = inspect(&server);
    let used: u64 = info_field_on(&mut con, "memory", "used_memory")
        .unwrap()
        .parse()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used + 2_000_000)
        .query(&mut con)
        .unwrap();
    for i in 0..5 {
        let c = l.check("victim").await.unwrap();
        assert_eq!((c.source, c.decision.is_allowed()), (Source::Redis, i < 4));
    }
    let victim = l.redis_key("victim");
    let filler = vec![b'x'; 100_000];
    let mut evicted_after = None;
    for i in 0..2_000 {
        let _: () = redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(&filler)
            .query(&mut con)
            .unwrap();
        // A key in use all along: Redis keeps deciding it, with no error.
        let hot = l.check_n("hot", 0).await.unwrap();
        assert_eq!(hot.source, Source::Redis, "{hot:?}");
        let exists: bool = redis::cmd("EXISTS").arg(&victim).query(&mut con).unwrap();
        if !exists {
            evicted_after = Some(i);
            break;
        }
    }
    assert!(
        evicted_after.is_some(),
        "the victim's funnel was never evicted"
    );
    assert_counting(&l, "victim").await;
    let s = l.stats();
    assert_eq!((s.redis_errors, s.typed_errors), (0, 0), "{s:?}");
}
