//! `Backend::Cell` against the real redis-cell module, built from the vendored source by
//! `bash .ci/redis-cell.sh` (or named by `FUNNEL_REDIS_CELL`); without it the test is skipped
//! and says so (`FUNNEL_REQUIRE_TOOLS=1` makes that a failure).

use std::time::{Duration, Instant};

use funnel::{Limiter, Quota, Timestamp};
use funnel_redis::{Backend, RedisLimiter, Source};

/// With the module loaded: it is detected, the five integers of a burst (all within 900 ms, on
/// a 2 s interval, so the module's own clock cannot change them) equal the in-process
/// limiter's at one instant, and every deny-cache answer is a denial the module
/// gives too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cl_throttle_answers_like_the_in_process_limiter_and_the_cache_agrees_with_it() {
    let Some(server) = funnel_testkit::redis_cell::server() else {
        return;
    };
    let quota = Quota::from_cl_throttle(15, 30, 60).unwrap(); // limit 16, T = 2 s
    let cell = |cache: usize| {
        RedisLimiter::builder(server.url(), quota)
            .backend(Backend::Cell)
            .timeout(Duration::from_secs(2))
            .deny_cache(cache)
            .build()
    };
    let limiter = cell(0).await.expect("built: the module is listed");
    assert!(limiter.redis_cell_loaded().await.unwrap());
    let costs = [1, 1, 3, 0, 5, 1, 20, 2, 1, 1, 1, 7, 0, 1];
    // The module reads its own clock: a burst that took 900 ms or more (a loaded machine) is
    // sent again on a fresh key, since the module's times could then round differently.
    let mut attempt = 0;
    let (key, answers) = loop {
        attempt += 1;
        let key = format!("burst-{attempt}");
        let start = Instant::now();
        let mut answers = Vec::with_capacity(costs.len());
        for &n in &costs {
            answers.push(limiter.check_n(&key, n).await.unwrap());
        }
        if start.elapsed() < Duration::from_millis(900) {
            break (key, answers);
        }
        assert!(
            attempt < 5,
            "{attempt} bursts of {} calls took 900 ms or more",
            costs.len()
        );
    };
    let local = Limiter::<str>::builder(quota).build().unwrap();
    let instant = Timestamp::from_nanos(1_000_000_000_000).unwrap();
    for (i, (&n, c)) in costs.iter().zip(&answers).enumerate() {
        assert_eq!(c.source, Source::Redis, "request #{i}");
        let expected = local.check_n_at(&key, n, instant);
        assert_eq!(
            c.decision.to_cl_throttle(),
            expected.to_cl_throttle(),
            "request #{i} (cost {n})"
        );
        assert!(c.decision.reset_after() <= expected.reset_after());
    }
    // An abuser: after the module's first denial the cache answers; each cached denial is
    // checked against the module itself (a denied CL.THROTTLE charges nothing).
    let limiter = cell(100).await.unwrap();
    let mut con = server.connection().unwrap();
    let mut cached = 0;
    for i in 0..40 {
        let c = limiter.check("abuser").await.unwrap();
        if c.source == Source::DenyCache {
            cached += 1;
            let reply: Vec<i64> = redis::cmd("CL.THROTTLE")
                .arg(limiter.redis_key("abuser"))
                .arg(15)
                .arg(1)
                .arg(2)
                .arg(1)
                .query(&mut con)
                .unwrap();
            assert_eq!(
                reply[0], 1,
                "request #{i}: the cache denied what the module allows"
            );
        }
    }
    assert_eq!(
        cached,
        40 - 17,
        "16 allowed, one denial from the module, then the cache"
    );
}
