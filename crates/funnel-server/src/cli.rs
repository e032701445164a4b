//! The command line of the `funnel-server` binary: its flags, and envoyproxy/ratelimit's
//! environment variables where a flag is not given (`environment.rs`).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};

use crate::answers::{Answers, LimitHeaders, NearLimitRatio};
use crate::connection_age::ConnectionAge;
use crate::environment;
use crate::fleet::{HashTag, RedisType};
use crate::grpc_tls::GrpcTls;
use crate::mogrifier::{self, MogrifierError};
use crate::rules::RedisSettings;
use crate::server::{run, Options, Source};
use crate::statsd::{Dialect, Statsd};
use crate::xds::{self, XdsOptions};

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
    #[arg(long, value_name = "DURATION", value_parser = crate::go::duration)]
    xds_backoff_initial: Option<std::time::Duration>,
    /// The longest wait before reconnecting [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = crate::go::duration)]
    xds_backoff_max: Option<std::time::Duration>,
    /// The growth of the wait per failed attempt [default: 0.5, which keeps the first wait].
    #[arg(long, value_name = "FACTOR")]
    xds_backoff_factor: Option<f64>,
    /// Draw each wait at random between the first and the computed one [default: true].
    #[arg(long, value_name = "BOOL", value_parser = crate::go::boolean)]
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
    #[arg(long, default_value = "127.0.0.1:8081", overrides_with = "grpc_uds")]
    grpc: SocketAddr,
    /// Send each gRPC connection a GOAWAY once this old (a Go duration: 24h, 30m; 0: never),
    /// so clients reconnect and spread over new instances; drawn within ±10% once per process
    /// [default: never; 24h as envoyproxy/ratelimit].
    #[arg(long, value_name = "DURATION", value_parser = crate::go::duration)]
    grpc_max_connection_age: Option<Duration>,
    /// After the GOAWAY, how long calls in flight may go on before the connection is closed
    /// (0: as long as they take) [default: as long as they take; 1h as envoyproxy/ratelimit].
    #[arg(long, value_name = "DURATION", value_parser = crate::go::duration)]
    grpc_max_connection_age_grace: Option<Duration>,
    /// Listen for gRPC on this Unix domain socket instead of --grpc's address (GRPC_UDS).
    #[arg(long, value_name = "PATH", overrides_with = "grpc")]
    grpc_uds: Option<PathBuf>,
    /// Serve gRPC over TLS with --grpc-tls-cert and --grpc-tls-key (GRPC_SERVER_USE_TLS); the
    /// pair is read again when its files change.
    #[arg(long, requires_all = ["grpc_tls_cert", "grpc_tls_key"])]
    grpc_tls: bool,
    /// The gRPC listener's PEM certificate chain (GRPC_SERVER_TLS_CERT).
    #[arg(long, value_name = "FILE", requires = "grpc_tls")]
    grpc_tls_cert: Option<PathBuf>,
    /// The PEM private key of --grpc-tls-cert (GRPC_SERVER_TLS_KEY).
    #[arg(long, value_name = "FILE", requires = "grpc_tls")]
    grpc_tls_key: Option<PathBuf>,
    /// Mutual TLS: require a client certificate signed by this PEM CA (GRPC_CLIENT_TLS_CACERT).
    #[arg(long, value_name = "FILE", requires = "grpc_tls")]
    grpc_tls_client_ca: Option<PathBuf>,
    /// With --grpc-tls-client-ca, also require this DNS name or IP address among the client
    /// certificate's SANs (GRPC_CLIENT_TLS_SAN).
    #[arg(long, value_name = "NAME", requires = "grpc_tls_client_ca")]
    grpc_tls_client_san: Option<String>,
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
    #[arg(long, default_value = "10s", value_parser = crate::go::duration)]
    stats_flush_interval: Duration,
    /// Tags added to every statsd statistic: `tag:value,tag:value`.
    #[arg(long, value_parser = parse_tags)]
    extra_tags: Option<Tags>,
    /// Write --statsd's lines as DogStatsD, for Datadog's agent: the extra tags as tags
    /// (`name:1|c|#tag:value`), names rewritten by the mogrifiers (envoyproxy's
    /// USE_DOG_STATSD).
    #[arg(long, requires = "statsd")]
    dogstatsd: bool,
    /// A DogStatsD mogrifier, repeatable, tried in order: a statistic whose name PATTERN (a
    /// regular expression) matches is sent as NAME with TAGS (`tag:value,...`; empty for
    /// none), `$1`, `$2`, ... the pattern's groups [default: from envoyproxy's
    /// USE_DOG_STATSD_MOGRIFIERS].
    #[arg(
        long,
        num_args = 3,
        value_names = ["PATTERN", "NAME", "TAGS"],
        requires = "dogstatsd"
    )]
    dogstatsd_mogrifier: Vec<String>,
    /// Count in Redis, shared by every instance pointed at it (redis://host:port/).
    #[arg(long)]
    redis: Option<String>,
    /// How --redis reaches Redis: one server (`host:port` or a URL), a cluster (seed nodes,
    /// comma-separated) or sentinel (`master_name,host:port[,host:port...]`).
    #[arg(long, value_enum, default_value = "single")]
    redis_type: RedisType,
    /// `password` or `user:password` for every Redis server.
    #[arg(long)]
    redis_auth: Option<String>,
    /// `password` or `user:password` for the sentinels themselves, with --redis-type sentinel
    /// (the primary takes --redis-auth).
    #[arg(long)]
    redis_sentinel_auth: Option<String>,
    /// Reach every `host:port` of --redis over TLS (`rediss://`).
    #[arg(long)]
    redis_tls: bool,
    /// A certificate authority (PEM file) Redis's TLS certificates must chain to, instead of the
    /// system's root certificates.
    #[arg(long, value_name = "FILE")]
    redis_tls_ca_cert: Option<PathBuf>,
    /// A client certificate (PEM file, the chain leaf first) shown to Redis servers that
    /// require one (`tls-auth-clients yes`), with --redis-tls-client-key.
    #[arg(long, value_name = "FILE", requires = "redis_tls_client_key")]
    redis_tls_client_cert: Option<PathBuf>,
    /// The private key (PEM file) of --redis-tls-client-cert.
    #[arg(long, value_name = "FILE", requires = "redis_tls_client_cert")]
    redis_tls_client_key: Option<PathBuf>,
    /// Accept a Redis TLS certificate that does not name the host dialed. Its chain is still
    /// checked against --redis-tls-ca-cert or the system's roots.
    #[arg(long)]
    redis_tls_skip_hostname_verification: bool,
    /// `domain`: every Redis key of a domain in one cluster slot, so that a request's
    /// descriptors are charged together in one script on a cluster too.
    #[arg(long, value_enum, default_value = "none")]
    redis_hash_tag: HashTag,
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
    /// costs more than the wait (the repository's docs/bench/funnel-server.md has the sweep). Envoy's own timeout for the
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
    /// Count the units asked past this share of a limit in the `near_limit` statistic, from 0
    /// to 1 (envoyproxy/ratelimit's NEAR_LIMIT_RATIO).
    #[arg(long, value_name = "RATIO", default_value = "0.8", value_parser = str::parse::<NearLimitRatio>)]
    near_limit_ratio: NearLimitRatio,
    /// Do not watch the configuration for changes.
    #[arg(long)]
    no_watch: bool,
    /// Merge configuration files that name the same domain (envoyproxy/ratelimit's
    /// MERGE_DOMAIN_CONFIG); without it a domain in two files is refused.
    #[arg(long)]
    merge_domain_config: bool,
    /// Decide on a time refreshed every `INTERVAL` (`250us`, `1ms`; 10us to 1000ms) instead of
    /// reading the clock per decision: each limit may admit up to one interval's worth of its
    /// rate more than exact. Not worth it beside a gRPC round trip unless measured.
    #[arg(long, value_name = "INTERVAL", value_parser = parse_interval)]
    recent_clock: Option<Duration>,
    /// Serve `/forward-auth/<domain>` on the HTTP port with this file's actions (nginx, Caddy,
    /// Traefik).
    #[arg(long, value_name = "FILE")]
    forward_auth: Option<PathBuf>,
    /// The threads that serve calls [default: one per CPU the process may use]. With 1,
    /// everything runs on one thread and no work is handed between threads: where CPUs are
    /// few or shared (a pod limited to one CPU, a load beside it) that costs less CPU per
    /// call.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    worker_threads: Option<u16>,
}

/// The runtime for `threads` worker threads: one thread of its own for 1 (tokio's
/// current-thread runtime), else that many workers, else one per CPU.
fn runtime(threads: Option<u16>) -> std::io::Result<tokio::runtime::Runtime> {
    match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n.into())
            .enable_all()
            .build(),
        None => tokio::runtime::Runtime::new(),
    }
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

/// How statsd's lines are written: DogStatsD with --dogstatsd, its mogrifiers from
/// --dogstatsd-mogrifier or, when none is given, from envoyproxy/ratelimit's variables (read
/// through `env`): flags win.
fn dialect(args: &Args, env: impl Fn(&str) -> Option<String>) -> Result<Dialect, MogrifierError> {
    let listed = env(mogrifier::LIST).is_some_and(|v| !v.trim().is_empty());
    if !args.dogstatsd {
        if listed {
            tracing::info!(
                variable = mogrifier::LIST,
                "ignored: read only with USE_DOG_STATSD (--dogstatsd)"
            );
        }
        return Ok(Dialect::Statsd);
    }
    let mogrifiers = if args.dogstatsd_mogrifier.is_empty() {
        mogrifier::from_environment(env)?
    } else {
        if listed {
            tracing::info!(
                variable = mogrifier::LIST,
                "ignored: --dogstatsd-mogrifier is given"
            );
        }
        args.dogstatsd_mogrifier
            .chunks(3)
            .map(mogrifier::from_flag)
            .collect::<Result<_, _>>()?
    };
    Ok(Dialect::DogStatsd { mogrifiers })
}

impl Args {
    fn into_options(self, source: Source, dialect: Dialect) -> Options {
        let on_failure = match self.on_redis_failure {
            OnRedisFailure::Open => funnel_redis::OnFailure::Open,
            OnRedisFailure::Closed => funnel_redis::OnFailure::Closed,
            OnRedisFailure::Local => funnel_redis::OnFailure::Local {
                instances: self.fleet_size.max(1),
            },
        };
        let mut opts = Options::new(source, self.grpc);
        opts.grpc_uds = self.grpc_uds;
        opts.grpc_tls = match (self.grpc_tls, self.grpc_tls_cert, self.grpc_tls_key) {
            (true, Some(cert), Some(key)) => {
                let mut tls = GrpcTls::new(cert, key);
                tls.client_ca = self.grpc_tls_client_ca;
                tls.client_san = self.grpc_tls_client_san;
                Some(tls)
            }
            // clap requires the pair with --grpc-tls.
            _ => None,
        };
        opts.http = Some(self.http);
        opts.debug = self.debug;
        opts.prometheus = self.prometheus.map(|a| (a, self.prometheus_path));
        opts.statsd = self.statsd.map(|target| Statsd {
            target,
            flush_interval: self.stats_flush_interval,
            extra_tags: self.extra_tags.map(|t| t.0).unwrap_or_default(),
            dialect,
        });
        opts.redis = self.redis.map(|url| RedisSettings {
            url,
            redis_type: self.redis_type,
            auth: self.redis_auth,
            sentinel_auth: self.redis_sentinel_auth,
            tls: self.redis_tls,
            tls_ca_cert: self.redis_tls_ca_cert,
            tls_client_cert: self.redis_tls_client_cert.zip(self.redis_tls_client_key),
            tls_skip_hostname_verification: self.redis_tls_skip_hostname_verification,
            hash_tag: self.redis_hash_tag,
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
            near_limit_ratio: self.near_limit_ratio,
        };
        opts.watch = !self.no_watch;
        opts.merge_domain_config = self.merge_domain_config;
        opts.recent_clock = self.recent_clock;
        opts.forward_auth = self.forward_auth;
        // Zero is Go's "never", for the age and for the grace alike.
        let set = |d: Option<Duration>| d.filter(|d| !d.is_zero());
        opts.connection_age = set(self.grpc_max_connection_age).map(|max| ConnectionAge {
            max,
            grace: set(self.grpc_max_connection_age_grace),
        });
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

/// The binary's body: reads the command line and the environment, serves until SIGTERM or
/// SIGINT, and says why it stopped when it could not start.
pub fn main() -> ExitCode {
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
    let source = match source(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("funnel-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dialect = match dialect(&args, |name| std::env::var(name).ok()) {
        Ok(d) => d,
        Err(e) => {
            match std::error::Error::source(&e) {
                Some(why) => eprintln!("funnel-server: {e}: {why}"),
                None => eprintln!("funnel-server: {e}"),
            }
            return ExitCode::FAILURE;
        }
    };
    let runtime = match runtime(args.worker_threads) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("funnel-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args.into_options(source, dialect))) {
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

    fn parse(flags: &[&str]) -> Args {
        let mut all = vec!["funnel-server", "--config", "rules"];
        all.extend(flags);
        Args::try_parse_from(all).expect("the flags parse")
    }

    /// envoyproxy/ratelimit's variables for one mogrifier, `NAMED`.
    fn env(name: &str) -> Option<String> {
        match name {
            "USE_DOG_STATSD_MOGRIFIERS" => Some("NAMED".into()),
            "DOG_STATSD_MOGRIFIER_NAMED_PATTERN" => Some("^from-env$".into()),
            "DOG_STATSD_MOGRIFIER_NAMED_NAME" => Some("n".into()),
            _ => None,
        }
    }

    fn patterns(d: Dialect) -> Vec<String> {
        match d {
            Dialect::DogStatsd { mogrifiers } => {
                mogrifiers.iter().map(|m| m.pattern().to_owned()).collect()
            }
            Dialect::Statsd => panic!("plain statsd"),
        }
    }

    #[test]
    fn mogrifier_flags_win_over_the_environment() {
        let dog = ["--statsd", "h:1", "--dogstatsd"];
        assert_eq!(
            patterns(dialect(&parse(&dog), env).unwrap()),
            ["^from-env$"]
        );
        let first = ["--dogstatsd-mogrifier", "^a$", "x", ""];
        let second = ["--dogstatsd-mogrifier", "^b$", "y", "t:$0"];
        let flagged = [&dog[..], &first, &second].concat();
        assert_eq!(
            patterns(dialect(&parse(&flagged), env).unwrap()),
            ["^a$", "^b$"]
        );
        // Without --dogstatsd the mogrifiers are not read, and plain statsd stays.
        let plain = dialect(&parse(&["--statsd", "h:1"]), env).unwrap();
        assert_eq!(plain, Dialect::Statsd);
        assert!(Args::try_parse_from(["funnel-server", "--dogstatsd"]).is_err());
    }

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
