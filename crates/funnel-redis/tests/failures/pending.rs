//! The requests waiting on Redis, against a real `redis-server` that is frozen (SIGSTOP) or
//! slower than the timeout for seconds (`DEBUG SLEEP` in a loop): at most `max_pending` of a
//! limiter's requests wait at once, the others are answered at once as `Failure::Overloaded`,
//! every answer comes within the timeout, and the requests Redis runs after their caller's
//! timeout are charged and counted (`late_replies`, `late_charges`), so that every charge in
//! Redis is accounted for.
//!
//! Each test holds [`SERIAL`]: its timing bounds measure the limiter, not other tests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use funnel::Quota;
use funnel_redis::{Failure, OnFailure, RedisLimiter, Source};
use funnel_testkit::redis_server::{server, server_with, RedisServer};

use crate::SERIAL;

const TIMEOUT: Duration = Duration::from_millis(50);
/// How far past the timeout an answer may come on a shared 2-core machine.
const MARGIN: Duration = Duration::from_millis(50);
/// The limit of the keys here: more than any test charges, so every request Redis runs is
/// admitted, and charged.
const LIMIT: u64 = 10_000;

fn quota() -> Quota {
    Quota::per_hour(1).unwrap().with_limit(LIMIT).unwrap()
}

async fn limiter(server: &RedisServer, max_pending: usize) -> Arc<RedisLimiter> {
    let l = RedisLimiter::builder(server.url(), quota())
        .timeout(TIMEOUT)
        .on_failure(OnFailure::Closed)
        .max_pending(max_pending)
        .build()
        .await
        .unwrap();
    Arc::new(l)
}

/// How many units Redis has charged `key` (the limit less what a peek says remains; the
/// funnel drains one unit an hour, nothing within a test).
async fn charged(limiter: &RedisLimiter, key: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(c) = limiter.check_n(key, 0).await {
            if c.source == Source::Redis {
                return LIMIT - c.decision.remaining();
            }
        }
        assert!(Instant::now() < deadline, "Redis never decided again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until every late reply is in: the count stops moving for 300 ms (each late request
/// is answered within the give-up time, 10 s).
async fn settled(limiter: &RedisLimiter) {
    let mut last = limiter.stats();
    let deadline = Instant::now() + Duration::from_secs(12);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = limiter.stats();
        if now.late_replies == last.late_replies || Instant::now() > deadline {
            return;
        }
        last = now;
    }
}

/// A frozen server and 12 concurrent requests with room for 4: 4 are sent and time out, 8 are
/// answered at once as `Overloaded`, all within the timeout. When the server thaws it runs the
/// 4 and charges them: `late_charges` counts exactly what Redis charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_gets_at_most_max_pending_requests_and_their_late_charges_are_counted() {
    let _serial = SERIAL.lock().await;
    let Some(server) = server() else { return };
    let l = limiter(&server, 4).await;
    assert!(l.check("k").await.unwrap().decision.is_allowed()); // loads the script
    server.pause();
    let started = Instant::now();
    let calls: Vec<_> = (0..12)
        .map(|_| {
            let l = l.clone();
            tokio::spawn(async move {
                let t = Instant::now();
                let c = l.check("k").await.unwrap();
                (c, t.elapsed())
            })
        })
        .collect();
    let mut by_failure = (0, 0);
    for call in calls {
        let (c, took) = call.await.unwrap();
        assert!(took <= TIMEOUT + MARGIN, "answered after {took:?}");
        assert_eq!(c.source, Source::FailedClosed);
        match c.failure {
            Some(Failure::Timeout) => by_failure.0 += 1,
            Some(Failure::Overloaded) => by_failure.1 += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(started.elapsed() < Duration::from_millis(150));
    assert_eq!(by_failure, (4, 8), "{:?}", l.stats());
    let s = l.stats();
    assert_eq!((s.timeouts, s.overloaded, s.failed_closed), (4, 8, 12));
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.resume();
    let charged = charged(&l, "k").await;
    settled(&l).await;
    let s = l.stats();
    // The warm-up, then the 4 the thaw ran: all admitted (LIMIT), all counted.
    assert_eq!(charged, 1 + 4, "{s:?}");
    assert_eq!((s.late_replies, s.late_charges), (4, 4), "{s:?}");
}

/// A server slower than the timeout for two seconds (it sleeps 100 ms at a time, answering in
/// between) under 16 concurrent callers with room for 4: every answer comes within the
/// timeout, the bound turns requests away, Redis decides again within a quarter of a second
/// once it is fast, and every unit Redis charged was either answered as admitted by Redis or counted as a
/// late charge: no debt is lost, none is invented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_slower_than_the_timeout_for_seconds_queues_nothing_beyond_the_bound() {
    let _serial = SERIAL.lock().await;
    let Some(server) = server_with(&["--enable-debug-command", "yes"]) else {
        return;
    };
    let l = limiter(&server, 4).await;
    assert!(l.check("k").await.unwrap().decision.is_allowed());
    let url = server.url();
    let slow = std::thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            let _: () = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg("0.1")
                .query(&mut con)
                .unwrap();
        }
    });
    let callers: Vec<_> = (0..16)
        .map(|_| {
            let l = l.clone();
            tokio::spawn(async move {
                let mut admitted_by_redis = 0;
                let mut slowest = Duration::ZERO;
                let until = Instant::now() + Duration::from_millis(2_000);
                while Instant::now() < until {
                    let t = Instant::now();
                    let c = l.check("k").await.unwrap();
                    slowest = slowest.max(t.elapsed());
                    if c.source == Source::Redis && c.decision.is_allowed() {
                        admitted_by_redis += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                (admitted_by_redis, slowest)
            })
        })
        .collect();
    let mut admitted_by_redis = 1; // the warm-up
    for caller in callers {
        let (admitted, slowest) = caller.await.unwrap();
        admitted_by_redis += admitted;
        assert!(slowest <= TIMEOUT + MARGIN, "an answer took {slowest:?}");
    }
    slow.join().unwrap();
    // Fast again: the late replies come in and free their places, and Redis decides.
    let back = Instant::now();
    while l.check_n("k", 0).await.unwrap().source != Source::Redis {
        assert!(
            back.elapsed() < Duration::from_millis(250),
            "{:?}",
            l.stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let charged = charged(&l, "k").await;
    settled(&l).await;
    let s = l.stats();
    assert!(s.overloaded > 0, "the bound was never reached: {s:?}");
    assert!(s.late_charges > 0, "no request was late: {s:?}");
    assert_eq!(charged, admitted_by_redis + s.late_charges, "{s:?}");
}

/// A `check_many` takes one place per key it sends to Redis: one with more keys than
/// `max_pending` is answered by the policy as `Overloaded`, at once, and sends nothing; one
/// within the bound is decided by Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_takes_one_place_per_key() {
    let _serial = SERIAL.lock().await;
    let Some(server) = server() else { return };
    let l = limiter(&server, 2).await;
    for answer in l.check_many(&["a", "b", "c"], 1).await {
        let c = answer.unwrap();
        assert_eq!(
            (c.source, c.failure),
            (Source::FailedClosed, Some(Failure::Overloaded))
        );
    }
    assert_eq!(l.stats().round_trips, 0);
    for answer in l.check_many(&["a", "b"], 1).await {
        let c = answer.unwrap();
        assert_eq!((c.source, c.decision.is_allowed()), (Source::Redis, true));
    }
    assert_eq!(charged(&l, "c").await, 0);
}
