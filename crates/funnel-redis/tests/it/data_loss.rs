//! Redis losing its data against a real `redis-server`: a `FLUSHALL`, a restart with nothing
//! kept, and a failover to a replica that missed the last writes. Redis forgives every key it
//! lost; the limiter sees it by itself (the data-set marker, the server's identity), empties
//! its deny cache, counts it, and Redis decides those keys again, from empty funnels.

use std::time::{Duration, Instant};

use crate::common::GENEROUS;
use funnel::Quota;
use funnel_redis::{RedisLimiter, Source};
use funnel_testkit::redis_server::{info_field_on, inspect, server, server_with, RedisServer};

/// Limit 2, one per hour: a denied key stays denied for the whole test.
fn quota() -> Quota {
    Quota::per_hour(1).unwrap().with_limit(2).unwrap()
}

async fn cached(url: String) -> RedisLimiter {
    RedisLimiter::builder(url, quota())
        .timeout(GENEROUS)
        .deny_cache(1_000)
        .build()
        .await
        .unwrap()
}

/// Spends `key`'s burst until Redis denies it, and checks that the deny cache answers it next.
async fn exhaust(limiter: &RedisLimiter, key: &str) {
    for _ in 0..2 {
        assert!(limiter.check(key).await.unwrap().decision.is_allowed());
    }
    let denied = limiter.check(key).await.unwrap();
    assert_eq!(
        (denied.source, denied.decision.is_allowed()),
        (Source::Redis, false)
    );
    let cached = limiter.check(key).await.unwrap();
    assert_eq!(cached.source, Source::DenyCache, "{key}");
}

/// What the fleet admits after a loss: a lost key's full burst again, decided by Redis.
async fn assert_forgiven(limiter: &RedisLimiter, key: &str) {
    for i in 0..3 {
        let c = limiter.check(key).await.unwrap();
        assert_eq!(c.source, Source::Redis, "{key} #{i}");
        assert_eq!(c.decision.is_allowed(), i < 2, "{key} #{i}");
    }
}

/// Polls until `data_losses` reaches `at_least`, for up to 5 s (the identity is read every
/// second).
async fn until_losses(limiter: &RedisLimiter, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while limiter.stats().data_losses < at_least {
        assert!(Instant::now() < deadline, "{:?}", limiter.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `FLUSHALL`: the cached denials stand until the next reply from Redis, for any key, shows the
/// new marker; then they are gone, the loss is counted once, and the lost keys get a full burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushall_is_seen_at_the_next_reply_and_empties_the_deny_cache() {
    let Some(server) = server() else { return };
    let limiter = cached(server.url()).await;
    for key in ["a", "b"] {
        exhaust(&limiter, key).await;
    }
    server.flushall().unwrap();
    // No reply yet: the cache still denies (never admits) what Redis would now allow.
    assert_eq!(limiter.check("a").await.unwrap().source, Source::DenyCache);
    assert_eq!(limiter.stats().data_losses, 0);
    let other = limiter.check("c").await.unwrap();
    assert_eq!(
        (other.source, other.decision.is_allowed()),
        (Source::Redis, true)
    );
    assert_eq!(limiter.stats().data_losses, 1);
    for key in ["a", "b"] {
        assert_forgiven(&limiter, key).await;
    }
    // The identity did not change: still one loss after the next readings.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(limiter.stats().data_losses, 1);
}

/// A restart without persistence: seen by both signals (a new `run_id`, a new marker), counted
/// once, and the deny cache emptied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_nothing_kept_is_counted_once_and_empties_the_deny_cache() {
    let Some(mut server) = server() else { return };
    let limiter = cached(server.url()).await;
    exhaust(&limiter, "a").await;
    tokio::time::sleep(Duration::from_millis(1_200)).await; // the identity has been read
    server.restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(c) = limiter.check("probe").await {
            if c.source == Source::Redis {
                break;
            }
        }
        assert!(Instant::now() < deadline, "Redis never decided again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    until_losses(&limiter, 1).await;
    assert_forgiven(&limiter, "a").await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(limiter.stats().data_losses, 1, "{:?}", limiter.stats());
}

/// Until `INFO replication`'s `field` on `server` is `value`, for up to 10 s.
fn until_info(server: &RedisServer, field: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut con = inspect(server);
    while info_field_on(&mut con, "replication", field).as_deref() != Ok(value) {
        assert!(Instant::now() < deadline, "{field} never became {value}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn replicaof(server: &RedisServer, primary: Option<&RedisServer>) {
    let mut cmd = redis::cmd("REPLICAOF");
    match primary {
        Some(p) => cmd.arg("127.0.0.1").arg(p.port()),
        None => cmd.arg("NO").arg("ONE"),
    };
    let _: () = cmd.query(&mut inspect(server)).unwrap();
}

/// A failover to a replica that missed the last writes, behind the limiter's one address: the
/// primary's data set is replaced by the replica's (the primary resyncs from the promoted
/// replica, then is promoted again). The marker survived (the replica had it); the
/// replication id did not, and the limiter sees that within about a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_replica_that_missed_writes_empties_the_deny_cache() {
    // No delay before a full sync (Redis waits 5 s by default for more replicas to join).
    let fast = ["--repl-diskless-sync-delay", "0"];
    let Some(primary) = server_with(&fast) else {
        return;
    };
    let Some(replica) = server_with(&fast) else {
        return;
    };
    replicaof(&replica, Some(&primary));
    until_info(&replica, "master_link_status", "up");
    let limiter = cached(primary.url()).await;
    exhaust(&limiter, "early").await;
    // Replication is asynchronous: wait until the replica holds what the primary holds for
    // "early". (`WAIT` would not do: it waits for the writes of the connection that sends it,
    // and the limiter's writes went over its own.)
    until_replicated(&primary, &replica, &limiter.redis_key("early"));
    // The replica is cut off, then the primary takes writes it never gets.
    replicaof(&replica, None);
    exhaust(&limiter, "late").await;
    tokio::time::sleep(Duration::from_millis(1_200)).await; // the identity has been read
    let losses = limiter.stats().data_losses;
    assert_eq!(losses, 0);
    // The failover: the address now serves the replica's data set.
    replicaof(&primary, Some(&replica));
    until_info(&primary, "master_link_status", "up");
    replicaof(&primary, None);
    until_info(&primary, "role", "master");
    let exists: bool = redis::cmd("EXISTS")
        .arg(limiter.redis_key("late"))
        .query(&mut inspect(&primary))
        .unwrap();
    assert!(!exists, "the replica missed the late writes");
    until_losses(&limiter, 1).await;
    assert_forgiven(&limiter, "late").await;
    // What the replica had is still denied, by Redis now.
    let early = limiter.check("early").await.unwrap();
    assert_eq!(
        (early.source, early.decision.is_allowed()),
        (Source::Redis, false)
    );
}

/// Until `replica` holds the value `primary` holds at `key`, for up to 10 s.
fn until_replicated(primary: &RedisServer, replica: &RedisServer, key: &str) {
    let get = |con: &mut redis::Connection| -> Option<String> {
        redis::cmd("GET").arg(key).query(con).unwrap()
    };
    let want = get(&mut inspect(primary));
    assert!(want.is_some(), "the primary holds {key}");
    let mut replica = inspect(replica);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&mut replica) != want {
        assert!(Instant::now() < deadline, "{key} never reached the replica");
        std::thread::sleep(Duration::from_millis(5));
    }
}
