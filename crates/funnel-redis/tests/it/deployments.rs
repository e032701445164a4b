//! The ways a deployment reaches Redis, each against real `redis-server` processes started
//! here: a primary found through Redis Sentinel (and found again after the sentinel promotes
//! its replica), a server that requires a password, and one reached over TLS with a
//! certificate authority made for the test.

use std::time::{Duration, Instant};

use funnel::Quota;
use funnel_redis::{Error, OnFailure, RedisLimiter, Source};
use funnel_testkit::redis_server::{sentinel, server_with, tls_server, RedisSentinel};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_found_through_sentinel_is_followed_after_a_failover() {
    let Some(mut group) = sentinel() else { return };
    let quota = Quota::per_hour(3).unwrap();
    let limiter = RedisLimiter::builder("unused", quota)
        .sentinel(RedisSentinel::MASTER_NAME, [group.sentinel_url()])
        .timeout(Duration::from_secs(2))
        .on_failure(OnFailure::Report)
        .build()
        .await
        .expect("a limiter through the sentinel");
    let admitted = {
        let mut n = 0;
        for _ in 0..5 {
            let c = limiter.check("client").await.expect("decided");
            assert_eq!(c.source, Source::Redis);
            n += usize::from(c.decision.is_allowed());
        }
        n
    };
    assert_eq!(admitted, 3);
    // The writes reached the primary the sentinel named.
    let primary_port = group.primary().port();
    assert_eq!(group.primary_port().unwrap(), primary_port);

    // The primary dies; the sentinel promotes the replica; the limiter follows.
    group.primary().kill();
    let deadline = Instant::now() + Duration::from_secs(60);
    let replica_port = group.replica().port();
    loop {
        if let Ok(c) = limiter.check("after-failover").await {
            assert_eq!(c.source, Source::Redis);
            assert!(c.decision.is_allowed());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no decision through the sentinel within 60 s of the primary's death"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        group.primary_port().unwrap(),
        replica_port,
        "the replica was promoted"
    );
    let stored: bool = redis::cmd("EXISTS")
        .arg(limiter.redis_key("after-failover"))
        .query(&mut group.replica().connection().unwrap())
        .unwrap();
    assert!(stored, "the decision was taken on the promoted replica");
}

#[tokio::test]
async fn a_sentinel_that_does_not_know_the_master_name_is_a_connection_failure() {
    let Some(group) = sentinel() else { return };
    let e = RedisLimiter::builder("unused", Quota::per_second(1).unwrap())
        .sentinel("no-such-primary", [group.sentinel_url()])
        .on_failure(OnFailure::Report)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Connect { .. }), "{e}");
}

#[tokio::test]
async fn a_password_is_taken_from_the_url_or_from_auth_and_a_wrong_one_is_refused() {
    let Some(redis) = server_with(&["--requirepass", "s3cret"]) else {
        return;
    };
    let quota = Quota::per_hour(2).unwrap();
    let port = redis.port();
    let in_url = RedisLimiter::builder(format!("redis://:s3cret@127.0.0.1:{port}/"), quota)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("the URL's password");
    assert!(in_url.check("k").await.unwrap().decision.is_allowed());
    let by_auth = RedisLimiter::builder(redis.url(), quota)
        .auth(None, "s3cret")
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("auth's password");
    assert!(by_auth.check("k").await.unwrap().decision.is_allowed());
    assert!(!by_auth.check("k").await.unwrap().decision.is_allowed());
    let wrong = RedisLimiter::builder(redis.url(), quota)
        .auth(Some("default".into()), "wrong")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(wrong, Error::NoPermission { .. }), "{wrong}");
}

#[tokio::test]
async fn a_rediss_url_is_reached_over_tls_checked_against_the_given_authority() {
    let Some(tls) = tls_server() else { return };
    let quota = Quota::per_hour(2).unwrap();
    let limiter = RedisLimiter::builder(tls.tls_url(), quota)
        .tls_root_certificate(tls.ca_pem())
        .timeout(Duration::from_secs(2))
        .on_failure(OnFailure::Report)
        .build()
        .await
        .expect("a limiter over TLS");
    let first = limiter.check("k").await.expect("decided over TLS");
    assert_eq!(first.source, Source::Redis);
    assert!(first.decision.is_allowed());
    let stored: bool = redis::cmd("EXISTS")
        .arg(limiter.redis_key("k"))
        .query(&mut tls.server().connection().unwrap())
        .unwrap();
    assert!(stored, "the decision was taken on this server");
    // Without the authority, the server's certificate is not trusted: no connection.
    let untrusted = RedisLimiter::builder(tls.tls_url(), quota)
        .timeout(Duration::from_secs(2))
        .on_failure(OnFailure::Report)
        .build()
        .await;
    assert!(
        untrusted.is_err(),
        "a certificate of an unknown authority is refused"
    );
}
