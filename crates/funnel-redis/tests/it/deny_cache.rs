//! The local deny cache: it answers known-denied keys without Redis, never denies what Redis
//! would allow, differs from Redis after a reset elsewhere until invalidated, and the round
//! trips it saves are counted exactly.

use std::time::Duration;

use crate::common::GENEROUS;
use funnel::{Quota, Timestamp};
use funnel_redis::{RedisLimiter, Source};
use funnel_testkit::redis_server::{inspect, server, server_with, RedisServer};

async fn cached(server: &RedisServer, quota: Quota) -> RedisLimiter {
    RedisLimiter::builder(server.url(), quota)
        .timeout(GENEROUS)
        .deny_cache(1_000)
        .build()
        .await
        .unwrap()
}

/// An abusive key: after Redis's first denial the cache answers it locally, and every local
/// denial is one Redis would give too (checked against the stored arrival time and the
/// server's clock, read after the cache answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_cache_answers_an_abuser_locally_and_never_denies_what_redis_allows() {
    let Some(server) = server() else { return };
    let quota = Quota::per_period(1, Duration::from_secs(10))
        .unwrap()
        .with_limit(5)
        .unwrap(); // limit 5, 1 per 10 s
    let limiter = cached(&server, quota).await;
    let mut inspect = inspect(&server);
    let mut allowed = 0;
    for i in 0..300 {
        let c = limiter.check("abuser").await.unwrap();
        allowed += usize::from(c.decision.is_allowed());
        if c.source == Source::DenyCache {
            assert!(!c.decision.is_allowed());
            let tat: u64 = redis::cmd("GET")
                .arg(limiter.redis_key("abuser"))
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
    let stats = limiter.stats();
    assert!(
        stats.redis_decisions <= 10 && stats.cache_denials >= 290,
        "round trips should stop once the key is denied: {stats:?}"
    );
}

/// Another instance resets the key in Redis: this instance's cache goes on denying it (the
/// documented difference) until `invalidate`, after which Redis decides, and allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_elsewhere_is_seen_once_the_key_is_invalidated() {
    let Some(server) = server() else { return };
    let quota = Quota::per_hour(1).unwrap(); // limit 1 an hour
    let here = cached(&server, quota).await;
    let elsewhere = cached(&server, quota).await;
    assert!(here.check("k").await.unwrap().decision.is_allowed());
    assert_eq!(here.check("k").await.unwrap().source, Source::Redis); // denied, now cached
    assert!(elsewhere.reset("k").await.unwrap(), "Redis held the key");
    let stale = here.check("k").await.unwrap();
    assert_eq!(stale.source, Source::DenyCache);
    assert!(!stale.decision.is_allowed());
    here.invalidate("k");
    let fresh = here.check("k").await.unwrap();
    assert_eq!(fresh.source, Source::Redis);
    assert!(fresh.decision.is_allowed());
}

/// Redis loses its data (`FLUSHALL`, as a restart without persistence would): the cache
/// goes on denying its keys until `invalidate_all`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_all_forgets_every_cached_denial_after_redis_lost_its_data() {
    let Some(server) = server() else { return };
    let quota = Quota::per_hour(1).unwrap();
    let limiter = cached(&server, quota).await;
    for key in ["a", "b"] {
        limiter.check(key).await.unwrap();
        limiter.check(key).await.unwrap();
        assert_eq!(limiter.check(key).await.unwrap().source, Source::DenyCache);
    }
    server.flushall().unwrap();
    assert_eq!(limiter.check("a").await.unwrap().source, Source::DenyCache);
    limiter.invalidate_all();
    for key in ["a", "b"] {
        let c = limiter.check(key).await.unwrap();
        assert_eq!((c.source, c.decision.is_allowed()), (Source::Redis, true));
    }
}

/// `round_trips` counts every reply: a `NOSCRIPT` and the `EVAL` that follows are two, for a
/// single request and for a `check_many` pipeline; with the script loaded, one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_count_the_script_reload_exactly() {
    let Some(server) = server() else { return };
    let quota = Quota::per_second(1000).unwrap();
    let limiter = cached(&server, quota).await;
    let trips = || limiter.stats().round_trips;
    limiter.check("a").await.unwrap();
    assert_eq!(trips(), 2, "EVALSHA (NOSCRIPT) then EVAL");
    limiter.check("a").await.unwrap();
    assert_eq!(trips(), 3, "EVALSHA");
    let flush = || {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut inspect(&server))
            .unwrap();
    };
    flush();
    for c in limiter.check_many(&["a", "b", "c"], 1).await {
        assert_eq!(c.unwrap().source, Source::Redis);
    }
    assert_eq!(
        trips(),
        5,
        "a pipeline of EVALSHA (all NOSCRIPT), then one of EVAL"
    );
    limiter.check_many(&["a", "b", "c"], 1).await;
    assert_eq!(trips(), 6, "one pipeline");
    assert_eq!(limiter.stats().redis_decisions, 8);
}

/// A denial answered after `reset` began is not remembered: the check is sent before the
/// reset's `DEL` (both queue behind a `DEBUG SLEEP`), Redis denies it and then deletes the key,
/// and the next check goes to Redis and is allowed instead of being denied by the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_in_flight_during_a_reset_is_not_cached() {
    let Some(server) = server_with(&["--enable-debug-command", "yes"]) else {
        return;
    };
    let limiter = std::sync::Arc::new(cached(&server, Quota::per_hour(1).unwrap()).await);
    assert!(limiter.check("k").await.unwrap().decision.is_allowed());
    let url = server.url();
    let sleeper = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("1")
            .query(&mut con)
            .unwrap();
    });
    tokio::time::sleep(Duration::from_millis(200)).await; // the server is asleep
    let l = limiter.clone();
    let check = tokio::spawn(async move { l.check("k").await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await; // the check is queued
    assert!(limiter.reset("k").await.unwrap(), "Redis held the key");
    let denied = check.await.unwrap();
    assert!(!denied.decision.is_allowed() && denied.source == Source::Redis);
    sleeper.join().unwrap();
    let next = limiter.check("k").await.unwrap();
    assert!(
        next.decision.is_allowed() && next.source == Source::Redis,
        "{next:?}"
    );
}
