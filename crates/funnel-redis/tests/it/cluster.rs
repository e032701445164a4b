//! A real three-master Redis Cluster started on loopback (`redis-server --cluster-enabled
//! yes`, joined by `redis-cli --cluster create`): the limiter on a cluster connection decides
//! keys on every node exactly, `check_many` sends one pipeline per hash slot, one key's error
//! in a slot's pipeline (a foreign value, a write refused for `OOM`) stays that key's, and a
//! single-server limiter pointed at one node gets `MOVED` as a typed error.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use funnel::{Limiter, Quota};
use funnel_redis::{Error, Failure, OnFailure, RedisLimiter, Source};
use funnel_testkit::redis_server::{cluster, RedisCluster};
use redis::cluster::ClusterConnection;

async fn on_cluster(cluster: &RedisCluster, quota: Quota) -> RedisLimiter {
    RedisLimiter::builder("unused", quota)
        .cluster(cluster.urls())
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("a cluster limiter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_on_a_cluster_admits_exactly_the_limit_of_keys_on_every_node() {
    let Some(cluster) = cluster(3) else { return };
    let quota = Quota::per_hour(1).unwrap().with_limit(10).unwrap(); // limit 10
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(Arc::new(on_cluster(&cluster, quota).await));
    }
    // Enough keys to land on all three masters.
    let keys: Vec<String> = (0..12).map(|i| format!("user:{i}")).collect();
    let slots: BTreeSet<u16> = keys
        .iter()
        .map(|k| redis::cluster_routing::get_slot(fleet[0].redis_key(k).as_bytes()))
        .collect();
    assert!(slots.iter().any(|&s| s < 5461) && slots.iter().any(|&s| s > 10922));
    let mut tasks = Vec::new();
    for i in 0..(keys.len() * 30) {
        let (instance, key) = (fleet[i % 3].clone(), keys[i % keys.len()].clone());
        tasks.push(tokio::spawn(async move {
            let c = instance.check(&key).await.unwrap();
            assert_eq!(c.source, Source::Redis);
            (key, c.decision.is_allowed())
        }));
    }
    let mut admitted = std::collections::HashMap::<String, u32>::new();
    for t in tasks {
        let (key, allowed) = t.await.unwrap();
        *admitted.entry(key).or_default() += u32::from(allowed);
    }
    for key in &keys {
        assert_eq!(admitted[key], 10, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_many_on_a_cluster_sends_one_pipeline_per_slot_and_decides_in_order() {
    let Some(cluster) = cluster(3) else { return };
    let quota = Quota::per_hour(1).unwrap().with_limit(2).unwrap(); // limit 2
    let l = on_cluster(&cluster, quota).await;
    let keys = ["a", "b", "c", "a", "a", "d", "b", "b"];
    // Load the script on every node first.
    for k in ["a", "b", "c", "d"] {
        l.check_n(k, 0).await.unwrap();
    }
    let before = l.stats().round_trips;
    let answers: Vec<_> = l
        .check_many(&keys, 1)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let local = Limiter::<str>::builder(quota).build().unwrap();
    for (key, c) in keys.iter().zip(&answers) {
        assert_eq!(c.source, Source::Redis);
        assert_eq!(
            c.decision,
            local
                .with_quota(quota)
                .check_n_at(key, 1, c.server_now.unwrap()),
            "{key}"
        );
    }
    let allowed: Vec<bool> = answers.iter().map(|c| c.decision.is_allowed()).collect();
    assert_eq!(allowed, [true, true, true, true, false, true, true, false]);
    let slots: BTreeSet<u16> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| redis::cluster_routing::get_slot(l.redis_key(k).as_bytes()))
        .collect();
    assert_eq!(l.stats().round_trips - before, slots.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_limiter_on_a_cluster_node_gets_moved_as_a_typed_error() {
    let Some(cluster) = cluster(3) else { return };
    let quota = Quota::per_second(10).unwrap();
    let node = RedisLimiter::builder(cluster.urls()[0].clone(), quota)
        .timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let mut moved = 0;
    for i in 0..20 {
        match node.check(&format!("user:{i}")).await {
            Ok(c) => assert_eq!(c.source, Source::Redis), // a key of this node's slots
            Err(Error::WrongNode { .. }) => moved += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(moved > 0, "some keys live on the other nodes");
}

/// The test's own connection to the cluster, to plant foreign values (it follows `MOVED`).
fn inspect(cluster: &RedisCluster) -> ClusterConnection {
    redis::cluster::ClusterClient::new(cluster.urls())
        .and_then(|client| client.get_connection())
        .unwrap_or_else(|e| panic!("a cluster connection: {e}"))
}

/// The hash slot of each of `keys`' Redis keys.
fn slots(l: &RedisLimiter, keys: &[&str]) -> BTreeSet<u16> {
    keys.iter()
        .map(|k| redis::cluster_routing::get_slot(l.redis_key(k).as_bytes()))
        .collect()
}

/// Two keys and a foreign one (planted by `plant` on its Redis key), all of one hash slot, so
/// one pipeline in each `check_many`, three times with limit 2: the foreign key gets
/// `Error::WrongType` naming its Redis key every time and is left as `plant` made it (`kept`
/// reads it back); the other two get exactly their decisions, 2 admitted each.
async fn a_foreign_key_fails_alone_in_its_slot(
    plant: impl Fn(&mut ClusterConnection, &str),
    kept: impl Fn(&mut ClusterConnection, &str),
) {
    let Some(cluster) = cluster(3) else { return };
    let quota = Quota::per_hour(1).unwrap().with_limit(2).unwrap(); // limit 2
    let l = on_cluster(&cluster, quota).await;
    let keys = ["{tenant}first", "{tenant}foreign", "{tenant}second"];
    assert_eq!(
        slots(&l, &keys).len(),
        1,
        "the hash tag puts them in one slot"
    );
    let foreign = l.redis_key(keys[1]);
    let mut con = inspect(&cluster);
    plant(&mut con, &foreign);
    let local = Limiter::<str>::builder(quota).build().unwrap();
    let mut admitted = [0; 3];
    for round in 0..3 {
        let answers = l.check_many(&keys, 1).await;
        for (i, (key, answer)) in keys.iter().zip(&answers).enumerate() {
            if i == 1 {
                match answer {
                    Err(Error::WrongType { redis_key }) => assert_eq!(*redis_key, foreign),
                    other => panic!("round {round}: {key}: expected WrongType, got {other:?}"),
                }
                continue;
            }
            let c = answer
                .as_ref()
                .unwrap_or_else(|e| panic!("round {round}: {key}: {e}"));
            assert_eq!(c.source, Source::Redis, "round {round}: {key}");
            assert_eq!(
                c.decision,
                local
                    .with_quota(quota)
                    .check_n_at(key, 1, c.server_now.unwrap()),
                "round {round}: {key}"
            );
            admitted[i] += u32::from(c.decision.is_allowed());
        }
    }
    assert_eq!(admitted, [2, 0, 2]);
    let stats = l.stats();
    assert_eq!((stats.redis_decisions, stats.typed_errors), (6, 3));
    kept(&mut con, &foreign);
}

/// A Redis hash at one key of a slot: `WRONGTYPE` from the script's `GET`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_fails_alone_and_its_slot_is_decided() {
    a_foreign_key_fails_alone_in_its_slot(
        |con, key| {
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg("f")
                .arg("v")
                .query(con)
                .unwrap();
        },
        |con, key| {
            let kind: String = redis::cmd("TYPE").arg(key).query(con).unwrap();
            assert_eq!(kind, "hash", "the key was left alone");
        },
    )
    .await;
}

/// A string that is not an arrival time at one key of a slot: the script's own `WRONGTYPE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_that_is_not_an_arrival_time_fails_alone_and_its_slot_is_decided() {
    a_foreign_key_fails_alone_in_its_slot(
        |con, key| {
            let _: () = redis::cmd("SET").arg(key).arg("1.5").query(con).unwrap();
        },
        |con, key| {
            let kept: String = redis::cmd("GET").arg(key).query(con).unwrap();
            assert_eq!(kept, "1.5", "the value was left alone");
        },
    )
    .await;
}

/// `maxmemory` reached on every node: in one slot's pipeline, the key that would be charged
/// gets `OOM` from its write, answered by the policy (here `Open`), while the key that is
/// denied needs no write and stays denied: the policy never admits what Redis denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_for_memory_does_not_open_the_denied_keys_of_its_slot() {
    let Some(cluster) = cluster(3) else { return };
    let quota = Quota::per_hour(1).unwrap().with_limit(2).unwrap(); // limit 2
    let l = RedisLimiter::builder("unused", quota)
        .cluster(cluster.urls())
        .timeout(Duration::from_secs(2))
        .on_failure(OnFailure::Open)
        .build()
        .await
        .expect("a cluster limiter");
    let keys = ["{tenant}spent", "{tenant}fresh"];
    assert_eq!(
        slots(&l, &keys).len(),
        1,
        "the hash tag puts them in one slot"
    );
    for _ in 0..2 {
        assert!(l.check(keys[0]).await.unwrap().decision.is_allowed());
    }
    let maxmemory = |bytes: &str| {
        for node in cluster.nodes() {
            let mut con = node.connection().unwrap();
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory")
                .arg(bytes)
                .query(&mut con)
                .unwrap();
        }
    };
    maxmemory("1");
    let answers = l.check_many(&keys, 1).await;
    maxmemory("0");
    let spent = answers[0].as_ref().unwrap();
    assert_eq!(spent.source, Source::Redis);
    assert!(!spent.decision.is_allowed(), "Redis denied it: {spent:?}");
    let fresh = answers[1].as_ref().unwrap();
    assert_eq!(fresh.source, Source::FailedOpen);
    assert_eq!(fresh.failure, Some(Failure::OutOfMemory));
    assert_eq!(l.stats().failed_open, 1);
}
