//! The HTTP side: `GET /healthcheck`, `GET /metrics` (Prometheus' exposition), and `POST /json`, the
//! same decision as gRPC with the request and response in proto3 JSON (200 when allowed, 429
//! when over the limit, 400 for a request refused as invalid), and `/forward-auth/<domain>`
//! for nginx, Caddy and Traefik ([`crate::forward_auth`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;

use crate::decide::Decider;
use crate::json::{request_from_json, response_to_json};
use crate::limits::MAX_REQUEST_BYTES;
use crate::proto::rate_limit_response::Code;

/// What the routes share.
#[derive(Clone)]
pub(crate) struct Http {
    /// The decisions.
    pub(crate) decider: Arc<Decider>,
    /// Set on SIGTERM: the health check fails so that load balancers stop sending.
    pub(crate) draining: Arc<AtomicBool>,
    /// The forward-auth file (`--forward-auth`), if given.
    pub(crate) forward_auth: Option<Arc<crate::forward_auth::Settings>>,
    /// Set while no configuration is in force and one is required to be healthy (xDS with
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
    pub(crate) config_missing: Arc<AtomicBool>,
}

/// The router.
pub(crate) fn router(state: Http) -> Router {
    Router::new()
        .route("/healthcheck", get(health))
        .route("/metrics", get(metrics))
        .route("/json", post(json))
        .route("/forward-auth/{domain}", any(forward_auth))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(state)
}

async fn health(State(s): State<Http>) -> Response {
    // Acquire: pairs with the Release store of the shutdown path.
    if s.draining.load(Ordering::Acquire) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response()
    } else if s.config_missing.load(Ordering::Acquire) {
        // Acquire: pairs with the Release stores of the server's health follower.
        (StatusCode::SERVICE_UNAVAILABLE, "no configuration\n").into_response()
    } else {
        (StatusCode::OK, "OK\n").into_response()
    }
}

async fn metrics(State(s): State<Http>) -> Response {
    exposition(&s.decider)
}

fn exposition(decider: &Arc<Decider>) -> Response {
    let body = crate::metrics::render(decider);
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body).into_response()
}

/// The Prometheus listener of its own (`USE_PROMETHEUS`): the exposition at `path` alone.
pub(crate) fn metrics_router(decider: Arc<Decider>, path: &str) -> Router {
    Router::new()
        .route(
            path,
            get(|State(d): State<Arc<Decider>>| async move { exposition(&d) }),
        )
        .with_state(decider)
}

async fn forward_auth(State(s): State<Http>, Path(domain): Path<String>, req: Request) -> Response {
    crate::forward_auth::answer(&s.decider, s.forward_auth.as_deref(), &domain, req).await
}

async fn json(State(s): State<Http>, body: Bytes) -> Response {
    let req = match request_from_json(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    match s.decider.decide(&req).await {
        Ok(r) => {
            let code = if r.overall_code == Code::OverLimit as i32 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (
                code,
                [(header::CONTENT_TYPE, "application/json")],
                response_to_json(&r),
            )
                .into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    }
}
