//! A small reverse proxy with funnel's layer in front of one upstream.
//!
//! ```sh
//! cargo run --release -p funnel-tower --example proxy -- \
//!     --listen 127.0.0.1:8080 --upstream http://127.0.0.1:9000 \
//!     --limit "ip=10/1s,burst=20" --limit "route=1000/60s"
//! ```
//!
//! Run with `--help` for every flag; the `--limit` syntax is in `funnel_tower::spec`. The
//! flags and the forwarding are in `cli.rs` and `forward.rs`, which the lab's load-test proxy
//! shares.
//!
//! On SIGTERM or SIGINT the proxy stops as a load balancer expects: it closes its listener (a
//! new connection is refused), lets the requests in flight be answered for at most
//! `--drain-timeout` seconds (idle keep-alive connections close at once; a second signal stops
//! the wait), then saves the limits' state with `--state`, so that the saved debts include the
//! requests it drained, and exits 0.
//!
//! `--recent-clock <interval>` decides on `funnel::clock::RecentClock` (a time one thread
//! refreshes every interval) instead of the exact clock. It is rarely worth it here: the clock
//! read it saves is a few nanoseconds a decision, against tens of microseconds for the HTTP
//! round trip around it, and it lets a limit admit up to one interval's worth of requests more
//! than exact. It pays where decisions are most of the work: an in-process loop deciding tens of
//! millions of requests a second.

mod cli;
mod forward;

use std::path::{Path, PathBuf};
use std::time::Duration;

use funnel::clock::{Clock, QuantaClock, RecentClock};
use funnel::Timestamp;
use funnel_tower::{PeerAddr, RateLimitLayer};
use http::Request;
use hyper::body::Incoming;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tower_layer::Layer;

use forward::{accept, bind, refuse, serve, Forward};

/// This binary's name in what it prints.
const NAME: &str = "proxy";

/// How long a stop waits for the requests in flight without `--drain-timeout`: less than the
/// grace period process managers give before they kill (systemd's and Kubernetes' default
/// is 30 s), more than a slow upstream answer takes.
const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// The longest `--drain-timeout`: a drain longer than an hour is a hang.
const MAX_DRAIN_SECS: u64 = 3600;

const USAGE: &str = "\
proxy: a reverse proxy to one upstream, rate-limited by funnel

USAGE:
    proxy --upstream <http://host:port> [--listen <addr:port>] [--limit <spec>]... [options]

OPTIONS:
";

/// The flags only this proxy takes.
const OWN_OPTIONS: &str = "    \
    --state <path>         keep debts across restarts: load the limits' state from <path> at
                           start (a missing or unusable file: start empty, and say why), and
                           write it there atomically when stopped (SIGTERM, SIGINT), after
                           the drain, before exiting
    --drain-timeout <s>    on SIGTERM or SIGINT, stop accepting and wait at most <s> whole
                           seconds (default 10, at most 3600) for the requests in flight to
                           be answered before exiting; idle connections close at once; 0 cuts
                           them without waiting; a second signal stops the wait
    --recent-clock <d>     decide on a time refreshed every <d> (<n>us | <n>ms, 10us to 1000ms)
                           instead of reading the clock per request: saves a few ns a decision,
                           admits up to <d>'s worth of each limit's rate more than exact; not
                           worth it beside an HTTP round trip (see the example's docs)
    -h, --help             this text
";

/// The flags only this proxy takes.
#[derive(Default)]
struct Own {
    /// `--state`: where the limits' state is loaded from at start and saved at the stop.
    state: Option<PathBuf>,
    /// `--recent-clock <interval>`.
    recent_clock: Option<Duration>,
    /// `--drain-timeout <secs>`; [`DEFAULT_DRAIN`] without it.
    drain: Option<Duration>,
}

/// The command line: the shared flags, this proxy's own, and the layer's builder.
fn parse_args() -> Result<(cli::Args, Own, funnel_tower::Builder), String> {
    let mut own = Own::default();
    let help = format!("{USAGE}{}{OWN_OPTIONS}", cli::OPTIONS);
    let args = cli::parse(std::env::args().skip(1), &help, |flag, it| {
        match flag {
            "--state" => own.state = Some(cli::value(it, "--state")?.into()),
            "--recent-clock" => {
                let v = cli::value(it, "--recent-clock")?;
                own.recent_clock = Some(
                    parse_interval(&v)
                        .ok_or(format!("--recent-clock {v:?}: expected <n>us or <n>ms"))?,
                );
            }
            "--drain-timeout" => {
                let v = cli::value(it, "--drain-timeout")?;
                own.drain = Some(parse_drain(&v).ok_or(format!(
                    "--drain-timeout {v:?}: expected whole seconds, 0 to {MAX_DRAIN_SECS}"
                ))?);
            }
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if args.limits.is_empty() {
        return Err("give at least one --limit (see --help)".into());
    }
    let builder = cli::layer(&args)?;
    Ok((args, own, builder))
}

/// `250us`, `1ms`: the recent clock's interval (its range is checked when it starts).
fn parse_interval(v: &str) -> Option<Duration> {
    let (n, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = n.parse().ok()?;
    match unit {
        "us" => Some(Duration::from_micros(n)),
        "ms" => Some(Duration::from_millis(n)),
        _ => None,
    }
}

/// `30`: the drain's bound, whole seconds up to [`MAX_DRAIN_SECS`].
fn parse_drain(v: &str) -> Option<Duration> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None; // `parse` would take a leading `+`
    }
    let secs: u64 = v.parse().ok()?;
    (secs <= MAX_DRAIN_SECS).then(|| Duration::from_secs(secs))
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
    let (args, own, builder) = parse_args().unwrap_or_else(|e| refuse(NAME, e));
    let clock = match own.recent_clock.map(RecentClock::with_interval) {
        None => ProxyClock::Exact(QuantaClock::new()),
        Some(Ok(c)) => ProxyClock::Recent(c),
        Some(Err(e)) => refuse(NAME, format!("--recent-clock: {e}")),
    };
    let layer = builder
        .build_with_clock(clock)
        .unwrap_or_else(|e| refuse(NAME, e));
    let forward = Forward::new(args.upstream.clone(), std::convert::identity);
    // Printed after the line that says where the proxy listens, which comes first.
    let restored = own.state.as_ref().map(|path| restore(path, &layer));
    // Installed before the proxy says it listens, so a signal that follows that line is never
    // the default one, which ends the process without a drain or a save.
    let mut signals = Signals::install();
    let listener = bind(NAME, args.listen).await;
    let local = listener.local_addr().unwrap_or(args.listen);
    let clock_note = own
        .recent_clock
        .map(|d| format!(", recent clock every {d:?}"));
    cli::say_listening(NAME, local, &args, clock_note.as_deref().unwrap_or(""));
    if let Some(restored) = restored {
        eprintln!("{restored}");
    }
    let stop = async {
        let name = signals.next().await;
        eprintln!("proxy: {name}: no new connections");
    };
    let open = accept(NAME, listener, stop, |io, peer, watcher| {
        // The layer reads the peer address from the request's extensions.
        let tag = move |req: &mut Request<Incoming>| {
            req.extensions_mut().insert(PeerAddr(peer));
        };
        tokio::spawn(serve(io, layer.layer(forward.clone()), tag, watcher));
    })
    .await;
    drain(open, own.drain.unwrap_or(DEFAULT_DRAIN), &mut signals).await;
    // After the drain, not at the signal: a request whose head was still arriving then is
    // decided during the drain, and its debt belongs in the file.
    if let Some(path) = &own.state {
        save(path, &layer);
    }
    // Exiting here, not by returning: what the drain cut is dropped with the process rather
    // than waited for by the runtime's shutdown.
    std::process::exit(0)
}

/// SIGTERM and SIGINT, handled from [`Signals::install`] on.
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    /// Installs both handlers, or says why not and exits 1.
    fn install() -> Signals {
        let install = |kind: SignalKind, name: &str| {
            signal(kind).unwrap_or_else(|e| {
                eprintln!("proxy: cannot handle {name}: {e}");
                std::process::exit(1);
            })
        };
        Signals {
            term: install(SignalKind::terminate(), "SIGTERM"),
            int: install(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// The next of either signal; its name.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Lets the connections still `open` finish the requests they are answering, for at most
/// `timeout` or until another signal; an idle one closes at once. What is still open then is
/// cut when the process exits.
async fn drain(open: GracefulShutdown, timeout: Duration, signals: &mut Signals) {
    let count = open.count();
    if timeout.is_zero() {
        eprintln!("proxy: --drain-timeout 0: cutting {count} connection(s)");
        return;
    }
    eprintln!(
        "proxy: draining {count} connection(s) for at most {}s",
        timeout.as_secs()
    );
    tokio::select! {
        drained = tokio::time::timeout(timeout, open.shutdown()) => match drained {
            Ok(()) => eprintln!("proxy: drained"),
            Err(_) => eprintln!(
                "proxy: drain timeout after {}s: cutting what is still open",
                timeout.as_secs()
            ),
        },
        name = signals.next() => eprintln!("proxy: {name} again: cutting what is still open"),
    }
}

/// `--state` at start: loads the saved state into `layer` (before any request); what the load
/// found, as a line to print.
fn restore<C: Clock + Clone + 'static>(path: &Path, layer: &RateLimitLayer<C>) -> String {
    match layer.restore_state_from(path) {
        Ok(keys) => format!("proxy: restored {keys} key(s) from {}", path.display()),
        Err(funnel_tower::Error::State(funnel::SnapshotError::Io(e)))
            if e.kind() == std::io::ErrorKind::NotFound =>
        {
            format!(
                "proxy: no saved state at {}: starting empty",
                path.display()
            )
        }
        Err(e) => format!(
            "proxy: cannot restore {}: {e}; starting empty",
            path.display()
        ),
    }
}

/// `--state` at the stop: writes the limits' state to `path`, or says why not and exits 1.
fn save<C: Clock + Clone + 'static>(path: &Path, layer: &RateLimitLayer<C>) {
    match layer.save_state_to(path) {
        Ok(keys) => eprintln!("proxy: state saved to {} ({keys} key(s))", path.display()),
        Err(e) => {
            eprintln!("proxy: cannot save {}: {e}", path.display());
            std::process::exit(1);
        }
    }
}
