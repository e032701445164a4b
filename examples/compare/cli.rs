//! Command-line options.

use std::path::PathBuf;
use std::time::Duration;

use crate::limiters::ClockPolicy;

pub const HELP: &str = "\
compare: funnel against governor, a Mutex<HashMap> funnel and Redis-backed limiters

USAGE:
    cargo run --release --example compare -- [OPTIONS]

Runs every workload (hot key, hot set of 1,000, Zipf 0.99 over 1M, uniform over 10M, churn,
attack mix) for every in-process competitor, with u64 and String keys, an allowing and a
denying quota, at each thread count; then the Redis-backed limiters (if redis-server is
installed), memory per key and over-admission. Progress goes to stderr, the summary to
stdout; CSV files, SVG charts and summary.md go to <out>/<run id>/.

OPTIONS:
    --quick               short pass for CI: key spaces / 10, 3 runs of 50 ms, Redis runs of
                          200 ms, no key-space sweep; exits non-zero on any error
    --threads <list>      thread counts, comma-separated (default 1,2); the largest is also the
                          number of Redis connections in the several-connection rows
    --duration <secs>     length of one timed run (default 0.3; --quick 0.05)
    --runs <n>            timed runs per configuration; the tables show the median, min and
                          max (default 5; --quick 3)
    --redis-duration <s>  length of one Redis run (default 1; --quick 0.2)
    --retries <n>         repeat an in-process run up to n times when its threads were on a
                          CPU less than --min-cpu of the time (other work on the machine), and
                          keep the run with the largest share (default 1; --quick 0)
    --min-cpu <share>     see --retries (default 0.9)
    --out <dir>           output directory (default results)
    --clock <real|manual> clock policy for workloads 1-5 (default real: every limiter reads
                          a TSC clock through quanta; manual: every limiter reads a frozen
                          shared counter). The attack mix always replays trace times.
    --only <list>         run only these parts, comma-separated: workload names (hot-1,
                          hot-1k, zipf-1M, uniform-10M, churn) or roles (W1..W5), attack,
                          sweep, redis (Redis rows and over-admission), over, memory
    --keys <list>         key types: u64, string (default both)
    --no-redis            skip the Redis rows even if redis-server is installed
    --publish             also copy the charts to docs/bench/ and replace the generated
                          section of BENCHMARKS.md with this run's summary
    --publish-from <dir>  do only that, from an earlier run's directory (results/<run id>)
    -h, --help            this text
";

#[derive(Clone, Debug)]
pub struct Options {
    pub quick: bool,
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
    Help,
    /// `--child-memory <variant> <n>`: the memory probe, run in a child process.
    ChildMemory(String, u64),
    /// `--publish-from <run dir>`: publish an earlier run.
    PublishFrom(PathBuf),
}

pub fn parse(args: Vec<String>) -> Result<Parsed, String> {
    let mut quick = false;
    let mut threads = None;
    let mut duration = None;
    let mut runs = None;
    let mut redis_duration = None;
    let mut retries = None;
    let mut min_cpu = 0.9;
    let mut out = PathBuf::from("results");
    let mut clock = ClockPolicy::Real;
    let mut only = None;
    let (mut u64_keys, mut string_keys) = (true, true);
    let mut redis = true;
    let mut publish = false;
    let command = std::iter::once("cargo run --release --example compare --".to_string())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let command = command.trim_end_matches(" --").to_string();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| format!("{name} needs a value (see --help)"))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--quick" => quick = true,
            "--threads" => {
                let v = value("--threads")?;
                let list = v
                    .split(',')
                    .map(|s| s.trim().parse::<usize>().ok().filter(|&n| n >= 1))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| format!("--threads: expected a list like 1,2, got {v:?}"))?;
                let mut list = list;
                list.sort_unstable();
                list.dedup();
                threads = Some(list);
            }
            "--duration" => duration = Some(secs(&value("--duration")?, "--duration")?),
            "--redis-duration" => {
                redis_duration = Some(secs(&value("--redis-duration")?, "--redis-duration")?)
            }
            "--runs" => {
                let v = value("--runs")?;
                runs =
                    Some(v.parse::<usize>().ok().filter(|&n| n >= 1).ok_or_else(|| {
                        format!("--runs: expected a positive integer, got {v:?}")
                    })?);
            }
            "--out" => out = PathBuf::from(value("--out")?),
            "--retries" => {
                let v = value("--retries")?;
                retries = Some(
                    v.parse::<usize>()
                        .map_err(|_| format!("--retries: expected a count, got {v:?}"))?,
                );
            }
            "--min-cpu" => {
                let v = value("--min-cpu")?;
                min_cpu = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| (0.0..=1.0).contains(s))
                    .ok_or_else(|| {
                        format!("--min-cpu: expected a share between 0 and 1, got {v:?}")
                    })?;
            }
            "--clock" => {
                clock = match value("--clock")?.as_str() {
                    "real" => ClockPolicy::Real,
                    "manual" => ClockPolicy::Manual,
                    other => {
                        return Err(format!("--clock: expected real or manual, got {other:?}"))
                    }
                }
            }
            "--only" => {
                only = Some(
                    value("--only")?
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .collect(),
                )
            }
            "--keys" => {
                let v = value("--keys")?;
                u64_keys = false;
                string_keys = false;
                for k in v.split(',') {
                    match k.trim().to_ascii_lowercase().as_str() {
                        "u64" => u64_keys = true,
                        "string" => string_keys = true,
                        other => {
                            return Err(format!(
                                "--keys: expected u64 and/or string, got {other:?}"
                            ))
                        }
                    }
                }
            }
            "--no-redis" => redis = false,
            "--publish" => publish = true,
            "--publish-from" => {
                return Ok(Parsed::PublishFrom(PathBuf::from(value("--publish-from")?)))
            }
            "--child-memory" => {
                let variant = value("--child-memory")?;
                let n = value("--child-memory")?
                    .parse::<u64>()
                    .map_err(|e| format!("--child-memory: {e}"))?;
                return Ok(Parsed::ChildMemory(variant, n));
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    Ok(Parsed::Run(Options {
        quick,
        threads: threads.unwrap_or_else(|| vec![1, 2]),
        duration: duration.unwrap_or(Duration::from_millis(if quick { 50 } else { 300 })),
        runs: runs.unwrap_or(if quick { 3 } else { 5 }),
        redis_duration: redis_duration.unwrap_or(Duration::from_millis(if quick {
            200
        } else {
            1000
        })),
        retries: retries.unwrap_or(if quick { 0 } else { 1 }),
        min_cpu,
        out,
        clock,
        only,
        u64_keys,
        string_keys,
        redis,
        publish,
        command,
    }))
}

fn secs(v: &str, name: &str) -> Result<Duration, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 3600.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{name}: expected seconds, like 0.5, got {v:?}"))
}
