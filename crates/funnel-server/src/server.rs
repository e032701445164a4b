//! The server: configuration loaded (from files, or subscribed to over xDS), gRPC and HTTP
//! bound, reload watched, and on SIGTERM or SIGINT the health checks turned to failing,
//! in-flight calls drained, and a clean exit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_stream::wrappers::TcpListenerStream;

use crate::clock::UnixClock;
use crate::config::Config;
use crate::decide::Decider;
use crate::grpc::Service;
use crate::limits::MAX_REQUEST_BYTES;
use crate::proto::rate_limit_service_server::RateLimitServiceServer;
use crate::rules::{RedisSettings, Registry};
use crate::xds::{Progress, XdsOptions};

/// Where the configuration comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A YAML file or a directory of them.
    Files(PathBuf),
    /// An xDS server (`--xds`).
    Xds(Box<XdsOptions>),
}

/// How the server runs (the command line's options).
#[derive(Clone, Debug)]
pub struct Options {
    /// The configuration's source.
    pub source: Source,
    /// The gRPC address.
    pub grpc: SocketAddr,
    /// The HTTP address, if any.
    pub http: Option<SocketAddr>,
    /// Fleet mode.
    pub redis: Option<RedisSettings>,
    /// Keys per rule's table at most.
    pub max_keys: usize,
    /// Write `RateLimit-Policy`/`RateLimit` into `response_headers_to_add`.
    pub response_headers: bool,
    /// Watch the configuration's files and reload them.
    pub watch: bool,
    /// Decide on funnel's recent clock refreshed at this interval instead of reading the
    /// monotonic clock per decision (`--recent-clock`).
    pub recent_clock: Option<std::time::Duration>,
}

/// Runs until SIGTERM or SIGINT; errors only when it cannot start.
pub async fn run(opts: Options) -> Result<(), String> {
    let config = match &opts.source {
        Source::Files(path) => Config::load(path).map_err(|e| e.to_string())?,
        // Nothing until the xDS server sends it.
        Source::Xds(_) => Config::default(),
    };
    let clock = match opts.recent_clock {
        None => UnixClock::new(),
        Some(interval) => {
            UnixClock::recent(interval).map_err(|e| format!("--recent-clock {interval:?}: {e}"))?
        }
    };
    let registry = Registry::new(clock, opts.max_keys, opts.redis.clone());
    let rules = registry.compile(&config).await?;
    let decider = Arc::new(Decider::new(rules, registry, opts.response_headers));
    let _watcher = match &opts.source {
        Source::Files(path) => {
            decider
                .stats
                .config_load_success
                .fetch_add(1, Ordering::Relaxed);
            if opts.watch {
                Some(crate::reload::watch(decider.clone(), path.clone())?)
            } else {
                None
            }
        }
        Source::Xds(_) => None,
    };
    // Set while the health checks must fail for want of a configuration (xDS only).
    let config_missing = Arc::new(AtomicBool::new(false));
    let subscription = match &opts.source {
        Source::Xds(xds) => match subscribe(xds, &decider, &config_missing).await? {
            // Followed only when the health depends on the configuration.
            Some(progress) => Some(progress).filter(|_| xds.healthy_needs_domains),
            // Stopped by a signal before the first configuration came.
            None => return Ok(()),
        },
        Source::Files(_) => None,
    };

    let grpc = TcpListener::bind(opts.grpc)
        .await
        .map_err(|e| format!("cannot bind gRPC to {}: {e}", opts.grpc))?;
    let grpc_addr = grpc.local_addr().map_err(|e| e.to_string())?;
    let http = match opts.http {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .map_err(|e| format!("cannot bind HTTP to {a}: {e}"))?,
        ),
        None => None,
    };
    let http_addr = http.as_ref().and_then(|l| l.local_addr().ok());

    let (stop_tx, stop_rx) = watch::channel(false);
    let draining = Arc::new(AtomicBool::new(false));
    let (health, health_service) = tonic_health::server::health_reporter();
    // Acquire: pairs with the Release stores of the health follower below.
    if config_missing.load(Ordering::Acquire) {
        health
            .set_not_serving::<RateLimitServiceServer<Service>>()
            .await;
    } else {
        health
            .set_serving::<RateLimitServiceServer<Service>>()
            .await;
    }
    let follower = subscription.map(|progress| {
        tokio::spawn(follow_health(
            progress,
            config_missing.clone(),
            health.clone(),
        ))
    });

    let service = RateLimitServiceServer::new(Service::new(decider.clone()))
        .max_decoding_message_size(MAX_REQUEST_BYTES);
    let mut stop = stop_rx.clone();
    let grpc_task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(grpc), async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
    });
    let http_task = http.map(|listener| {
        let state = crate::http::Http {
            decider: decider.clone(),
            draining: draining.clone(),
            config_missing: config_missing.clone(),
        };
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            axum::serve(listener, crate::http::router(state))
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        })
    });

    // The line tests and scripts wait for: the addresses actually bound.
    println!(
        "funnel-server listening grpc={grpc_addr} http={}",
        http_addr.map_or_else(|| "-".to_owned(), |a| a.to_string())
    );
    tracing::info!(%grpc_addr, ?http_addr, domains = decider.rules.load().domains.len(), "serving");

    shutdown_signal().await;
    tracing::info!("shutting down: draining in-flight calls");
    // Stopped first, so that a configuration arriving now cannot turn the health back on.
    if let Some(f) = follower {
        f.abort();
    }
    // Release: the health check's Acquire load sees the drain.
    draining.store(true, Ordering::Release);
    health
        .set_not_serving::<RateLimitServiceServer<Service>>()
        .await;
    let _ = stop_tx.send(true);
    match grpc_task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("gRPC server: {e}")),
        Err(e) => return Err(format!("gRPC server task: {e}")),
    }
    if let Some(t) = http_task {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("HTTP server: {e}")),
            Err(e) => return Err(format!("HTTP server task: {e}")),
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// Starts the xDS subscription; with `wait_for_first`, returns once a first response was
/// processed (`None` if a signal came first). Its progress, for the health checks. The settings are checked before anything
/// binds: a TLS file that cannot be read refuses the start.
async fn subscribe(
    xds: &XdsOptions,
    decider: &Arc<Decider>,
    config_missing: &AtomicBool,
) -> Result<Option<watch::Receiver<Progress>>, String> {
    crate::xds::client::endpoint(xds)?;
    let (progress_tx, mut progress) = watch::channel(Progress::default());
    tokio::spawn(crate::xds::subscribe(
        xds.clone(),
        decider.clone(),
        progress_tx,
    ));
    if xds.wait_for_first {
        tracing::info!(server = %xds.url, "waiting for the first configuration from the xDS server");
        tokio::select! {
            r = progress.wait_for(|p| p.responses > 0) => {
                r.map_err(|_| "the xDS subscription stopped".to_owned())?;
            }
            () = shutdown_signal() => return Ok(None),
        }
    }
    let missing = xds.healthy_needs_domains && progress.borrow().domains.unwrap_or(0) == 0;
    // Release: read by the health checks (Acquire) once the servers are up.
    config_missing.store(missing, Ordering::Release);
    Ok(Some(progress))
}

/// Keeps the health checks failing while no configuration with a domain is in force
/// (`HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`), as each xDS response changes it.
async fn follow_health(
    mut progress: watch::Receiver<Progress>,
    config_missing: Arc<AtomicBool>,
    health: tonic_health::server::HealthReporter,
) {
    while progress.changed().await.is_ok() {
        let missing = progress.borrow_and_update().domains.unwrap_or(0) == 0;
        // Release: pairs with the health checks' Acquire loads.
        config_missing.store(missing, Ordering::Release);
        if missing {
            health
                .set_not_serving::<RateLimitServiceServer<Service>>()
                .await;
        } else {
            health
                .set_serving::<RateLimitServiceServer<Service>>()
                .await;
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
