//! A sliding-window limiter: about 100 requests per key in any minute, counted as this
//! minute's window plus the previous one's, weighted by the part of it the last sixty seconds
//! still cover.
//!
//! ```sh
//! cargo run --example sliding_window
//! ```
//!
//! Pick a window when the limit must read as "N per minute" to the API's callers; a funnel
//! (`Limiter::new`) spreads the same requests evenly instead.

use funnel::window::SlidingWindowQuota;
use funnel::Limiter;

fn main() -> Result<(), funnel::Error> {
    let limiter = Limiter::<str>::builder(SlidingWindowQuota::per_minute(100)?).build()?;
    let mut admitted = 0;
    let mut first_denial = None;
    for request in 1..=120 {
        let decision = limiter.check("client-42");
        if decision.is_allowed() {
            admitted += 1;
        } else if first_denial.is_none() {
            first_denial = Some((request, decision));
        }
    }
    println!("client-42: {admitted} of 120 requests admitted in this minute");
    if let Some((request, decision)) = first_denial {
        println!(
            "first denial: request {request}, {} remaining, retry after {:.1} s",
            decision.remaining(),
            decision.retry_after().unwrap_or_default().as_secs_f64(),
        );
    }
    // Another key has a window of its own.
    println!("client-43: {:?}", limiter.check("client-43").is_allowed());
    Ok(())
}
