//! Command-line options (parsed by clap).
// The doc comments below are clap's `--help` text, read in a terminal as written: placeholders
// such as <out> and type names such as Mutex<HashMap> stay bare there rather than in backticks.
#![allow(rustdoc::invalid_html_tags)]

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::limiters::ClockPolicy;

/// funnel against governor, pingora-limits, a Mutex<HashMap> funnel and Redis-backed limiters,
/// on the same workloads, keys, quotas, clocks and threads.
///
/// The default run, the one published in docs/bench/ (`--publish`), takes about three minutes
/// on 2 cores: reduced key spaces (100k Zipf, 1M uniform), three short runs per configuration,
/// short Redis rows. `--full` runs the full key spaces, a key-space sweep and five runs (about
/// 15 minutes). Progress goes to
/// stderr, a short table to stdout; CSV files, SVG charts and summary.md go to <out>/<run id>/.
#[derive(Parser, Debug)]
#[command(name = "compare", version, about, long_about)]
struct Args {
    /// The full run: full key spaces (1M Zipf, 10M uniform), the key-space sweep, five runs of
    /// 0.3 s per configuration, Redis rows of 1 s.
    #[arg(long, conflicts_with = "quick")]
    full: bool,
    /// A smoke pass for CI: the default scale with runs of 50 ms; exits non-zero on any error.
    #[arg(long)]
    quick: bool,
    /// Thread counts; the largest is also the number of Redis connections in the
    /// several-connection rows.
    #[arg(long, value_delimiter = ',', default_value = "1,2",
          value_parser = clap::value_parser!(u16).range(1..))]
    threads: Vec<u16>,
    /// Length of one timed run in seconds [default: 0.1; --full 0.3; --quick 0.05].
    #[arg(long, value_parser = parse_secs)]
    duration: Option<Duration>,
    /// Timed runs per configuration; the tables show the median, min and max
    /// [default: 3; --full 5].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    runs: Option<u16>,
    /// Length of one Redis run in seconds [default: 0.5; --full 1; --quick 0.2].
    #[arg(long, value_parser = parse_secs)]
    redis_duration: Option<Duration>,
    /// Repeat an in-process run up to this many times when its threads were on a CPU less than
    /// --min-cpu of the time (other work on the machine), keeping the run with the largest
    /// share [default: 0; --full 1].
    #[arg(long)]
    retries: Option<u16>,
    /// See --retries.
    #[arg(long, default_value_t = 0.9, value_parser = parse_share)]
    min_cpu: f64,
    /// Output directory.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Clock policy for workloads 1-5 (real: every limiter reads the TSC, calibrated by quanta;
    /// recent: every limiter reads its cheap clock, a time an upkeep thread refreshes every
    /// millisecond; manual: every limiter reads a frozen shared counter). The attack mix always
    /// replays trace times.
    #[arg(long, value_enum, default_value_t = ClockPolicy::Real)]
    clock: ClockPolicy,
    /// Run only these parts: workload names (hot-1, hot-1k, zipf-1M, uniform-10M, churn) or
    /// roles (W1..W5), attack, sweep, clocks (each clock's cost), sketch (pingora's
    /// over-admission), redis (Redis rows and over-admission), over, memory.
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// Key types.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "u64,string")]
    keys: Vec<KeyType>,
    /// Skip the Redis rows even if redis-server is installed.
    #[arg(long)]
    no_redis: bool,
    /// Also copy the charts, the CSVs and the short report (latest.md) to docs/bench/, where
    /// BENCHMARKS.md links to them, and write the run's ratios into README.md (it refuses to
    /// start without redis-server, unless --no-redis).
    #[arg(long)]
    publish: bool,
    /// Only publish an earlier run's directory (results/<run id>), as --publish would.
    #[arg(long, value_name = "DIR", exclusive = true)]
    publish_from: Option<PathBuf>,
    /// The memory probe, run in a child process: <variant> <keys>.
    #[arg(long, num_args = 2, value_names = ["VARIANT", "KEYS"], hide = true, exclusive = true)]
    child_memory: Option<Vec<String>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum KeyType {
    U64,
    String,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Reduced key spaces (key spaces / 10, no sweep): every run but `--full`.
    pub quick: bool,
    /// `--full`: the publication run.
    pub full: bool,
    /// `--quick`: the CI smoke pass.
    pub smoke: bool,
    pub threads: Vec<usize>,
    pub duration: Duration,
    pub runs: usize,
    pub redis_duration: Duration,
    pub retries: usize,
    pub min_cpu: f64,
    pub out: PathBuf,
    pub clock: ClockPolicy,
    pub only: Option<Vec<String>>,
    pub u64_keys: bool,
    pub string_keys: bool,
    pub redis: bool,
    pub publish: bool,
    /// The command line as typed (for the report).
    pub command: String,
}

impl Options {
    pub fn max_threads(&self) -> usize {
        self.threads.iter().copied().max().unwrap_or(1)
    }

    /// Whether a part (workload name, "attack", "redis", "memory", "sweep") is selected.
    pub fn wants(&self, part: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|p| p.eq_ignore_ascii_case(part)))
    }
}

pub enum Parsed {
    Run(Options),
    /// `--child-memory <variant> <n>`: the memory probe, run in a child process.
    ChildMemory(String, u64),
    /// `--publish-from <run dir>`: publish an earlier run.
    PublishFrom(PathBuf),
}

/// Parses the command line; prints help or a usage error and exits on bad input.
pub fn parse() -> Result<Parsed, String> {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let a = Args::parse();
    if let Some(dir) = a.publish_from {
        return Ok(Parsed::PublishFrom(dir));
    }
    if let Some(v) = a.child_memory {
        let n = v[1]
            .parse::<u64>()
            .map_err(|e| format!("--child-memory: {e}"))?;
        return Ok(Parsed::ChildMemory(v[0].clone(), n));
    }
    let mut threads: Vec<usize> = a.threads.iter().map(|&t| usize::from(t)).collect();
    threads.sort_unstable();
    threads.dedup();
    let pick = |full: u64, default: u64, quick: u64| {
        Duration::from_millis(if a.full {
            full
        } else if a.quick {
            quick
        } else {
            default
        })
    };
    let command = std::iter::once("cargo run --release -p funnel-compare --".to_string())
        .chain(raw)
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Parsed::Run(Options {
        quick: !a.full,
        full: a.full,
        smoke: a.quick,
        threads,
        duration: a.duration.unwrap_or(pick(300, 100, 50)),
        runs: usize::from(a.runs.unwrap_or(if a.full { 5 } else { 3 })),
        redis_duration: a.redis_duration.unwrap_or(pick(1000, 500, 200)),
        retries: usize::from(a.retries.unwrap_or(u16::from(a.full))),
        min_cpu: a.min_cpu,
        out: a.out,
        clock: a.clock,
        only: a.only,
        u64_keys: a.keys.contains(&KeyType::U64),
        string_keys: a.keys.contains(&KeyType::String),
        redis: !a.no_redis,
        publish: a.publish,
        command: command.trim_end_matches(" --").to_string(),
    }))
}

fn parse_secs(v: &str) -> Result<Duration, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 3600.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("expected seconds between 0 and 3600, like 0.5, got {v:?}"))
}

fn parse_share(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| (0.0..=1.0).contains(s))
        .ok_or_else(|| format!("expected a share between 0 and 1, got {v:?}"))
}
