//! `funnel-server`: Envoy's rate-limit service on funnel. See the crate's README.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use funnel_server::rules::RedisSettings;
use funnel_server::server::{run, Options, Source};
use funnel_server::xds::{self, XdsOptions};

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
    /// This or --xds.
    #[arg(long, conflicts_with = "xds")]
    config: Option<PathBuf>,
    /// Take the configuration from an xDS server instead (`host:port`, `http://host:port`,
    /// `https://host:port`), as envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW does.
    #[arg(long, value_name = "URL")]
    xds: Option<String>,
    /// The node id sent to the xDS server, which selects the configuration by it
    /// [default: default].
    #[arg(long, value_name = "ID")]
    xds_node_id: Option<String>,
    /// The node metadata sent to the xDS server: `key=value,key=value`.
    #[arg(long, value_name = "PAIRS")]
    xds_node_metadata: Option<String>,
    /// Headers added to the xDS stream: `name:value,name:value`.
    #[arg(long, value_name = "PAIRS")]
    xds_headers: Option<String>,
    /// TLS to the xDS server (implied by an https:// URL).
    #[arg(long)]
    xds_tls: bool,
    /// The PEM CA certificate the xDS server's certificate must chain to [default: the
    /// system's roots].
    #[arg(long, value_name = "FILE")]
    xds_tls_ca: Option<PathBuf>,
    /// The PEM client certificate for mutual TLS to the xDS server (with --xds-tls-key).
    #[arg(long, value_name = "FILE")]
    xds_tls_cert: Option<PathBuf>,
    /// The PEM key of --xds-tls-cert.
    #[arg(long, value_name = "FILE")]
    xds_tls_key: Option<PathBuf>,
    /// The name the xDS server's certificate must carry [default: the URL's host].
    #[arg(long, value_name = "NAME")]
    xds_tls_server_name: Option<String>,
    /// The first wait before reconnecting to the xDS server, as a Go duration [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = xds::settings::go_duration)]
    xds_backoff_initial: Option<std::time::Duration>,
    /// The longest wait before reconnecting [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = xds::settings::go_duration)]
    xds_backoff_max: Option<std::time::Duration>,
    /// The growth of the wait per failed attempt [default: 0.5, which keeps the first wait].
    #[arg(long, value_name = "FACTOR")]
    xds_backoff_factor: Option<f64>,
    /// Draw each wait at random between the first and the computed one [default: true].
    #[arg(long, value_name = "BOOL", value_parser = xds::settings::go_bool)]
    xds_backoff_jitter: Option<bool>,
    /// The largest xDS response accepted, in bytes [default: 4 MiB].
    #[arg(long, value_name = "BYTES")]
    xds_max_message_bytes: Option<usize>,
    /// With --xds, serve at once instead of after the first response (before it, every
    /// domain is unknown: OK without a limit).
    #[arg(long)]
    force_start_without_initial_config: bool,
    /// With --xds, fail the health checks while no configuration with a domain is in force.
    #[arg(long)]
    healthy_with_at_least_one_config_loaded: bool,
    /// The gRPC address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    grpc: SocketAddr,
    /// The HTTP address (/healthcheck, /metrics, POST /json).
    #[arg(long, default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// Count in Redis, shared by every instance pointed at it (redis://host:port/).
    #[arg(long)]
    redis: Option<String>,
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

/// envoyproxy/ratelimit's environment variables of the xDS configuration source
/// (`CONFIG_TYPE=GRPC_XDS_SOTW`, `CONFIG_GRPC_XDS_*`, `XDS_CLIENT_*`,
/// `FORCE_START_WITHOUT_INITIAL_CONFIG`, `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`), each read
/// where no flag gave the same setting: flags win.
fn xds_env(args: &mut Args, env: impl Fn(&str) -> Option<String>) -> Result<(), String> {
    let get = |name: &str| env(name).filter(|v| !v.is_empty());
    fn parsed<T>(
        value: Option<String>,
        name: &str,
        f: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        value
            .map(|v| f(&v).map_err(|e| format!("{name}: {e}")))
            .transpose()
    }
    let parse = |name: &str, f: fn(&str) -> Result<bool, String>| parsed(get(name), name, f);
    match get("CONFIG_TYPE").as_deref() {
        None | Some("FILE") => {}
        Some("GRPC_XDS_SOTW") => {
            if args.config.is_none() && args.xds.is_none() {
                let url = get("CONFIG_GRPC_XDS_SERVER_URL");
                args.xds = Some(url.unwrap_or_else(|| xds::settings::DEFAULT_SERVER.into()));
            }
        }
        Some(other) => {
            return Err(format!(
                "CONFIG_TYPE={other:?}: expected FILE or GRPC_XDS_SOTW"
            ))
        }
    }
    let text = |slot: &mut Option<String>, name: &str| {
        if slot.is_none() {
            *slot = get(name);
        }
    };
    text(&mut args.xds_node_id, "CONFIG_GRPC_XDS_NODE_ID");
    text(&mut args.xds_node_metadata, "CONFIG_GRPC_XDS_NODE_METADATA");
    text(
        &mut args.xds_headers,
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    );
    text(
        &mut args.xds_tls_server_name,
        "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    );
    let path = |slot: &mut Option<PathBuf>, name: &str| {
        if slot.is_none() {
            *slot = get(name).map(PathBuf::from);
        }
    };
    path(&mut args.xds_tls_ca, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT");
    path(&mut args.xds_tls_cert, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT");
    path(&mut args.xds_tls_key, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY");
    let flag = |name: &str| parse(name, xds::settings::go_bool).map(|b| b == Some(true));
    let jitter = parse("XDS_CLIENT_BACKOFF_JITTER", xds::settings::go_bool)?;
    args.xds_tls |= flag("CONFIG_GRPC_XDS_SERVER_USE_TLS")?;
    args.force_start_without_initial_config |= flag("FORCE_START_WITHOUT_INITIAL_CONFIG")?;
    args.healthy_with_at_least_one_config_loaded |=
        flag("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED")?;
    if args.xds_backoff_initial.is_none() {
        let name = "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL";
        args.xds_backoff_initial = parsed(get(name), name, xds::settings::go_duration)?;
    }
    if args.xds_backoff_max.is_none() {
        let name = "XDS_CLIENT_BACKOFF_MAX_INTERVAL";
        args.xds_backoff_max = parsed(get(name), name, xds::settings::go_duration)?;
    }
    if args.xds_backoff_factor.is_none() {
        let name = "XDS_CLIENT_BACKOFF_RANDOM_FACTOR";
        args.xds_backoff_factor = parsed(get(name), name, |v| {
            v.trim()
                .parse::<f64>()
                .map_err(|_| format!("{v:?}: expected a number"))
        })?;
    }
    if args.xds_backoff_jitter.is_none() {
        args.xds_backoff_jitter = jitter;
    }
    if args.xds_max_message_bytes.is_none() {
        let name = "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES";
        args.xds_max_message_bytes = parsed(get(name), name, |v| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| format!("{v:?}: expected a number of bytes"))
        })?;
    }
    Ok(())
}

/// The configuration's source: --config or --xds, exactly one.
fn source(args: &Args) -> Result<Source, String> {
    let url = match (&args.config, &args.xds) {
        (Some(path), None) => return Ok(Source::Files(path.clone())),
        (None, Some(url)) => url,
        (Some(_), Some(_)) => return Err("give --config or --xds, not both".into()),
        (None, None) => {
            return Err(
                "no configuration: give --config <file or directory>, or --xds <url> \
                 (or CONFIG_TYPE=GRPC_XDS_SOTW in the environment)"
                    .into(),
            )
        }
    };
    let tls = args.xds_tls || url.trim().starts_with("https://");
    let url = xds::settings::server_url(url, tls).map_err(|e| format!("--xds {e}"))?;
    let identity = match (&args.xds_tls_cert, &args.xds_tls_key) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        (None, None) => None,
        _ => return Err("--xds-tls-cert and --xds-tls-key go together".into()),
    };
    let tls_files = args.xds_tls_ca.is_some() || identity.is_some();
    if tls_files && !tls {
        return Err(
            "TLS files given for the xDS server, but no TLS: add --xds-tls \
             (CONFIG_GRPC_XDS_SERVER_USE_TLS=true) or write https://"
                .into(),
        );
    }
    let defaults = xds::Backoff::default();
    let backoff = xds::Backoff {
        initial: args.xds_backoff_initial.unwrap_or(defaults.initial),
        max: args.xds_backoff_max.unwrap_or(defaults.max),
        factor: args.xds_backoff_factor.unwrap_or(defaults.factor),
        jitter: args.xds_backoff_jitter.unwrap_or(defaults.jitter),
    };
    if !(backoff.factor.is_finite() && backoff.factor >= 0.0) {
        return Err(format!(
            "the xDS backoff factor {} must be a number from 0 up",
            backoff.factor
        ));
    }
    Ok(Source::Xds(Box::new(XdsOptions {
        url,
        node_id: args.xds_node_id.clone().unwrap_or_else(|| "default".into()),
        node_metadata: xds::settings::node_metadata(
            args.xds_node_metadata.as_deref().unwrap_or(""),
        )?,
        headers: xds::settings::headers(args.xds_headers.as_deref().unwrap_or(""))?,
        tls: tls.then(|| xds::Tls {
            ca: args.xds_tls_ca.clone(),
            identity,
            server_name: args.xds_tls_server_name.clone(),
        }),
        backoff,
        max_message_bytes: args.xds_max_message_bytes,
        wait_for_first: !args.force_start_without_initial_config,
        healthy_needs_domains: args.healthy_with_at_least_one_config_loaded,
    })))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut args = Args::parse();
    if let Err(e) = xds_env(&mut args, |name| std::env::var(name).ok()) {
        eprintln!("funnel-server: {e}");
        return ExitCode::FAILURE;
    }
    let source = match source(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("funnel-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let on_failure = match args.on_redis_failure {
        OnRedisFailure::Open => funnel_redis::OnFailure::Open,
        OnRedisFailure::Closed => funnel_redis::OnFailure::Closed,
        OnRedisFailure::Local => funnel_redis::OnFailure::Local {
            instances: args.fleet_size.max(1),
        },
    };
    let opts = Options {
        source,
        grpc: args.grpc,
        http: Some(args.http),
        redis: args.redis.map(|url| RedisSettings {
            url,
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
