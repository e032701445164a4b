//! The decisions Redis takes: the five integers against the in-process limiter (at the
//! server's own times) and against the reference model (at injected times, with the stored
//! arrival time compared too), exactness across a fleet, and `check_many`.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{limiter, GENEROUS};
use funnel::{Limiter, Quota, Timestamp};
use funnel_redis::{RedisLimiter, Source};
use funnel_testkit::model::{Model, ModelQuota};
use funnel_testkit::redis_server::{inspect, server};
use funnel_testkit::Rng;

/// The five integers of every answer equal the in-process limiter's fed the same times (the
/// server's, which each answer carries), for several quotas and costs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_integers_match_the_in_process_limiter_at_the_servers_times() {
    let Some(server) = server() else { return };
    let quotas = [
        Quota::per_minute(30).unwrap().with_limit(16).unwrap(),
        Quota::per_second(1).unwrap().with_limit(5).unwrap(),
        Quota::per_second(10).unwrap().with_limit(1).unwrap(),
        Quota::per_second(1000).unwrap().with_limit(100).unwrap(),
    ];
    let costs = [1, 1, 3, 0, 5, 1, 20, 2, 1, 1, 1, 7, 0, 1, 16, 1];
    for (qi, quota) in quotas.into_iter().enumerate() {
        let remote = limiter(&server, quota).await;
        let local = Limiter::<str>::builder(quota).build().unwrap();
        let key = format!("five-{qi}");
        for (i, &n) in costs.iter().enumerate() {
            let checked = remote.check_n(&key, n).await.unwrap();
            assert_eq!(checked.source, Source::Redis);
            let now = checked.server_now.expect("the script decided");
            let expected = local.with_quota(quota).check_n_at(&key, n, now);
            assert_eq!(
                checked.decision, expected,
                "quota #{qi}, request #{i} (cost {n})"
            );
            if i % 4 == 3 {
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        }
    }
}

/// Redis's stored arrival time for `key`, ns (None when absent).
fn stored_tat_ns(con: &mut redis::Connection, redis_key: &str) -> Option<i128> {
    let us: Option<i64> = redis::cmd("GET").arg(redis_key).query(con).unwrap();
    us.map(|us| i128::from(us) * 1_000)
}

/// The replay file's requests at the file's own timestamps (injected as the script's `now`):
/// the five integers equal the reference model's, and after every request the arrival time
/// stored in Redis equals the model's (absent where the model's funnel is empty). One
/// `RedisLimiter` per quota, sharing one key space, as CL.THROTTLE takes its parameters per
/// call. Lines the replay format rejects are skipped (the replay parser's own tests cover them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_arithmetic_matches_the_reference_model_on_the_replay_file() {
    let Some(server) = server() else { return };
    let mut con = inspect(&server);
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/data/replay.txt"
    );
    let text = std::fs::read_to_string(path).expect("the replay file");
    let mut model = Model::new();
    let mut limiters: HashMap<(i64, i64, i64), RedisLimiter> = HashMap::new();
    let mut decided = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let nums: Vec<i64> = f.iter().skip(2).filter_map(|x| x.parse().ok()).collect();
        let Ok(ts) = f
            .first()
            .map_or(Err(()), |t| t.parse::<u64>().map_err(drop))
        else {
            continue;
        };
        if f.len() < 5 || nums.len() != f.len() - 2 {
            continue;
        }
        let Ok(quota) = Quota::from_cl_throttle(nums[0], nums[1], nums[2]) else {
            continue;
        };
        let Ok(n) = u64::try_from(nums.get(3).copied().unwrap_or(1)) else {
            continue;
        };
        let params = (nums[0], nums[1], nums[2]);
        let remote = match limiters.entry(params) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(
                RedisLimiter::builder(server.url(), quota)
                    .prefix("replay:")
                    .timeout(GENEROUS)
                    .build()
                    .await
                    .expect("every replay quota has a whole-microsecond interval"),
            ),
        };
        let key = f[1];
        let now = Timestamp::from_nanos(ts).unwrap();
        let checked = remote.check_n_at(key, n, now).await.unwrap();
        let q = ModelQuota::cl(nums[0].into(), nums[1].into(), nums[2].into());
        let expected = model.throttle(key.as_bytes(), ts.into(), q, n.into());
        assert_eq!(checked.decision.to_cl_throttle(), expected, "{line}");
        assert_eq!(
            stored_tat_ns(&mut con, &remote.redis_key(key)).filter(|&t| t > i128::from(ts)),
            model.tat(key.as_bytes(), ts.into()),
            "stored arrival time after {line}"
        );
        decided += 1;
    }
    assert_eq!(decided, 12, "every valid line of the replay file");
}

/// Random requests (costs 0 to past the limit) on a few keys at random injected times (steps
/// from nothing to several tolerances, whole microseconds): the five integers and the stored
/// arrival time equal the reference model's after every request. Emission intervals are at
/// least 10 s, so no key's real-time TTL runs out during the test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_arithmetic_matches_the_reference_model_on_random_requests() {
    let Some(server) = server() else { return };
    let mut con = inspect(&server);
    let quotas = [
        (
            Quota::from_cl_throttle(2, 1, 10).unwrap(),
            ModelQuota::cl(2, 1, 10),
        ),
        (
            Quota::from_cl_throttle(15, 30, 600).unwrap(),
            ModelQuota::cl(15, 30, 600),
        ),
        (
            Quota::from_cl_throttle(0, 4, 40).unwrap(),
            ModelQuota::cl(0, 4, 40),
        ),
    ];
    for (qi, (quota, mq)) in quotas.into_iter().enumerate() {
        let remote = RedisLimiter::builder(server.url(), quota)
            .prefix(format!("random-{qi}:"))
            .timeout(GENEROUS)
            .build()
            .await
            .unwrap();
        let mut model = Model::new();
        let mut rng = Rng::new(0x5EED + qi as u64);
        let tau_us = quota.tolerance().as_micros() as u64;
        let mut now_us: u64 = 1_700_000_000_000_000;
        for i in 0..400 {
            now_us += match rng.below(4) {
                0 => 0,
                1 => rng.below(1_000),
                2 => rng.below(tau_us / 4 + 1),
                _ => rng.below(3 * tau_us),
            };
            let key = format!("k{}", rng.below(3));
            let n = rng.below(quota.limit() + 2);
            let now_ns = now_us * 1_000;
            let checked = remote
                .check_n_at(&key, n, Timestamp::from_nanos(now_ns).unwrap())
                .await
                .unwrap();
            let expected = model.throttle(key.as_bytes(), now_ns.into(), mq, n.into());
            assert_eq!(
                checked.decision.to_cl_throttle(),
                expected,
                "quota #{qi}, request #{i}: {key} cost {n} at {now_us} µs"
            );
            assert_eq!(
                stored_tat_ns(&mut con, &remote.redis_key(&key)).filter(|&t| t > now_ns.into()),
                model.tat(key.as_bytes(), now_ns.into()),
                "quota #{qi}, request #{i}: stored arrival time"
            );
        }
    }
}

/// Four instances, each with its own connection, 200 concurrent requests on one key limited
/// to 50 an hour: exactly 50 admitted in total.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_instances_admits_exactly_the_limit() {
    let Some(server) = server() else { return };
    let quota = Quota::per_hour(1).unwrap().with_limit(50).unwrap();
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
    let decided: u64 = fleet.iter().map(|l| l.stats().redis_decisions).sum();
    assert_eq!(decided, 200);
}

/// `check_many`: one round trip for a batch, the answers of Redis taken in order (equal to
/// the in-process limiter fed the same server times), and the keys the deny cache knows
/// answered without Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_many_decides_a_batch_in_order_in_one_round_trip() {
    let Some(server) = server() else { return };
    let quota = Quota::per_minute(1).unwrap().with_limit(3).unwrap(); // limit 3
    let remote = RedisLimiter::builder(server.url(), quota)
        .timeout(GENEROUS)
        .deny_cache(100)
        .build()
        .await
        .unwrap();
    // Load the script first, so the batch below is one round trip.
    remote.check_n("warm-up", 0).await.unwrap();
    let before = remote.stats().round_trips;
    let local = Limiter::<str>::builder(quota).build().unwrap();
    let keys = ["a", "b", "a", "a", "c", "a", "b", "b", "b"];
    let answers: Vec<_> = remote
        .check_many(&keys, 1)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(answers.len(), keys.len());
    for (key, c) in keys.iter().zip(&answers) {
        assert_eq!(c.source, Source::Redis);
        let expected = local
            .with_quota(quota)
            .check_n_at(key, 1, c.server_now.unwrap());
        assert_eq!(c.decision, expected, "{key}");
    }
    let allowed: Vec<bool> = answers.iter().map(|c| c.decision.is_allowed()).collect();
    assert_eq!(
        allowed,
        [true, true, true, true, true, false, true, true, false]
    );
    let stats = remote.stats();
    assert_eq!((stats.round_trips - before, stats.redis_decisions), (1, 10));
    // "a" and "b" are now known denied: only "c" and "d" go to Redis.
    let again = remote.check_many(&["a", "c", "b", "d"], 1).await;
    let sources: Vec<Source> = again.iter().map(|c| c.as_ref().unwrap().source).collect();
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
            stats.round_trips - before,
            stats.redis_decisions,
            stats.cache_denials
        ),
        (2, 12, 2)
    );
}
