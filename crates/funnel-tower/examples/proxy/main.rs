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
//! `--recent-clock <interval>` decides on `funnel::clock::RecentClock` (a time one thread
//! refreshes every interval) instead of the exact clock. It is rarely worth it here: the clock
//! read it saves is a few nanoseconds a decision, against tens of microseconds for the HTTP
//! round trip around it, and it lets a limit admit up to one interval's worth of requests more
//! than exact. It pays where decisions are most of the work: an in-process loop deciding tens of
//! millions of requests a second.

mod cli;
mod forward;

use std::path::PathBuf;
use std::time::Duration;

use funnel::clock::{Clock, QuantaClock, RecentClock};
use funnel::Timestamp;
use funnel_tower::{PeerAddr, RateLimitLayer};
use http::Request;
use hyper::body::Incoming;
use tower_layer::Layer;

use forward::{accept, bind, refuse, serve, Forward};

/// This binary's name in what it prints.
const NAME: &str = "proxy";

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
                           write it there atomically on SIGTERM before exiting
    --recent-clock <d>     decide on a time refreshed every <d> (<n>us | <n>ms, 10us to 1000ms)
                           instead of reading the clock per request: saves a few ns a decision,
                           admits up to <d>'s worth of each limit's rate more than exact; not
                           worth it beside an HTTP round trip (see the example's docs)
    -h, --help             this text
";

/// The flags only this proxy takes.
#[derive(Default)]
struct Own {
    /// `--state`: where the limits' state is loaded from at start and saved on SIGTERM.
    state: Option<PathBuf>,
    /// `--recent-clock <interval>`.
    recent_clock: Option<Duration>,
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
    let restored = own.state.as_ref().map(|path| keep_state(path, &layer));
    let listener = bind(NAME, args.listen).await;
    let local = listener.local_addr().unwrap_or(args.listen);
    let clock_note = own
        .recent_clock
        .map(|d| format!(", recent clock every {d:?}"));
    cli::say_listening(NAME, local, &args, clock_note.as_deref().unwrap_or(""));
    if let Some(restored) = restored {
        eprintln!("{restored}");
    }
    accept(NAME, listener, |io, peer| {
        // The layer reads the peer address from the request's extensions.
        let tag = move |req: &mut Request<Incoming>| {
            req.extensions_mut().insert(PeerAddr(peer));
        };
        tokio::spawn(serve(io, layer.layer(forward.clone()), tag));
    })
    .await
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
