//! Workload 6, the attack mix: 90% of requests from legitimate keys (Zipf 0.99) at a known rate,
//! 10% from a flood of keys never seen before. Every request carries a trace time (1 µs apart:
//! one million requests per second of trace time), and every competitor decides at that time.
//! Each legitimate decision is compared with the reference: funnel's own arithmetic
//! (`funnel::Funnel::check_at`, one funnel per key) in an unbounded `HashMap`, so the count of
//! wrongly admitted / wrongly denied requests is what bounding the memory cost.

use std::collections::HashMap;

use funnel::clock::{Clock, ManualClock};
use funnel::{Funnel, Limiter, Timestamp};
use governor::RateLimiter;

use crate::keys::{Key, Zipf};
use crate::limiters::{ahash_for, nz, sip, GovKeyed, LimitAt, MutexMap, TraceClock};
use crate::numbers::{fmt_int, fmt_rate};
use crate::report::{Row, Section};
use crate::runner::{best_of, replay, Run, TraceShare, LEGIT, MAX_SKEW_NS, REF_ALLOWED};
use crate::Ctx;
use funnel_testkit::mutex_map::MutexMapLimiter;
use funnel_testkit::{mix as splitmix64, Rng};

/// One quota of the mix: `per_sec` per second per key, bursts of `per_sec`.
#[derive(Clone, Copy, Debug)]
pub struct MixQuota {
    pub label: &'static str,
    pub per_sec: u32,
}

/// The attack mix's parameters (all stated in the report).
#[derive(Clone, Debug)]
pub struct Params {
    pub legit_keys: u64,
    pub zipf_s: f64,
    /// Requests per second of trace time, legitimate and flood together.
    pub rate: u64,
    /// Share of legitimate requests, per mille.
    pub legit_per_mille: u64,
    /// A mostly-allowing and a mostly-denying quota.
    pub quotas: [MixQuota; 2],
    /// Requests in the whole trace (all threads).
    pub len: usize,
    /// funnel's capacities: one that holds the legitimate keys in debt, and the default.
    pub capacities: [usize; 2],
    /// Timed replays per configuration (each replays the whole trace).
    pub runs: usize,
}

pub fn params(o: &crate::cli::Options) -> Params {
    Params {
        legit_keys: if o.quick { 100_000 } else { 1_000_000 },
        zipf_s: 0.99,
        rate: 1_000_000,
        legit_per_mille: 900,
        quotas: [
            MixQuota {
                label: "allow",
                per_sec: 1000,
            },
            MixQuota {
                label: "deny",
                per_sec: 1,
            },
        ],
        len: if o.quick { 1 << 18 } else { 1 << 22 },
        capacities: [1 << 20, funnel::DEFAULT_CAPACITY],
        runs: if o.quick { 1 } else { o.runs.min(3) },
    }
}

/// Flood key ids start here.
const FLOOD_BASE: u64 = 1 << 48;
/// Trace time of the first request: 1 s.
const START_NS: u64 = 1_000_000_000;

/// A clock that is never read (the reference only calls `check_at`).
struct NoClock;
impl Clock for NoClock {
    fn now(&self) -> Timestamp {
        Timestamp::ZERO
    }
}

/// The whole trace in time order.
struct Trace {
    ids: Vec<u64>,
    legit: Vec<bool>,
    /// Flood requests before each request (flood keys are dealt round-robin).
    flood_index: Vec<u32>,
    /// Per quota, per request: `LEGIT | REF_ALLOWED` flags.
    flags: Vec<Vec<u8>>,
}

impl Params {
    fn time(&self, i: usize) -> u64 {
        START_NS + i as u64 * (1_000_000_000 / self.rate)
    }

    pub fn describe(&self) -> String {
        let zipf = Zipf::new(self.legit_keys, self.zipf_s);
        let legit_rate = self.rate as f64 * self.legit_per_mille as f64 / 1000.0;
        let hottest = zipf.probability(0) * legit_rate;
        let over = |q: f64| {
            (0..self.legit_keys)
                .take_while(|&r| zipf.probability(r) * legit_rate > q)
                .count() as u64
        };
        let quotas: Vec<String> = self
            .quotas
            .iter()
            .map(|q| {
                format!(
                    "`{}` = {}/s per key with bursts of {} (the {} hottest keys send more)",
                    q.label,
                    fmt_int(u64::from(q.per_sec)),
                    fmt_int(u64::from(q.per_sec)),
                    fmt_int(over(f64::from(q.per_sec)))
                )
            })
            .collect();
        format!(
            "{} requests per second of trace time for {:.1} s ({} requests): {}% from legitimate keys, Zipf {} \
             over {} keys ({} legitimate requests/s; the hottest key sends {}/s), {}% from a flood of keys \
             never seen before. Quotas: {}. funnel capacities {} and {} slots; {} replays of the whole trace \
             per configuration",
            fmt_int(self.rate),
            self.len as f64 / self.rate as f64,
            fmt_int(self.len as u64),
            self.legit_per_mille / 10,
            self.zipf_s,
            fmt_int(self.legit_keys),
            fmt_rate(legit_rate),
            fmt_rate(hottest),
            100 - self.legit_per_mille / 10,
            quotas.join("; "),
            fmt_int(self.capacities[0] as u64),
            fmt_int(self.capacities[1] as u64),
            self.runs,
        )
    }
}

/// The trace, and the reference's decision for every request under each quota.
fn generate(p: &Params) -> (Trace, Vec<String>) {
    let zipf = Zipf::new(p.legit_keys, p.zipf_s);
    let mut rng = Rng::new(0x00A7_7AC4);
    let mut trace = Trace {
        ids: Vec::with_capacity(p.len),
        legit: Vec::with_capacity(p.len),
        flood_index: Vec::with_capacity(p.len),
        flags: Vec::new(),
    };
    let mut floods = 0u32;
    for _ in 0..p.len {
        let is_legit = rng.below(1000) < p.legit_per_mille;
        let id = if is_legit {
            zipf.sample(&mut rng)
        } else {
            FLOOD_BASE + u64::from(floods)
        };
        trace.flood_index.push(floods);
        floods += u32::from(!is_legit);
        trace.ids.push(id);
        trace.legit.push(is_legit);
    }
    let mut summaries = Vec::new();
    for q in p.quotas {
        let quota = funnel::Quota::per_second(u64::from(q.per_sec)).expect("valid quota");
        let mut reference: HashMap<u64, Funnel<NoClock>, ahash::RandomState> = HashMap::default();
        let (mut legit, mut admitted) = (0u64, 0u64);
        let flags: Vec<u8> = (0..p.len)
            .map(|i| {
                let now = Timestamp::from_nanos(p.time(i)).expect("trace times are small");
                let allowed = reference
                    .entry(trace.ids[i])
                    .or_insert_with(|| Funnel::with_clock(quota, NoClock))
                    .check_at(now)
                    .is_allowed();
                let is_legit = trace.legit[i];
                legit += u64::from(is_legit);
                admitted += u64::from(is_legit && allowed);
                (if is_legit { LEGIT } else { 0 }) | if allowed { REF_ALLOWED } else { 0 }
            })
            .collect();
        summaries.push(format!(
            "attack mix, `{}` quota: the reference admits {} of {} legitimate requests ({:.1}%); {} distinct keys",
            q.label,
            fmt_int(admitted),
            fmt_int(legit),
            100.0 * admitted as f64 / legit.max(1) as f64,
            fmt_int(reference.len() as u64)
        ));
        trace.flags.push(flags);
    }
    (trace, summaries)
}

/// Deals the trace to `threads` threads: a legitimate key always goes to the same thread (so
/// its requests stay in time order, as in the reference), flood keys round-robin.
fn shares<K: Key>(p: &Params, trace: &Trace, threads: usize) -> Vec<TraceShare<K>> {
    let mut shares: Vec<TraceShare<K>> = (0..threads)
        .map(|_| TraceShare {
            keys: Vec::new(),
            times: Vec::new(),
            flags: vec![Vec::new(); trace.flags.len()],
        })
        .collect();
    for i in 0..trace.ids.len() {
        let owner = if trace.legit[i] {
            (splitmix64(trace.ids[i]) % threads as u64) as usize
        } else {
            trace.flood_index[i] as usize % threads
        };
        let s = &mut shares[owner];
        s.keys.push(K::from_id(trace.ids[i]));
        s.times.push(p.time(i));
        for (q, flags) in trace.flags.iter().enumerate() {
            s.flags[q].push(flags[i]);
        }
    }
    shares
}

/// Competitors per (key type, thread count, quota): funnel at two capacities, governor keyed
/// with two hashers, the `Mutex<HashMap>` funnel.
const COMPETITORS: usize = 5;
/// Estimated seconds per decision, for the progress bar.
const EST_NS: f64 = 250e-9;

pub fn plan_weight(o: &crate::cli::Options) -> f64 {
    let p = params(o);
    let key_types = usize::from(o.u64_keys) + usize::from(o.string_keys);
    let per_quota: f64 = o
        .threads
        .iter()
        .map(|&t| p.len as f64 * EST_NS / t.min(2) as f64 * (COMPETITORS * p.runs) as f64)
        .sum();
    3.0 + key_types as f64
        * (per_quota * p.quotas.len() as f64 + p.len as f64 * 80e-9 * o.threads.len() as f64)
}

pub fn run(ctx: &mut Ctx) -> Result<(), String> {
    let p = params(&ctx.opts);
    ctx.progress
        .begin("attack: generating the trace and the references");
    let (trace, summaries) = generate(&p);
    ctx.facts.push(format!("attack mix: {}", p.describe()));
    ctx.facts.extend(summaries);
    ctx.facts.push(format!(
        "attack mix: a legitimate key's requests all go to one thread, in trace order; threads keep within {} ms of \
         trace time of each other",
        MAX_SKEW_NS / 1_000_000
    ));
    ctx.progress.advance(3.0);
    if ctx.opts.u64_keys {
        run_keys::<u64>(ctx, &p, &trace)?;
    }
    if ctx.opts.string_keys {
        run_keys::<String>(ctx, &p, &trace)?;
    }
    Ok(())
}

fn run_keys<K: Key>(ctx: &mut Ctx, p: &Params, trace: &Trace) -> Result<(), String> {
    let o = ctx.opts.clone();
    for &threads in &o.threads {
        ctx.progress
            .begin(format!("attack {} {threads}t: dealing the trace", K::NAME));
        let shares = shares::<K>(p, trace, threads);
        ctx.progress.advance(p.len as f64 * 80e-9);
        for (qi, q) in p.quotas.iter().enumerate() {
            let m = Mix {
                p,
                shares: &shares,
                threads,
                quota: qi,
            };
            let fq = funnel::Quota::per_second(u64::from(q.per_sec)).map_err(|e| e.to_string())?;
            let gq = governor::Quota::per_second(nz(q.per_sec));
            let mut field = Vec::new();
            for cap in p.capacities {
                let label = format!("funnel (capacity {})", fmt_int(cap as u64));
                field.push(m.contender(label, fmt_int(cap as u64), move || {
                    Limiter::<K>::builder(fq)
                        .capacity(cap)
                        .build()
                        .map_err(|e| format!("funnel: {e}"))
                }));
            }
            field.push(
                m.contender("governor-keyed".into(), "unbounded".into(), move || {
                    let l: GovKeyed<K, std::hash::RandomState, TraceClock> =
                        RateLimiter::dashmap_with_clock_and_hasher(gq, TraceClock, sip());
                    Ok(l)
                }),
            );
            field.push(m.contender(
                "governor-keyed-ahash".into(),
                "unbounded".into(),
                move || {
                    let l: GovKeyed<K, ahash::RandomState, TraceClock> =
                        RateLimiter::dashmap_with_clock_and_hasher(gq, TraceClock, ahash_for());
                    Ok(l)
                },
            ));
            let per_sec = u64::from(q.per_sec);
            field.push(
                m.contender("mutex-map".into(), "unbounded".into(), move || {
                    let t_ns = 1_000_000_000 / per_sec;
                    Ok(MutexMap {
                        map: MutexMapLimiter::<K, ahash::RandomState>::new(per_sec, t_ns),
                        clock: ManualClock::new(),
                    })
                }),
            );
            m.measure(ctx, field)?;
        }
    }
    Ok(())
}

/// One (key type, thread count, quota) of the mix.
struct Mix<'a, K> {
    p: &'a Params,
    shares: &'a [TraceShare<K>],
    threads: usize,
    quota: usize,
}

/// One competitor of the mix: its row's label and capacity, and one measured run (a fresh
/// limiter replaying the whole trace, the best of `--retries` by CPU share), with the note on
/// its table at the end.
struct Contender<'a> {
    label: String,
    capacity: String,
    run: RunOnce<'a>,
}

/// A [`Contender`]'s measurement of one run.
type RunOnce<'a> = Box<dyn FnMut(&Ctx) -> Result<Measured, String> + 'a>;

/// One measured run of a [`Contender`]: the run kept, how many were repeated, the note on
/// funnel's table at its end.
type Measured = (Run, usize, Option<String>);

impl<'m, K: Key> Mix<'m, K> {
    /// The competitor `make` builds, replaying this mix.
    fn contender<L: LimitAt<K> + 'm>(
        &self,
        label: String,
        capacity: String,
        make: impl Fn() -> Result<L, String> + 'm,
    ) -> Contender<'m> {
        let Mix { shares, quota, .. } = *self;
        Contender {
            label,
            capacity,
            run: Box::new(move |ctx: &Ctx| {
                let mut lim = make()?;
                let mut failed = None;
                let (run, repeated) = best_of(ctx.opts.retries, ctx.opts.min_cpu, || {
                    match make() {
                        Ok(fresh) => lim = fresh,
                        Err(e) => failed = Some(e),
                    }
                    replay(&lim, shares, quota)
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                let note = lim.funnel_stats().map(|(held, s)| {
                    format!(
                        "last run: {} keys held at the end, {} forced evictions, {} recovered slots reused",
                        fmt_int(held as u64),
                        fmt_int(s.forced_evictions),
                        fmt_int(s.recovered_evictions)
                    )
                });
                Ok((run, repeated, note))
            }),
        }
    }

    /// Runs every competitor of `field` `--runs` times, in turns (run `r` starts at competitor
    /// `r`, as the in-process workloads do: the host's speed drifts, and no competitor always
    /// runs first or last), then adds one row per competitor, in `field`'s order.
    fn measure(&self, ctx: &mut Ctx, mut field: Vec<Contender<'_>>) -> Result<(), String> {
        let Mix {
            p, threads, quota, ..
        } = *self;
        let q = p.quotas[quota];
        let n = field.len();
        let mut runs: Vec<Vec<Run>> = (0..n).map(|_| Vec::with_capacity(p.runs)).collect();
        let mut notes = vec![String::new(); n];
        for r in 0..p.runs {
            for k in 0..n {
                let at = (r + k) % n;
                let c = &mut field[at];
                ctx.progress.begin(format!(
                    "attack {} {} {} {threads}t run {}/{}",
                    K::NAME,
                    q.label,
                    c.label,
                    r + 1,
                    p.runs
                ));
                let (run, repeated, note) = (c.run)(ctx)?;
                ctx.repeated += repeated;
                ctx.kept += 1;
                runs[at].push(run);
                if let Some(note) = note {
                    notes[at] = note;
                }
                ctx.progress
                    .advance(p.len as f64 * EST_NS / threads.min(2) as f64);
            }
        }
        for ((c, runs), note) in field.iter().zip(runs).zip(notes) {
            ctx.rows.push(Row {
                section: Section::Attack,
                workload: "attack".into(),
                key_space: p.legit_keys,
                key_type: K::NAME,
                quota: q.label.to_string(),
                threads,
                pipeline: 1,
                competitor: c.label.clone(),
                clock: "trace".into(),
                capacity: c.capacity.clone(),
                runs,
                note,
                prefill: None,
                table_prefill: None,
                table_end: None,
                held_end: None,
            });
        }
        Ok(())
    }
}
