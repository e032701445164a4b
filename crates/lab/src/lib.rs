//! funnel's lab: the instruments that measured the design, kept apart from the published crates.
//! Nothing here is a library; every instrument is an example of this crate:
//!
//! * `icount`: a fixed workload for counting instructions per decision under callgrind;
//! * `floors`: what the hardware itself costs (a CAS, a cache miss, a clock read), the floors
//!   a decision cannot go under;
//! * `layouts`: the table's layouts compared (slots in use at the first miss, lookups);
//! * `growth_latency`: the latency of decisions while a growable table grows;
//! * `build_time`: how long a fixed table takes to build, on huge and small pages;
//! * `attack`: funnel-redis's deny cache under an abusive mix (starts its own `redis-server`);
//! * `funnel-loadgen`: gRPC load for funnel-server's `ShouldRateLimit` (p50/p99/p99.9) and the
//!   no-decision floor, which `crates/funnel-server/bench/run.sh` runs;
//! * `loadtest_proxy`: funnel-tower's example proxy with a no-limit baseline and
//!   tower_governor modes, which `bench/wrk.sh` puts under wrk in front of funnel-tower's
//!   example upstream.
//!
//! Each example's documentation gives its command, e.g.
//! `cargo run --release -p funnel-lab --example floors -- cas`.
