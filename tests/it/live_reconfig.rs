//! Live reconfiguration under load: the default quota changes every millisecond of the clock
//! while threads decide, and every admission matches the reference model (`funnel_testkit::model`)
//! under the quota in force, with each key's debt kept as time across changes.

use funnel_testkit::model;

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use funnel::clock::ManualClock;
use funnel::{Clock, Limiter, LiveLimiter, Quota};
use model::{Model, ModelQuota};

const MS: u64 = 1_000_000;

/// Three quotas with distinct limits, so a decision's limit names the quota it used:
/// 5 at 2,000/s, 3 at 4,000/s, 8 at 1,000/s.
fn quotas() -> [(Quota, ModelQuota); 3] {
    [(4, 2_000), (2, 4_000), (7, 1_000)].map(|(burst, count)| {
        let q = Quota::per_second(count)
            .unwrap()
            .with_limit(burst + 1)
            .unwrap();
        let m = ModelQuota::per(i128::from(burst) + 1, i128::from(count), 1_000_000_000);
        assert_eq!(q.emission_interval().as_nanos() as i128, m.t);
        (q, m)
    })
}

fn live(clock: &ManualClock, first: Quota) -> LiveLimiter<u64, ManualClock> {
    LiveLimiter::new(
        Limiter::builder(first)
            .capacity(1_024)
            .clock(clock.clone())
            .seed(3)
            .build()
            .unwrap(),
    )
}

/// Two threads share 64 keys. Each millisecond the quota changes (cycling through the three),
/// the clock moves 1 ms, and both threads send every key more requests than any quota admits:
/// each key then admits exactly what the model admits under that quota from its kept debt.
#[test]
fn admissions_match_the_model_in_every_interval_as_the_quota_changes_every_millisecond() {
    const THREADS: usize = 2;
    const KEYS: u64 = 64;
    const INTERVALS: usize = 60;
    let quotas = quotas();
    let clock = ManualClock::new();
    let limiter = live(&clock, quotas[0].0);
    let mut model = Model::new();
    let admitted: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    let start = Barrier::new(THREADS + 1);
    let end = Barrier::new(THREADS + 1);
    thread::scope(|s| {
        for t in 0..THREADS as u64 {
            let (limiter, admitted, start, end) = (&limiter, &admitted, &start, &end);
            s.spawn(move || {
                for _ in 0..INTERVALS {
                    start.wait();
                    for round in 0..5 {
                        for i in 0..KEYS {
                            // The threads walk the keys in opposite directions.
                            let k = if (t + round) % 2 == 0 {
                                i
                            } else {
                                KEYS - 1 - i
                            };
                            if limiter.current().check(&k).is_allowed() {
                                // Relaxed: read after the `end` barrier.
                                admitted[k as usize].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    end.wait();
                }
            });
        }
        for interval in 0..INTERVALS {
            let (quota, mq) = quotas[interval % 3];
            limiter.set_quota(quota);
            clock.advance(Duration::from_millis(1));
            let now = i128::from(clock.now().as_nanos());
            start.wait();
            end.wait();
            for k in 0..KEYS {
                let key = k.to_le_bytes();
                let mut want = 0;
                while model.throttle(&key, now, mq, 1)[0] == 0 {
                    want += 1;
                }
                let got = admitted[k as usize].swap(0, Ordering::Relaxed);
                assert_eq!(
                    got,
                    want,
                    "interval {interval} (limit {}): key {k}",
                    quota.limit()
                );
            }
        }
    });
}

/// A writer replaces the quota and moves the clock by 1 ms in a loop while two threads decide,
/// each on keys of its own. Every decision names its quota by its limit (never a mix: the
/// limit is one of the three), and replaying each key's decisions in the model under those
/// quotas at the same times gives the same answers, debt kept as time across every change.
/// After each change the writer waits for two more decisions from each thread (the threads
/// never wait), so every quota is used whatever the scheduler does, and each change still
/// races with decisions in flight.
#[test]
fn decisions_racing_quota_changes_each_match_the_model_under_the_quota_they_used() {
    const THREADS: u64 = 2;
    const KEYS: u64 = 8;
    let quotas = quotas();
    let by_limit: HashMap<u64, ModelQuota> = quotas.iter().map(|(q, m)| (q.limit(), *m)).collect();
    let clock = ManualClock::new();
    let limiter = live(&clock, quotas[0].0);
    let stop = AtomicBool::new(false);
    let decided: Vec<AtomicU64> = (0..THREADS).map(|_| AtomicU64::new(0)).collect();
    let logs = thread::scope(|s| {
        let readers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (limiter, clock, stop) = (&limiter, &clock, &stop);
                let decided = &decided[t as usize];
                s.spawn(move || {
                    let mut log = Vec::new();
                    let mut i = 0u64;
                    // Relaxed: a stop flag; the join orders everything else.
                    while !stop.load(Ordering::Relaxed) || log.len() < 20_000 {
                        let key = t * KEYS + i % KEYS;
                        let now = clock.now();
                        let d = limiter.current().check_n_at(&key, 1, now);
                        log.push((key, now.as_nanos(), d.limit(), d.to_cl_throttle()));
                        i += 1;
                        // Relaxed, then a SeqCst fence, as the writer does on its side: a
                        // writer that has not seen this count yet has its quota change seen by
                        // the decision after this one (the store-buffering pattern, which the
                        // two fences forbid).
                        decided.store(i, Ordering::Relaxed);
                        fence(Ordering::SeqCst);
                    }
                    log
                })
            })
            .collect();
        for change in 0..200 {
            limiter.set_quota(quotas[change % 3].0);
            clock.advance(Duration::from_nanos(MS));
            // See the readers' fence. Each reader's second decision from now on started after
            // the change, so it used this quota; the ones before may race with the change.
            fence(Ordering::SeqCst);
            for count in &decided {
                let from = count.load(Ordering::Relaxed);
                while count.load(Ordering::Relaxed) < from + 2 {
                    thread::yield_now();
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        readers
            .into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    let mut model = Model::new();
    let mut limits_seen = std::collections::HashSet::new();
    for log in &logs {
        for (n, (key, now, limit, reply)) in log.iter().enumerate() {
            let mq = by_limit
                .get(limit)
                .unwrap_or_else(|| panic!("decision {n} used a limit of {limit}: a torn quota"));
            limits_seen.insert(*limit);
            let want = model.throttle(&key.to_le_bytes(), i128::from(*now), *mq, 1);
            assert_eq!(
                *reply, want,
                "key {key}, decision {n} at {now} ns, limit {limit}"
            );
        }
    }
    assert_eq!(
        limits_seen.len(),
        3,
        "a quota was never used by the readers"
    );
}
