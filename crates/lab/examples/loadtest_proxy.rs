//! The load test's proxy (`bench/wrk.sh`): funnel-tower's example proxy with two more modes,
//! no limiter at all (`--no-limit`, the baseline) and tower_governor instead of funnel
//! (`--governor`, `--governor-headers`), so that every row of the load test runs the same
//! forwarding code and differs only in its limiter.
//!
//! ```sh
//! cargo run --release -p funnel-lab --example loadtest_proxy -- \
//!     --listen 127.0.0.1:8080 --upstream http://127.0.0.1:9000 --governor --limit ip=10/1s
//! ```
//!
//! Run with `--help` for every flag; the `--limit` syntax is in `funnel_tower::spec`. The
//! shared flags and the forwarding are the example proxy's own files, included below.

#[path = "../../funnel-tower/examples/proxy/cli.rs"]
mod cli;
#[path = "../../funnel-tower/examples/proxy/forward.rs"]
mod forward;

use funnel_tower::spec::parse_limit;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use tower_layer::Layer;

use forward::{accept, bind, refuse, serve, Forward};

/// This binary's name in what it prints.
const NAME: &str = "loadtest_proxy";

const USAGE: &str = "\
loadtest_proxy: a reverse proxy to one upstream, rate-limited by funnel or tower_governor

USAGE:
    loadtest_proxy --upstream <http://host:port> [--listen <addr:port>] [--limit <spec>]... [options]

OPTIONS:
";

/// The flags only this proxy takes.
const OWN_OPTIONS: &str = "    \
    --no-limit             forward everything (a baseline for load tests)
    --governor             limit with tower_governor instead of funnel (for load tests): the
                           first --limit, which must be an `ip` key, as its per-IP quota
    --governor-headers     as --governor, with tower_governor writing its x-ratelimit-*
                           headers on every response (its `use_headers` mode)
    -h, --help             this text
";

/// Which limiter serves, if any.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Funnel,
    /// `--no-limit`.
    NoLimit,
    /// `--governor`.
    Governor,
    /// `--governor-headers`: tower_governor writing its headers on every response.
    GovernorHeaders,
}

/// The command line: the shared flags, the mode, and funnel's layer's builder.
fn parse_args() -> Result<(cli::Args, Mode, funnel_tower::Builder), String> {
    let mut mode = Mode::Funnel;
    let help = format!("{USAGE}{}{OWN_OPTIONS}", cli::OPTIONS);
    let args = cli::parse(std::env::args().skip(1), &help, |flag, _| {
        let chosen = match flag {
            "--no-limit" => Mode::NoLimit,
            "--governor" => Mode::Governor,
            "--governor-headers" => Mode::GovernorHeaders,
            _ => return Ok(false),
        };
        if mode != Mode::Funnel && mode != chosen {
            return Err(format!(
                "{flag}: --no-limit, --governor and --governor-headers exclude each other"
            ));
        }
        mode = chosen;
        Ok(true)
    })?;
    if args.limits.is_empty() && mode != Mode::NoLimit {
        return Err("give at least one --limit, or --no-limit (see --help)".into());
    }
    let builder = cli::layer(&args)?;
    Ok((args, mode, builder))
}

type GovernorLayer<M = governor::middleware::NoOpMiddleware> = tower_governor::GovernorLayer<
    tower_governor::key_extractor::PeerIpKeyExtractor,
    M,
    axum::body::Body,
>;

/// tower_governor writing its `x-ratelimit-*` headers on every response (`use_headers`), as
/// funnel's layer writes its `RateLimit` headers: the like-for-like comparison under load.
type GovernorHeadersLayer = GovernorLayer<governor::middleware::StateInformationMiddleware>;

/// tower_governor with the first `--limit` (an `ip` key) as its per-IP quota: one cell every
/// emission interval, a burst of the limit; denials answered 429 with `Retry-After`.
fn governor_layer(args: &cli::Args) -> Result<GovernorLayer, String> {
    let (interval, burst) = governor_quota(args)?;
    let config = tower_governor::governor::GovernorConfigBuilder::default()
        .per_nanosecond(interval)
        .burst_size(burst)
        .finish()
        .ok_or("tower_governor rejected the quota")?;
    Ok(tower_governor::GovernorLayer::new(config).error_handler(governor_429))
}

/// [`governor_layer`] with `use_headers`: its headers on every response.
fn governor_headers_layer(args: &cli::Args) -> Result<GovernorHeadersLayer, String> {
    let (interval, burst) = governor_quota(args)?;
    let config = tower_governor::governor::GovernorConfigBuilder::default()
        .per_nanosecond(interval)
        .burst_size(burst)
        .use_headers()
        .finish()
        .ok_or("tower_governor rejected the quota")?;
    Ok(tower_governor::GovernorLayer::new(config).error_handler(governor_429))
}

/// The first `--limit` (an `ip` key) as tower_governor's emission interval (ns) and burst.
fn governor_quota(args: &cli::Args) -> Result<(u64, u32), String> {
    let spec = args.limits.first().ok_or("--governor needs a --limit")?;
    if !spec.starts_with("ip=") {
        return Err(format!("--governor takes an `ip=` limit, not {spec:?}"));
    }
    let p = parse_limit(spec, &[]).map_err(|e| e.to_string())?;
    let interval = u64::try_from(p.quota.emission_interval().as_nanos()).unwrap_or(u64::MAX);
    let burst = u32::try_from(p.quota.limit()).map_err(|_| "burst too large for governor")?;
    Ok((interval.max(1), burst))
}

/// tower_governor's error as this proxy's response: 429 with `Retry-After`.
fn governor_429(e: tower_governor::GovernorError) -> Response<axum::body::Body> {
    let mut r = Response::new(axum::body::Body::empty());
    *r.status_mut() = match e {
        tower_governor::GovernorError::TooManyRequests { wait_time, .. } => {
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, wait_time.into());
            StatusCode::TOO_MANY_REQUESTS
        }
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    r
}

#[tokio::main]
async fn main() {
    let (args, mode, builder) = parse_args().unwrap_or_else(|e| refuse(NAME, e));
    // The same forwarding for every mode; tower_governor builds its 429 in axum's body type,
    // so its rows answer in it.
    let forward = Forward::new(args.upstream.clone(), std::convert::identity);
    let forward_axum = Forward::new(args.upstream.clone(), axum::body::Body::new);
    let layer = (mode == Mode::Funnel).then(|| builder.build().unwrap_or_else(|e| refuse(NAME, e)));
    let governor =
        (mode == Mode::Governor).then(|| governor_layer(&args).unwrap_or_else(|e| refuse(NAME, e)));
    let governor_headers = (mode == Mode::GovernorHeaders)
        .then(|| governor_headers_layer(&args).unwrap_or_else(|e| refuse(NAME, e)));
    let listener = bind(NAME, args.listen).await;
    let local = listener.local_addr().unwrap_or(args.listen);
    let mode_note = if mode == Mode::NoLimit {
        ", no limit"
    } else {
        ""
    };
    cli::say_listening(NAME, local, &args, mode_note);
    // No stop: the load test ends this proxy with a kill, having no request in flight.
    let stop = std::future::pending();
    accept(NAME, listener, stop, |io, peer, watcher| {
        // Each mode serves with its own service, cloned per request, and inserts the one
        // extension its limiter reads: nothing else differs between the load test's rows.
        if let Some(l) = &layer {
            let tag = move |req: &mut Request<Incoming>| {
                req.extensions_mut().insert(funnel_tower::PeerAddr(peer));
            };
            tokio::spawn(serve(io, l.layer(forward.clone()), tag, watcher));
        } else if let Some(g) = &governor {
            // tower_governor's peer: its `axum` feature reads axum's ConnectInfo.
            let tag = move |req: &mut Request<Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
            };
            tokio::spawn(serve(io, g.layer(forward_axum.clone()), tag, watcher));
        } else if let Some(g) = &governor_headers {
            let tag = move |req: &mut Request<Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
            };
            tokio::spawn(serve(io, g.layer(forward_axum.clone()), tag, watcher));
        } else {
            let untagged = |_: &mut Request<Incoming>| {};
            tokio::spawn(serve(io, forward.clone(), untagged, watcher));
        }
    })
    .await;
}
