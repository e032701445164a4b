//! `funnel-loadgen`: a gRPC load generator for funnel-server's `ShouldRateLimit`, and the
//! no-decision floor. Built with `cargo build --release -p funnel-lab --example funnel-loadgen`
//! (`target/release/examples/funnel-loadgen`).
//!
//! * `funnel-loadgen floor --grpc ADDR`: a server answering every call OK without deciding,
//!   the transport's floor to compare funnel-server with.
//! * `funnel-loadgen run --target ADDR ...`: N concurrent calls over M connections, bounded
//!   by a count of calls; prints decisions/s and p50/p99/p99.9 latency, and with `--metrics`
//!   the server's Redis round trips during the run (read from its `/metrics`).
//!
//! By default each of the N callers sends its next call as soon as the last is answered (a
//! closed loop: the server's saturation throughput, and the tail at saturation). With
//! `--rate R` the calls leave on a schedule, R a second in all (an open loop: two servers'
//! tails compared at the same load). A caller whose previous call overran its next call's
//! scheduled time measures that call from the scheduled time, so a stall counts for every
//! call it delayed (no coordinated omission); a call the timer woke late, after a previous call
//! that finished in time, is measured from when it was sent.
//!
//! The key mix: `--abusive-percent` of the calls go to `--abusive-keys` hot keys (which the
//! limit soon denies), the rest spread over `--keys` keys.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use proto::rate_limit_descriptor::Entry;
use proto::rate_limit_response::Code;
use proto::rate_limit_service_client::RateLimitServiceClient;
use proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint};

mod proto;

#[derive(Parser)]
#[command(about = "Load for Envoy's rate-limit service, and the no-decision floor")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve ShouldRateLimit answering OK without deciding.
    Floor {
        #[arg(long, default_value = "127.0.0.1:8091")]
        grpc: SocketAddr,
    },
    /// Send calls and report throughput and latency.
    Run(Run),
}

/// `funnel-loadgen run`'s flags.
#[derive(clap::Args)]
struct Run {
    /// The server's gRPC address.
    #[arg(long, default_value = "127.0.0.1:8081")]
    target: SocketAddr,
    /// Connections (HTTP/2), calls spread over them.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Calls in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Calls in all (the run's bound).
    #[arg(long, default_value_t = 200_000)]
    requests: u64,
    /// Calls before measuring.
    #[arg(long, default_value_t = 10_000)]
    warmup: u64,
    /// The domain.
    #[arg(long, default_value = "bench")]
    domain: String,
    /// The descriptor key.
    #[arg(long, default_value = "client")]
    key: String,
    /// Distinct well-behaved values.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Hot values.
    #[arg(long, default_value_t = 10)]
    abusive_keys: u64,
    /// Percent of calls for the hot values.
    #[arg(long, default_value_t = 0)]
    abusive_percent: u64,
    /// The server's HTTP address, to read its Redis round trips before and after.
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// Calls per second in all, sent on a schedule (an open loop) instead of each as soon as
    /// the last is answered; the warm-up is not paced.
    #[arg(long, value_parser = parse_rate)]
    rate: Option<f64>,
}

/// A positive, finite rate.
fn parse_rate(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|r| r.is_finite() && *r > 0.0)
        .ok_or_else(|| format!("expected calls per second above 0, got {v:?}"))
}

struct Floor;

#[tonic::async_trait]
impl RateLimitService for Floor {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let n = request.get_ref().descriptors.len();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: (0..n)
                .map(|_| proto::rate_limit_response::DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }))
    }
}

/// A SplitMix64 step: the key stream's generator.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The Redis counters of the server's `/metrics`: (round trips, timeouts).
fn redis_counters(addr: SocketAddr) -> Option<(u64, u64)> {
    let mut s = TcpStream::connect(addr).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let read = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((
        read("funnel_server_redis_round_trips_total")?,
        read("funnel_server_redis_timeouts_total")?,
    ))
}

async fn run(args: Run) -> Result<(), String> {
    let Run {
        target,
        connections,
        concurrency,
        requests,
        warmup,
        domain,
        key,
        keys,
        abusive_keys,
        abusive_percent,
        metrics,
        rate,
    } = args;
    let mut channels: Vec<Channel> = Vec::new();
    for _ in 0..connections.max(1) {
        // TCP_NODELAY: a request's frames leave at once, not after the server's delayed ACK.
        let ch = Endpoint::new(format!("http://{target}"))
            .map_err(|e| e.to_string())?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {target}: {e}"))?;
        channels.push(ch);
    }
    let make = Arc::new(move |r: u64| -> RateLimitRequest {
        let value = if r % 100 < abusive_percent {
            format!("hot-{}", (r / 100) % abusive_keys.max(1))
        } else {
            format!("user-{}", (r / 100) % keys.max(1))
        };
        RateLimitRequest {
            domain: domain.clone(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: key.clone(),
                    value,
                }],
                ..Default::default()
            }],
            hits_addend: 1,
        }
    });
    let phase = |total: u64, record: bool| {
        let channels = channels.clone();
        let make = make.clone();
        async move {
            let callers = concurrency.max(1);
            let per = total / callers as u64;
            // Open loop: caller t sends its calls `callers / rate` seconds apart, the callers
            // staggered so that the calls leave evenly spread.
            let pace = rate.filter(|_| record).map(|r| {
                let interval = Duration::from_secs_f64(callers as f64 / r);
                (interval, Instant::now())
            });
            let mut tasks = Vec::new();
            for t in 0..callers {
                let mut client = RateLimitServiceClient::new(channels[t % channels.len()].clone());
                let make = make.clone();
                tasks.push(tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(if record { per as usize } else { 0 });
                    let (mut ok, mut over, mut failed) = (0u64, 0u64, 0u64);
                    let mut rng = t as u64 + 1;
                    let mut due =
                        pace.map(|(interval, t0)| t0 + interval.mul_f64(t as f64 / callers as f64));
                    for _ in 0..per {
                        let r = make(next(&mut rng));
                        let start = match (due, pace) {
                            (Some(at), Some((interval, _))) => {
                                due = Some(at + interval);
                                if Instant::now() < at {
                                    tokio::time::sleep_until(at.into()).await;
                                    Instant::now()
                                } else {
                                    // The previous call overran this one's slot: the wait
                                    // counts.
                                    at
                                }
                            }
                            _ => Instant::now(),
                        };
                        match client.should_rate_limit(r).await {
                            Ok(resp) if resp.get_ref().overall_code == Code::Ok as i32 => ok += 1,
                            Ok(_) => over += 1,
                            Err(_) => failed += 1,
                        }
                        if record {
                            lat.push(start.elapsed().as_nanos() as u64);
                        }
                    }
                    (lat, ok, over, failed)
                }));
            }
            let mut all = Vec::new();
            let (mut ok, mut over, mut failed) = (0, 0, 0);
            for t in tasks {
                let (l, o, v, f) = t.await.expect("a load task");
                all.extend(l);
                ok += o;
                over += v;
                failed += f;
            }
            (all, ok, over, failed)
        }
    };
    phase(warmup, false).await;
    let trips_before = metrics.and_then(redis_counters);
    let start = Instant::now();
    let (mut lat, ok, over, failed) = phase(requests, true).await;
    let elapsed = start.elapsed();
    let trips_after = metrics.and_then(redis_counters);
    lat.sort_unstable();
    let pct = |p: f64| -> Duration {
        if lat.is_empty() {
            return Duration::ZERO;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        Duration::from_nanos(lat[i])
    };
    let n = lat.len() as f64;
    println!(
        "calls={} ok={ok} over={over} failed={failed} decisions/s={:.0} p50={:?} p99={:?} p99.9={:?}",
        lat.len(),
        n / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        pct(0.999)
    );
    if let (Some((a, ta)), Some((b, tb))) = (trips_before, trips_after) {
        println!(
            "redis_round_trips={} per_call={:.3} redis_timeouts={}",
            b - a,
            (b - a) as f64 / n,
            tb - ta
        );
    }
    if failed > 0 {
        return Err(format!("{failed} calls failed"));
    }
    Ok(())
}

/// Serves the floor until Ctrl-C. Binds before printing, so the line names the port actually
/// bound (port 0 picks a free one, which scripts read from the line).
async fn floor(grpc: SocketAddr) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(grpc)
        .await
        .map_err(|e| format!("cannot bind gRPC to {grpc}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("funnel-loadgen floor listening grpc={bound}");
    // TCP_NODELAY on every accepted connection, as funnel-server sets it, so that the floor
    // and the server are measured on the same transport.
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Floor))
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await
        .map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // The lab's dependencies turn on tracing's `log` feature, which, while no subscriber is
    // set, forwards every span of tonic and h2 to `log` on each call: work funnel-server (whose
    // subscriber filters those spans out) does not do. A subscriber that takes nothing keeps
    // the floor's transport the same as the server's. Fails only if one is already set.
    let _ = tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
    let result = match Args::parse().cmd {
        Cmd::Floor { grpc } => floor(grpc).await,
        Cmd::Run(args) => run(args).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("funnel-loadgen: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
