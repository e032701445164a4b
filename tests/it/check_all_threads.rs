//! Several limits, all or nothing, under contention, on a frozen clock: the admitted counts are
//! exact for both limits, and every limit ends holding exactly the requests it admitted (a
//! rollback that leaked or gave back too much would show in its remaining units).
//!
//! Four threads send requests for 2,000 users, each thread in its own shuffled order, three
//! rounds; every request must pass a per-user limit (`Limiter<u64>`) and one per-route limit
//! (`Limiter<str>`) shared by all of them.

use funnel_testkit::rng;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;

use funnel::clock::ManualClock;
use funnel::{check_all, Charge, Limiter, Quota};
use rng::Rng;

const THREADS: usize = 4;
const USERS: u64 = 2_000;
const ROUNDS: usize = 3;
const ROUTE: &str = "/api/search";

struct Limits {
    users: Limiter<u64, ManualClock>,
    routes: Limiter<str, ManualClock>,
}

fn limits(per_user: u64, per_route: u64, seed: u64) -> Limits {
    let clock = ManualClock::new();
    Limits {
        users: Limiter::builder(Quota::per_second(per_user).unwrap())
            .capacity(4 * USERS as usize)
            .clock(clock.clone())
            .seed(seed)
            .build()
            .unwrap(),
        routes: Limiter::builder(Quota::per_second(per_route).unwrap())
            .capacity(16)
            .clock(clock)
            .seed(seed + 1)
            .build()
            .unwrap(),
    }
}

/// `0..n` in an order of its own for every seed (Fisher–Yates).
fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (0..n).collect();
    Rng::new(seed).shuffle(&mut order);
    order
}

/// One request for `user`, the route checked first or last.
fn request(limits: &Limits, user: u64, route_first: bool) -> bool {
    let now = limits.users.now();
    let user = limits.users.cost(&user, 1);
    let route = limits.routes.cost(ROUTE, 1);
    // Limiters of two key types: `&dyn Charge` entries.
    let entries: [&dyn Charge; 2] = if route_first {
        [&route, &user]
    } else {
        [&user, &route]
    };
    let d = check_all(&entries, now);
    assert_eq!(d.decisions().len(), 2);
    d.is_allowed()
}

/// Every thread sends `ROUNDS` requests per user; returns the admitted count per user.
fn contend(limits: &Limits, route_first: bool, seed: u64) -> Vec<u64> {
    let admitted: Vec<AtomicU64> = (0..USERS).map(|_| AtomicU64::new(0)).collect();
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (admitted, barrier) = (&admitted, &barrier);
            let order = shuffled(USERS, seed * 10 + t as u64);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..ROUNDS {
                    for &u in &order {
                        if request(limits, u, route_first) {
                            // Relaxed: read only after the scope joins every thread.
                            admitted[u as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    admitted.into_iter().map(AtomicU64::into_inner).collect()
}

/// The limits hold exactly the admitted requests: each user's funnel `admitted[u]` units, the
/// route's funnel their sum.
fn assert_charged_exactly(limits: &Limits, admitted: &[u64], per_user: u64, per_route: u64) {
    for (u, n) in admitted.iter().enumerate() {
        assert!(*n <= per_user, "user {u} admitted {n} > {per_user}");
        assert_eq!(
            limits.users.peek(&(u as u64)).remaining(),
            per_user - n,
            "user {u}: admitted {n}, but its funnel holds another charge"
        );
    }
    let total: u64 = admitted.iter().sum();
    assert!(total <= per_route, "route admitted {total} > {per_route}");
    assert_eq!(limits.routes.peek(ROUTE).remaining(), per_route - total);
}

/// The users bind, the route is last: the route is charged and rolled back on every denial by
/// a user, yet ends holding exactly the admitted requests, and every user admits exactly its
/// limit (a user's charge, checked last, is never transient).
#[test]
fn route_first_rollbacks_leave_the_route_exactly_the_admitted_requests() {
    for seed in 0..3 {
        let (per_user, per_route) = (5, 100_000);
        let limits = limits(per_user, per_route, seed);
        let admitted = contend(&limits, true, seed);
        assert!(admitted.iter().all(|&n| n == per_user), "seed {seed}");
        assert_charged_exactly(&limits, &admitted, per_user, per_route);
    }
}

/// The route binds (6,000 of the users' 10,000), checked last: its charges are never rolled back,
/// so it admits exactly 6,000; the users' charges rolled back once the route is full leave each
/// user holding exactly its admitted requests.
#[test]
fn route_last_admits_exactly_the_route_limit_and_rolls_back_every_user_charge() {
    for seed in 0..3 {
        let (per_user, per_route) = (5, 6_000);
        let limits = limits(per_user, per_route, seed);
        let admitted = contend(&limits, false, seed);
        assert_eq!(admitted.iter().sum::<u64>(), per_route, "seed {seed}");
        assert_charged_exactly(&limits, &admitted, per_user, per_route);
    }
}

/// Both limits bind and the route goes first, so a request doomed by its user holds a route
/// unit for a moment and may make a concurrent request fail (stricter). Whatever happened, the
/// limits hold exactly what was admitted, never more than either limit, and sending more
/// requests one at a time fills the route exactly to its limit: no unit was lost.
#[test]
fn transient_charges_are_only_stricter_and_never_leak() {
    for seed in 0..3 {
        let (per_user, per_route) = (5, 6_000);
        let limits = limits(per_user, per_route, seed);
        let mut admitted = contend(&limits, true, seed);
        assert_charged_exactly(&limits, &admitted, per_user, per_route);
        // Top up one request at a time until nothing more fits anywhere.
        for u in 0..USERS {
            while admitted[u as usize] < per_user && request(&limits, u, true) {
                admitted[u as usize] += 1;
            }
        }
        assert_eq!(admitted.iter().sum::<u64>(), per_route, "seed {seed}");
        assert_charged_exactly(&limits, &admitted, per_user, per_route);
    }
}

/// On the real clock, with rollbacks all the time (users checked last, most requests denied by
/// them after charging the route): the route never admits more than a funnel may over the run,
/// `limit + elapsed / T`, plus at most one unit per thread for rollbacks given back early
/// (`docs/design/policies.md`: a rollback may return up to what a concurrent later `now` drained, and
/// such errors do not accumulate).
#[test]
fn on_a_moving_clock_rollbacks_keep_the_route_within_its_rate() {
    const RUN: std::time::Duration = std::time::Duration::from_millis(200);
    let users = Limiter::<u64>::builder(Quota::per_second(20).unwrap().with_limit(2).unwrap())
        .capacity(4 * USERS as usize)
        .build()
        .unwrap();
    // 10,000 per second (T = 100 us), bursts of 50.
    let route_quota = Quota::per_second(10_000).unwrap().with_limit(50).unwrap();
    let routes = Limiter::<str>::builder(route_quota).build().unwrap();
    let admitted = AtomicU64::new(0);
    let start = routes.now();
    thread::scope(|s| {
        for t in 0..THREADS as u64 {
            let (users, routes, admitted) = (&users, &routes, &admitted);
            s.spawn(move || {
                let began = std::time::Instant::now();
                let mut i = t;
                while began.elapsed() < RUN {
                    i = (i + 7) % USERS;
                    let now = routes.now();
                    let (route, user) = (routes.cost(ROUTE, 1), users.cost(&i, 1));
                    let entries: [&dyn Charge; 2] = [&route, &user];
                    let d = check_all(&entries, now);
                    if d.is_allowed() {
                        // Relaxed: read after the scope joins.
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let elapsed = routes.now().as_nanos() - start.as_nanos();
    let t = route_quota.emission_interval().as_nanos() as u64;
    let bound = route_quota.limit() + elapsed / t + 1 + THREADS as u64;
    let admitted = admitted.into_inner();
    assert!(
        admitted <= bound,
        "{admitted} admitted in {elapsed} ns, at most {bound}"
    );
    assert!(admitted > 0);
    eprintln!("{admitted} admitted, bound {bound}");
}
