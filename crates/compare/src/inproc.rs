//! Workloads 1–5 and the key-space sweep, for every in-process competitor.

use std::time::Duration;

use funnel::Funnel;
use governor::RateLimiter;

use crate::keys::{request_arrays, Dist, Key};
use crate::limiters::{
    ahash_for, fake_clock, funnel_grown_manual, funnel_grown_on, funnel_grown_real, funnel_manual,
    funnel_on, funnel_real, manual_clock, mutex_manual, mutex_on, mutex_real, sip, Batched,
    ClockPolicy, GovKeyed, Limit, Pingora, QuotaKind, PINGORA_SLOTS,
};
use crate::numbers::{fmt_count_short, fmt_int};
use crate::report::{Row, Section, TableState};
use crate::runner::{best_of, prefill, timed, Run};
use crate::Ctx;

#[derive(Clone, Debug)]
pub struct Workload {
    /// `hot-1`, `hot-1k`, `zipf-1M`, `uniform-10M`, `churn`, `uniform-10k` ...
    pub name: String,
    /// W1..W5, or "sweep".
    pub role: &'static str,
    pub dist: Dist,
    /// Distinct keys (0 for churn: unbounded).
    pub key_space: u64,
    /// funnel's requested capacity (keys).
    pub capacity: usize,
    pub section: Section,
    /// Every key gets one request before timing (not for churn).
    pub prefill: bool,
    /// Keys per thread in the request array.
    pub array_len: usize,
    pub string_keys: bool,
}

/// funnel's capacity for a key space of `n`: 1.25 n slots (at least 1,024), the sizing
/// `docs/design/table.md` recommends for keys in debt at once, so every key fits when all are in
/// debt (with the cuckoo step, a table first evicts a key in debt only when nearly full). A
/// larger table (the next power of two) can outgrow the last-level cache at a million keys
/// and cost funnel speed, not only memory.
pub fn capacity_for(n: u64) -> usize {
    ((n as usize).saturating_mul(5) / 4).max(1024)
}

/// funnel's table in the churn workload: the default capacity, 65,536 keys in 1 MiB.
pub const CHURN_CAPACITY: usize = funnel::DEFAULT_CAPACITY;

pub fn workloads(quick: bool) -> Vec<Workload> {
    let scale = if quick { 10 } else { 1 };
    let len = if quick { 1 << 18 } else { 1 << 22 };
    let churn_len = if quick { 1 << 20 } else { 1 << 23 };
    let zipf_n = 1_000_000 / scale;
    let uni_n = 10_000_000 / scale;
    let w = |name: String, role, dist, key_space: u64, section| Workload {
        name,
        role,
        dist,
        key_space,
        capacity: capacity_for(key_space),
        section,
        prefill: true,
        array_len: len,
        string_keys: section == Section::InProc,
    };
    let mut list = vec![
        w("hot-1".into(), "W1", Dist::Hot, 1, Section::InProc),
        w(
            "hot-1k".into(),
            "W2",
            Dist::Uniform(1000),
            1000,
            Section::InProc,
        ),
        w(
            format!("zipf-{}", fmt_count_short(zipf_n)),
            "W3",
            Dist::Zipf { n: zipf_n, s: 0.99 },
            zipf_n,
            Section::InProc,
        ),
        w(
            format!("uniform-{}", fmt_count_short(uni_n)),
            "W4",
            Dist::Uniform(uni_n),
            uni_n,
            Section::InProc,
        ),
        Workload {
            name: "churn".into(),
            role: "W5",
            dist: Dist::Churn,
            key_space: 0,
            capacity: CHURN_CAPACITY,
            section: Section::InProc,
            prefill: false,
            array_len: churn_len,
            string_keys: true,
        },
    ];
    if !quick {
        for n in [10_000u64, 100_000, 1_000_000] {
            list.push(w(
                format!("uniform-{}", fmt_count_short(n)),
                "sweep",
                Dist::Uniform(n),
                n,
                Section::Sweep,
            ));
        }
    }
    list
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comp {
    Funnel,
    FunnelBatch,
    /// funnel with a growable table: started at 1,024 keys, grown by the prefill up to the same
    /// maximum as `Funnel`'s fixed table.
    FunnelGrown,
    /// funnel's single-key `Funnel`: what a caller with one global limit uses, the
    /// counterpart of governor's direct limiter (hot-1 `u64` only, as that one).
    FunnelDirect,
    GovDirect,
    GovKeyed,
    GovKeyedAhash,
    MutexMap,
    /// pingora-limits' `Rate` at its default size (4 x 1,024 counters).
    Pingora,
    /// pingora-limits' `Rate` with one column per key of the workload ([`Pingora::slots_for`]).
    PingoraSized,
}

impl Comp {
    /// One limiter state and no key: nothing to prefill, no table.
    pub fn is_direct(self) -> bool {
        matches!(self, Comp::FunnelDirect | Comp::GovDirect)
    }

    pub fn label(self) -> &'static str {
        match self {
            Comp::Funnel => "funnel",
            Comp::FunnelBatch => "funnel-batch",
            Comp::FunnelGrown => "funnel-grown",
            Comp::FunnelDirect => "funnel-direct",
            Comp::GovDirect => "governor-direct",
            Comp::GovKeyed => "governor-keyed",
            Comp::GovKeyedAhash => "governor-keyed-ahash",
            Comp::MutexMap => "mutex-map",
            Comp::Pingora => "pingora",
            Comp::PingoraSized => "pingora-sized",
        }
    }

    /// Every competitor of the in-process tables. To add one: a variant here, its label, its
    /// place in `competitors`, its prefill estimate in `prefill_weight`, and how to build it
    /// for each clock policy in `enter` (anything implementing `limiters::Limit`).
    pub const IN_TABLE: [Comp; 10] = [
        Comp::Funnel,
        Comp::FunnelBatch,
        Comp::FunnelGrown,
        Comp::FunnelDirect,
        Comp::GovDirect,
        Comp::GovKeyed,
        Comp::GovKeyedAhash,
        Comp::MutexMap,
        Comp::Pingora,
        Comp::PingoraSized,
    ];
}

fn competitors(wl: &Workload, key_type: &str) -> Vec<Comp> {
    let mut v = vec![Comp::Funnel, Comp::FunnelBatch];
    // The growable table where growing matters: the large key spaces.
    if matches!(wl.role, "W3" | "W4") {
        v.push(Comp::FunnelGrown);
    }
    // The unkeyed limiters where there is one key: funnel's `Funnel` and governor's direct
    // limiter, side by side.
    if wl.role == "W1" && key_type == "u64" {
        v.extend([Comp::FunnelDirect, Comp::GovDirect]);
    }
    v.extend([
        Comp::GovKeyed,
        Comp::GovKeyedAhash,
        Comp::MutexMap,
        Comp::Pingora,
    ]);
    // The sketch sized to the keys where the key space is beyond its default size.
    if matches!(wl.role, "W3" | "W4") {
        v.push(Comp::PingoraSized);
    }
    v
}

/// Estimated seconds of the in-process part, for the progress bar.
pub fn plan_weight(ctx_opts: &crate::cli::Options) -> f64 {
    let o = ctx_opts;
    let mut total = 0.0;
    for wl in workloads(o.quick) {
        if !wants(o, &wl) {
            continue;
        }
        for (is_string, on) in [(false, o.u64_keys), (true, o.string_keys && wl.string_keys)] {
            if !on {
                continue;
            }
            total += keygen_weight(&wl, is_string, o.max_threads());
            for _quota in [QuotaKind::Allow, QuotaKind::Deny] {
                for comp in competitors(&wl, if is_string { "String" } else { "u64" }) {
                    total += prefill_weight(&wl, comp, is_string, o.max_threads());
                    total += (o.threads.len() * o.runs) as f64 * o.duration.as_secs_f64();
                }
            }
        }
    }
    total
}

pub fn wants(o: &crate::cli::Options, wl: &Workload) -> bool {
    if wl.section == Section::Sweep {
        o.wants("sweep")
    } else {
        o.wants(&wl.name) || o.wants(wl.role)
    }
}

fn keygen_weight(wl: &Workload, is_string: bool, threads: usize) -> f64 {
    let per = match (&wl.dist, is_string) {
        (_, true) => 60e-9,
        (Dist::Zipf { .. }, false) => 30e-9,
        _ => 3e-9,
    };
    // Threads generate in parallel, but the machine has few cores.
    per * (wl.array_len * threads) as f64 / 1.5
}

fn prefill_weight(wl: &Workload, comp: Comp, is_string: bool, threads: usize) -> f64 {
    if !wl.prefill {
        return 0.0;
    }
    let per_key = match (comp, is_string) {
        (Comp::FunnelDirect | Comp::GovDirect, _) => 0.0,
        (Comp::Funnel | Comp::FunnelBatch, false) => 150e-9,
        (Comp::Funnel | Comp::FunnelBatch, true) => 300e-9,
        (Comp::FunnelGrown, false) => 250e-9,
        (Comp::FunnelGrown, true) => 400e-9,
        (Comp::GovKeyed | Comp::GovKeyedAhash, false) => 350e-9,
        (Comp::GovKeyed | Comp::GovKeyedAhash, true) => 900e-9,
        (Comp::MutexMap, false) => 250e-9,
        (Comp::MutexMap, true) => 500e-9,
        (Comp::Pingora | Comp::PingoraSized, false) => 100e-9,
        (Comp::Pingora | Comp::PingoraSized, true) => 200e-9,
    };
    per_key * wl.key_space as f64 / (threads.min(2) as f64).max(1.0) + 0.05
}

pub fn run(ctx: &mut Ctx) -> Result<(), String> {
    let o = ctx.opts.clone();
    for wl in workloads(o.quick) {
        if !wants(&o, &wl) {
            continue;
        }
        if o.u64_keys {
            run_workload::<u64>(ctx, &wl)?;
        }
        if o.string_keys && wl.string_keys {
            run_workload::<String>(ctx, &wl)?;
        }
    }
    Ok(())
}

fn run_workload<K: Key>(ctx: &mut Ctx, wl: &Workload) -> Result<(), String> {
    let threads = ctx.opts.max_threads();
    ctx.progress
        .begin(format!("{} {}: generating keys", wl.name, K::NAME));
    let arrays = request_arrays::<K>(&wl.dist, threads, wl.array_len, 0xF00D + wl.key_space);
    ctx.progress
        .advance(keygen_weight(wl, K::NAME == "String", threads));
    for quota in [QuotaKind::Allow, QuotaKind::Deny] {
        let mut field = Vec::new();
        for comp in competitors(wl, K::NAME) {
            field.push(enter::<K>(ctx, wl, quota, comp)?);
        }
        measure(ctx, wl, quota, &mut field, &arrays)?;
        for entry in field {
            ctx.progress.begin(format!(
                "{} {} {} {}: freeing",
                wl.name,
                K::NAME,
                quota.label(),
                entry.contender.comp().label()
            ));
            drop(entry);
        }
    }
    Ok(())
}

/// A competitor built for the clock policy, as the measuring loop sees it: whatever its type,
/// one timed run at a time (the decisions themselves stay inlined into `timed`'s loop, which is
/// generic over the limiter; only the call per run goes through this trait).
trait Contender<K> {
    fn comp(&self) -> Comp;
    /// Replaces the limiter by a fresh one (churn: every run starts empty).
    fn renew(&mut self) -> Result<(), String>;
    fn prefill(&self, key_space: u64, threads: usize);
    fn timed(&self, arrays: &[Vec<K>], threads: usize, duration: Duration, cycle: bool) -> Run;
    fn state(&self) -> Option<TableState>;
    fn keys_held(&self) -> Option<usize>;
    fn slots(&self) -> Option<usize>;
    fn size_label(&self) -> Option<String>;
}

struct Built<L, F> {
    comp: Comp,
    lim: L,
    make: F,
}

impl<K: Key, L: Limit<K>, F: Fn() -> Result<L, String>> Contender<K> for Built<L, F> {
    fn comp(&self) -> Comp {
        self.comp
    }

    fn renew(&mut self) -> Result<(), String> {
        let fresh = (self.make)()?;
        drop(std::mem::replace(&mut self.lim, fresh));
        Ok(())
    }

    fn prefill(&self, key_space: u64, threads: usize) {
        prefill(&self.lim, key_space, threads, K::from_id);
    }

    fn timed(&self, arrays: &[Vec<K>], threads: usize, duration: Duration, cycle: bool) -> Run {
        timed(&self.lim, arrays, threads, duration, cycle)
    }

    fn state(&self) -> Option<TableState> {
        self.lim.funnel_stats().map(|(held, s)| TableState {
            slots: self.lim.slots().unwrap_or(0),
            held,
            forced: s.forced_evictions,
            recovered: s.recovered_evictions,
            huge_pages: s.huge_pages,
        })
    }

    fn keys_held(&self) -> Option<usize> {
        self.lim.keys_held()
    }

    fn slots(&self) -> Option<usize> {
        self.lim.slots()
    }

    fn size_label(&self) -> Option<String> {
        self.lim.size_label()
    }
}

fn built<K: Key, L: Limit<K> + 'static>(
    comp: Comp,
    make: impl Fn() -> Result<L, String> + 'static,
) -> Result<Box<dyn Contender<K>>, String> {
    let lim = make()?;
    Ok(Box::new(Built { comp, lim, make }))
}

/// Builds competitor `comp` on the recent policy's cheap clocks.
fn enter_recent<K: Key>(
    comp: Comp,
    quota: QuotaKind,
    cap: usize,
    clocks: crate::limiters::CheapClocks,
) -> Result<Box<dyn Contender<K>>, String> {
    let (fq, gq) = (quota.funnel(), quota.governor());
    let (f, g) = (clocks.funnel, clocks.governor);
    match comp {
        Comp::Funnel => built(comp, move || funnel_on::<K, _>(fq, cap, f.clone())),
        Comp::FunnelBatch => built(comp, move || {
            funnel_on::<K, _>(fq, cap, f.clone()).map(Batched)
        }),
        Comp::FunnelGrown => built(comp, move || funnel_grown_on::<K, _>(fq, cap, f.clone())),
        Comp::FunnelDirect => built(comp, move || Ok(Funnel::with_clock(fq, f.clone()))),
        Comp::GovDirect => built(comp, move || {
            Ok(RateLimiter::direct_with_clock(gq, g.clone()))
        }),
        Comp::GovKeyed => built(comp, move || {
            let l: GovKeyed<K, std::hash::RandomState, _> =
                RateLimiter::dashmap_with_clock_and_hasher(gq, g.clone(), sip());
            Ok(l)
        }),
        Comp::GovKeyedAhash => built(comp, move || {
            let l: GovKeyed<K, ahash::RandomState, _> =
                RateLimiter::dashmap_with_clock_and_hasher(gq, g.clone(), ahash_for());
            Ok(l)
        }),
        Comp::MutexMap => built(comp, move || Ok(mutex_on::<K, _>(quota, f.clone()))),
        Comp::Pingora | Comp::PingoraSized => unreachable!("pingora reads its own clock"),
    }
}

/// A competitor in the field, prefilled, with what its rows' notes report.
struct Entry<K> {
    contender: Box<dyn Contender<K>>,
    /// Seconds the prefill took, and on how many threads.
    prefill_time: Option<(f64, usize)>,
    table_prefill: Option<TableState>,
}

/// Builds competitor `comp` for the clock policy and prefills it.
fn enter<K: Key>(
    ctx: &mut Ctx,
    wl: &Workload,
    quota: QuotaKind,
    comp: Comp,
) -> Result<Entry<K>, String> {
    let (fq, gq) = (quota.funnel(), quota.governor());
    let (interval, limit) = quota.pingora();
    let cap = wl.capacity;
    let sized = Pingora::slots_for(wl.key_space);
    let cheap = match (ctx.opts.clock, &ctx.cheap) {
        (ClockPolicy::Recent, None) => return Err("the recent clocks were not started".into()),
        (_, c) => c.clone(),
    };
    let contender = match (comp, ctx.opts.clock) {
        // pingora reads `Instant::now()` itself, whatever the policy.
        (Comp::Pingora, _) => built(comp, move || {
            Ok(Pingora::new(interval, limit, PINGORA_SLOTS))
        }),
        (Comp::PingoraSized, _) => built(comp, move || Ok(Pingora::new(interval, limit, sized))),
        (_, ClockPolicy::Recent) => {
            let Some(c) = cheap else {
                unreachable!("checked above")
            };
            enter_recent::<K>(comp, quota, cap, c)
        }
        (Comp::Funnel, ClockPolicy::Real) => built(comp, move || funnel_real::<K>(fq, cap)),
        (Comp::Funnel, ClockPolicy::Manual) => built(comp, move || funnel_manual::<K>(fq, cap)),
        (Comp::FunnelBatch, ClockPolicy::Real) => {
            built(comp, move || funnel_real::<K>(fq, cap).map(Batched))
        }
        (Comp::FunnelBatch, ClockPolicy::Manual) => {
            built(comp, move || funnel_manual::<K>(fq, cap).map(Batched))
        }
        (Comp::FunnelGrown, ClockPolicy::Real) => {
            built(comp, move || funnel_grown_real::<K>(fq, cap))
        }
        (Comp::FunnelGrown, ClockPolicy::Manual) => {
            built(comp, move || funnel_grown_manual::<K>(fq, cap))
        }
        (Comp::FunnelDirect, ClockPolicy::Real) => built(comp, move || Ok(Funnel::new(fq))),
        (Comp::FunnelDirect, ClockPolicy::Manual) => {
            built(comp, move || Ok(Funnel::with_clock(fq, manual_clock())))
        }
        (Comp::GovDirect, ClockPolicy::Real) => built(comp, move || Ok(RateLimiter::direct(gq))),
        (Comp::GovDirect, ClockPolicy::Manual) => built(comp, move || {
            Ok(RateLimiter::direct_with_clock(gq, fake_clock()))
        }),
        // governor's defaults: `keyed(gq)` is the DashMap store, SipHash, its QuantaClock.
        (Comp::GovKeyed, ClockPolicy::Real) => built(comp, move || {
            let l: GovKeyed<K, std::hash::RandomState, governor::clock::QuantaClock> =
                RateLimiter::dashmap_with_hasher(gq, sip());
            Ok(l)
        }),
        (Comp::GovKeyed, ClockPolicy::Manual) => built(comp, move || {
            let l: GovKeyed<K, std::hash::RandomState, _> =
                RateLimiter::dashmap_with_clock_and_hasher(gq, fake_clock(), sip());
            Ok(l)
        }),
        (Comp::GovKeyedAhash, ClockPolicy::Real) => built(comp, move || {
            let l: GovKeyed<K, ahash::RandomState, governor::clock::QuantaClock> =
                RateLimiter::dashmap_with_hasher(gq, ahash_for());
            Ok(l)
        }),
        (Comp::GovKeyedAhash, ClockPolicy::Manual) => built(comp, move || {
            let l: GovKeyed<K, ahash::RandomState, _> =
                RateLimiter::dashmap_with_clock_and_hasher(gq, fake_clock(), ahash_for());
            Ok(l)
        }),
        (Comp::MutexMap, ClockPolicy::Real) => built(comp, move || Ok(mutex_real::<K>(quota))),
        (Comp::MutexMap, ClockPolicy::Manual) => built(comp, move || Ok(mutex_manual::<K>(quota))),
    }?;
    let threads = ctx.opts.max_threads();
    let mut entry = Entry {
        contender,
        prefill_time: None,
        table_prefill: None,
    };
    if wl.prefill && !comp.is_direct() {
        ctx.progress.begin(format!(
            "{} {} {} {}: prefill {} keys",
            wl.name,
            K::NAME,
            quota.label(),
            comp.label(),
            fmt_int(wl.key_space)
        ));
        let started = std::time::Instant::now();
        entry.contender.prefill(wl.key_space, threads);
        entry.prefill_time = Some((started.elapsed().as_secs_f64(), threads));
        entry.table_prefill = entry.contender.state();
    }
    ctx.progress
        .advance(prefill_weight(wl, comp, K::NAME == "String", threads));
    Ok(entry)
}

/// Measures every competitor of `field`, interleaved: run `r` of each in turn, starting one
/// competitor further along each run, so that all of them meet the same changes in the host's
/// speed (on a shared VM a cell can move by a third within minutes), and none always runs first
/// or last. Then one row per competitor and thread count, competitor by competitor.
fn measure<K: Key>(
    ctx: &mut Ctx,
    wl: &Workload,
    quota: QuotaKind,
    field: &mut [Entry<K>],
    arrays: &[Vec<K>],
) -> Result<(), String> {
    let o = ctx.opts.clone();
    let n = field.len();
    let mut rows: Vec<Vec<Row>> = (0..n).map(|_| Vec::new()).collect();
    for &threads in &o.threads {
        let mut runs: Vec<Vec<Run>> = (0..n).map(|_| Vec::with_capacity(o.runs)).collect();
        let mut table_end = vec![None; n];
        let mut held_end = vec![None; n];
        for r in 0..o.runs {
            for k in 0..n {
                let at = (r + k) % n;
                let contender = &mut field[at].contender;
                let what = format!(
                    "{} {} {} {}",
                    wl.name,
                    K::NAME,
                    quota.label(),
                    contender.comp().label()
                );
                ctx.progress
                    .begin(format!("{what} {threads}t run {}/{}", r + 1, o.runs));
                let mut failed = None;
                let (run, repeated) = best_of(o.retries, o.min_cpu, || {
                    if !wl.prefill {
                        // Churn: every run starts from an empty limiter and new keys.
                        if let Err(e) = contender.renew() {
                            failed = Some(e);
                        }
                    }
                    contender.timed(arrays, threads, o.duration, wl.prefill)
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                ctx.repeated += repeated;
                ctx.kept += 1;
                if run.decisions == 0 {
                    return Err(format!("{what} {threads}t: a run made no decisions"));
                }
                runs[at].push(run);
                ctx.progress.advance(o.duration.as_secs_f64());
                if !wl.prefill {
                    table_end[at] = contender.state();
                    held_end[at] = contender.keys_held();
                    // Churn: free what the run added (an unbounded map holds every new key)
                    // before the other competitors run; the next run starts afresh anyway.
                    contender.renew()?;
                }
            }
        }
        for (at, runs) in runs.into_iter().enumerate() {
            let entry = &field[at];
            let end = (table_end[at], held_end[at]);
            let row = row_of(wl, quota, threads, entry, runs, end, &o);
            rows[at].push(row);
        }
    }
    for (at, mut rows) in rows.into_iter().enumerate() {
        if wl.prefill {
            // After all runs (the table the rows share).
            let end = field[at].contender.state();
            for row in &mut rows {
                row.table_end = end;
            }
        }
        ctx.rows.extend(rows);
    }
    Ok(())
}

/// One competitor's row for one thread count, with its notes; `end` is, for churn, the table
/// and the keys held after the last run.
fn row_of<K: Key>(
    wl: &Workload,
    quota: QuotaKind,
    threads: usize,
    entry: &Entry<K>,
    runs: Vec<Run>,
    (table_end, held_end): (Option<TableState>, Option<usize>),
    o: &crate::cli::Options,
) -> Row {
    let comp = entry.contender.comp();
    let mut note = Vec::new();
    if let Some((secs, t)) = entry.prefill_time {
        note.push(format!(
            "prefill of {} keys on {t} threads: {secs:.2} s",
            fmt_int(wl.key_space)
        ));
    }
    if let Some(s) = entry.table_prefill {
        note.push(format!(
            "after prefill: {} keys held, {} forced evictions, {} recovered slots reused",
            fmt_int(s.held as u64),
            fmt_int(s.forced),
            fmt_int(s.recovered)
        ));
    }
    if let (false, Some(s)) = (wl.prefill, table_end) {
        note.push(format!(
            "last run: {} keys held at the end, {} forced evictions, {} recovered slots reused",
            fmt_int(s.held as u64),
            fmt_int(s.forced),
            fmt_int(s.recovered)
        ));
    }
    if let (false, None, Some(h)) = (wl.prefill, table_end, held_end) {
        note.push(format!(
            "unbounded: {} keys held at the end of the last run",
            fmt_int(h as u64)
        ));
    }
    Row {
        section: wl.section,
        workload: wl.name.clone(),
        key_space: wl.key_space,
        key_type: K::NAME,
        quota: quota.label().to_string(),
        threads,
        pipeline: 1,
        competitor: comp.label().to_string(),
        clock: o.clock.label().to_string(),
        capacity: if let Some(label) = entry.contender.size_label() {
            label
        } else if let Some(slots) = entry.contender.slots() {
            fmt_int(slots as u64)
        } else if comp.is_direct() {
            "1 state".into()
        } else {
            "unbounded".into()
        },
        runs,
        note: note.join("; "),
        prefill: entry.prefill_time,
        table_prefill: entry.table_prefill,
        table_end,
        held_end,
    }
}
