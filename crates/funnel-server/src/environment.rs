//! The `funnel-server` binary's reading of envoyproxy/ratelimit's environment variables (part
//! of the command line, `cli.rs`; the server takes only [`crate::Options`]).
//!
//! Each variable becomes the command-line flags it means, placed before the real arguments,
//! so that a flag given on the command line wins over the variable. A variable that asks for
//! something funnel-server does not do is refused at start, naming it; a variable that only
//! tunes envoyproxy/ratelimit's own machinery (connection pools, pipelining, Go profiling) is
//! logged as ignored. The xDS client's variables are read here too. The README's "Starting
//! from envoyproxy/ratelimit's environment" has the table.
//!
//! Running "as envoyproxy/ratelimit" (any of `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`,
//! `RUNTIME_APPDIRECTORY`, `CONFIG_TYPE` set), an address or switch left unset takes
//! envoyproxy/ratelimit's default (listen on every interface, ports 8080, 8081 and 6070,
//! statsd on), as the Deployment being replaced expects; otherwise funnel-server's own
//! defaults stay (loopback, no debug listener, no statsd).

use std::ffi::OsString;
use std::fmt;

/// What the environment asks.
#[derive(Debug, Default)]
pub struct FromEnvironment {
    /// Flags and their values, each with the variables it came from.
    pub args: Vec<(Vec<OsString>, &'static str)>,
    /// Variables set but without effect here, with why.
    pub ignored: Vec<(&'static str, &'static str)>,
    /// `LOG_LEVEL` as a tracing filter.
    pub log_level: Option<&'static str>,
    /// `LOG_FORMAT=json`.
    pub log_json: bool,
}

/// A variable funnel-server cannot honour, or a value it cannot read.
#[derive(Debug, PartialEq, Eq)]
pub struct EnvError {
    /// The variable.
    pub var: &'static str,
    /// Why.
    pub reason: String,
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.var, self.reason)
    }
}

impl std::error::Error for EnvError {}

/// Variables whose only effect is on envoyproxy/ratelimit's own machinery: ignored, logged.
const HARMLESS: [(&str, &str); 18] = [
    (
        "REDIS_PERSECOND",
        "per-second limits are counted with the others in REDIS_URL's Redis, with the same answers",
    ),
    ("REDIS_POOL_SIZE", "one multiplexed connection per limiter"),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "one multiplexed connection per limiter",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "requests are pipelined as they come",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "requests are pipelined as they come",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "requests are pipelined as they come",
    ),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "the health check does not ping Redis",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "the first Redis connection is not retried at start",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        "the first Redis connection is not retried at start",
    ),
    (
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "the first Redis connection is not retried at start",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "Redis keys expire when their debt is paid",
    ),
    (
        "CACHE_KEY_PREFIX",
        "Redis keys carry funnel-server's own prefix",
    ),
    ("TRACING_ENABLED", "no OpenTelemetry tracing"),
    (
        "RUNTIME_WATCH_ROOT",
        "the configuration directory itself is watched (a ConfigMap's ..data swap included)",
    ),
    ("RUNTIME_IGNOREDOTFILES", "dot files are always ignored"),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "no response-time histogram",
    ),
    (
        "MEMCACHE_HOST_PORT",
        "read only with BACKEND_TYPE=memcache, which is refused",
    ),
    (
        "MEMCACHE_SRV",
        "read only with BACKEND_TYPE=memcache, which is refused",
    ),
];

/// Variables asking for what funnel-server does not do: refused when set (to anything but
/// their off value, for switches).
const REFUSED: [(&str, &str); 1] = [(
    "PROMETHEUS_MAPPER_YAML",
    "the Prometheus names are fixed (see the README)",
)];

/// The flags envoyproxy/ratelimit's environment means, read through `get`.
pub fn translate(get: impl Fn(&str) -> Option<String>) -> Result<FromEnvironment, EnvError> {
    // An empty variable is an unset one, as envoyproxy/ratelimit's loader reads it.
    let var = |name: &str| get(name).filter(|v| !v.trim().is_empty());
    let mut out = FromEnvironment::default();
    let mut push = |vars: &'static str, args: &[&str]| {
        out.args
            .push((args.iter().map(OsString::from).collect(), vars));
    };

    for (name, why) in REFUSED {
        if let Some(v) = var(name) {
            if !is_off(&v) {
                return Err(EnvError {
                    var: name,
                    reason: why.to_owned(),
                });
            }
        }
    }

    let envoy_mode = [
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "RUNTIME_APPDIRECTORY",
        "CONFIG_TYPE",
    ]
    .iter()
    .any(|n| var(n).is_some());

    // Listeners: a pair with either half set, or any pair as envoyproxy, takes envoyproxy's
    // default for the unset half. GRPC_UDS replaces the gRPC pair.
    let grpc_uds = var("GRPC_UDS");
    for (host, port, flag, default_port, vars) in [
        ("HOST", "PORT", "--http", "8080", "HOST/PORT"),
        (
            "GRPC_HOST",
            "GRPC_PORT",
            "--grpc",
            "8081",
            "GRPC_HOST/GRPC_PORT",
        ),
        (
            "DEBUG_HOST",
            "DEBUG_PORT",
            "--debug",
            "6070",
            "DEBUG_HOST/DEBUG_PORT",
        ),
    ] {
        let (h, p) = (var(host), var(port));
        if let Some(path) = grpc_uds.as_deref().filter(|_| flag == "--grpc") {
            for name in [host, port].into_iter().filter(|n| var(n).is_some()) {
                out.ignored
                    .push((name, "GRPC_UDS is set: gRPC listens on the Unix socket"));
            }
            push("GRPC_UDS", &["--grpc-uds", path]);
            continue;
        }
        if h.is_none() && p.is_none() && !envoy_mode {
            continue;
        }
        let h = h.unwrap_or_else(|| "0.0.0.0".to_owned());
        let p = p.unwrap_or_else(|| default_port.to_owned());
        let port_number: u16 = p.trim().parse().map_err(|_| EnvError {
            var: port,
            reason: format!("{p:?} is not a port number"),
        })?;
        push(vars, &[flag, &join_host_port(&h, port_number)]);
    }

    // Connection ages: envoyproxy/ratelimit's defaults when running as it, else as given.
    for (name, flag, default) in [
        (
            "GRPC_MAX_CONNECTION_AGE",
            "--grpc-max-connection-age",
            "24h",
        ),
        (
            "GRPC_MAX_CONNECTION_AGE_GRACE",
            "--grpc-max-connection-age-grace",
            "1h",
        ),
    ] {
        let value = match var(name) {
            Some(v) => v,
            None if envoy_mode => default.to_owned(),
            None => continue,
        };
        crate::go::duration(&value).map_err(|reason| EnvError { var: name, reason })?;
        push(name, &[flag, value.trim()]);
    }

    // The configuration: files under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY,
    // or xDS.
    let config_type = var("CONFIG_TYPE").unwrap_or_else(|| "FILE".to_owned());
    match config_type.to_ascii_uppercase().as_str() {
        "FILE" => {
            if envoy_mode {
                let mut dir = std::path::PathBuf::from(
                    var("RUNTIME_ROOT").unwrap_or_else(|| "/srv/runtime_data/current".to_owned()),
                );
                if let Some(sub) = var("RUNTIME_SUBDIRECTORY") {
                    dir.push(sub);
                }
                dir.push(var("RUNTIME_APPDIRECTORY").unwrap_or_else(|| "config".to_owned()));
                out.args.push((
                    vec!["--config".into(), dir.into_os_string()],
                    "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY",
                ));
            }
        }
        "GRPC_XDS_SOTW" => {
            // As given: `--xds` reads `host:port` with or without TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS).
            let url = var("CONFIG_GRPC_XDS_SERVER_URL")
                .unwrap_or_else(|| crate::xds::settings::DEFAULT_SERVER.into());
            push("CONFIG_TYPE/CONFIG_GRPC_XDS_SERVER_URL", &["--xds", &url]);
        }
        other => {
            return Err(EnvError {
                var: "CONFIG_TYPE",
                reason: format!("{other:?}: expected FILE or GRPC_XDS_SOTW"),
            })
        }
    }

    if let Some(v) = var("LOG_LEVEL") {
        out.log_level = Some(match v.to_ascii_lowercase().as_str() {
            "trace" => "trace",
            "debug" => "debug",
            "info" => "info",
            "warn" | "warning" => "warn",
            "error" | "fatal" | "panic" => "error",
            _ => {
                return Err(EnvError {
                    var: "LOG_LEVEL",
                    reason: format!("{v:?}: expected debug, info, warn or error"),
                })
            }
        });
    }
    if let Some(v) = var("LOG_FORMAT") {
        out.log_json = match v.to_ascii_lowercase().as_str() {
            "json" => true,
            "text" => false,
            _ => {
                return Err(EnvError {
                    var: "LOG_FORMAT",
                    reason: format!("{v:?}: expected json or text"),
                })
            }
        };
    }

    xds(&var, &mut out)?;
    grpc_tls(&var, &mut out)?;
    redis(&var, &mut out)?;
    statistics(&var, envoy_mode, &mut out)?;

    if let Some(v) = var("NEAR_LIMIT_RATIO") {
        if let Err(reason) = v.parse::<crate::answers::NearLimitRatio>() {
            return Err(EnvError {
                var: "NEAR_LIMIT_RATIO",
                reason,
            });
        }
        out.args.push((
            vec!["--near-limit-ratio".into(), v.trim().into()],
            "NEAR_LIMIT_RATIO",
        ));
    }

    for (name, flag) in [
        ("SHADOW_MODE", "--shadow-mode"),
        ("QUOTA_MODE", "--quota-mode"),
        ("RESPONSE_DYNAMIC_METADATA", "--response-dynamic-metadata"),
        ("MERGE_DOMAIN_CONFIG", "--merge-domain-config"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "--limit-response-headers"),
    ] {
        if let Some(v) = var(name) {
            if switch(name, &v)? {
                out.args.push((vec![flag.into()], name));
            }
        }
    }
    for (name, flag) in [
        ("LIMIT_LIMIT_HEADER", "--limit-limit-header"),
        ("LIMIT_REMAINING_HEADER", "--limit-remaining-header"),
        ("LIMIT_RESET_HEADER", "--limit-reset-header"),
    ] {
        if let Some(v) = var(name) {
            out.args.push((vec![flag.into(), v.into()], name));
        }
    }
    // envoyproxy/ratelimit's default (false) charges every descriptor even when the request is
    // over the limit; funnel charges none unless told. Only an explicit `false` asks for it.
    if let Some(v) = var("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
        if !switch("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", &v)? {
            out.args.push((
                vec!["--charge-denied".into()],
                "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            ));
        }
    }

    for (name, why) in HARMLESS {
        if var(name).is_some() {
            out.ignored.push((name, why));
        }
    }
    Ok(out)
}

/// `REDIS_TLS_CLIENT_CERT` and `REDIS_TLS_CLIENT_KEY`: both or neither (envoyproxy/ratelimit
/// quietly drops one alone, and the server then refuses the connection for want of it: the
/// half-given pair is reported at start instead).
fn redis_client_certificate(
    var: &impl Fn(&str) -> Option<String>,
    out: &mut FromEnvironment,
) -> Result<(), EnvError> {
    match (var("REDIS_TLS_CLIENT_CERT"), var("REDIS_TLS_CLIENT_KEY")) {
        (Some(cert), Some(key)) => {
            out.args.push((
                vec!["--redis-tls-client-cert".into(), cert.into()],
                "REDIS_TLS_CLIENT_CERT",
            ));
            out.args.push((
                vec!["--redis-tls-client-key".into(), key.into()],
                "REDIS_TLS_CLIENT_KEY",
            ));
            Ok(())
        }
        (Some(_), None) => Err(EnvError {
            var: "REDIS_TLS_CLIENT_CERT",
            reason: "set without REDIS_TLS_CLIENT_KEY, its private key: set both or neither".into(),
        }),
        (None, Some(_)) => Err(EnvError {
            var: "REDIS_TLS_CLIENT_KEY",
            reason: "set without REDIS_TLS_CLIENT_CERT, the certificate it is the key of: set \
                     both or neither"
                .into(),
        }),
        (None, None) => Ok(()),
    }
}

/// The Redis variables.
/// The xDS client's variables (`CONFIG_GRPC_XDS_*`, `XDS_CLIENT_*` and the two start and
/// health switches), read whatever `CONFIG_TYPE` says, as envoyproxy/ratelimit reads them: they
/// take effect with `--xds`, given by `CONFIG_TYPE=GRPC_XDS_SOTW` or on the command line.
fn xds(var: &impl Fn(&str) -> Option<String>, out: &mut FromEnvironment) -> Result<(), EnvError> {
    let mut push = |vars: &'static str, args: &[&str]| {
        out.args
            .push((args.iter().map(OsString::from).collect(), vars));
    };
    for (name, flag) in [
        ("CONFIG_GRPC_XDS_NODE_ID", "--xds-node-id"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "--xds-node-metadata"),
        ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "--xds-headers"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "--xds-tls-server-name"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "--xds-tls-ca"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "--xds-tls-cert"),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "--xds-tls-key"),
    ] {
        if let Some(v) = var(name) {
            push(name, &[flag, &v]);
        }
    }
    for (name, flag) in [
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "--xds-tls"),
        (
            "FORCE_START_WITHOUT_INITIAL_CONFIG",
            "--force-start-without-initial-config",
        ),
        (
            "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
            "--healthy-with-at-least-one-config-loaded",
        ),
    ] {
        if let Some(v) = var(name) {
            if switch(name, &v)? {
                push(name, &[flag]);
            }
        }
    }
    // Values checked here, so that a bad one is reported under its variable's name.
    type Check = fn(&str) -> Result<(), String>;
    let checks: [(&'static str, &str, Check); 5] = [
        (
            "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            "--xds-backoff-initial",
            |v| crate::go::duration(v).map(drop),
        ),
        (
            "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            "--xds-backoff-max",
            |v| crate::go::duration(v).map(drop),
        ),
        (
            "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            "--xds-backoff-factor",
            |v| {
                v.trim()
                    .parse::<f64>()
                    .map(drop)
                    .map_err(|_| format!("{v:?}: expected a number"))
            },
        ),
        ("XDS_CLIENT_BACKOFF_JITTER", "--xds-backoff-jitter", |v| {
            crate::go::boolean(v).map(drop)
        }),
        (
            "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
            "--xds-max-message-bytes",
            |v| {
                v.trim()
                    .parse::<usize>()
                    .map(drop)
                    .map_err(|_| format!("{v:?}: expected a number of bytes"))
            },
        ),
    ];
    for (name, flag, check) in checks {
        if let Some(v) = var(name) {
            check(&v).map_err(|reason| EnvError { var: name, reason })?;
            push(name, &[flag, v.trim()]);
        }
    }
    Ok(())
}

fn redis(var: &impl Fn(&str) -> Option<String>, out: &mut FromEnvironment) -> Result<(), EnvError> {
    let backend = var("BACKEND_TYPE").map(|b| b.to_ascii_lowercase());
    match backend.as_deref() {
        None | Some("redis") => {}
        Some(other) => {
            return Err(EnvError {
                var: "BACKEND_TYPE",
                reason: format!("{other:?}: only redis is supported (or none: in process)"),
            })
        }
    }
    let Some(url) = var("REDIS_URL") else {
        if backend.is_some() {
            return Err(EnvError {
                var: "BACKEND_TYPE",
                reason: "redis needs REDIS_URL (funnel-server has no default Redis address; \
                         leave both unset to count in process)"
                    .into(),
            });
        }
        return Ok(());
    };
    let kind = var("REDIS_TYPE")
        .unwrap_or_else(|| "single".into())
        .to_ascii_lowercase();
    let tls = match var("REDIS_TLS") {
        Some(v) => switch("REDIS_TLS", &v)?,
        None => false,
    };
    let auth = var("REDIS_AUTH");
    match kind.as_str() {
        "single" => {
            let socket = var("REDIS_SOCKET_TYPE")
                .unwrap_or_else(|| "unix".into())
                .to_ascii_lowercase();
            let full = if url.contains("://") {
                url
            } else {
                match socket.as_str() {
                    "tcp" => {
                        let scheme = if tls { "rediss" } else { "redis" };
                        let userinfo = auth.as_deref().map(userinfo).unwrap_or_default();
                        format!("{scheme}://{userinfo}{url}")
                    }
                    "unix" => {
                        if tls {
                            return Err(EnvError {
                                var: "REDIS_TLS",
                                reason: "TLS over a Unix socket is not supported".into(),
                            });
                        }
                        match auth.as_deref() {
                            None => format!("redis+unix://{url}"),
                            Some(a) => {
                                let (user, pass) = a.split_once(':').unwrap_or(("", a));
                                let mut u = format!("redis+unix://{url}?pass={}", encode(pass));
                                if !user.is_empty() {
                                    u.push_str(&format!("&user={}", encode(user)));
                                }
                                u
                            }
                        }
                    }
                    other => {
                        return Err(EnvError {
                            var: "REDIS_SOCKET_TYPE",
                            reason: format!("{other:?}: expected tcp or unix"),
                        })
                    }
                }
            };
            out.args
                .push((vec!["--redis".into(), full.into()], "REDIS_URL"));
        }
        "cluster" | "sentinel" => {
            // envoyproxy/ratelimit's lists (`host:port,host:port`; `master,host:port,...`),
            // read as such by --redis-type.
            out.args
                .push((vec!["--redis".into(), url.into()], "REDIS_URL"));
            out.args.push((
                vec!["--redis-type".into(), kind.clone().into()],
                "REDIS_TYPE",
            ));
            if let Some(a) = auth {
                out.args
                    .push((vec!["--redis-auth".into(), a.into()], "REDIS_AUTH"));
            }
            // Read, as there, only for sentinel.
            if let Some(a) = var("REDIS_SENTINEL_AUTH").filter(|_| kind == "sentinel") {
                out.args.push((
                    vec!["--redis-sentinel-auth".into(), a.into()],
                    "REDIS_SENTINEL_AUTH",
                ));
            }
            if tls {
                out.args.push((vec!["--redis-tls".into()], "REDIS_TLS"));
            }
        }
        other => {
            return Err(EnvError {
                var: "REDIS_TYPE",
                reason: format!("{other:?}: expected single, cluster or sentinel"),
            })
        }
    }
    if let Some(ca) = var("REDIS_TLS_CACERT") {
        out.args.push((
            vec!["--redis-tls-ca-cert".into(), ca.into()],
            "REDIS_TLS_CACERT",
        ));
    }
    redis_client_certificate(var, out)?;
    if let Some(v) = var("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
        if switch("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", &v)? {
            out.args.push((
                vec!["--redis-tls-skip-hostname-verification".into()],
                "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            ));
        }
    }
    if let Some(t) = var("REDIS_TIMEOUT") {
        let d = crate::go::duration(&t).map_err(|reason| EnvError {
            var: "REDIS_TIMEOUT",
            reason,
        })?;
        out.args.push((
            vec![
                "--redis-timeout-ms".into(),
                d.as_millis().max(1).to_string().into(),
            ],
            "REDIS_TIMEOUT",
        ));
    }
    if let Some(b) = var("LOCAL_CACHE_SIZE_IN_BYTES") {
        let bytes: u64 = b.trim().parse().map_err(|_| EnvError {
            var: "LOCAL_CACHE_SIZE_IN_BYTES",
            reason: format!("{b:?} is not a number of bytes"),
        })?;
        let keys = bytes / DENY_CACHE_BYTES_PER_KEY;
        out.args.push((
            vec!["--deny-cache".into(), keys.to_string().into()],
            "LOCAL_CACHE_SIZE_IN_BYTES",
        ));
    }
    Ok(())
}

/// The gRPC listener's TLS variables, read (as there) only with `GRPC_SERVER_USE_TLS` on.
fn grpc_tls(
    var: &impl Fn(&str) -> Option<String>,
    out: &mut FromEnvironment,
) -> Result<(), EnvError> {
    let on = match var("GRPC_SERVER_USE_TLS") {
        Some(v) => switch("GRPC_SERVER_USE_TLS", &v)?,
        None => false,
    };
    let files = [
        ("GRPC_SERVER_TLS_CERT", "--grpc-tls-cert"),
        ("GRPC_SERVER_TLS_KEY", "--grpc-tls-key"),
        ("GRPC_CLIENT_TLS_CACERT", "--grpc-tls-client-ca"),
        ("GRPC_CLIENT_TLS_SAN", "--grpc-tls-client-san"),
    ];
    if !on {
        for (name, _) in files {
            if var(name).is_some() {
                out.ignored
                    .push((name, "read only with GRPC_SERVER_USE_TLS=true"));
            }
        }
        return Ok(());
    }
    for name in ["GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY"] {
        if var(name).is_none() {
            return Err(EnvError {
                var: name,
                reason: "GRPC_SERVER_USE_TLS=true needs the server's certificate chain \
                         (GRPC_SERVER_TLS_CERT) and its key (GRPC_SERVER_TLS_KEY), PEM files"
                    .into(),
            });
        }
    }
    out.args
        .push((vec!["--grpc-tls".into()], "GRPC_SERVER_USE_TLS"));
    let with_ca = var("GRPC_CLIENT_TLS_CACERT").is_some();
    for (name, flag) in files {
        match var(name) {
            // Only a certificate signed by the CA is asked for; without one there is none to
            // compare, as there.
            Some(_) if name == "GRPC_CLIENT_TLS_SAN" && !with_ca => out.ignored.push((
                name,
                "no client certificate is asked without GRPC_CLIENT_TLS_CACERT",
            )),
            Some(v) => out.args.push((vec![flag.into(), v.into()], name)),
            None => {}
        }
    }
    Ok(())
}

/// What one key of the deny cache takes, to read `LOCAL_CACHE_SIZE_IN_BYTES` as a number of
/// keys: its slot in funnel's table plus a descriptor value of typical length.
pub const DENY_CACHE_BYTES_PER_KEY: u64 = 64;

/// The statistics variables.
fn statistics(
    var: &impl Fn(&str) -> Option<String>,
    envoy_mode: bool,
    out: &mut FromEnvironment,
) -> Result<(), EnvError> {
    let disabled = match var("DISABLE_STATS") {
        Some(v) => switch("DISABLE_STATS", &v)?,
        None => false,
    };
    let prometheus = match var("USE_PROMETHEUS") {
        Some(v) => switch("USE_PROMETHEUS", &v)?,
        None => false,
    };
    let dogstatsd = match var("USE_DOG_STATSD") {
        Some(v) => switch("USE_DOG_STATSD", &v)?,
        None => false,
    };
    let statsd_asked = match var("USE_STATSD") {
        Some(v) => Some(switch("USE_STATSD", &v)?),
        None => None,
    };
    // DogStatsD goes to STATSD_HOST:STATSD_PORT too, so envoyproxy/ratelimit takes one or the
    // other: plain statsd asked for beside it is refused, left unset it is off (statistics
    // disabled, neither is read).
    if dogstatsd && statsd_asked == Some(true) && !disabled {
        return Err(EnvError {
            var: "USE_DOG_STATSD",
            reason: "USE_STATSD=true too: both send to STATSD_HOST:STATSD_PORT, set one".into(),
        });
    }
    // envoyproxy/ratelimit sends to statsd unless told not to (and refuses statsd beside
    // Prometheus); as envoyproxy, the same.
    let statsd = dogstatsd || statsd_asked.unwrap_or(envoy_mode && !prometheus);
    if statsd && !disabled {
        let host = var("STATSD_HOST").unwrap_or_else(|| "localhost".into());
        let port = var("STATSD_PORT").unwrap_or_else(|| "8125".into());
        let port: u16 = port.trim().parse().map_err(|_| EnvError {
            var: "STATSD_PORT",
            reason: format!("{port:?} is not a port number"),
        })?;
        out.args.push((
            vec!["--statsd".into(), join_host_port(&host, port).into()],
            "USE_STATSD/STATSD_HOST/STATSD_PORT",
        ));
        if dogstatsd {
            out.args
                .push((vec!["--dogstatsd".into()], "USE_DOG_STATSD"));
        }
        if let Some(i) = var("STATS_FLUSH_INTERVAL") {
            crate::go::duration(&i).map_err(|reason| EnvError {
                var: "STATS_FLUSH_INTERVAL",
                reason,
            })?;
            out.args.push((
                vec!["--stats-flush-interval".into(), i.into()],
                "STATS_FLUSH_INTERVAL",
            ));
        }
        if let Some(t) = var("EXTRA_TAGS") {
            out.args
                .push((vec!["--extra-tags".into(), t.into()], "EXTRA_TAGS"));
        }
    }
    if prometheus && !disabled {
        let addr = var("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
        // Go's `:9090` is every interface.
        let addr = match addr.strip_prefix(':') {
            Some(port) => format!("0.0.0.0:{port}"),
            None => addr,
        };
        out.args.push((
            vec!["--prometheus".into(), addr.into()],
            "USE_PROMETHEUS/PROMETHEUS_ADDR",
        ));
        if let Some(p) = var("PROMETHEUS_PATH") {
            out.args.push((
                vec!["--prometheus-path".into(), p.into()],
                "PROMETHEUS_PATH",
            ));
        }
    }
    Ok(())
}

/// A switch as Go's `strconv.ParseBool` reads it.
fn switch(var: &'static str, v: &str) -> Result<bool, EnvError> {
    crate::go::boolean(v).map_err(|reason| EnvError { var, reason })
}

fn is_off(v: &str) -> bool {
    crate::go::boolean(v) == Ok(false)
}

/// `host:port`, an IPv6 host in brackets.
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `REDIS_AUTH` (`password` or `user:password`) as a URL's user information.
fn userinfo(auth: &str) -> String {
    match auth.split_once(':') {
        Some((user, pass)) => format!("{}:{}@", encode(user), encode(pass)),
        None => format!(":{}@", encode(auth)),
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(vars: &[(&str, &str)]) -> Result<Vec<String>, EnvError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let t = translate(|k| map.get(k).cloned())?;
        Ok(t.args
            .into_iter()
            .flat_map(|(a, _)| a)
            .map(|a| a.to_string_lossy().into_owned())
            .collect())
    }

    #[test]
    fn nothing_set_keeps_funnel_defaults() {
        assert_eq!(from(&[]).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn as_envoyproxy_unset_addresses_take_its_defaults() {
        let args = from(&[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("USE_STATSD", "false"),
        ])
        .unwrap();
        assert_eq!(
            args,
            [
                "--http",
                "0.0.0.0:8080",
                "--grpc",
                "0.0.0.0:8081",
                "--debug",
                "0.0.0.0:6070",
                "--grpc-max-connection-age",
                "24h",
                "--grpc-max-connection-age-grace",
                "1h",
                "--config",
                "/data/ratelimit/config"
            ]
        );
    }

    #[test]
    fn redis_urls_follow_envoyproxy_conventions() {
        let args = from(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "localhost:6379"),
            ("REDIS_AUTH", "us:p@ss"),
            ("REDIS_TLS", "true"),
            ("REDIS_TIMEOUT", "1.5s"),
            ("LOCAL_CACHE_SIZE_IN_BYTES", "6400"),
        ])
        .unwrap();
        assert_eq!(
            args,
            [
                "--redis",
                "rediss://us:p%40ss@localhost:6379",
                "--redis-timeout-ms",
                "1500",
                "--deny-cache",
                "100"
            ]
        );
        let args = from(&[("REDIS_URL", "/run/redis.sock")]).unwrap();
        assert_eq!(args, ["--redis", "redis+unix:///run/redis.sock"]);
        let args = from(&[("REDIS_URL", "m,h1:26379"), ("REDIS_TYPE", "SENTINEL")]).unwrap();
        assert_eq!(args, ["--redis", "m,h1:26379", "--redis-type", "sentinel"]);
    }

    #[test]
    fn redis_client_certificates_and_the_host_name_check_map_to_flags() {
        let args = from(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis.internal:6380"),
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", "/certs/ca.crt"),
            ("REDIS_TLS_CLIENT_CERT", "/certs/tls.crt"),
            ("REDIS_TLS_CLIENT_KEY", "/certs/tls.key"),
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
        ])
        .unwrap();
        assert_eq!(
            args,
            [
                "--redis",
                "rediss://redis.internal:6380",
                "--redis-tls-ca-cert",
                "/certs/ca.crt",
                "--redis-tls-client-cert",
                "/certs/tls.crt",
                "--redis-tls-client-key",
                "/certs/tls.key",
                "--redis-tls-skip-hostname-verification"
            ]
        );
        // The same for a cluster and for sentinel, whose lists go through --redis-type.
        let args = from(&[
            ("REDIS_URL", "h1:6379,h2:6379"),
            ("REDIS_TYPE", "cluster"),
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CLIENT_CERT", "/certs/tls.crt"),
            ("REDIS_TLS_CLIENT_KEY", "/certs/tls.key"),
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false"),
        ])
        .unwrap();
        assert_eq!(
            args,
            [
                "--redis",
                "h1:6379,h2:6379",
                "--redis-type",
                "cluster",
                "--redis-tls",
                "--redis-tls-client-cert",
                "/certs/tls.crt",
                "--redis-tls-client-key",
                "/certs/tls.key"
            ]
        );
    }

    #[test]
    fn a_client_certificate_without_its_key_or_a_key_alone_is_refused() {
        let e = from(&[
            ("REDIS_URL", "h:1"),
            ("REDIS_TLS_CLIENT_CERT", "/certs/tls.crt"),
        ])
        .unwrap_err();
        assert_eq!(e.var, "REDIS_TLS_CLIENT_CERT");
        assert!(e.reason.contains("REDIS_TLS_CLIENT_KEY"), "{e}");
        let e = from(&[
            ("REDIS_URL", "h:1"),
            ("REDIS_TLS_CLIENT_KEY", "/certs/tls.key"),
        ])
        .unwrap_err();
        assert_eq!(e.var, "REDIS_TLS_CLIENT_KEY");
        assert!(e.reason.contains("REDIS_TLS_CLIENT_CERT"), "{e}");
        let e = from(&[
            ("REDIS_URL", "h:1"),
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "sometimes"),
        ])
        .unwrap_err();
        assert_eq!(e.var, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION");
    }

    /// The names in backquotes of the README paragraph that starts with `lead`.
    fn readme_names(lead: &str) -> Vec<String> {
        let readme = include_str!("../README.md");
        let start = readme.find(lead).expect("the README's paragraph");
        let paragraph = readme[start..].split("\n\n").next().unwrap_or_default();
        paragraph
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|w| {
                w.chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c == '*')
            })
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_readme_lists_the_refused_and_ignored_variables_as_the_code_has_them() {
        let refused = readme_names("Refused at start");
        let mut expected: Vec<&str> = REFUSED.iter().map(|(name, _)| *name).collect();
        expected.extend(["BACKEND_TYPE", "NEAR_LIMIT_RATIO"]);
        let mut listed: Vec<&str> = refused.iter().map(String::as_str).collect();
        listed.sort_unstable();
        expected.sort_unstable();
        assert_eq!(listed, expected, "README.md, \"Refused at start\"");
        for name in &refused {
            if REFUSED.iter().any(|(n, _)| n == name) {
                let e = from(&[(name.as_str(), "true"), ("REDIS_URL", "h:1")]).unwrap_err();
                assert_eq!(e.var, name, "{e}");
            }
        }
        let ignored = readme_names("Logged as ignored");
        for (name, _) in HARMLESS {
            assert!(
                ignored.iter().any(|i| i == name
                    || i.strip_suffix('*')
                        .is_some_and(|prefix| name.starts_with(prefix))),
                "README.md, \"Logged as ignored\", lacks {name}"
            );
        }
        for name in &ignored {
            assert!(
                HARMLESS.iter().any(|(n, _)| n == name
                    || name
                        .strip_suffix('*')
                        .is_some_and(|prefix| n.starts_with(prefix))),
                "README.md, \"Logged as ignored\", names {name}, which the code does not ignore"
            );
        }
    }

    #[test]
    fn the_sentinels_password_is_read_for_sentinel_only() {
        let sentinel = [
            ("REDIS_URL", "m,h1:26379"),
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_AUTH", "primary-pw"),
            ("REDIS_SENTINEL_AUTH", "sentinel-pw"),
        ];
        assert_eq!(
            from(&sentinel).unwrap(),
            [
                "--redis",
                "m,h1:26379",
                "--redis-type",
                "sentinel",
                "--redis-auth",
                "primary-pw",
                "--redis-sentinel-auth",
                "sentinel-pw"
            ]
        );
        let cluster = [
            ("REDIS_URL", "h1:6379,h2:6379"),
            ("REDIS_TYPE", "cluster"),
            ("REDIS_SENTINEL_AUTH", "sentinel-pw"),
        ];
        assert_eq!(
            from(&cluster).unwrap(),
            ["--redis", "h1:6379,h2:6379", "--redis-type", "cluster"]
        );
    }

    #[test]
    fn unsupported_variables_are_refused_by_name() {
        for (k, v) in [
            ("BACKEND_TYPE", "memcache"),
            ("NEAR_LIMIT_RATIO", "1.5"),
            ("REDIS_TYPE", "ring"),
            ("CONFIG_TYPE", "ETCD"),
            ("LOG_LEVEL", "loud"),
            ("SHADOW_MODE", "maybe"),
        ] {
            let vars = [(k, v), ("REDIS_URL", "h:1")];
            let e = from(&vars).unwrap_err();
            assert_eq!(e.var, k, "{e}");
        }
    }

    #[test]
    fn dogstatsd_goes_to_the_statsd_address() {
        let args = from(&[
            ("USE_DOG_STATSD", "true"),
            ("STATSD_HOST", "agent"),
            ("STATSD_PORT", "8126"),
            ("EXTRA_TAGS", "a:1"),
            // Read by the command line, which knows whether a flag gave mogrifiers.
            ("USE_DOG_STATSD_MOGRIFIERS", "HITS"),
        ])
        .unwrap();
        assert_eq!(
            args,
            [
                "--statsd",
                "agent:8126",
                "--dogstatsd",
                "--extra-tags",
                "a:1"
            ]
        );
        // As envoyproxy/ratelimit, where plain statsd is on by default: off beside DogStatsD
        // unless asked for, and refused when it is.
        let envoy = [("RUNTIME_ROOT", "/data"), ("USE_DOG_STATSD", "true")];
        let args = from(&envoy).unwrap();
        assert!(
            args.windows(3)
                .any(|w| w == ["--statsd", "localhost:8125", "--dogstatsd"]),
            "{args:?}"
        );
        assert_eq!(args.iter().filter(|a| *a == "--statsd").count(), 1);
        let e = from(&[("USE_DOG_STATSD", "true"), ("USE_STATSD", "true")]).unwrap_err();
        assert_eq!(e.var, "USE_DOG_STATSD", "{e}");
        let args = from(&[("USE_DOG_STATSD", "true"), ("USE_STATSD", "false")]).unwrap();
        assert_eq!(args, ["--statsd", "localhost:8125", "--dogstatsd"]);
        // Switched off, or with statistics disabled: nothing.
        assert!(from(&[("USE_DOG_STATSD", "false")]).unwrap().is_empty());
        let off = [
            ("USE_DOG_STATSD", "true"),
            ("USE_STATSD", "true"),
            ("DISABLE_STATS", "true"),
        ];
        assert!(from(&off).unwrap().is_empty());
        let e = from(&[("USE_DOG_STATSD", "yes")]).unwrap_err();
        assert_eq!(e.var, "USE_DOG_STATSD", "{e}");
    }

    #[test]
    fn switches_and_statistics() {
        let args = from(&[
            ("SHADOW_MODE", "true"),
            ("QUOTA_MODE", "false"),
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "stats"),
            ("STATS_FLUSH_INTERVAL", "1m30s"),
            ("EXTRA_TAGS", "a:1,b:2"),
            ("USE_PROMETHEUS", "1"),
            ("PROMETHEUS_ADDR", ":9102"),
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
        ])
        .unwrap();
        assert_eq!(
            args,
            [
                "--statsd",
                "stats:8125",
                "--stats-flush-interval",
                "1m30s",
                "--extra-tags",
                "a:1,b:2",
                "--prometheus",
                "0.0.0.0:9102",
                "--shadow-mode",
                "--charge-denied"
            ]
        );
    }

    /// The flags and the ignored variables of `vars`.
    fn with_ignored(vars: &[(&str, &str)]) -> (Vec<String>, Vec<&'static str>) {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let t = translate(|k| map.get(k).cloned()).unwrap();
        let ignored = t.ignored.iter().map(|(name, _)| *name).collect();
        let args = t
            .args
            .into_iter()
            .flat_map(|(a, _)| a)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        (args, ignored)
    }

    #[test]
    fn grpc_tls_variables_become_the_tls_flags() {
        let tls = [
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
            ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
            ("GRPC_CLIENT_TLS_CACERT", "/certs/ca.crt"),
            ("GRPC_CLIENT_TLS_SAN", "envoy.test"),
        ];
        assert_eq!(
            from(&tls).unwrap(),
            [
                "--grpc-tls",
                "--grpc-tls-cert",
                "/certs/tls.crt",
                "--grpc-tls-key",
                "/certs/tls.key",
                "--grpc-tls-client-ca",
                "/certs/ca.crt",
                "--grpc-tls-client-san",
                "envoy.test"
            ]
        );
        // Without the client CA no client certificate is asked: the SAN has none to check.
        let (args, ignored) = with_ignored(&[tls[0], tls[1], tls[2], tls[4]]);
        assert_eq!(
            args,
            [
                "--grpc-tls",
                "--grpc-tls-cert",
                "/certs/tls.crt",
                "--grpc-tls-key",
                "/certs/tls.key"
            ]
        );
        assert_eq!(ignored, ["GRPC_CLIENT_TLS_SAN"]);
        // TLS off: the files are read by nothing, as there.
        let mut off = tls;
        off[0] = ("GRPC_SERVER_USE_TLS", "false");
        let (args, ignored) = with_ignored(&off);
        assert!(args.is_empty(), "{args:?}");
        assert_eq!(ignored.len(), 4, "{ignored:?}");
    }

    #[test]
    fn grpc_tls_without_its_pair_is_refused_by_name() {
        let e = from(&[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
        ])
        .unwrap_err();
        assert_eq!(e.var, "GRPC_SERVER_TLS_CERT", "{e}");
        let e = from(&[
            ("GRPC_SERVER_USE_TLS", "1"),
            ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ])
        .unwrap_err();
        assert_eq!(e.var, "GRPC_SERVER_TLS_KEY", "{e}");
        let e = from(&[("GRPC_SERVER_USE_TLS", "on")]).unwrap_err();
        assert_eq!(e.var, "GRPC_SERVER_USE_TLS", "{e}");
    }

    #[test]
    fn grpc_uds_replaces_the_grpc_address() {
        let (args, ignored) = with_ignored(&[
            ("GRPC_UDS", "/run/ratelimit.sock"),
            ("GRPC_HOST", "0.0.0.0"),
            ("GRPC_PORT", "9081"),
        ]);
        assert_eq!(args, ["--grpc-uds", "/run/ratelimit.sock"]);
        assert_eq!(ignored, ["GRPC_HOST", "GRPC_PORT"]);
        // As envoyproxy: the other listeners keep their defaults.
        let args = from(&[
            ("RUNTIME_ROOT", "/data"),
            ("USE_STATSD", "false"),
            ("GRPC_UDS", "/run/ratelimit.sock"),
        ])
        .unwrap();
        assert_eq!(
            args,
            [
                "--http",
                "0.0.0.0:8080",
                "--grpc-uds",
                "/run/ratelimit.sock",
                "--debug",
                "0.0.0.0:6070",
                "--grpc-max-connection-age",
                "24h",
                "--grpc-max-connection-age-grace",
                "1h",
                "--config",
                "/data/config"
            ]
        );
    }

    #[test]
    fn the_xds_client_reads_envoyproxys_variables() {
        let args = from(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "xds:18000"),
            ("CONFIG_GRPC_XDS_NODE_ID", "gw"),
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-a:1"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/ca.pem"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "false"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "1"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2s"),
            ("XDS_CLIENT_BACKOFF_JITTER", "false"),
            ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1024"),
        ])
        .unwrap();
        let joined = args.join(" ");
        for expected in [
            "--xds xds:18000",
            "--xds-node-id gw",
            "--xds-headers x-a:1",
            "--xds-tls-ca /ca.pem",
            "--xds-tls ",
            "--healthy-with-at-least-one-config-loaded",
            "--xds-backoff-initial 2s",
            "--xds-backoff-jitter false",
            "--xds-max-message-bytes 1024",
        ] {
            assert!(joined.contains(expected), "{expected:?} in {joined:?}");
        }
        assert!(!joined.contains("--force-start"), "{joined}");
        // Without CONFIG_TYPE the URL is the command line's to give; the rest still apply.
        let args = from(&[("CONFIG_GRPC_XDS_NODE_ID", "gw")]).unwrap();
        assert_eq!(args, ["--xds-node-id", "gw"]);
        for (name, bad) in [
            ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "soon"),
            ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "half"),
            ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "-1"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "yes"),
        ] {
            assert_eq!(from(&[(name, bad)]).unwrap_err().var, name);
        }
    }

    #[test]
    fn connection_ages_take_envoyproxys_defaults_when_running_as_it() {
        let args = from(&[("RUNTIME_ROOT", "/data")]).unwrap().join(" ");
        assert!(args.contains("--grpc-max-connection-age 24h"), "{args}");
        assert!(
            args.contains("--grpc-max-connection-age-grace 1h"),
            "{args}"
        );
        let args = from(&[("GRPC_MAX_CONNECTION_AGE", "30m")]).unwrap();
        assert_eq!(args, ["--grpc-max-connection-age", "30m"]);
        assert!(from(&[]).unwrap().is_empty());
        assert_eq!(
            from(&[("GRPC_MAX_CONNECTION_AGE_GRACE", "later")])
                .unwrap_err()
                .var,
            "GRPC_MAX_CONNECTION_AGE_GRACE"
        );
    }
}
