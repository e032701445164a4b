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
//! * `minimal_loop`: the one-thread loop a new user writes, funnel and governor against the
//!   bare lookup of funnel's bucket layout;
//! * `funnel-loadgen`: gRPC load for funnel-server's `ShouldRateLimit` (p50/p99/p99.9) and the
//!   no-decision floor, which `bench/server.sh` runs;
//! * `loadtest_proxy`: funnel-tower's example proxy with a no-limit baseline and
//!   tower_governor modes, which `bench/wrk.sh` puts under wrk in front of funnel-tower's
//!   example upstream.
//!
//! Each example's documentation gives its command, e.g.
//! `cargo run --release -p funnel-lab --example floors -- cas`.
//!
//! The shell drivers under `bench/` start real servers and proxies on loopback and put them
//! under load, sharing what they start and stop through `bench/lib.sh`:
//!
//! * `server.sh`: funnel-server in process against the no-decision floor, on Redis with and
//!   without the deny cache, and across Redis timeouts (rules in `bench/rules/`);
//! * `limitador.sh`: funnel-server beside limitador-server (Kuadrant's rate-limit service) and
//!   the no-decision floor, timed or counted in instructions under callgrind;
//! * `proxies.sh`: the forward-auth hop in nginx and Caddy, against their own limit and none;
//! * `wrk.sh`: funnel-tower's layer against tower_governor in one proxy;
//! * `soak.sh`: funnel-tower's example proxy under ten million churning keys, checked for
//!   memory growth, errors and a probe key's decisions (CI runs it briefly).
