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
//! Run with `--help` for every flag; the `--limit` syntax is in `funnel_tower::spec`.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use funnel_tower::spec::parse_limit;
use funnel_tower::{Net, PeerAddr, RateLimitLayer, Report};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower_layer::Layer;

const HELP: &str = "\
loadtest_proxy: a reverse proxy to one upstream, rate-limited by funnel or tower_governor

USAGE:
    loadtest_proxy --upstream <http://host:port> [--listen <addr:port>] [--limit <spec>]... [options]

OPTIONS:
    --listen <addr:port>   where to listen (default 127.0.0.1:8080; port 0 picks a free one;
                           the address listened on is printed to stderr)
    --upstream <url>       the upstream, http://host:port (required)
    --limit <spec>         a limit, repeatable; every limit is charged or none:
                               <key>=<count>/<period>[,burst=<n>]
                           count requests per period, one every period/count once the burst
                           is used up; burst is how many may come at once, and defaults to
                           count.
                               key:    ip | ip/<v6 prefix> | client | client-forwarded
                                       | route | global | header:<name>
                               period: <n>ms | <n>s | <n>m | <n>h (a bare number is seconds)
                           e.g. \"ip=10/1s,burst=20\" (10 per second, 20 at once)
                                \"route=1000/60s\" \"header:x-api-key=100/1m\"
                           ip is the peer (IPv6 grouped by /64 unless ip/<prefix>); client is
                           the address a trusted proxy appended to X-Forwarded-For (see
                           --trust), client-forwarded the same from Forwarded; route is the
                           request path.
    --trust <net>          a proxy in front of this one whose X-Forwarded-For (or Forwarded)
                           the client keys believe (repeatable; none by default)
    --shadow               evaluate and count, add headers, never reject
    --legacy-headers       X-RateLimit-Limit/Remaining/Reset instead of RateLimit-Policy/RateLimit
    --closest              RateLimit headers for the policy closest to its limit only
    --no-limit             forward everything (a baseline for load tests)
    --governor             limit with tower_governor instead of funnel (for load tests): the
                           first --limit, which must be an `ip` key, as its per-IP quota
    --governor-headers     as --governor, with tower_governor writing its x-ratelimit-*
                           headers on every response (its `use_headers` mode)
    -h, --help             this text
";

struct Args {
    listen: SocketAddr,
    upstream: Uri,
    limits: Vec<String>,
    trusted: Vec<Net>,
    shadow: bool,
    report: Report,
    no_limit: bool,
    governor: bool,
    /// `--governor-headers`: tower_governor writing its headers on every response.
    governor_headers: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut args = Args {
        listen: "127.0.0.1:8080".parse().expect("a valid default"),
        upstream: Uri::default(),
        limits: Vec::new(),
        trusted: Vec::new(),
        shadow: false,
        report: Report::All,
        no_limit: false,
        governor: false,
        governor_headers: false,
    };
    let mut upstream = None;
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                std::process::exit(0);
            }
            "--listen" => {
                let v = value("--listen")?;
                args.listen = v
                    .parse()
                    .map_err(|_| format!("--listen {v:?}: not addr:port"))?;
            }
            "--upstream" => {
                let v = value("--upstream")?;
                let uri: Uri = v
                    .parse()
                    .map_err(|_| format!("--upstream {v:?}: not a URL"))?;
                if uri.scheme_str() != Some("http") || uri.authority().is_none() {
                    return Err(format!("--upstream {v:?}: expected http://host:port"));
                }
                upstream = Some(uri);
            }
            "--limit" => args.limits.push(value("--limit")?),
            "--trust" => {
                let v = value("--trust")?;
                args.trusted
                    .push(Net::parse(&v).ok_or(format!("--trust {v:?}: not a network"))?);
            }
            "--shadow" => args.shadow = true,
            "--legacy-headers" => args.report = Report::Legacy,
            "--closest" => args.report = Report::Closest,
            "--no-limit" => args.no_limit = true,
            "--governor" => args.governor = true,
            "--governor-headers" => args.governor_headers = true,
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    args.upstream = upstream.ok_or("--upstream is required (see --help)")?;
    if args.limits.is_empty() && !args.no_limit {
        return Err("give at least one --limit, or --no-limit (see --help)".into());
    }
    Ok(args)
}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// Forwards a request to the upstream, keeping method, path, query and headers.
#[derive(Clone)]
struct Forward {
    client: Client<HttpConnector, Incoming>,
    upstream: Uri,
}

impl tower_service::Service<Request<Incoming>> for Forward {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let (mut parts, body) = req.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = format!(
            "http://{}{}",
            self.upstream.authority().map_or("", |a| a.as_str()),
            path
        );
        let client = self.client.clone();
        Box::pin(async move {
            match uri.parse() {
                Ok(uri) => parts.uri = uri,
                Err(_) => return Ok(status(StatusCode::BAD_REQUEST)),
            }
            match client.request(Request::from_parts(parts, body)).await {
                Ok(resp) => Ok(resp.map(|b| b.boxed())),
                Err(_) => Ok(status(StatusCode::BAD_GATEWAY)),
            }
        })
    }
}

type GovernorLayer<M = governor::middleware::NoOpMiddleware> = tower_governor::GovernorLayer<
    tower_governor::key_extractor::PeerIpKeyExtractor,
    M,
    axum::body::Body,
>;

/// tower_governor writing its `x-ratelimit-*` headers on every response (`use_headers`), as
/// funnel's layer writes its `RateLimit` headers: the like-for-like comparison under load.
type GovernorHeadersLayer = GovernorLayer<governor::middleware::StateInformationMiddleware>;

/// [`Forward`] answering with axum's body type, the one tower_governor builds its 429 in.
#[derive(Clone)]
struct ForwardAxum(Forward);

impl tower_service::Service<Request<Incoming>> for ForwardAxum {
    type Response = Response<axum::body::Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Incoming>) -> Self::Future {
        let fut = tower_service::Service::call(&mut self.0, req);
        Box::pin(async move { fut.await.map(|r| r.map(axum::body::Body::new)) })
    }
}

/// tower_governor with the first `--limit` (an `ip` key) as its per-IP quota: one cell every
/// emission interval, a burst of the limit; denials answered 429 with `Retry-After`.
fn governor_layer(args: &Args) -> Result<GovernorLayer, String> {
    let (interval, burst) = governor_quota(args)?;
    let config = tower_governor::governor::GovernorConfigBuilder::default()
        .per_nanosecond(interval)
        .burst_size(burst)
        .finish()
        .ok_or("tower_governor rejected the quota")?;
    Ok(tower_governor::GovernorLayer::new(config).error_handler(governor_429))
}

/// [`governor_layer`] with `use_headers`: its headers on every response.
fn governor_headers_layer(args: &Args) -> Result<GovernorHeadersLayer, String> {
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
fn governor_quota(args: &Args) -> Result<(u64, u32), String> {
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

fn status(code: StatusCode) -> Response<ProxyBody> {
    let mut r = Response::new(
        Full::new(Bytes::new())
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = code;
    r
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("loadtest_proxy: {e}");
            std::process::exit(2);
        }
    };
    let mut builder = RateLimitLayer::builder()
        .shadow(args.shadow)
        .report(args.report);
    for spec in &args.limits {
        match parse_limit(spec, &args.trusted) {
            Ok(p) => builder = builder.policy(p.name, p.key, p.quota),
            Err(e) => {
                eprintln!("loadtest_proxy: {e}");
                std::process::exit(2);
            }
        }
    }
    let forward = Forward {
        client: Client::builder(TokioExecutor::new()).build_http(),
        upstream: args.upstream.clone(),
    };
    let layer = if args.no_limit || args.governor || args.governor_headers {
        None
    } else {
        match builder.build() {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("loadtest_proxy: {e}");
                std::process::exit(2);
            }
        }
    };
    let or_exit = |e: String| -> ! {
        eprintln!("loadtest_proxy: {e}");
        std::process::exit(2)
    };
    let governor = args
        .governor
        .then(|| governor_layer(&args).unwrap_or_else(|e| or_exit(e)));
    let governor_headers = args
        .governor_headers
        .then(|| governor_headers_layer(&args).unwrap_or_else(|e| or_exit(e)));
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("loadtest_proxy: cannot listen on {}: {e}", args.listen);
            std::process::exit(1);
        }
    };
    let local = listener.local_addr().unwrap_or(args.listen);
    eprintln!(
        "loadtest_proxy: listening on {local} -> {} ({} limit(s){}{})",
        args.upstream,
        args.limits.len(),
        if args.shadow { ", shadow" } else { "" },
        if args.no_limit { ", no limit" } else { "" }
    );
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors (or another transient error): retrying at once
                // would spin a core until a connection closes.
                eprintln!("loadtest_proxy: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(stream);
        // Each mode serves with its own service, cloned per request, and inserts the one
        // extension its limiter reads: nothing else differs between the load test's rows.
        if let Some(l) = &layer {
            let tag = move |req: &mut Request<Incoming>| {
                req.extensions_mut().insert(PeerAddr(peer));
            };
            tokio::spawn(serve(io, l.layer(forward.clone()), tag));
        } else if let Some(g) = &governor {
            // tower_governor's peer: its `axum` feature reads axum's ConnectInfo.
            let tag = move |req: &mut Request<Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
            };
            tokio::spawn(serve(io, g.layer(ForwardAxum(forward.clone())), tag));
        } else if let Some(g) = &governor_headers {
            let tag = move |req: &mut Request<Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
            };
            tokio::spawn(serve(io, g.layer(ForwardAxum(forward.clone())), tag));
        } else {
            tokio::spawn(serve(io, forward.clone(), |_: &mut Request<Incoming>| {}));
        }
    }
}

/// Serves one connection with `svc`, cloned for each request after `tag` has marked it.
async fn serve<S, B>(
    io: TokioIo<tokio::net::TcpStream>,
    svc: S,
    tag: impl Fn(&mut Request<Incoming>) + Clone + Send + 'static,
) where
    S: tower_service::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        tag(&mut req);
        let mut svc = svc.clone();
        async move { tower_service::Service::call(&mut svc, req).await }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, svc)
        .await;
}
