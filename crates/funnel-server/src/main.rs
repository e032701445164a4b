//! `funnel-server`: Envoy's rate-limit service on funnel. See the crate's README.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use funnel_server::rules::RedisSettings;
use funnel_server::server::{run, Options};

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
#[derive(Debug, Parser)]
#[command(version, about)]
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
    /// Count in Redis, shared by every instance pointed at it (redis://host:port/).
    #[arg(long)]
    redis: Option<String>,
    /// How --redis reaches Redis: one server (`host:port` or a URL), a cluster (seed nodes,
    /// comma-separated) or sentinel (`master_name,host:port[,host:port...]`).
    #[arg(long, value_enum, default_value = "single")]
    redis_type: funnel_server::fleet::RedisType,
    /// `password` or `user:password` for every Redis server.
    #[arg(long)]
    redis_auth: Option<String>,
    /// Reach every `host:port` of --redis over TLS (`rediss://`).
    #[arg(long)]
    redis_tls: bool,
    /// A certificate authority (PEM file) Redis's TLS certificates must chain to, instead of the
    /// system's root certificates.
    #[arg(long)]
    redis_tls_ca_cert: Option<PathBuf>,
    /// `domain`: every Redis key of a domain in one cluster slot, so that a request's
    /// descriptors are charged together in one script on a cluster too.
    #[arg(long, value_enum, default_value = "none")]
    redis_hash_tag: funnel_server::fleet::HashTag,
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
    #[arg(long)]
    redis_timeout_ms: Option<u64>,
    /// The most keys one rule's table holds (the least indebted is evicted beyond).
    #[arg(long, default_value_t = 1 << 20)]
    max_keys: usize,
    /// Add the IETF RateLimit-Policy and RateLimit fields to response_headers_to_add.
    #[arg(long)]
    response_headers: bool,
    /// Do not watch the configuration for changes.
    #[arg(long)]
    no_watch: bool,
    /// Decide on a time refreshed every <interval> (`250us`, `1ms`; 10us to 1000ms) instead of
    /// reading the clock per decision: each limit may admit up to one interval's worth of its
    /// rate more than exact. Not worth it beside a gRPC round trip unless measured.
    #[arg(long, value_name = "INTERVAL", value_parser = parse_interval)]
    recent_clock: Option<std::time::Duration>,
}

/// `<n>us` or `<n>ms`, as the example proxy of funnel-tower reads `--recent-clock`.
fn parse_interval(s: &str) -> Result<std::time::Duration, String> {
    let (digits, unit): (&str, fn(u64) -> std::time::Duration) =
        if let Some(n) = s.strip_suffix("us") {
            (n, std::time::Duration::from_micros)
        } else if let Some(n) = s.strip_suffix("ms") {
            (n, std::time::Duration::from_millis)
        } else {
            return Err(format!("{s:?}: expected <n>us or <n>ms"));
        };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: expected <n>us or <n>ms with a whole number"))?;
    let d = unit(n);
    if d < std::time::Duration::from_micros(10) || d > std::time::Duration::from_secs(1) {
        return Err(format!("{s:?}: the interval must be 10us to 1000ms"));
    }
    Ok(d)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let on_failure = match args.on_redis_failure {
        OnRedisFailure::Open => funnel_redis::OnFailure::Open,
        OnRedisFailure::Closed => funnel_redis::OnFailure::Closed,
        OnRedisFailure::Local => funnel_redis::OnFailure::Local {
            instances: args.fleet_size.max(1),
        },
    };
    let opts = Options {
        config: args.config,
        grpc: args.grpc,
        http: Some(args.http),
        redis: args.redis.map(|url| RedisSettings {
            url,
            redis_type: args.redis_type,
            auth: args.redis_auth,
            tls: args.redis_tls,
            tls_ca_cert: args.redis_tls_ca_cert,
            hash_tag: args.redis_hash_tag,
            on_failure,
            deny_cache: args.deny_cache,
            timeout: args.redis_timeout_ms.map(std::time::Duration::from_millis),
        }),
        max_keys: args.max_keys.max(1),
        response_headers: args.response_headers,
        watch: !args.no_watch,
        recent_clock: args.recent_clock,
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("funnel-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("funnel-server: {e}");
            ExitCode::FAILURE
        }
    }
}
