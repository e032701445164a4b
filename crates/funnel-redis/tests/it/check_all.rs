//! `check_all`: several limiters' keys decided together, all or nothing, on a real
//! `redis-server` and on a real three-master cluster: eight limiters (eight connections) racing
//! on a request of two keys where one denies admit exactly the limit, and the other key is
//! charged for the admitted requests only; the answers are `funnel::check_all`'s.

use std::sync::Arc;
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::{Limiter, Quota};
use funnel_redis::{check_all, peek_all, Error, JointEntry, RedisLimiter};
use funnel_testkit::redis_server::{cluster, server};

const GENEROUS: Duration = Duration::from_secs(5);

/// The tight limit (5 an hour: it denies) and the loose one (1,000 an hour).
fn quotas() -> (Quota, Quota) {
    (Quota::per_hour(5).unwrap(), Quota::per_hour(1_000).unwrap())
}

/// One instance: a tight and a loose limiter, each with its own connection.
async fn instance(
    seeds: &[String],
    cluster: bool,
    prefixes: (&str, &str),
) -> (RedisLimiter, RedisLimiter) {
    let (tight, loose) = quotas();
    let build = |quota: Quota, prefix: &str| {
        let mut b = RedisLimiter::builder(seeds[0].clone(), quota)
            .prefix(prefix)
            .timeout(GENEROUS);
        if cluster {
            b = b.cluster(seeds.to_vec());
        }
        b.build()
    };
    (
        build(tight, prefixes.0).await.expect("a limiter"),
        build(loose, prefixes.1).await.expect("a limiter"),
    )
}

/// Eight instances race 80 requests of one unit on `(tight, loose)` for one client; returns
/// how many were admitted and whether every answer was atomic.
async fn race(seeds: &[String], cluster: bool, prefixes: (&str, &str)) -> (usize, bool) {
    let mut fleet = Vec::new();
    for _ in 0..8 {
        fleet.push(Arc::new(instance(seeds, cluster, prefixes).await));
    }
    let mut tasks = Vec::new();
    for i in 0..80 {
        let pair = fleet[i % 8].clone();
        tasks.push(tokio::spawn(async move {
            let (tight, loose) = &*pair;
            let joint = check_all(&[
                JointEntry {
                    limiter: loose,
                    key: "client-1",
                    n: 1,
                },
                JointEntry {
                    limiter: tight,
                    key: "client-1",
                    n: 1,
                },
            ])
            .await
            .expect("decided");
            if !joint.is_allowed() {
                assert_eq!(joint.denied_by, Some(1), "only the tight limit denies");
                assert!(
                    joint.checked[0].decision.is_allowed(),
                    "the loose one would admit"
                );
            }
            (joint.is_allowed(), joint.atomic)
        }));
    }
    let mut admitted = 0;
    let mut atomic = true;
    for t in tasks {
        let (allowed, whole) = t.await.unwrap();
        admitted += usize::from(allowed);
        atomic &= whole;
    }
    // What the loose limit holds now: a peek of zero units.
    let (_, loose) = &*fleet[0];
    let left = loose.check_n("client-1", 0).await.unwrap().decision;
    assert_eq!(
        left.remaining(),
        1_000 - admitted as u64,
        "the loose key was charged for the admitted requests only"
    );
    (admitted, atomic)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_racing_instances_on_one_server_charge_nothing_for_a_denied_request() {
    let Some(redis) = server() else { return };
    let (admitted, atomic) = race(&[redis.url()], false, ("rl:tight:", "rl:loose:")).await;
    assert_eq!(admitted, 5);
    assert!(atomic);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_racing_instances_on_a_cluster_with_a_hash_tag_charge_nothing_for_a_denied_request() {
    let Some(cluster) = cluster(3) else { return };
    let prefixes = ("rl:{tenant}:tight:", "rl:{tenant}:loose:");
    let (admitted, atomic) = race(&cluster.urls(), true, prefixes).await;
    assert_eq!(admitted, 5);
    assert!(atomic, "one slot: one script");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_slots_a_denial_found_by_the_check_charges_nothing() {
    let Some(cluster) = cluster(3) else { return };
    let (tight, loose) = instance(&cluster.urls(), true, ("a:", "b:")).await;
    let (k_tight, k_loose) = (tight.redis_key("client-9"), loose.redis_key("client-9"));
    assert_ne!(
        redis::cluster_routing::get_slot(k_tight.as_bytes()),
        redis::cluster_routing::get_slot(k_loose.as_bytes()),
        "the test needs the two keys in two slots"
    );
    let entries = [
        JointEntry {
            limiter: &loose,
            key: "client-9",
            n: 1,
        },
        JointEntry {
            limiter: &tight,
            key: "client-9",
            n: 1,
        },
    ];
    let mut admitted = 0;
    for _ in 0..12 {
        let joint = check_all(&entries).await.unwrap();
        assert!(
            joint.atomic,
            "one caller: nothing races between check and charge"
        );
        admitted += usize::from(joint.is_allowed());
    }
    assert_eq!(admitted, 5);
    let left = loose.check_n("client-9", 0).await.unwrap().decision;
    assert_eq!(left.remaining(), 995);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answers_are_funnel_check_all_s_at_the_server_s_time() {
    let Some(redis) = server() else { return };
    let url = redis.url();
    let a_quota = Quota::per_second(10).unwrap().with_limit(4).unwrap();
    let b_quota = Quota::per_second(2).unwrap().with_limit(3).unwrap();
    let a = RedisLimiter::builder(url.clone(), a_quota)
        .prefix("eq:a:")
        .timeout(GENEROUS)
        .build()
        .await
        .unwrap();
    let b = RedisLimiter::builder(url, b_quota)
        .prefix("eq:b:")
        .timeout(GENEROUS)
        .build()
        .await
        .unwrap();
    let clock = ManualClock::new();
    let local_a = Limiter::<str>::builder(a_quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    let local_b = Limiter::<str>::builder(b_quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    // The same key twice on `a`: the second entry sees the first's charge.
    let plan: [(u64, u64, u64); 8] = [
        (1, 1, 1),
        (2, 0, 1),
        (1, 1, 2),
        (0, 2, 0),
        (1, 1, 1),
        (3, 1, 0),
        (1, 0, 1),
        (1, 1, 1),
    ];
    let mut denials = 0;
    for (n_a, n_a2, n_b) in plan {
        let entries = [
            JointEntry {
                limiter: &a,
                key: "k",
                n: n_a,
            },
            JointEntry {
                limiter: &a,
                key: "k",
                n: n_a2,
            },
            JointEntry {
                limiter: &b,
                key: "k",
                n: n_b,
            },
        ];
        let peeked = peek_all(&entries).await.unwrap();
        let joint = check_all(&entries).await.unwrap();
        let now = joint.checked[0].server_now.expect("the script's time");
        // The peek and the charge see one state: nothing else touches these keys.
        assert_eq!(peeked.denied_by, joint.denied_by);
        clock.set(now);
        let local = funnel::check_all(
            &[
                local_a.cost("k", n_a),
                local_a.cost("k", n_a2),
                local_b.cost("k", n_b),
            ],
            now,
        );
        assert_eq!(joint.denied_by, local.denied_by());
        for (redis_side, in_process) in joint.checked.iter().zip(local.decisions()) {
            assert_eq!(&redis_side.decision, in_process);
        }
        denials += usize::from(!joint.is_allowed());
    }
    assert!(denials > 0, "the plan denies some requests");
}

#[tokio::test]
async fn limiters_of_different_servers_are_refused() {
    let (Some(one), Some(two)) = (server(), server()) else {
        return;
    };
    let q = Quota::per_second(1).unwrap();
    let a = RedisLimiter::builder(one.url(), q).build().await.unwrap();
    let b = RedisLimiter::builder(two.url(), q).build().await.unwrap();
    let e = check_all(&[
        JointEntry {
            limiter: &a,
            key: "k",
            n: 1,
        },
        JointEntry {
            limiter: &b,
            key: "k",
            n: 1,
        },
    ])
    .await
    .unwrap_err();
    assert!(matches!(e, Error::InvalidSetting { .. }), "{e}");
}

#[tokio::test]
async fn a_foreign_value_at_one_key_charges_none() {
    let Some(redis) = server() else { return };
    let q = Quota::per_second(5).unwrap();
    let a = RedisLimiter::builder(redis.url(), q)
        .prefix("f:a:")
        .timeout(GENEROUS)
        .build()
        .await
        .unwrap();
    let b = RedisLimiter::builder(redis.url(), q)
        .prefix("f:b:")
        .timeout(GENEROUS)
        .build()
        .await
        .unwrap();
    let mut con = redis.connection().unwrap();
    let _: () = redis::cmd("LPUSH")
        .arg(b.redis_key("k"))
        .arg("x")
        .query(&mut con)
        .unwrap();
    let e = check_all(&[
        JointEntry {
            limiter: &a,
            key: "k",
            n: 1,
        },
        JointEntry {
            limiter: &b,
            key: "k",
            n: 1,
        },
    ])
    .await
    .unwrap_err();
    assert!(matches!(e, Error::WrongType { .. }), "{e}");
    let exists: bool = redis::cmd("EXISTS")
        .arg(a.redis_key("k"))
        .query(&mut con)
        .unwrap();
    assert!(!exists, "the first key was not charged");
}
