//! What the clock costs: each limiter's clock read alone, and a keyed decision on 1,000 `u64`
//! keys on one thread with every competitor on each kind of clock: the real one (the TSC
//! through quanta), the recent one (a time an upkeep thread refreshes every millisecond:
//! funnel's `RecentClock`, governor's `QuantaUpkeepClock`, `RecentClock` for the
//! `Mutex<HashMap>` funnel), the manual one (a frozen counter), and for funnel the time handed
//! in (`check_at`, the time read once per 1,024 decisions, as an event loop reads it).
//!
//! Times are per decision *on a CPU*: the thread's time on a CPU (/proc/thread-self/schedstat)
//! over its decisions, where the system reports it (wall time elsewhere), so that a machine
//! shared with other work slows each figure less than it lengthens the run.
//!
//! Each decision is timed two ways, in alternation: through the harness's loop (`runner::timed`:
//! a spawned thread walking a pre-drawn key array, as in every other table), and in a minimal
//! loop on the calling thread that draws a key below 1,000 and decides it, as a new user would
//! write it. Runs of all variants alternate, so drift on a shared machine falls on all of them.

use std::hint::black_box;
use std::time::{Duration, Instant};

use funnel::clock::{Clock as FunnelClock, ManualClock, QuantaClock, StdClock};
use funnel::{Limiter, Timestamp};
use governor::clock::{Clock as GovClock, FakeRelativeClock, Reference};
use governor::RateLimiter;

use crate::inproc::capacity_for;
use crate::keys::{request_arrays, Dist, Rng};
use crate::limiters::{
    ahash_for, fake_clock, manual_clock, mutex_on, CheapClocks, GovKeyed, Limit, QuotaKind,
    UPKEEP_INTERVAL,
};
use crate::numbers::sig3;
use crate::report::median;
use crate::runner::{on_cpu_ns, timed};
use crate::table::Table;
use crate::Ctx;

/// Keys of the decision loops.
const KEYS: u64 = 1_000;
/// Decisions per minimal-loop run.
const MINIMAL_DECISIONS: u64 = 1 << 20;
/// Clock reads per timed read loop.
const READS: u64 = 1 << 20;
/// Keys per thread of the harness loop's array.
const ARRAY: usize = 1 << 18;

/// One competitor on one clock: its timings, ns per decision.
#[derive(Clone, Debug)]
pub struct ClockRow {
    pub competitor: &'static str,
    pub clock: &'static str,
    pub quota: &'static str,
    pub harness: Vec<f64>,
    pub minimal: Vec<f64>,
}

/// One clock's read: ns per read, one per alternating round.
#[derive(Clone, Debug)]
pub struct ReadRow {
    pub clock: &'static str,
    pub ns: Vec<f64>,
}

/// Rounds of alternating runs: at least three, and five in the publication run.
fn rounds(o: &crate::cli::Options) -> usize {
    o.runs.max(3)
}

pub fn plan_weight(o: &crate::cli::Options) -> f64 {
    // 10 variants, two quotas, a harness run and a minimal run of about 30 ms each round.
    rounds(o) as f64 * 20.0 * (o.duration.as_secs_f64() + 0.03) + 1.0
}

/// A decision loop to time, both ways.
trait Variant {
    fn competitor(&self) -> &'static str;
    fn clock(&self) -> &'static str;
    /// ns per decision through `runner::timed` on one thread.
    fn harness(&self, arrays: &[Vec<u64>], duration: Duration) -> f64;
    /// ns per decision in the minimal loop.
    fn minimal(&self, seed: u64) -> f64;
}

struct Plain<L> {
    competitor: &'static str,
    clock: &'static str,
    lim: L,
}

impl<L: Limit<u64>> Variant for Plain<L> {
    fn competitor(&self) -> &'static str {
        self.competitor
    }
    fn clock(&self) -> &'static str {
        self.clock
    }
    fn harness(&self, arrays: &[Vec<u64>], duration: Duration) -> f64 {
        per_decision_on_cpu(&timed(&self.lim, arrays, 1, duration, true))
    }
    fn minimal(&self, seed: u64) -> f64 {
        minimal_loop(&self.lim, seed)
    }
}

/// A timed stretch of the calling thread: its time on a CPU where known, else wall time.
struct Stopwatch {
    cpu: Option<u64>,
    wall: Instant,
}

impl Stopwatch {
    fn start() -> Stopwatch {
        Stopwatch {
            cpu: on_cpu_ns(),
            wall: Instant::now(),
        }
    }

    /// ns per one of `n` operations since `start`.
    fn per(&self, n: u64) -> f64 {
        let wall = self.wall.elapsed().as_nanos() as f64;
        let ns = match (self.cpu, on_cpu_ns()) {
            (Some(a), Some(b)) if b > a => (b - a) as f64,
            _ => wall,
        };
        ns / n as f64
    }
}

/// ns per decision of a harness run on one thread, on a CPU where known.
fn per_decision_on_cpu(run: &crate::runner::Run) -> f64 {
    let wall = run.elapsed.as_nanos() as f64;
    let share = if run.cpu_share.is_finite() && run.cpu_share > 0.0 {
        run.cpu_share
    } else {
        1.0
    };
    wall * share / run.decisions.max(1) as f64
}

/// The minimal loop: draw a key below 1,000, decide it.
#[inline(never)]
fn minimal_loop<L: Limit<u64>>(lim: &L, seed: u64) -> f64 {
    let mut rng = Rng::new(seed);
    let watch = Stopwatch::start();
    let mut allowed = 0u64;
    for _ in 0..MINIMAL_DECISIONS {
        let key = rng.below(KEYS);
        allowed += u64::from(lim.check(&key));
    }
    black_box(allowed);
    watch.per(MINIMAL_DECISIONS)
}

/// funnel with the time handed in: `check_at` with a time read once per 1,024 decisions.
struct HandedIn {
    lim: Limiter<u64>,
}

impl Limit<u64> for HandedIn {
    #[inline(always)]
    fn check(&self, key: &u64) -> bool {
        self.lim.check(key).is_allowed()
    }
    /// One clock read per slice (the harness's loop hands out 1,024 keys a slice).
    #[inline(always)]
    fn check_slice(&self, keys: &[u64]) -> u64 {
        let now = self.lim.clock().now();
        keys.iter()
            .map(|k| u64::from(self.lim.check_at(k, now).is_allowed()))
            .sum()
    }
}

impl Variant for HandedIn {
    fn competitor(&self) -> &'static str {
        "funnel"
    }
    fn clock(&self) -> &'static str {
        "handed in"
    }
    fn harness(&self, arrays: &[Vec<u64>], duration: Duration) -> f64 {
        per_decision_on_cpu(&timed(self, arrays, 1, duration, true))
    }
    #[inline(never)]
    fn minimal(&self, seed: u64) -> f64 {
        let mut rng = Rng::new(seed);
        let clock = self.lim.clock();
        let watch = Stopwatch::start();
        let mut allowed = 0u64;
        let mut now = clock.now();
        for i in 0..MINIMAL_DECISIONS {
            if i % 1024 == 0 {
                now = clock.now();
            }
            let key = rng.below(KEYS);
            allowed += u64::from(self.lim.check_at(&key, now).is_allowed());
        }
        black_box(allowed);
        watch.per(MINIMAL_DECISIONS)
    }
}

fn funnel_on<C: FunnelClock + 'static>(
    q: QuotaKind,
    clock: C,
    name: &'static str,
) -> Result<Box<dyn Variant>, String> {
    let lim = Limiter::<u64>::builder(q.funnel())
        .capacity(capacity_for(KEYS))
        .clock(clock)
        .build()
        .map_err(|e| format!("funnel: {e}"))?;
    Ok(Box::new(Plain {
        competitor: "funnel",
        clock: name,
        lim,
    }))
}

fn governor_on<C: GovClock + Sync + Send + 'static>(
    q: QuotaKind,
    clock: C,
    name: &'static str,
) -> Box<dyn Variant> {
    let lim: GovKeyed<u64, ahash::RandomState, C> =
        RateLimiter::dashmap_with_clock_and_hasher(q.governor(), clock, ahash_for());
    Box::new(Plain {
        competitor: "governor-keyed-ahash",
        clock: name,
        lim,
    })
}

fn mutex_with<C: FunnelClock + 'static>(
    q: QuotaKind,
    clock: C,
    name: &'static str,
) -> Box<dyn Variant> {
    Box::new(Plain {
        competitor: "mutex-map",
        clock: name,
        lim: mutex_on::<u64, _>(q, clock),
    })
}

/// Every variant for quota `q`, prefilled (each key decided once).
fn variants(q: QuotaKind, cheap: &CheapClocks) -> Result<Vec<Box<dyn Variant>>, String> {
    let handed = Limiter::<u64>::builder(q.funnel())
        .capacity(capacity_for(KEYS))
        .build()
        .map_err(|e| format!("funnel: {e}"))?;
    let v: Vec<Box<dyn Variant>> = vec![
        Box::new(HandedIn { lim: handed }),
        funnel_on(q, QuantaClock::new(), "real")?,
        funnel_on(q, cheap.funnel.clone(), "recent")?,
        funnel_on(q, manual_clock(), "manual")?,
        governor_on(q, governor::clock::QuantaClock::default(), "real"),
        governor_on(q, cheap.governor.clone(), "recent"),
        governor_on(q, fake_clock(), "manual"),
        mutex_with(q, QuantaClock::new(), "real"),
        mutex_with(q, cheap.funnel.clone(), "recent"),
        mutex_with(q, manual_clock(), "manual"),
    ];
    Ok(v)
}

/// ns per read of `clock`, `READS` reads summed.
#[inline(never)]
fn reads<T>(now: impl Fn() -> T, fold: impl Fn(T) -> u64) -> f64 {
    let watch = Stopwatch::start();
    let mut sum = 0u64;
    for _ in 0..READS {
        sum = sum.wrapping_add(fold(now()));
        // Emits nothing; keeps the compiler from merging or hoisting reads across iterations.
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
    black_box(sum);
    watch.per(READS)
}

/// Each clock's read, ns.
fn read_round(cheap: &CheapClocks) -> Vec<(&'static str, f64)> {
    let q = QuantaClock::new();
    let s = StdClock::new();
    let m = ManualClock::starting_at(Timestamp::ZERO);
    let gq = governor::clock::QuantaClock::default();
    let gf = FakeRelativeClock::default();
    let (rf, rg) = (&cheap.funnel, &cheap.governor);
    let ts = |t: Timestamp| t.as_nanos();
    let (gq0, rg0, gf0, i0) = (gq.now(), rg.now(), gf.now(), Instant::now());
    vec![
        ("funnel QuantaClock (real)", reads(|| q.now(), ts)),
        ("funnel RecentClock (recent)", reads(|| rf.now(), ts)),
        ("funnel ManualClock (manual)", reads(|| m.now(), ts)),
        ("funnel StdClock", reads(|| s.now(), ts)),
        (
            "governor QuantaClock (real)",
            reads(|| gq.now(), |i| i.duration_since(gq0).as_u64()),
        ),
        (
            "governor QuantaUpkeepClock (recent)",
            reads(|| rg.now(), |i| i.duration_since(rg0).as_u64()),
        ),
        (
            "governor FakeRelativeClock (manual)",
            reads(|| gf.now(), |i| i.duration_since(gf0).as_u64()),
        ),
        (
            "std Instant::now",
            reads(Instant::now, |i| i.duration_since(i0).as_nanos() as u64),
        ),
    ]
}

pub fn run(ctx: &mut Ctx) -> Result<(), String> {
    // Both upkeep threads run through the whole part, for every row alike; under
    // `--clock recent` they already run for the whole run.
    let cheap = match &ctx.cheap {
        Some(c) => c.clone(),
        None => CheapClocks::start()?,
    };
    let o = ctx.opts.clone();
    ctx.progress.begin("clocks: drawing keys");
    let arrays = request_arrays::<u64>(&Dist::Uniform(KEYS), 1, ARRAY, 0xC10C);
    let mut fields = Vec::new();
    for q in [QuotaKind::Allow, QuotaKind::Deny] {
        let field = variants(q, &cheap)?;
        for v in &field {
            // The prefill: every key decided once.
            ctx.progress
                .begin(format!("clocks: prefill {} {}", v.competitor(), v.clock()));
            v.minimal(0);
        }
        fields.push((q, field));
    }
    let mut rows: Vec<ClockRow> = Vec::new();
    let mut read_ns: Vec<ReadRow> = Vec::new();
    for round in 0..rounds(&o) {
        for (name, ns) in read_round(&cheap) {
            match read_ns.iter_mut().find(|r| r.clock == name) {
                Some(r) => r.ns.push(ns),
                None => read_ns.push(ReadRow {
                    clock: name,
                    ns: vec![ns],
                }),
            }
        }
        for (q, field) in &fields {
            let n = field.len();
            for k in 0..n {
                // Each round starts at another variant.
                let v = &field[(round + k) % n];
                ctx.progress.begin(format!(
                    "clocks: {} {} {} round {}/{}",
                    v.competitor(),
                    v.clock(),
                    q.label(),
                    round + 1,
                    rounds(&o)
                ));
                let h = v.harness(&arrays, o.duration);
                let m = v.minimal(round as u64 + 1);
                ctx.progress.advance(o.duration.as_secs_f64() + 0.03);
                match rows.iter_mut().find(|r| {
                    r.competitor == v.competitor() && r.clock == v.clock() && r.quota == q.label()
                }) {
                    Some(r) => {
                        r.harness.push(h);
                        r.minimal.push(m);
                    }
                    None => rows.push(ClockRow {
                        competitor: v.competitor(),
                        clock: v.clock(),
                        quota: q.label(),
                        harness: vec![h],
                        minimal: vec![m],
                    }),
                }
            }
        }
    }
    drop(fields);
    ctx.clock_rows = rows;
    ctx.clock_reads = read_ns;
    ctx.facts.push(format!(
        "Clocks table: 1,000 u64 keys, one thread, {} alternating rounds; the recent clocks tick \
         every {:?}.",
        rounds(&o),
        UPKEEP_INTERVAL
    ));
    Ok(())
}

fn med(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    median(&s)
}

fn fmt_ns_range(v: &[f64]) -> String {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match (s.first(), s.last()) {
        (Some(lo), Some(hi)) => format!("{} ({}–{})", sig3(median(&s)), sig3(*lo), sig3(*hi)),
        _ => "–".into(),
    }
}

/// Each (limiter, clock) pair once, in the order first measured, with its `allow` and `deny`
/// rows (`None` where that quota was not measured).
fn by_limiter_and_clock(rows: &[ClockRow]) -> Vec<(&ClockRow, [Option<&ClockRow>; 2])> {
    let mut pairs: Vec<(&ClockRow, [Option<&ClockRow>; 2])> = Vec::new();
    for r in rows {
        if pairs
            .iter()
            .any(|(p, _)| (p.competitor, p.clock) == (r.competitor, r.clock))
        {
            continue;
        }
        let get = |q: &str| {
            rows.iter()
                .find(|x| x.competitor == r.competitor && x.clock == r.clock && x.quota == q)
        };
        pairs.push((r, [get("allow"), get("deny")]));
    }
    pairs
}

/// ns per decision, median (min–max) of the rounds, both loops, both quotas.
pub fn decision_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &[
            "limiter",
            "clock",
            "allow, harness",
            "allow, minimal",
            "deny, harness",
            "deny, minimal",
        ],
        &[false, false, true, true, true, true],
    );
    for (r, quotas) in by_limiter_and_clock(&ctx.clock_rows) {
        let mut cells = vec![r.competitor.to_string(), r.clock.to_string()];
        for x in quotas {
            match x {
                Some(x) => {
                    cells.push(fmt_ns_range(&x.harness));
                    cells.push(fmt_ns_range(&x.minimal));
                }
                None => cells.extend(["–".to_string(), "–".to_string()]),
            }
        }
        t.rows.push(cells);
    }
    t
}

/// The short form printed on stdout: medians only.
pub fn short_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(
        &[
            "limiter",
            "clock",
            "allow",
            "deny",
            "allow (minimal loop)",
            "deny (minimal loop)",
        ],
        &[false, false, true, true, true, true],
    );
    for (r, [a, d]) in by_limiter_and_clock(&ctx.clock_rows) {
        let cell = |x: Option<&ClockRow>, minimal: bool| {
            x.map_or("–".into(), |x| {
                sig3(med(if minimal { &x.minimal } else { &x.harness }))
            })
        };
        t.rows.push(vec![
            r.competitor.to_string(),
            r.clock.to_string(),
            cell(a, false),
            cell(d, false),
            cell(a, true),
            cell(d, true),
        ]);
    }
    t
}

/// ns per clock read, median (min–max) of the rounds.
pub fn read_table(ctx: &Ctx) -> Table {
    let mut t = Table::new(&["clock", "ns per read"], &[false, true]);
    for r in &ctx.clock_reads {
        t.rows.push(vec![r.clock.to_string(), fmt_ns_range(&r.ns)]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(competitor: &'static str, clock: &'static str, quota: &'static str) -> ClockRow {
        ClockRow {
            competitor,
            clock,
            quota,
            harness: vec![1.0],
            minimal: vec![2.0],
        }
    }

    #[test]
    fn each_limiter_and_clock_is_one_row_with_its_allow_and_deny() {
        let rows = [
            row("funnel", "quanta", "deny"),
            row("governor", "quanta", "allow"),
            row("funnel", "quanta", "allow"),
            row("funnel", "recent", "allow"),
        ];
        let pairs = by_limiter_and_clock(&rows);
        let seen: Vec<_> = pairs
            .iter()
            .map(|(r, [a, d])| {
                let quota = |x: &Option<&ClockRow>| x.map(|x| x.quota);
                (r.competitor, r.clock, quota(a), quota(d))
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("funnel", "quanta", Some("allow"), Some("deny")),
                ("governor", "quanta", Some("allow"), None),
                ("funnel", "recent", Some("allow"), None),
            ]
        );
    }
}
