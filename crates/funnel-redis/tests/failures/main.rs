//! funnel-redis when Redis fails or is slow: failure policies against faults (`faults`) and
//! the requests waiting on Redis (`pending`). A binary of its own, apart from `it/`: these
//! tests bound how long an answer takes, so they run one at a time, with no other test in
//! the process.

use tokio::sync::Mutex;

mod faults;
mod pending;

/// Held by every test of this binary for its whole run: one test at a time, so that a timing
/// bound measures the limiter rather than another test.
static SERIAL: Mutex<()> = Mutex::const_new(());
