//! funnel-redis when Redis fails or is slow: failure policies against faults (`faults`) and
//! the requests waiting on Redis (`pending`). A binary of its own, apart from `it/`: these
//! tests bound how long an answer takes, so they run one at a time, with no other test in
//! the process.

mod faults;
mod pending;
