//! A real three-master Redis Cluster started on loopback (`redis-server --cluster-enabled
//! yes`, joined by `redis-cli --cluster create`): the limiter on a cluster connection decides
//! keys on every node exactly, `check_many` sends one pipeline per hash slot, and a
//! single-server limiter pointed at one node gets `MOVED` as a typed error.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use funnel::{Limiter, Quota};
use funnel_redis::{Error, RedisLimiter, Source};
use funnel_testkit::redis_server::RedisCluster;

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
    let cluster = RedisCluster::start(3).expect("a 3-master cluster");
    let quota = Quota::new(9, 1, Duration::from_secs(3600)).unwrap(); // limit 10
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
    let cluster = RedisCluster::start(3).expect("a 3-master cluster");
    let quota = Quota::new(1, 1, Duration::from_secs(3600)).unwrap(); // limit 2
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
            local.throttle_at(key, &quota, 1, c.server_now.unwrap()),
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
    let cluster = RedisCluster::start(3).expect("a 3-master cluster");
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
