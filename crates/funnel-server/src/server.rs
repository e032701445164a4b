//! The server: configuration loaded, gRPC and HTTP bound, reload watched, and on SIGTERM or
//! SIGINT the health checks turned to failing, in-flight calls drained, and a clean exit.

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

/// How the server runs (the command line's options).
#[derive(Clone, Debug)]
pub struct Options {
    /// A YAML file or a directory of them.
    pub config: PathBuf,
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
    /// envoyproxy/ratelimit's answer switches (shadow and quota modes, limit headers, dynamic
    /// metadata, charging denied requests).
    pub answers: crate::answers::Answers,
    /// Watch the configuration and reload it.
    pub watch: bool,
    /// Merge the files that name the same domain instead of refusing the second
    /// (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`).
    pub merge_domain_config: bool,
    /// Decide on funnel's recent clock refreshed at this interval instead of reading the
    /// monotonic clock per decision (`--recent-clock`).
    pub recent_clock: Option<std::time::Duration>,
    /// The forward-auth file (`--forward-auth`): the endpoint's actions per domain.
    pub forward_auth: Option<PathBuf>,
}

/// Runs until SIGTERM or SIGINT; errors only when it cannot start.
pub async fn run(opts: Options) -> Result<(), String> {
    let config = Config::load(&opts.config, opts.merge_domain_config).map_err(|e| e.to_string())?;
    let forward_auth = match &opts.forward_auth {
        Some(p) => Some(Arc::new(
            crate::forward_auth::Settings::load(p).map_err(|e| e.to_string())?,
        )),
        None => None,
    };
    let clock = match opts.recent_clock {
        None => UnixClock::new(),
        Some(interval) => {
            UnixClock::recent(interval).map_err(|e| format!("--recent-clock {interval:?}: {e}"))?
        }
    };
    let registry = Registry::new(clock, opts.max_keys, opts.redis.clone());
    let rules = registry.compile(&config).await.map_err(|e| e.to_string())?;
    let decider = Arc::new(
        Decider::new(rules, registry, opts.response_headers).with_answers(opts.answers.clone()),
    );
    decider
        .stats
        .config_load_success
        .fetch_add(1, Ordering::Relaxed);
    let _watcher = if opts.watch {
        Some(crate::reload::watch(
            decider.clone(),
            opts.config.clone(),
            opts.merge_domain_config,
        )?)
    } else {
        None
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
    health
        .set_serving::<RateLimitServiceServer<Service>>()
        .await;

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
            forward_auth: forward_auth.clone(),
        };
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            // The peer's address: the forward-auth endpoint keys on it.
            let app =
                crate::http::router(state).into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app)
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
    tracing::info!(%grpc_addr, ?http_addr, domains = config.domains.len(), "serving");

    shutdown_signal().await;
    tracing::info!("shutting down: draining in-flight calls");
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
