//! The server: configuration loaded (from files, or subscribed to over xDS), gRPC and HTTP
//! bound (gRPC on a Unix socket, over TLS, when asked; the debug and Prometheus listeners
//! when asked), reload watched, statistics sent to statsd when asked, and on
//! SIGTERM or SIGINT the health checks turned to failing, in-flight calls drained, and a clean
//! exit.
//!
//! Every accepted connection gets `TCP_NODELAY`: a response written in more than one segment
//! (gRPC's headers, message and trailers) would otherwise wait for the client's delayed
//! acknowledgement before its last segment leaves, stalling the call by the client's
//! delayed-ACK timer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt as _;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::UnixClock;
use crate::config::Config;
use crate::connection_age::ConnectionAge;
use crate::decide::Decider;
use crate::error::Error;
use crate::grpc::Service;
use crate::grpc_listener::Bound;
use crate::grpc_tls::GrpcTls;
use crate::limits::MAX_REQUEST_BYTES;
use crate::proto::rate_limit_service_server::RateLimitServiceServer;
use crate::rules::{RedisSettings, Registry};
use crate::statsd::Statsd;
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
#[non_exhaustive]
pub struct Options {
    /// The configuration's source.
    pub source: Source,
    /// The gRPC address.
    pub grpc: SocketAddr,
    /// A Unix domain socket for gRPC instead of `grpc` (envoyproxy/ratelimit's `GRPC_UDS`).
    pub grpc_uds: Option<PathBuf>,
    /// gRPC over TLS, mutual when a client CA is given.
    pub grpc_tls: Option<GrpcTls>,
    /// The HTTP address (`/healthcheck`, `/metrics`, `POST /json`), if any.
    pub http: Option<SocketAddr>,
    /// The debug address (`/rlconfig`, `/stats`), if any.
    pub debug: Option<SocketAddr>,
    /// A Prometheus listener of its own: its address and the path of the exposition.
    pub prometheus: Option<(SocketAddr, String)>,
    /// Statistics sent to statsd.
    pub statsd: Option<Statsd>,
    /// Fleet mode.
    pub redis: Option<RedisSettings>,
    /// Keys per rule's table at most.
    pub max_keys: usize,
    /// Write `RateLimit-Policy`/`RateLimit` into `response_headers_to_add`.
    pub response_headers: bool,
    /// envoyproxy/ratelimit's answer switches (shadow and quota modes, limit headers, dynamic
    /// metadata, charging denied requests).
    pub answers: crate::answers::Answers,
    /// Watch the configuration's files and reload them.
    pub watch: bool,
    /// Merge the files that name the same domain instead of refusing the second
    /// (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`).
    pub merge_domain_config: bool,
    /// Decide on funnel's recent clock refreshed at this interval instead of reading the
    /// monotonic clock per decision (`--recent-clock`).
    pub recent_clock: Option<Duration>,
    /// The forward-auth file (`--forward-auth`): the endpoint's actions per domain.
    pub forward_auth: Option<PathBuf>,
    /// Close gRPC connections once this old (envoyproxy/ratelimit's
    /// `GRPC_MAX_CONNECTION_AGE`); none: never.
    pub connection_age: Option<ConnectionAge>,
}

impl Options {
    /// The options of a server taking its configuration from `source`, with gRPC on `grpc`
    /// and nothing else: no HTTP, no statistics sent, in process, no reload.
    pub fn new(source: Source, grpc: SocketAddr) -> Options {
        Options {
            source,
            grpc,
            grpc_uds: None,
            grpc_tls: None,
            http: None,
            debug: None,
            prometheus: None,
            statsd: None,
            redis: None,
            max_keys: 1 << 20,
            response_headers: false,
            answers: crate::answers::Answers::default(),
            watch: false,
            merge_domain_config: false,
            recent_clock: None,
            forward_auth: None,
            connection_age: None,
        }
    }
}

/// A task serving one listener until told to stop.
type Listener = (&'static str, JoinHandle<Result<(), Error>>);

/// Runs until SIGTERM or SIGINT (Ctrl-C where there are no signals).
///
/// # Errors
///
/// When it cannot start (the configuration, an address, the statsd server), or when a
/// listener fails while serving.
pub async fn run(opts: Options) -> Result<(), Error> {
    let config = match &opts.source {
        Source::Files(path) => {
            Config::load(path, opts.merge_domain_config).map_err(Error::Config)?
        }
        // Nothing until the xDS server sends it.
        Source::Xds(_) => Config::default(),
    };
    let forward_auth = match &opts.forward_auth {
        Some(p) => Some(Arc::new(
            crate::forward_auth::Settings::load(p).map_err(Error::ForwardAuth)?,
        )),
        None => None,
    };
    // Checked before anything binds; the watcher swaps the certificate while it lives.
    let (grpc_tls, _certificate_watcher) = match &opts.grpc_tls {
        Some(tls) => {
            let (acceptor, watcher) = crate::grpc_tls::acceptor(tls).map_err(Error::GrpcTls)?;
            (Some(acceptor), Some(watcher))
        }
        None => (None, None),
    };
    let clock = match opts.recent_clock {
        None => UnixClock::new(),
        Some(interval) => {
            UnixClock::recent(interval).map_err(|source| Error::Clock { interval, source })?
        }
    };
    let registry = Registry::new(clock, opts.max_keys, opts.redis.clone());
    let rules = registry.compile(&config).await.map_err(Error::Rules)?;
    let decider = Arc::new(
        Decider::new(rules, registry, opts.response_headers).with_answers(opts.answers.clone()),
    );
    let _watcher = match &opts.source {
        Source::Files(path) => {
            decider
                .stats()
                .config_load_success
                .fetch_add(1, Ordering::Relaxed);
            if opts.watch {
                Some(
                    crate::reload::watch(decider.clone(), path.clone(), opts.merge_domain_config)
                        .map_err(Error::Watch)?,
                )
            } else {
                None
            }
        }
        Source::Xds(_) => None,
    };
    // Set while the health checks must fail for want of a configuration (xDS only).
    let config_missing = Arc::new(AtomicBool::new(false));
    let subscription = match &opts.source {
        Source::Xds(xds) => match subscribe(xds, &decider, &config_missing)
            .await
            .map_err(Error::Xds)?
        {
            // Followed only when the health depends on the configuration.
            Some(progress) => Some(progress).filter(|_| xds.healthy_needs_domains),
            // Stopped by a signal before the first configuration came.
            None => return Ok(()),
        },
        Source::Files(_) => None,
    };
    let statsd = match &opts.statsd {
        Some(s) => {
            Some(
                crate::statsd::connect(&s.target)
                    .await
                    .map_err(|source| Error::Statsd {
                        target: s.target.clone(),
                        source,
                    })?,
            )
        }
        None => None,
    };

    let grpc = match &opts.grpc_uds {
        Some(path) => crate::grpc_listener::bind_unix(path).map_err(|source| Error::BindUnix {
            path: path.clone(),
            source,
        })?,
        None => Bound::Tcp(bind("gRPC", opts.grpc).await?),
    };
    let grpc_addr = grpc.describe().map_err(|source| Error::Serve {
        listener: "gRPC",
        source: Box::new(source),
    })?;
    let http = bind_some("HTTP", opts.http).await?;
    let debug = bind_some("debug", opts.debug).await?;
    let prometheus = bind_some("Prometheus", opts.prometheus.as_ref().map(|p| p.0)).await?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let draining = Arc::new(AtomicBool::new(false));
    let (health, health_service) = tonic_health::server::health_reporter();
    // Acquire: pairs with the Release stores of `subscribe` and the health follower below.
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
    let mut builder = tonic::transport::Server::builder();
    // The GOAWAY at the age is tonic's; the close after the grace is `Aged`'s (see
    // connection_age.rs for why tonic is not given the grace).
    let mut lifetime = None;
    if let Some(age) = opts.connection_age {
        let max = age.spread();
        builder = builder.max_connection_age(max);
        lifetime = age.grace.map(|grace| max + grace);
    }
    let router = builder.add_service(health_service).add_service(service);
    if grpc_tls.is_some() {
        let mutual = opts
            .grpc_tls
            .as_ref()
            .is_some_and(|t| t.client_ca.is_some());
        tracing::info!(mutual, "gRPC over TLS");
    }
    let grpc_task = tokio::spawn(async move {
        crate::grpc_listener::serve(router, grpc, grpc_tls, lifetime, async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
        .map_err(|e| Error::Serve {
            listener: "gRPC",
            source: Box::new(e),
        })
    });
    let mut listeners: Vec<Listener> = vec![("gRPC", grpc_task)];
    let mut line = format!("funnel-server listening grpc={grpc_addr}");
    if let Some(listener) = http {
        line.push_str(&format!(" http={}", local_addr("HTTP", &listener)?));
        let state = crate::http::Http {
            decider: decider.clone(),
            draining: draining.clone(),
            forward_auth: forward_auth.clone(),
            config_missing: config_missing.clone(),
        };
        listeners.push(serve_http(
            "HTTP",
            listener,
            crate::http::router(state),
            &stop_rx,
        ));
    } else {
        line.push_str(" http=-");
    }
    if let Some(listener) = debug {
        line.push_str(&format!(" debug={}", local_addr("debug", &listener)?));
        listeners.push(serve_http(
            "debug",
            listener,
            crate::debug::router(decider.clone()),
            &stop_rx,
        ));
    }
    if let (Some(listener), Some((_, path))) = (prometheus, &opts.prometheus) {
        line.push_str(&format!(
            " prometheus={}",
            local_addr("Prometheus", &listener)?
        ));
        listeners.push(serve_http(
            "Prometheus",
            listener,
            crate::http::metrics_router(decider.clone(), path),
            &stop_rx,
        ));
    }
    let statsd_task = match (statsd, &opts.statsd) {
        (Some(socket), Some(settings)) => Some(crate::statsd::spawn(
            socket,
            settings.clone(),
            decider.clone(),
            stop_rx.clone(),
        )),
        _ => None,
    };

    // The line tests and scripts wait for: the addresses actually bound.
    println!("{line}");
    tracing::info!(%grpc_addr, domains = decider.rules().domains.len(), "serving");

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
    for (listener, task) in listeners {
        match task.await {
            Ok(result) => result?,
            Err(e) => {
                return Err(Error::Serve {
                    listener,
                    source: Box::new(e),
                })
            }
        }
    }
    if let Some(task) = statsd_task {
        // The last flush: what moved since the previous one.
        let _ = task.await;
    }
    tracing::info!("stopped");
    Ok(())
}

async fn bind(listener: &'static str, addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr).await.map_err(|source| Error::Bind {
        listener,
        addr,
        source,
    })
}

async fn bind_some(
    listener: &'static str,
    addr: Option<SocketAddr>,
) -> Result<Option<TcpListener>, Error> {
    match addr {
        Some(a) => bind(listener, a).await.map(Some),
        None => Ok(None),
    }
}

fn local_addr(listener: &'static str, l: &TcpListener) -> Result<SocketAddr, Error> {
    // The address was bound a moment ago; reading it back fails only if the socket did.
    l.local_addr().map_err(|source| Error::Serve {
        listener,
        source: Box::new(source),
    })
}

/// Serves `router` on `listener` with `TCP_NODELAY` on every connection, until `stop`.
fn serve_http(
    name: &'static str,
    listener: TcpListener,
    router: Router,
    stop: &watch::Receiver<bool>,
) -> Listener {
    let mut stop = stop.clone();
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
    });
    let task = tokio::spawn(async move {
        // With the peer's address: the forward-auth endpoint keys on it.
        let app = router.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
            .map_err(|e| Error::Serve {
                listener: name,
                source: Box::new(e),
            })
    });
    (name, task)
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

/// SIGTERM (what Kubernetes sends) or SIGINT.
#[cfg(unix)]
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

/// Ctrl-C (or the console's close) where there are no Unix signals.
#[cfg(not(unix))]
async fn shutdown_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
