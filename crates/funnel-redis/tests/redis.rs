//! funnel-redis against a real `redis-server` started by each test.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use funnel::{Limiter, Quota, Timestamp};
use funnel_redis::{Error, OnFailure, RedisLimiter, Source};
use support::server::Server;

const GENEROUS: Duration = Duration::from_secs(2);

async fn limiter(server: &Server, quota: Quota) -> RedisLimiter {
    RedisLimiter::builder(server.url(), quota)
        .timeout(GENEROUS)
        .build()
        .await
        .expect("limiter")
}

/// The five integers of every answer equal the in-process limiter's, fed the same times (the
/// server's, which each answer carries), for several quotas and costs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_integers_match_the_in_process_limiter() {
    let server = Server::start();
    let quotas = [
        Quota::new(15, 30, Duration::from_secs(60)).unwrap(),
        Quota::new(4, 1, Duration::from_secs(1)).unwrap(),
        Quota::new(0, 10, Duration::from_secs(1)).unwrap(),
        Quota::new(99, 1000, Duration::from_secs(1)).unwrap(),
    ];
    let costs = [1, 1, 3, 0, 5, 1, 20, 2, 1, 1, 1, 7, 0, 1, 16, 1];
    for (qi, quota) in quotas.into_iter().enumerate() {
        let remote = limiter(&server, quota).await;
        let local = Limiter::<str>::builder(quota).build().unwrap();
        let key = format!("five-{qi}");
        for (i, &n) in costs.iter().enumerate() {
            let checked = remote.check_n(&key, n).await.unwrap();
            assert_eq!(checked.source, Source::Redis);
            let now = checked.server_now.expect("Redis decided");
            let expected = local.throttle_at(&key, &quota, n, now);
            assert_eq!(
                checked.decision.to_cl_throttle(),
                expected.to_cl_throttle(),
                "quota #{qi}, request #{i} (cost {n})"
            );
            assert_eq!(checked.decision, expected, "quota #{qi}, request #{i}");
            if i % 4 == 3 {
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }
    }
}

/// The replay file's requests (its quotas and costs, one `RedisLimiter` per quota sharing one
/// key space, as CL.THROTTLE takes its parameters per call), decided by Redis at the server's
/// times: the five integers equal the in-process limiter's fed the same times. Lines the
/// replay parser rejects (bad arguments) are rejected by `Quota::from_cl_throttle` here too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_integers_match_on_the_replay_cases() {
    let server = Server::start();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/data/replay.txt"
    );
    let text = std::fs::read_to_string(path).expect("the replay file");
    let local = Limiter::<str>::builder(Quota::per_second(1).unwrap())
        .build()
        .unwrap();
    let mut decided = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let nums: Vec<i64> = f.iter().skip(2).filter_map(|x| x.parse().ok()).collect();
        if f.len() < 5 || f[0].parse::<u64>().is_err() || nums.len() != f.len() - 2 {
            continue; // malformed line: the replay parser's business
        }
        let Ok(quota) = Quota::from_cl_throttle(nums[0], nums[1], nums[2]) else {
            continue;
        };
        let Ok(n) = u64::try_from(nums.get(3).copied().unwrap_or(1)) else {
            continue;
        };
        let remote = RedisLimiter::builder(server.url(), quota)
            .prefix("replay:")
            .timeout(GENEROUS)
            .build()
            .await
            .expect("every replay quota has a whole-microsecond interval");
        let key = f[1];
        let checked = remote.check_n(key, n).await.unwrap();
        let now = checked.server_now.unwrap();
        let expected = local.throttle_at(key, &quota, n, now);
        assert_eq!(
            checked.decision.to_cl_throttle(),
            expected.to_cl_throttle(),
            "{line}"
        );
        decided += 1;
    }
    assert_eq!(decided, 12, "every valid line of the replay file");
}

/// Four instances, each with its own connection, 200 concurrent requests on one key limited
/// to 50 an hour: exactly 50 admitted in total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_instances_admits_exactly_the_limit() {
    let server = Server::start();
    let quota = Quota::new(49, 1, Duration::from_secs(3600)).unwrap();
    let mut fleet = Vec::new();
    for _ in 0..4 {
        fleet.push(Arc::new(limiter(&server, quota).await));
    }
    let mut tasks = Vec::new();
    for i in 0..200 {
        let instance = fleet[i % 4].clone();
        tasks.push(tokio::spawn(async move {
            instance
                .check("shared")
                .await
                .unwrap()
                .decision
                .is_allowed()
        }));
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += usize::from(t.await.unwrap());
    }
    assert_eq!(admitted, 50);
    let round_trips: u64 = fleet.iter().map(|l| l.stats().redis_decisions).sum();
    assert_eq!(round_trips, 200);
}

/// `check_many`: one round trip for a batch, the answers of the script taken in order (equal
/// to the in-process limiter fed the same server times), and the keys the deny cache knows
/// answered without Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_many_decides_a_batch_in_order_in_one_round_trip() {
    let server = Server::start();
    let quota = Quota::new(2, 1, Duration::from_secs(60)).unwrap(); // limit 3
    let remote = RedisLimiter::builder(server.url(), quota)
        .timeout(GENEROUS)
        .deny_cache(100)
        .build()
        .await
        .unwrap();
    let local = Limiter::<str>::builder(quota).build().unwrap();
    let keys = ["a", "b", "a", "a", "c", "a", "b", "b", "b"];
    let answers = remote.check_many(&keys, 1).await.unwrap();
    assert_eq!(answers.len(), keys.len());
    for (key, c) in keys.iter().zip(&answers) {
        assert_eq!(c.source, Source::Redis);
        let expected = local.throttle_at(key, &quota, 1, c.server_now.unwrap());
        assert_eq!(c.decision, expected, "{key}");
    }
    let allowed: Vec<bool> = answers.iter().map(|c| c.decision.is_allowed()).collect();
    assert_eq!(
        allowed,
        [true, true, true, true, true, false, true, true, false]
    );
    let stats = remote.stats();
    assert_eq!((stats.round_trips, stats.redis_decisions), (1, 9));
    // "a" and "b" are now known denied: only "c" and "d" go to Redis.
    let again = remote.check_many(&["a", "c", "b", "d"], 1).await.unwrap();
    let sources: Vec<Source> = again.iter().map(|c| c.source).collect();
    assert_eq!(
        sources,
        [
            Source::DenyCache,
            Source::Redis,
            Source::DenyCache,
            Source::Redis
        ]
    );
    let stats = remote.stats();
    assert_eq!(
        (
            stats.round_trips,
            stats.redis_decisions,
            stats.cache_denials
        ),
        (2, 11, 2)
    );
}

/// An abusive key: after Redis's first denial the cache answers it locally, and every local
/// denial is one Redis would give too (checked against the stored arrival time and the
/// server's clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_cache_answers_an_abuser_locally_and_never_admits_what_redis_denies() {
    let server = Server::start();
    let quota = Quota::new(4, 1, Duration::from_secs(10)).unwrap(); // limit 5, 1 per 10 s
    let cached = RedisLimiter::builder(server.url(), quota)
        .timeout(GENEROUS)
        .deny_cache(1_000)
        .build()
        .await
        .unwrap();
    let mut inspect = server.connection();
    let mut allowed = 0;
    for i in 0..300 {
        let c = cached.check("abuser").await.unwrap();
        allowed += usize::from(c.decision.is_allowed());
        if c.source == Source::DenyCache {
            assert!(!c.decision.is_allowed());
            // What Redis would answer now.
            let tat: u64 = redis::cmd("GET")
                .arg(cached.redis_key("abuser"))
                .query(&mut inspect)
                .unwrap();
            let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut inspect).unwrap();
            let now = Timestamp::from_nanos((secs * 1_000_000 + micros) * 1_000).unwrap();
            let (d, _) = quota.decide_at(Timestamp::from_nanos(tat * 1_000).unwrap(), now, 1);
            assert!(
                !d.is_allowed(),
                "request #{i}: the cache denied what Redis allows"
            );
        }
    }
    assert_eq!(allowed, 5);
    let stats = cached.stats();
    assert!(
        stats.redis_decisions <= 10 && stats.cache_denials >= 290,
        "round trips should stop once the key is denied: {stats:?}"
    );
    // Invalidation sends the key to Redis again.
    cached.invalidate("abuser");
    let before = cached.stats().round_trips;
    let c = cached.check("abuser").await.unwrap();
    assert_eq!(c.source, Source::Redis);
    assert_eq!(cached.stats().round_trips, before + 1);
}

/// A key holding another type is a typed error, not a guess and not an overwrite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_a_typed_error() {
    let server = Server::start();
    let quota = Quota::per_second(10).unwrap();
    let l = limiter(&server, quota).await;
    let mut con = server.connection();
    let _: () = redis::cmd("HSET")
        .arg(l.redis_key("hashed"))
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    match l.check("hashed").await {
        Err(Error::Reply(m)) => assert!(m.contains("WRONGTYPE"), "{m}"),
        other => panic!("expected a typed reply error, got {other:?}"),
    }
    let kind: String = redis::cmd("TYPE")
        .arg(l.redis_key("hashed"))
        .query(&mut con)
        .unwrap();
    assert_eq!(kind, "hash", "the key was left alone");
}

#[tokio::test]
async fn a_sub_microsecond_interval_is_refused_when_built() {
    // 3 per second: 333,333,333.3 ns, truncated to 333,333,333 ns, not whole microseconds.
    let result = RedisLimiter::builder("redis://127.0.0.1:1/", Quota::per_second(3).unwrap())
        .build()
        .await;
    assert!(matches!(result, Err(Error::SubMicrosecondQuota { .. })));
}

/// With the server frozen (SIGSTOP), each policy answers within about the timeout and says
/// so; once it thaws, Redis decides again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_policy_answers_a_frozen_server_within_the_timeout() {
    let server = Server::start();
    let quota = Quota::new(1, 1, Duration::from_secs(1)).unwrap(); // limit 2
    let timeout = Duration::from_millis(50);
    let mut limiters = Vec::new();
    for policy in [
        OnFailure::Open,
        OnFailure::Closed,
        OnFailure::Local { instances: 2 },
    ] {
        let l = RedisLimiter::builder(server.url(), quota)
            .timeout(timeout)
            .on_failure(policy)
            .prefix(format!("{policy:?}:"))
            .build()
            .await
            .unwrap();
        assert_eq!(l.check("k").await.unwrap().source, Source::Redis);
        limiters.push(l);
    }
    server.pause();
    for l in &limiters {
        let started = Instant::now();
        let c = l.check("k").await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "waited {:?}",
            started.elapsed()
        );
        assert_eq!(l.stats().timeouts, 1);
        match c.source {
            Source::FailedOpen => assert!(c.decision.is_allowed()),
            Source::FailedClosed => assert!(!c.decision.is_allowed()),
            Source::LocalFallback => {
                // The local share of a limit of 2 over 2 instances is 1: one allowed, then not.
                assert!(c.decision.is_allowed());
                assert!(!l.check("k").await.unwrap().decision.is_allowed());
            }
            other => panic!("{other:?} while the server is frozen"),
        }
    }
    server.resume();
    for l in &limiters {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if l.check_n("k", 0).await.unwrap().source == Source::Redis {
                break;
            }
            assert!(Instant::now() < deadline, "Redis never answered again");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The server killed and restarted on the same port: the limiter fails closed meanwhile, then
/// reconnects by itself and counts again (from zero: the server kept nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counting_resumes_after_the_server_is_killed_and_restarted() {
    let mut server = Server::start();
    let quota = Quota::new(2, 1, Duration::from_secs(3600)).unwrap(); // limit 3
    let l = RedisLimiter::builder(server.url(), quota)
        .timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    for _ in 0..3 {
        assert!(l.check("k").await.unwrap().decision.is_allowed());
    }
    server.kill();
    let c = l.check("k").await.unwrap();
    assert_eq!(c.source, Source::FailedClosed);
    assert!(!c.decision.is_allowed());
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    let first = loop {
        let c = l.check("k").await.unwrap();
        if c.source == Source::Redis {
            break c;
        }
        assert!(Instant::now() < deadline, "never reconnected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        first.decision.is_allowed(),
        "a fresh server starts a fresh funnel"
    );
    assert!(l.check("k").await.unwrap().decision.is_allowed());
    assert!(l.check("k").await.unwrap().decision.is_allowed());
    assert!(
        !l.check("k").await.unwrap().decision.is_allowed(),
        "counting resumed"
    );
}
