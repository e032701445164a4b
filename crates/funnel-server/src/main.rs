//! `funnel-server`: Envoy's rate-limit service on funnel. See the crate's README.
//!
//! Flags first; envoyproxy/ratelimit's environment variables where a flag is not given
//! (`environment.rs`).

mod environment;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};
use funnel_server::{run, Answers, LimitHeaders, Options, RedisSettings, RedisType, Statsd};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OnRedisFailure {
    /// Allow while Redis cannot answer.
    Open,
    /// Deny while Redis cannot answer.
    Closed,
    /// Decide locally on the quota divided by --fleet-size.
    Local,
}

/// Envoy's rate-limit service (envoy.service.ratelimit.v3) on funnel.
///
/// envoyproxy/ratelimit's environment variables (RUNTIME_ROOT, GRPC_PORT, REDIS_URL,
/// USE_STATSD, ...) are read too; a flag wins over its variable.
#[derive(Debug, Parser)]
#[command(version, about, args_override_self = true)]
struct Args {
    /// A YAML configuration file, or a directory of them (envoyproxy/ratelimit's format).
    #[arg(long)]
    config: PathBuf,
    /// The gRPC address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    grpc: SocketAddr,
    /// The HTTP address (/healthcheck, /metrics, POST /json).
    #[arg(long, default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// The debug address (/rlconfig, /stats); none unless given.
    #[arg(long)]
    debug: Option<SocketAddr>,
    /// Serve the Prometheus exposition on a listener of its own too (the HTTP address always
    /// serves it at /metrics).
    #[arg(long)]
    prometheus: Option<SocketAddr>,
    /// The path of the exposition on --prometheus.
    #[arg(long, default_value = "/metrics")]
    prometheus_path: String,
    /// Send statistics with envoyproxy/ratelimit's names to this statsd server (UDP,
    /// host:port).
    #[arg(long, value_name = "HOST:PORT")]
    statsd: Option<String>,
    /// How often statistics go to statsd (a Go duration: 10s, 500ms, 1m).
    #[arg(long, default_value = "10s", value_parser = environment::go_duration)]
    stats_flush_interval: Duration,
    /// Tags added to every statsd statistic: `tag:value,tag:value`.
    #[arg(long, value_parser = parse_tags)]
    extra_tags: Option<Tags>,
    /// Count in Redis, shared by every instance pointed at it (redis://host:port/).
    #[arg(long)]
    redis: Option<String>,
    /// What --redis names: one server, a cluster's seed nodes, or sentinels.
    #[arg(long, value_enum, default_value = "single")]
    redis_type: RedisTypeArg,
    /// What to answer when Redis cannot decide.
    #[arg(long, value_enum, default_value = "closed")]
    on_redis_failure: OnRedisFailure,
    /// Instances sharing the limits, for --on-redis-failure local.
    #[arg(long, default_value_t = 1)]
    fleet_size: u32,
    /// Keys held in the local deny cache of each rule with --redis (0: no cache).
    #[arg(long, default_value_t = 100_000)]
    deny_cache: usize,
    /// Milliseconds a decision waits for Redis before --on-redis-failure answers.
    ///
    /// The default leaves room for a busy Redis or a loaded host: a shorter wait turns slow
    /// but admissible calls into --on-redis-failure answers (denials under `closed`), which
    /// costs more than the wait (BENCHMARKS.md has the sweep). Envoy's own timeout for the
    /// rate-limit call may be shorter; Envoy then applies its failure mode first.
    #[arg(long, default_value_t = 50)]
    redis_timeout_ms: u64,
    /// The most keys one rule's table holds (the least indebted is evicted beyond).
    #[arg(long, default_value_t = 1 << 20)]
    max_keys: usize,
    /// Add the IETF RateLimit-Policy and RateLimit fields to response_headers_to_add.
    #[arg(long)]
    response_headers: bool,
    /// Answer OK overall even over the limit; statuses keep their codes (envoyproxy's
    /// SHADOW_MODE).
    #[arg(long)]
    shadow_mode: bool,
    /// Put every descriptor with a limit in quota mode: over the limit only when every one is,
    /// or a rate-limit mode one is (envoyproxy's QUOTA_MODE).
    #[arg(long)]
    quota_mode: bool,
    /// Fill the response's dynamic_metadata: domain, descriptors, hits_addend, and the rules'
    /// metadata (envoyproxy's RESPONSE_DYNAMIC_METADATA).
    #[arg(long)]
    response_dynamic_metadata: bool,
    /// Add the limit, remaining and reset headers of the descriptor closest to its limit
    /// (envoyproxy's LIMIT_RESPONSE_HEADERS_ENABLED).
    #[arg(long)]
    limit_response_headers: bool,
    /// The limit header's name, with --limit-response-headers (LIMIT_LIMIT_HEADER).
    #[arg(long, value_name = "NAME", default_value = "RateLimit-Limit", value_parser = header_name)]
    limit_limit_header: String,
    /// The remaining header's name, with --limit-response-headers (LIMIT_REMAINING_HEADER).
    #[arg(long, value_name = "NAME", default_value = "RateLimit-Remaining", value_parser = header_name)]
    limit_remaining_header: String,
    /// The reset header's name, with --limit-response-headers (LIMIT_RESET_HEADER).
    #[arg(long, value_name = "NAME", default_value = "RateLimit-Reset", value_parser = header_name)]
    limit_reset_header: String,
    /// Charge every descriptor on its own even when another denies the request, as
    /// envoyproxy/ratelimit does (funnel's default charges all or nothing).
    #[arg(long)]
    charge_denied: bool,
    /// Do not watch the configuration for changes.
    #[arg(long)]
    no_watch: bool,
    /// Merge configuration files that name the same domain (envoyproxy/ratelimit's
    /// MERGE_DOMAIN_CONFIG); without it a domain in two files is refused.
    #[arg(long)]
    merge_domain_config: bool,
    /// Decide on a time refreshed every <interval> (`250us`, `1ms`; 10us to 1000ms) instead of
    /// reading the clock per decision: each limit may admit up to one interval's worth of its
    /// rate more than exact. Not worth it beside a gRPC round trip unless measured.
    #[arg(long, value_name = "INTERVAL", value_parser = parse_interval)]
    recent_clock: Option<Duration>,
    /// Serve /forward-auth/<domain> on the HTTP port with this file's actions (nginx, Caddy,
    /// Traefik).
    #[arg(long, value_name = "FILE")]
    forward_auth: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum RedisTypeArg {
    /// One Redis server.
    Single,
    /// A Redis Cluster, from comma-separated seed nodes.
    Cluster,
    /// A master found through sentinels: `master_name,host:port,host:port`.
    Sentinel,
}

/// `--extra-tags`' pairs.
#[derive(Clone, Debug)]
struct Tags(Vec<(String, String)>);

/// `tag:value,tag:value`, as envoyproxy/ratelimit's EXTRA_TAGS.
fn parse_tags(s: &str) -> Result<Tags, String> {
    let mut tags = Vec::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once(':')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("{pair:?}: expected tag:value"))?;
        tags.push((k.to_owned(), v.to_owned()));
    }
    Ok(Tags(tags))
}

/// `<n>us` or `<n>ms`, as the example proxy of funnel-tower reads `--recent-clock`.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let (digits, unit): (&str, fn(u64) -> Duration) = if let Some(n) = s.strip_suffix("us") {
        (n, Duration::from_micros)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, Duration::from_millis)
    } else {
        return Err(format!("{s:?}: expected <n>us or <n>ms"));
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: expected <n>us or <n>ms with a whole number"))?;
    let d = unit(n);
    if d < Duration::from_micros(10) || d > Duration::from_secs(1) {
        return Err(format!("{s:?}: the interval must be 10us to 1000ms"));
    }
    Ok(d)
}

/// Checks a header name: one or more of HTTP's token characters (RFC 9110, 5.6.2), so that
/// Envoy can add it.
///
/// # Errors
///
/// The name, and what is wrong with it.
fn header_name(name: &str) -> Result<String, String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() {
        return Err("a header name cannot be empty".into());
    }
    if let Some(c) = name.chars().find(|c| !token(*c)) {
        return Err(format!("{name:?}: {c:?} cannot be in a header name"));
    }
    Ok(name.to_owned())
}

impl Args {
    fn into_options(self) -> Options {
        let on_failure = match self.on_redis_failure {
            OnRedisFailure::Open => funnel_server::OnFailure::Open,
            OnRedisFailure::Closed => funnel_server::OnFailure::Closed,
            OnRedisFailure::Local => funnel_server::OnFailure::Local {
                instances: self.fleet_size.max(1),
            },
        };
        let redis_type = match self.redis_type {
            RedisTypeArg::Single => RedisType::Single,
            RedisTypeArg::Cluster => RedisType::Cluster,
            RedisTypeArg::Sentinel => RedisType::Sentinel,
        };
        let mut opts = Options::new(self.config, self.grpc);
        opts.http = Some(self.http);
        opts.debug = self.debug;
        opts.prometheus = self.prometheus.map(|a| (a, self.prometheus_path));
        opts.statsd = self.statsd.map(|target| Statsd {
            target,
            flush_interval: self.stats_flush_interval,
            extra_tags: self.extra_tags.map(|t| t.0).unwrap_or_default(),
        });
        opts.redis = self.redis.map(|url| RedisSettings {
            url,
            redis_type,
            on_failure,
            deny_cache: self.deny_cache,
            timeout: Some(Duration::from_millis(self.redis_timeout_ms)),
        });
        opts.max_keys = self.max_keys.max(1);
        opts.response_headers = self.response_headers;
        opts.answers = Answers {
            shadow_mode: self.shadow_mode,
            quota_mode: self.quota_mode,
            dynamic_metadata: self.response_dynamic_metadata,
            limit_headers: self.limit_response_headers.then_some(LimitHeaders {
                limit: self.limit_limit_header,
                remaining: self.limit_remaining_header,
                reset: self.limit_reset_header,
            }),
            charge_denied: self.charge_denied,
        };
        opts.watch = !self.no_watch;
        opts.merge_domain_config = self.merge_domain_config;
        opts.recent_clock = self.recent_clock;
        opts.forward_auth = self.forward_auth;
        opts
    }
}

/// The arguments: those the environment means, then the command line's (which win).
fn arguments(env: &environment::FromEnvironment) -> Result<Args, String> {
    let command = Args::command();
    let mut all: Vec<OsString> = std::env::args_os().take(1).collect();
    for (args, vars) in &env.args {
        let flag = args[0].to_string_lossy();
        let known = command
            .get_arguments()
            .any(|a| a.get_long() == flag.strip_prefix("--"));
        if !known {
            return Err(format!(
                "{vars} asks for {flag}, which this build of funnel-server does not have"
            ));
        }
        all.extend(args.iter().cloned());
    }
    all.extend(std::env::args_os().skip(1));
    let matches = match command.try_get_matches_from(all) {
        Ok(m) => m,
        // --help, --version and usage errors print themselves, as clap's own parse does.
        Err(e) => e.exit(),
    };
    Args::from_arg_matches(&matches).map_err(|e| e.to_string())
}

fn init_logging(env: &environment::FromEnvironment) {
    // RUST_LOG wins over LOG_LEVEL, which wins over the default.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(env.log_level.unwrap_or("info")));
    let fmt = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    if env.log_json {
        fmt.json().init();
    } else {
        fmt.init();
    }
}

fn main() -> ExitCode {
    let env = match environment::translate(|name| std::env::var(name).ok()) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("funnel-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    init_logging(&env);
    for (var, why) in &env.ignored {
        tracing::info!(variable = var, "ignored: {why}");
    }
    let args = match arguments(&env) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("funnel-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("funnel-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args.into_options())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                message.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("funnel-server: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_tokens() {
        assert_eq!(
            header_name("X-RateLimit-Limit"),
            Ok("X-RateLimit-Limit".into())
        );
        assert!(header_name("").is_err());
        assert!(header_name("X Limit").is_err());
        assert!(header_name("X-Limit:").is_err());
        assert!(header_name("X-Limit\r\n").is_err());
    }
}
