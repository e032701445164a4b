//! `check_all`'s answer: which entry denied, what each entry reports, and that nothing stays
//! charged on a denial, with few entries (kept inline) and many (on the heap).

use funnel::clock::ManualClock;
use funnel::{check_all, Charge, Limiter, Outcome, Quota};

fn limiter(limit: u64) -> Limiter<u64, ManualClock> {
    Limiter::builder(Quota::per_second(limit).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

#[test]
fn a_denial_names_its_entry_and_leaves_every_limit_as_it_was() {
    for entries in [2usize, 4, 5, 9] {
        // Entry `entries - 2` has a limit of 1 already used; every other has room for 3.
        let limiters: Vec<_> = (0..entries)
            .map(|i| limiter(if i == entries - 2 { 1 } else { 3 }))
            .collect();
        let now = limiters[0].now();
        assert!(limiters[entries - 2].check(&7).is_allowed());
        let costs: Vec<_> = limiters.iter().map(|l| l.cost(&7, 1)).collect();
        let d = check_all(&costs, now);
        assert_eq!(d.denied_by(), Some(entries - 2), "{entries} entries");
        assert_eq!(d.decisions().len(), entries);
        for (i, decision) in d.decisions().iter().enumerate() {
            if i == entries - 2 {
                assert_eq!(decision.outcome(), Outcome::Limited);
                assert_eq!(d.strictest(), Some(decision));
            } else {
                // Rolled back or not consulted: what the entry alone would answer, 2 left.
                assert_eq!(
                    (decision.outcome(), decision.remaining()),
                    (Outcome::Allowed, 2)
                );
                assert_eq!(
                    limiters[i].peek(&7).remaining(),
                    3,
                    "entry {i} kept a charge"
                );
            }
        }
    }
}

#[test]
fn an_admission_charges_every_entry_and_reports_the_strictest() {
    let (a, b, c) = (limiter(5), limiter(2), limiter(9));
    let now = a.now();
    let d = check_all(&[&a.cost(&1, 1), &b.cost(&1, 1), &c.cost(&1, 1)], now);
    assert!(d.is_allowed());
    let remaining: Vec<u64> = d.decisions().iter().map(|d| d.remaining()).collect();
    assert_eq!(remaining, [4, 1, 8]);
    assert_eq!(d.strictest().map(|d| d.remaining()), Some(1));
    assert!(check_all::<&dyn Charge>(&[], now).is_allowed());
}

#[test]
fn one_now_serves_limiters_on_default_clocks_built_at_different_times() {
    // 5 a second, burst 1: one request, then the next 200 ms later.
    let quota = Quota::per_second(5).unwrap().with_limit(1).unwrap();
    let older = Limiter::<u64>::new(quota);
    std::thread::sleep(std::time::Duration::from_millis(400));
    let younger = Limiter::<u64>::new(Quota::per_second(1_000).unwrap());
    // The time read from the younger limiter is the older one's time too: its request leaves
    // the older limit charged for the next 200 ms, on the older limiter's own clock as well.
    // (Were the younger clock 400 ms behind, that charge would already have leaked on it.)
    let now = younger.now();
    assert!(check_all(&[&older.cost(&7, 1), &younger.cost(&7, 1)], now).is_allowed());
    let next = older.check(&7);
    assert!(!next.is_allowed(), "{next:?}");
}
