//! Loom models of the policies built on the table's update (`docs/design/policies.md`, "Several limits,
//! all or nothing" and "Settle-later costs"): two threads, two limiters of one four-slot bucket
//! each, a frozen clock passed as a value. Run by `.ci/loom.sh` with the slot protocol's models
//! (`src/table/loom.rs`; the `::loom::` filter picks both).

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use crate::clock::{ManualClock, Timestamp};
use crate::limiter::Limiter;
use crate::multi::{check_all, Charge};
use crate::quota::Quota;
use crate::table::loom::model;

const NOW: u64 = 100;
const T: u64 = 10;

fn now() -> Timestamp {
    Timestamp::from_nanos(NOW).unwrap()
}

/// A quota of burst capacity `limit`, one unit leaking back every `T` ns.
fn quota(limit: u64) -> Quota {
    Quota::per_period(1, Duration::from_nanos(T))
        .unwrap()
        .with_limit(limit)
        .unwrap()
}

/// A limiter of one bucket (four slots under loom) on a frozen clock.
fn limiter<K: std::hash::Hash + ?Sized>(limit: u64) -> Arc<Limiter<K, ManualClock>> {
    let limiter = Limiter::builder(quota(limit))
        .capacity(4)
        .seed(7)
        .clock(ManualClock::starting_at(now()))
        .build()
        .unwrap();
    Arc::new(limiter)
}

/// Units charged to `key` now: its funnel's debt in emission intervals.
fn charged<K: std::hash::Hash + ?Sized>(limiter: &Limiter<K, ManualClock>, key: &K) -> u64 {
    let reset = limiter.peek_at(key, now()).reset_after();
    assert_eq!(reset.as_nanos() % u128::from(T), 0, "a partial unit left");
    (reset.as_nanos() / u128::from(T)) as u64
}

/// Two requests, each against a per-user limit of 2 (`u64` keys) and a per-route limit of 1
/// (`str` keys): both fit the first, one wins the second, and the loser's first charge is
/// rolled back exactly, whatever the interleaving.
#[test]
fn the_loser_of_the_second_limit_rolls_back_its_first_charge_exactly() {
    model(|| {
        let users = limiter::<u64>(2);
        let routes = limiter::<str>(1);
        let request = |users: &Limiter<u64, ManualClock>, routes: &Limiter<str, ManualClock>| {
            let (user, route) = (users.cost(&1, 1), routes.cost("/r", 1));
            let entries: [&dyn Charge; 2] = [&user, &route];
            check_all(&entries, now())
        };
        let other = {
            let (users, routes) = (users.clone(), routes.clone());
            thread::spawn(move || request(&users, &routes))
        };
        let mine = request(&users, &routes);
        let theirs = other.join().unwrap();
        let outcomes = [mine.denied_by(), theirs.denied_by()];
        assert!(
            outcomes == [None, Some(1)] || outcomes == [Some(1), None],
            "exactly one admitted, the other denied by the route: {outcomes:?}"
        );
        assert_eq!(
            charged(&users, &1),
            1,
            "the rollback left the user's charge wrong"
        );
        assert_eq!(charged(&routes, "/r"), 1);
    });
}

/// A request that can never pass (its second limit is full) charges and rolls back a shared
/// limit of 1 while another request needs that unit: the other is admitted or denied by the
/// shared limit (stricter while the charge is in place), never charged twice, and the shared
/// limit ends holding exactly the admitted request.
#[test]
fn a_rolled_back_charge_only_makes_a_concurrent_request_stricter() {
    model(|| {
        let shared = limiter::<u64>(1);
        let own = limiter::<u64>(1);
        assert!(own.check_at(&1, now()).is_allowed()); // key 1's own limit is full
        let doomed = {
            let (shared, own) = (shared.clone(), own.clone());
            thread::spawn(move || check_all(&[&shared.cost(&0, 1), &own.cost(&1, 1)], now()))
        };
        let other = check_all(&[&shared.cost(&0, 1), &own.cost(&2, 1)], now());
        let doomed = doomed.join().unwrap();
        // Never admitted: denied by its own full limit, or by the shared one if the other
        // request took the unit first.
        assert!(matches!(doomed.denied_by(), Some(0 | 1)), "{doomed:?}");
        match other.denied_by() {
            None => {
                assert_eq!(charged(&shared, &0), 1);
                assert_eq!(charged(&own, &2), 1);
            }
            // Denied while the doomed request held the shared unit: stricter, nothing kept.
            Some(0) => {
                assert_eq!(doomed.denied_by(), Some(1), "nobody else held the unit");
                assert_eq!(charged(&shared, &0), 0);
                assert_eq!(charged(&own, &2), 0);
            }
            Some(i) => panic!("denied by limit {i}, which had room"),
        }
        assert_eq!(charged(&own, &1), 1);
    });
}

/// Two reservations of 2 on one key of limit 3, settled concurrently, one down to 1 and one up
/// to 3: whatever the interleaving, the funnel ends holding exactly the actual costs of the
/// admitted ones (a settle-down never takes back another's charge, a settle-up is never lost).
#[test]
fn concurrent_settles_leave_exactly_the_actual_costs() {
    model(|| {
        let users = limiter::<u64>(3);
        let reserve_and_settle = |users: &Limiter<u64, ManualClock>, actual: u64| {
            let r = users.with_quota(quota(3)).reserve_at(&1, 2, now());
            if !r.is_allowed() {
                return 0;
            }
            let _ = users.settle_at(&1, r, actual, now()).unwrap();
            actual
        };
        let other = {
            let users = users.clone();
            thread::spawn(move || reserve_and_settle(&users, 3))
        };
        let mine = reserve_and_settle(&users, 1);
        let theirs = other.join().unwrap();
        assert!(mine + theirs > 0, "the first reservation always fits");
        assert_eq!(charged(&users, &1), mine + theirs);
    });
}

/// A reader loads a live quota twice while a writer replaces it twice (the second replacement
/// rewrites the slot the first reads came from): every load is one whole quota, never a mix of
/// two, and never older than the load before it.
#[test]
fn a_live_quota_is_never_read_torn() {
    use crate::live::LiveQuota;
    // Distinct intervals and limits, so a mix of two shows.
    let quotas = [
        quota(1),
        Quota::per_period(1, Duration::from_nanos(2 * T))
            .unwrap()
            .with_limit(2)
            .unwrap(),
        Quota::per_period(1, Duration::from_nanos(3 * T))
            .unwrap()
            .with_limit(3)
            .unwrap(),
    ];
    model(move || {
        let cell = Arc::new(LiveQuota::new(quotas[0]));
        let writer = {
            let cell = cell.clone();
            thread::spawn(move || {
                cell.store(quotas[1]);
                cell.store(quotas[2]);
            })
        };
        let seen = [cell.load(), cell.load()].map(|q| {
            quotas
                .iter()
                .position(|x| *x == q)
                .unwrap_or_else(|| panic!("torn read {q:?}"))
        });
        assert!(seen[0] <= seen[1], "went back in time: {seen:?}");
        writer.join().unwrap();
        assert_eq!(cell.load(), quotas[2]);
    });
}

/// The key's theoretical arrival time, read through a peek at time zero (a peek's reset time is
/// `TAT - now`): shows a funnel left *below* fresh (`TAT < NOW`), which a peek at `NOW` cannot
/// tell from a fresh one.
fn arrival_time<K: std::hash::Hash + ?Sized>(limiter: &Limiter<K, ManualClock>, key: &K) -> u64 {
    limiter
        .peek_at(key, Timestamp::ZERO)
        .reset_after()
        .as_nanos() as u64
}

/// One thread charges a key twice while another charges it once and refunds that charge if it
/// was admitted (a request that was not served after all), on a limit of 2 and a key that does
/// not exist yet (so both may race to create it). Whatever the interleaving, the refund finds
/// its own charge to give back, and the funnel ends holding exactly the admitted charges minus
/// the refund: a refund's CAS loop never loses a concurrent charge, and never takes one back
/// twice.
#[test]
fn a_refund_racing_charges_leaves_exactly_the_admitted_charges_minus_the_refund() {
    model(|| {
        let users = limiter::<u64>(2);
        let charger = {
            let users = users.clone();
            thread::spawn(move || {
                (0..2)
                    .filter(|_| users.check_at(&1, now()).is_allowed())
                    .count() as u64
            })
        };
        let (admitted, refunded) = if users.check_at(&1, now()).is_allowed() {
            assert!(
                users.with_quota(quota(2)).refund_at(&1, 1, now()),
                "a refund found nothing to give back although its own charge was in place"
            );
            (1, 1)
        } else {
            (0, 0)
        };
        let theirs = charger.join().unwrap();
        assert!(theirs >= 1, "the first charge always fits");
        let held = theirs + admitted - refunded;
        assert_eq!(charged(&users, &1), held);
        assert_eq!(
            arrival_time(&users, &1),
            NOW + T * held,
            "below a fresh funnel"
        );
    });
}

/// A refund of 3 units on a funnel holding 1 races a charge of 1: the refund gives back what
/// the funnel holds when it lands and stops at a fresh funnel (`TAT = now`), never below it, so
/// the funnel ends holding the charge if it landed after the refund and nothing if before.
#[test]
fn a_refund_larger_than_the_funnel_stops_at_a_fresh_funnel() {
    model(|| {
        let users = limiter::<u64>(2);
        assert!(users.check_at(&1, now()).is_allowed());
        let refund = {
            let users = users.clone();
            thread::spawn(move || users.with_quota(quota(2)).refund_at(&1, 3, now()))
        };
        let charge = users.check_at(&1, now());
        assert!(charge.is_allowed(), "a limit of 2 holds 1 and 1 more");
        assert!(
            refund.join().unwrap(),
            "the funnel held something to give back"
        );
        // The charge saw 1 unit held (remaining 0 after it) when it came first, none when the
        // refund had emptied the funnel (remaining 1).
        let after_refund = charge.remaining() == 1;
        assert_eq!(charged(&users, &1), u64::from(after_refund));
        assert_eq!(
            arrival_time(&users, &1),
            NOW + T * u64::from(after_refund),
            "a refund left the funnel below fresh, or a charge was lost"
        );
    });
}
