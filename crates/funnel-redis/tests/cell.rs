//! `Backend::Cell` against a real redis-cell module. The module is not a Debian package, so
//! this test is ignored by default; to run it, build redis-cell and point
//! `REDIS_CELL_MODULE` at the library:
//!
//! ```sh
//! REDIS_CELL_MODULE=/path/to/libredis_cell.so \
//!     cargo test --release -p funnel-redis --test cell -- --ignored
//! ```

use std::time::Duration;

use funnel::{Limiter, Quota, Timestamp};
use funnel_redis::{Backend, RedisLimiter, Source};
use funnel_testkit::redis_server::RedisServer;

fn module() -> String {
    std::env::var("REDIS_CELL_MODULE")
        .expect("REDIS_CELL_MODULE must name the redis-cell library (libredis_cell.so)")
}

/// With the module loaded: it is detected, the five integers of a burst (all within a
/// second, on a 2 s interval, so the module's own clock cannot change them) equal the
/// in-process limiter's at one instant, and every deny-cache answer is a denial the module
/// gives too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the redis-cell module: set REDIS_CELL_MODULE=/path/to/libredis_cell.so and run with --ignored"]
async fn cl_throttle_answers_like_the_in_process_limiter_and_the_cache_agrees_with_it() {
    let server = RedisServer::start_with(&["--loadmodule", &module()]).expect("redis-server");
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
    let local = Limiter::<str>::builder(quota).build().unwrap();
    let instant = Timestamp::from_nanos(1_000_000_000_000).unwrap();
    let costs = [1, 1, 3, 0, 5, 1, 20, 2, 1, 1, 1, 7, 0, 1];
    for (i, &n) in costs.iter().enumerate() {
        let c = limiter.check_n("burst", n).await.unwrap();
        assert_eq!(c.source, Source::Redis, "request #{i}");
        let expected = local.check_n_at("burst", n, instant);
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
