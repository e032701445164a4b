//! `cargo run --release -p funnel-compare`: funnel against governor, a `Mutex<HashMap>` funnel
//! and Redis-backed limiters, on the same workloads, keys, quotas, clocks and threads.
//!
//! Workloads (`inproc.rs`, `attack.rs`): 1. one hot key; 2. a hot set of 1,000 keys; 3. Zipf
//! 0.99 over 1M keys; 4. uniform over 10M keys; 5. churn (every request a new key, through a
//! table smaller than the key stream); 6. attack mix (90% Zipf legitimate keys, 10% unique-key
//! flood; wrong decisions counted against an unbounded reference). Each with u64 and String
//! keys, an allowing and a denying quota, at every thread count given. Then the Redis scripts
//! (`redis_rows.rs` over `redis_side.rs`), over-admission, and memory per key (`memory.rs`).
//!
//! Then each limiter on each clock (`clocks.rs`) and pingora's sketch against an exact counter
//! (`sketch.rs`).
//!
//! Output: a progress bar on stderr, a summary on stdout, and `<out>/<run id>/` with
//! `results.csv` (one line per configuration), `runs.csv` (one per timed run), `memory.csv`,
//! SVG charts, `summary.md` (every table) and `latest.md` (the short report: machine, command,
//! the main tables), which `--publish` copies to `docs/bench/latest.md`. `--help` for flags.

mod attack;
mod charts;
mod cli;
mod clocks;
mod csv_out;
mod fleet_rows;
mod headline;
mod inproc;
mod keys;
mod limiters;
mod machine;
mod memory;
mod numbers;
mod progress;
mod readme;
mod redis_rows;
mod redis_side;
mod report;
mod runner;
mod sketch;
mod summary;
mod svg;
mod table;
mod tables;
mod weak;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use cli::{Options, Parsed};
use machine::Machine;
use memory::MemRow;
use progress::Progress;
use redis_rows::OverRow;
use redis_side::RedisServer;
use report::{Row, Section};

/// Everything a run accumulates.
pub struct Ctx {
    pub opts: Options,
    pub progress: Progress,
    pub machine: Machine,
    pub rows: Vec<Row>,
    pub memory: Vec<MemRow>,
    pub over: Vec<OverRow>,
    /// Statements for the method section (capacities, prefill outcomes, trace parameters).
    pub facts: Vec<String>,
    pub warnings: Vec<String>,
    pub errors: Vec<String>,
    pub redis_status: String,
    pub redis_version: Option<String>,
    pub load_end: String,
    /// Wall time of each part of the run.
    pub timings: Vec<(String, std::time::Duration)>,
    /// In-process runs kept, and runs repeated because other work held the CPUs.
    pub kept: usize,
    pub repeated: usize,
    /// The recent policy's clocks, running for the whole run under `--clock recent`.
    pub cheap: Option<limiters::CheapClocks>,
    /// The clocks part: each competitor on each clock, and each clock's read.
    pub clock_rows: Vec<clocks::ClockRow>,
    pub clock_reads: Vec<clocks::ReadRow>,
    /// pingora's sketch against an exact counter.
    pub sketch: Vec<sketch::SketchRow>,
}

fn main() -> ExitCode {
    let opts = match cli::parse() {
        Ok(Parsed::Run(o)) => o,
        Ok(Parsed::PublishFrom(dir)) => {
            return match publish(&dir) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Ok(Parsed::ChildMemory(variant, n)) => {
            return match memory::child(&variant, n) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // A publication run replaces the published Redis rows: without redis-server it would
    // publish a report with none, so it stops before running anything.
    if opts.publish && opts.redis && opts.wants("redis") && RedisServer::binary().is_none() {
        eprintln!(
            "error: --publish needs redis-server for the Redis rows, and it is not installed \
             (apt-get install -y redis-server), or pass --no-redis to publish without them"
        );
        return ExitCode::from(2);
    }
    // Likewise the redis-cell rows, which the published comparison with redis-cell rests on.
    if opts.publish && opts.redis && opts.wants("redis") {
        if let Err(why) = funnel_testkit::redis_cell::library() {
            eprintln!("error: --publish needs the redis-cell rows, and {why}");
            return ExitCode::from(2);
        }
    }
    match run(opts) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the comparison; `Ok(false)` when some part failed (the report is still written).
fn run(opts: Options) -> Result<bool, String> {
    if cfg!(debug_assertions) {
        eprintln!("warning: this is a debug build; run with --release for meaningful figures");
    }
    let run_id = run_id();
    let dir = opts.out.join(&run_id);
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let machine = machine::detect();
    let total = plan_weight(&opts);
    let mut ctx = Ctx {
        opts,
        progress: Progress::new(total),
        machine,
        rows: Vec::new(),
        memory: Vec::new(),
        over: Vec::new(),
        facts: Vec::new(),
        warnings: Vec::new(),
        errors: Vec::new(),
        redis_status: "Redis rows not run (--no-redis or --only)".into(),
        redis_version: None,
        load_end: String::new(),
        timings: Vec::new(),
        kept: 0,
        repeated: 0,
        cheap: None,
        clock_rows: Vec::new(),
        clock_reads: Vec::new(),
        sketch: Vec::new(),
    };
    if ctx.opts.clock == limiters::ClockPolicy::Recent {
        ctx.cheap = Some(limiters::CheapClocks::start()?);
    }
    ctx.progress.log(&format!(
        "compare: run {run_id} -> {}; estimated {}; clock policy {}; threads {:?}; {} runs of {:.2} s; {}, {} cores, load {}",
        dir.display(),
        progress::fmt_secs(total),
        ctx.opts.clock.label(),
        ctx.opts.threads,
        ctx.opts.runs,
        ctx.opts.duration.as_secs_f64(),
        ctx.machine.cpu,
        ctx.machine.cores,
        ctx.machine.load_start
    ));
    type Part = fn(&mut Ctx) -> Result<(), String>;
    let parts: [(&str, bool, Part); 7] = [
        ("in-process workloads", true, inproc::run),
        ("clocks", ctx.opts.wants("clocks"), clocks::run),
        ("pingora's sketch", ctx.opts.wants("sketch"), sketch::run),
        (
            "attack mix",
            ctx.opts.wants("attack") || ctx.opts.wants("W6"),
            attack::run,
        ),
        (
            "in-process over-admission",
            ctx.opts.wants("redis") || ctx.opts.wants("over"),
            redis_rows::inproc_over_admission,
        ),
        (
            "Redis",
            ctx.opts.redis && ctx.opts.wants("redis"),
            redis_rows::run,
        ),
        ("memory per key", ctx.opts.wants("memory"), memory::run),
    ];
    for (name, on, part) in parts {
        if !on {
            continue;
        }
        let started = std::time::Instant::now();
        if let Err(e) = part(&mut ctx) {
            let msg = format!("{name}: {e}");
            ctx.progress.log(&format!("error: {msg}"));
            ctx.errors.push(msg);
        }
        ctx.timings.push((name.to_string(), started.elapsed()));
    }
    ctx.load_end = machine::load_avg();
    sanity_checks(&mut ctx);
    ctx.progress.finish();

    csv_out::write_results(&dir, &ctx.rows)?;
    csv_out::write_memory(&dir, &ctx)?;
    let charts = charts::charts(&ctx, &dir)?;
    let md_local = summary::markdown(&ctx, &run_id, &charts, "", false);
    report::write(&dir, "summary.md", &md_local)?;
    // The short report, with the charts beside it (as they are in docs/bench/ once published).
    let md_latest = summary::markdown(&ctx, &run_id, &charts, "", true);
    report::write(&dir, "latest.md", &md_latest)?;
    report::write(&dir, "readme.md", &readme::table(&ctx))?;
    if ctx.opts.publish {
        publish(&dir)?;
    }
    print!("{}", headline::text(&ctx));
    println!(
        "\nWrote summary.md (every table), the CSVs and {} charts in {}\nto {}/",
        charts.len(),
        progress::fmt_secs(ctx.progress.elapsed().as_secs_f64()),
        dir.display()
    );
    for w in &ctx.warnings {
        println!("warning: {w}");
    }
    for e in &ctx.errors {
        println!("error: {e}");
    }
    Ok(ctx.errors.is_empty())
}

fn plan_weight(o: &Options) -> f64 {
    let mut w = inproc::plan_weight(o);
    if o.wants("clocks") {
        w += clocks::plan_weight(o);
    }
    if o.wants("sketch") {
        w += sketch::plan_weight(o);
    }
    if o.wants("attack") || o.wants("W6") {
        w += attack::plan_weight(o);
    }
    if o.wants("redis") || o.wants("over") {
        w += 1.0;
    }
    if o.redis && o.wants("redis") {
        w += redis_rows::plan_weight(o);
    }
    if o.wants("memory") {
        w += memory::plan_weight(o);
    }
    w
}

/// Checks that every competitor did the same work (the same share of allowed decisions as
/// funnel in the same cell), and that the unbounded competitors agree with the reference in
/// the attack mix.
fn sanity_checks(ctx: &mut Ctx) {
    let mut warnings = Vec::new();
    for r in ctx
        .rows
        .iter()
        .filter(|r| r.section == Section::InProc || r.section == Section::Sweep)
    {
        // pingora's sketch answers approximately by design: its errors have a table of their
        // own (`sketch.rs`).
        if r.competitor == "funnel"
            || r.competitor == "governor-direct"
            || r.competitor.starts_with("pingora")
        {
            continue;
        }
        let f = ctx.rows.iter().find(|f| {
            f.section == r.section
                && f.workload == r.workload
                && f.key_type == r.key_type
                && f.quota == r.quota
                && f.threads == r.threads
                && f.competitor == "funnel"
        });
        if let Some(f) = f {
            let (a, b) = (f.allowed_fraction(), r.allowed_fraction());
            if (a - b).abs() > 0.01 {
                warnings.push(format!(
                    "{} {} {} {}t: funnel allowed {:.3} of decisions, {} {:.3}: the limiters did different work",
                    r.workload, r.key_type, r.quota, r.threads, a, r.competitor, b
                ));
            }
        }
    }
    for r in ctx
        .rows
        .iter()
        .filter(|r| r.section == Section::Attack && !r.competitor.starts_with("funnel"))
    {
        let (_, wa, wd) = r.attack_errors();
        if wa + wd > 0 {
            warnings.push(format!(
                "attack {} {}t: {} (unbounded) differs from the reference on {} legitimate decisions",
                r.key_type,
                r.threads,
                r.competitor,
                wa + wd
            ));
        }
    }
    ctx.warnings.extend(warnings);
}

/// Copies a run's charts, CSVs and `latest.md` to docs/bench/ (the CSVs, so that every
/// published figure can be checked against the runs it comes from), and writes its ratios
/// into README.md between their markers. BENCHMARKS.md links to `docs/bench/latest.md` rather
/// than holding a copy.
pub fn publish(dir: &Path) -> Result<(), String> {
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let charts_dir = root.join("docs/bench");
    std::fs::create_dir_all(&charts_dir)
        .map_err(|e| format!("creating {}: {e}", charts_dir.display()))?;
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let (mut copied, mut tables) = (0, 0);
    for entry in entries.flatten() {
        let path = entry.path();
        let kind = path.extension().and_then(|e| e.to_str());
        if matches!(kind, Some("svg" | "csv")) {
            let to = charts_dir.join(entry.file_name());
            std::fs::copy(&path, &to).map_err(|e| format!("copying {}: {e}", path.display()))?;
            if kind == Some("svg") {
                copied += 1;
            } else {
                tables += 1;
            }
        }
    }
    let latest = dir.join("latest.md");
    let to = charts_dir.join("latest.md");
    std::fs::copy(&latest, &to).map_err(|e| format!("copying {}: {e}", latest.display()))?;
    // The README's ratios, from the same run (a run made before the harness wrote them has
    // none, and leaves the README as it is).
    let ratios = dir.join("readme.md");
    if let Ok(table) = std::fs::read_to_string(&ratios) {
        let path = root.join("README.md");
        let readme = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        std::fs::write(&path, readme::splice(&readme, &table)?)
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    eprintln!(
        "published {}: {copied} charts, {tables} CSVs and latest.md to {}",
        dir.display(),
        charts_dir.display()
    );
    Ok(())
}

/// The run's UTC start time as `YYYYMMDDTHHMMSSZ`.
fn run_id() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
