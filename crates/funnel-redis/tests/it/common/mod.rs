//! A funnel-redis limiter for the tests that are not about timeouts or failure policies.

use std::time::Duration;

use funnel::Quota;
use funnel_redis::RedisLimiter;

use funnel_testkit::redis_server::RedisServer;

/// A timeout no healthy loopback round trip comes near, for the tests that are not about
/// timeouts.
pub const GENEROUS: Duration = Duration::from_secs(2);

/// A limiter of `quota` on `server` with the [`GENEROUS`] timeout and the default settings
/// otherwise; panics when it cannot be built.
pub async fn limiter(server: &RedisServer, quota: Quota) -> RedisLimiter {
    RedisLimiter::builder(server.url(), quota)
        .timeout(GENEROUS)
        .build()
        .await
        .expect("a limiter")
}
