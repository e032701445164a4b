//! Two limits on one API key, charged all or nothing with [`check_all`]: a burst limit (5 a
//! second) and an hourly quota (12 an hour). A request either fits both and is charged to both,
//! or is charged to neither: a request the hourly quota refuses does not use up the burst.
//!
//! ```sh
//! cargo run --example check_all
//! ```
//!
//! The client sends 8 requests at once, three times, a second apart (about 2 s in all).

use std::time::Duration;

use funnel::{check_all, Limiter, Quota};

fn main() -> Result<(), funnel::Error> {
    let burst = Limiter::<str>::new(Quota::per_second(5)?);
    let hourly = Limiter::<str>::new(Quota::per_hour(12)?);
    let key = "api-key-7";
    for round in 1..=3 {
        let mut admitted = 0;
        let mut refused = [0; 2]; // by the burst limit, by the hourly quota
        for _ in 0..8 {
            // Every default clock in a process counts from one origin: either limiter's `now`
            // serves both. Take the limits in one order for every request.
            let now = burst.now();
            let answer = check_all(&[burst.cost(key, 1), hourly.cost(key, 1)], now);
            match answer.denied_by() {
                None => admitted += 1,
                Some(limit) => refused[limit] += 1,
            }
        }
        println!(
            "round {round}: {admitted} admitted, {} refused by the burst limit, {} by the hourly \
             quota; left: burst {}, hourly {}",
            refused[0],
            refused[1],
            burst.peek(key).remaining(),
            hourly.peek(key).remaining(),
        );
        if round < 3 {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
    Ok(())
}
