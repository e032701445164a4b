//! A small reverse proxy with funnel's layer in front of one upstream.
//!
//! ```sh
//! cargo run --release -p funnel-tower --example proxy -- \
//!     --listen 127.0.0.1:8080 --upstream http://127.0.0.1:9000 \
//!     --limit "ip=10/1s,burst=20" --limit "route=1000/60s"
//! ```
//!
//! Run with `--help` for every flag; the `--limit` syntax is in `funnel_tower::spec`.
//!
//! `--recent-clock <interval>` decides on `funnel::clock::RecentClock` (a time one thread
//! refreshes every interval) instead of the exact clock. It is rarely worth it here: the clock
//! read it saves is a few nanoseconds a decision, against tens of microseconds for the HTTP
//! round trip around it, and it lets a limit admit up to one interval's worth of requests more
//! than exact. It pays where decisions are most of the work: an in-process loop deciding tens of
//! millions of requests a second.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use funnel::clock::{Clock, QuantaClock, RecentClock};
use funnel::Timestamp;
use funnel_tower::spec::parse_limit;
use funnel_tower::{Net, PeerAddr, RateLimitLayer, Report};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower_layer::Layer;

const HELP: &str = "\
proxy: a reverse proxy to one upstream, rate-limited by funnel

USAGE:
    proxy --upstream <http://host:port> [--listen <addr:port>] [--limit <spec>]... [options]

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
    --exempt-path <path>   requests under this path pass unlimited (whole segments: /health
                           exempts /health/db, not /healthz; a path with a dot segment or an
                           encoded slash is never exempt); repeatable
    --shadow               evaluate and count, add headers, never reject
    --legacy-headers       X-RateLimit-Limit/Remaining/Reset instead of RateLimit-Policy/RateLimit
    --closest              RateLimit headers for the policy closest to its limit only
    --state <path>         keep debts across restarts: load the limits' state from <path> at
                           start (a missing or unusable file: start empty, and say why), and
                           write it there atomically on SIGTERM before exiting
    --recent-clock <d>     decide on a time refreshed every <d> (<n>us | <n>ms, 10us to 1000ms)
                           instead of reading the clock per request: saves a few ns a decision,
                           admits up to <d>'s worth of each limit's rate more than exact; not
                           worth it beside an HTTP round trip (see the example's docs)
    -h, --help             this text
";

struct Args {
    listen: SocketAddr,
    upstream: Uri,
    limits: Vec<String>,
    trusted: Vec<Net>,
    exempt_paths: Vec<String>,
    shadow: bool,
    report: Report,
    /// `--state`: where the limits' state is loaded from at start and saved on SIGTERM.
    state: Option<std::path::PathBuf>,
    /// `--recent-clock <interval>`.
    recent_clock: Option<std::time::Duration>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut args = Args {
        listen: "127.0.0.1:8080".parse().expect("a valid default"),
        upstream: Uri::default(),
        limits: Vec::new(),
        trusted: Vec::new(),
        exempt_paths: Vec::new(),
        shadow: false,
        report: Report::All,
        state: None,
        recent_clock: None,
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
            "--exempt-path" => args.exempt_paths.push(value("--exempt-path")?),
            "--shadow" => args.shadow = true,
            "--legacy-headers" => args.report = Report::Legacy,
            "--closest" => args.report = Report::Closest,
            "--state" => args.state = Some(value("--state")?.into()),
            "--recent-clock" => {
                let v = value("--recent-clock")?;
                args.recent_clock = Some(
                    parse_interval(&v)
                        .ok_or(format!("--recent-clock {v:?}: expected <n>us or <n>ms"))?,
                );
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    args.upstream = upstream.ok_or("--upstream is required (see --help)")?;
    if args.limits.is_empty() {
        return Err("give at least one --limit (see --help)".into());
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
        // Only a path is forwarded: `OPTIONS *` and `CONNECT host:port` name no resource of
        // the upstream, and the client's error, not the upstream's (a 400, not a 502).
        let path = match parts.uri.path_and_query() {
            Some(p) if p.as_str().starts_with('/') => Some(p.as_str()),
            _ if parts.uri.scheme().is_some() => Some("/"), // `http://host` without a path
            _ => None,
        };
        let uri = path.map(|path| {
            format!(
                "http://{}{}",
                self.upstream.authority().map_or("", |a| a.as_str()),
                path
            )
        });
        let client = self.client.clone();
        Box::pin(async move {
            match uri.map(|u| u.parse()) {
                Some(Ok(uri)) => parts.uri = uri,
                _ => return Ok(status(StatusCode::BAD_REQUEST)),
            }
            match client.request(Request::from_parts(parts, body)).await {
                Ok(resp) => Ok(resp.map(|b| b.boxed())),
                Err(_) => Ok(status(StatusCode::BAD_GATEWAY)),
            }
        })
    }
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

/// `250us`, `1ms`: the recent clock's interval (its range is checked when it starts).
fn parse_interval(v: &str) -> Option<std::time::Duration> {
    let (n, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = n.parse().ok()?;
    match unit {
        "us" => Some(std::time::Duration::from_micros(n)),
        "ms" => Some(std::time::Duration::from_millis(n)),
        _ => None,
    }
}

/// The layer's clock: exact by default, the recent clock with `--recent-clock`.
#[derive(Clone, Debug)]
enum ProxyClock {
    Exact(QuantaClock),
    Recent(RecentClock),
}

impl Clock for ProxyClock {
    #[inline]
    fn now(&self) -> Timestamp {
        match self {
            ProxyClock::Exact(c) => c.now(),
            ProxyClock::Recent(c) => c.now(),
        }
    }
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("proxy: {e}");
            std::process::exit(2);
        }
    };
    let mut builder = RateLimitLayer::builder()
        .shadow(args.shadow)
        .report(args.report);
    for path in &args.exempt_paths {
        builder = builder.exempt_path(path.clone());
    }
    for spec in &args.limits {
        match parse_limit(spec, &args.trusted) {
            Ok(p) => builder = builder.policy(p.name, p.key, p.quota),
            Err(e) => {
                eprintln!("proxy: {e}");
                std::process::exit(2);
            }
        }
    }
    let forward = Forward {
        client: Client::builder(TokioExecutor::new()).build_http(),
        upstream: args.upstream.clone(),
    };
    let clock = match args.recent_clock.map(RecentClock::with_interval) {
        None => ProxyClock::Exact(QuantaClock::new()),
        Some(Ok(c)) => ProxyClock::Recent(c),
        Some(Err(e)) => {
            eprintln!("proxy: --recent-clock: {e}");
            std::process::exit(2);
        }
    };
    let layer = match builder.build_with_clock(clock) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("proxy: {e}");
            std::process::exit(2);
        }
    };
    // Printed after the line that says where the proxy listens, which comes first.
    let restored = args.state.as_ref().map(|path| keep_state(path, &layer));
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("proxy: cannot listen on {}: {e}", args.listen);
            std::process::exit(1);
        }
    };
    let local = listener.local_addr().unwrap_or(args.listen);
    eprintln!(
        "proxy: listening on {local} -> {} ({} limit(s){}{})",
        args.upstream,
        args.limits.len(),
        if args.shadow { ", shadow" } else { "" },
        args.recent_clock
            .map(|d| format!(", recent clock every {d:?}"))
            .unwrap_or_default()
    );
    if let Some(restored) = restored {
        eprintln!("{restored}");
    }
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors (or another transient error): retrying at once
                // would spin a core until a connection closes.
                eprintln!("proxy: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(stream);
        // The layer reads the peer address from the request's extensions.
        let tag = move |req: &mut Request<Incoming>| {
            req.extensions_mut().insert(PeerAddr(peer));
        };
        tokio::spawn(serve(io, layer.layer(forward.clone()), tag));
    }
}

/// `--state`: loads the saved state into `layer` (before any request), and saves it on SIGTERM,
/// then exits; what the load found, as a line to print. The handler is installed before the
/// proxy says it listens, so a SIGTERM that follows that line is never the default one that
/// exits without saving.
fn keep_state<C: Clock + Clone + Send + Sync + 'static>(
    path: &std::path::Path,
    layer: &RateLimitLayer<C>,
) -> String {
    let restored = match layer.restore_state_from(path) {
        Ok(keys) => format!("proxy: restored {keys} key(s) from {}", path.display()),
        Err(funnel_tower::Error::State(funnel::Error::SnapshotIo {
            kind: std::io::ErrorKind::NotFound,
            ..
        })) => format!(
            "proxy: no saved state at {}: starting empty",
            path.display()
        ),
        Err(e) => format!(
            "proxy: cannot restore {}: {e}; starting empty",
            path.display()
        ),
    };
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("proxy: cannot handle SIGTERM: {e}");
            std::process::exit(1);
        }
    };
    let (path, layer) = (path.to_owned(), layer.clone());
    tokio::spawn(async move {
        term.recv().await;
        match layer.save_state_to(&path) {
            Ok(keys) => {
                eprintln!("proxy: saved {keys} key(s) to {}", path.display());
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("proxy: cannot save {}: {e}", path.display());
                std::process::exit(1);
            }
        }
    });
    restored
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
