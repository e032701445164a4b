//! Replies and settings that are errors of their own type, never a policy's guess.

use std::time::Duration;

use crate::common::limiter;
use funnel::Quota;
use funnel_redis::{Backend, Error, OnFailure, RedisLimiter, Source};
use funnel_testkit::redis_server::{inspect, server};

/// A key holding another type is `Error::WrongType`, for `check` and for that key alone in a
/// `check_many`; the key is left alone, and the other keys of the batch are decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_a_typed_error_and_is_left_alone() {
    let Some(server) = server() else { return };
    let l = limiter(&server, Quota::per_second(10).unwrap()).await;
    let mut con = inspect(&server);
    let _: () = redis::cmd("HSET")
        .arg(l.redis_key("hashed"))
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    match l.check("hashed").await {
        Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, l.redis_key("hashed")),
        other => panic!("expected WrongType, got {other:?}"),
    }
    let batch = l.check_many(&["fine", "hashed", "also-fine"], 1).await;
    assert_eq!(batch[0].as_ref().unwrap().source, Source::Redis);
    assert!(matches!(batch[1], Err(Error::WrongType { .. })));
    assert_eq!(batch[2].as_ref().unwrap().source, Source::Redis);
    assert_eq!(l.stats().typed_errors, 2);
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
    assert!(matches!(
        result,
        Err(Error::SubMicrosecondQuota {
            emission_interval_ns: 333_333_333
        })
    ));
}

#[tokio::test]
async fn a_quota_cl_throttle_cannot_express_is_refused_for_the_cell_backend() {
    // One per 20,000 s: no whole-second period up to 10,000 s gives it.
    let quota = Quota::per_period(1, Duration::from_secs(20_000)).unwrap();
    let result = RedisLimiter::builder("redis://127.0.0.1:1/", quota)
        .backend(Backend::Cell)
        .build()
        .await;
    assert!(matches!(result, Err(Error::NotCellQuota { .. })));
}

#[tokio::test]
async fn a_bad_url_is_an_invalid_url_error() {
    let result = RedisLimiter::builder("not a url", Quota::per_second(10).unwrap())
        .build()
        .await;
    assert!(matches!(result, Err(Error::InvalidUrl(_))));
}

/// `Backend::Cell` on a server without redis-cell: refused when built (`MODULE LIST`), and
/// `CellModuleMissing` from the first request when the build could not ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cell_backend_without_the_module_is_a_typed_error() {
    let Some(mut server) = server() else { return };
    let quota = Quota::per_minute(30).unwrap().with_limit(16).unwrap();
    let probe = limiter(&server, quota).await;
    assert!(!probe.redis_cell_loaded().await.unwrap());
    let built = RedisLimiter::builder(server.url(), quota)
        .backend(Backend::Cell)
        .build()
        .await;
    assert!(matches!(built, Err(Error::CellModuleMissing)), "{built:?}");
    // Built while Redis is down, the limiter learns it from CL.THROTTLE's reply.
    server.kill();
    let l = RedisLimiter::builder(server.url(), quota)
        .backend(Backend::Cell)
        .on_failure(OnFailure::Open)
        .connect_timeout(Duration::from_millis(200))
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    server.restart().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match l.check("k").await {
            Err(Error::CellModuleMissing) => break,
            Ok(c) if c.failure.is_some() => {}
            other => panic!("expected CellModuleMissing, got {other:?}"),
        }
        assert!(std::time::Instant::now() < deadline, "never reconnected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server that refuses the connection (a wrong password) is a setting to fix: `build` fails
/// with `NoPermission` whatever the policy, and no policy answers requests in its place (under
/// `OnFailure::Open` that would be running without a limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_the_build_under_every_policy() {
    let Some(server) = server() else { return };
    let mut con = inspect(&server);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("secret")
        .query(&mut con)
        .unwrap();
    let wrong = server.url().replace("redis://", "redis://:wrong@");
    for policy in [OnFailure::Open, OnFailure::Closed, OnFailure::Report] {
        let built = RedisLimiter::builder(&wrong, Quota::per_second(10).unwrap())
            .on_failure(policy)
            .build()
            .await;
        match built {
            Err(Error::NoPermission { .. }) => {}
            Err(other) => panic!("{policy:?}: expected NoPermission, got {other:?}"),
            Ok(_) => panic!("{policy:?}: built on a server that refused us"),
        }
    }
}

/// A string under the key that is not an arrival time (another program's value) is
/// `Error::WrongType` too, and is left alone: never overwritten, never charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_string_is_a_typed_error_and_is_left_alone() {
    let Some(server) = server() else { return };
    let l = limiter(&server, Quota::per_second(10).unwrap()).await;
    let mut con = inspect(&server);
    for foreign in ["1.5", "-5", "abc", "nan", "inf", "", "1e300"] {
        let _: () = redis::cmd("SET")
            .arg(l.redis_key("foreign"))
            .arg(foreign)
            .query(&mut con)
            .unwrap();
        match l.check("foreign").await {
            Err(Error::WrongType { .. }) => {}
            other => panic!("{foreign:?}: expected WrongType, got {other:?}"),
        }
        let kept: String = redis::cmd("GET")
            .arg(l.redis_key("foreign"))
            .query(&mut con)
            .unwrap();
        assert_eq!(kept, foreign, "the value was left alone");
    }
}

/// A foreign key (a Redis hash, a string that is not an arrival time) gets the same answer from
/// `check` and from `check_many`, and the same counts: `Error::WrongType` naming its Redis key,
/// one typed error, one round trip, never the failure policy's answer (here `Open`, which would
/// admit it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_check_many_give_a_foreign_key_the_same_answer_and_counts() {
    let Some(server) = server() else { return };
    let quota = Quota::per_second(10).unwrap();
    let open = || {
        RedisLimiter::builder(server.url(), quota)
            .timeout(Duration::from_secs(2))
            .on_failure(OnFailure::Open)
            .build()
    };
    // Loaded once, so that neither limiter below pays a NOSCRIPT round trip.
    open().await.unwrap().check_n("warm", 0).await.unwrap();
    let mut con = inspect(&server);
    let planted = open().await.unwrap();
    let (hashed, string) = (planted.redis_key("hashed"), planted.redis_key("string"));
    let _: () = redis::cmd("HSET")
        .arg(&hashed)
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&string)
        .arg("abc")
        .query(&mut con)
        .unwrap();
    for (key, redis_key) in [("hashed", &hashed), ("string", &string)] {
        let one = open().await.unwrap();
        let many = open().await.unwrap();
        let alone = one.check(key).await;
        let batch = many.check_many(&[key], 1).await;
        for answer in [&alone, &batch[0]] {
            match answer {
                Err(Error::WrongType { redis_key: named }) => assert_eq!(named, redis_key),
                other => panic!("{key}: expected WrongType, got {other:?}"),
            }
        }
        assert_eq!(one.stats(), many.stats(), "{key}");
        assert_eq!((one.stats().typed_errors, one.stats().round_trips), (1, 1));
        let mixed = many.check_many(&["fine", key, "also-fine"], 1).await;
        assert_eq!(mixed[0].as_ref().unwrap().source, Source::Redis);
        assert!(matches!(mixed[1], Err(Error::WrongType { .. })), "{key}");
        assert_eq!(mixed[2].as_ref().unwrap().source, Source::Redis);
    }
    let kind: String = redis::cmd("TYPE").arg(&hashed).query(&mut con).unwrap();
    let kept: String = redis::cmd("GET").arg(&string).query(&mut con).unwrap();
    assert_eq!(
        (kind.as_str(), kept.as_str()),
        ("hash", "abc"),
        "left alone"
    );
}
