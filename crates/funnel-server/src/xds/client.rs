//! The state-of-the-world subscription: one ADS stream
//! (`AggregatedDiscoveryService.StreamAggregatedResources`) asking for every resource of
//! [`TYPE_URL`], each response loaded whole and swapped in, then ACKed (its version and nonce)
//! or NACKed (the version still in force, its nonce, and why in `error_detail`); on any end of
//! the stream or failure to connect, a wait ([`Backoff`](super::Backoff)) and a new stream.
//!
//! Every request carries the node, as envoyproxy/ratelimit's client sends it. The first
//! request of a new stream carries the version in force and no nonce (a nonce names a
//! response of its own stream).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::resource::{self, TYPE_URL};
use super::settings::XdsOptions;
use crate::decide::Decider;
use crate::proto::envoy::config::core::v3::{node, Node};
use crate::proto::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use crate::proto::google::rpc::Status;

/// The gRPC code a NACK's `error_detail` carries: the configuration is not valid.
const INVALID_ARGUMENT: i32 = 3;

/// What the subscription has done so far, for the start and the health checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Responses processed (ACKed or NACKed).
    pub responses: u64,
    /// The domains of the xDS configuration in force; `None` before the first one loaded.
    pub domains: Option<usize>,
}

/// Runs the subscription for good, reporting to `progress`.
pub async fn subscribe(opts: XdsOptions, decider: Arc<Decider>, progress: watch::Sender<Progress>) {
    let mut state = State::default();
    let mut attempt = 0u32;
    loop {
        let before = state.responses;
        let ended = session(&opts, &mut state, &decider, &progress).await;
        if state.responses > before {
            // The stream was working: start the waits over.
            attempt = 0;
        }
        let wait = opts.backoff.delay(attempt, random_unit());
        attempt = attempt.saturating_add(1);
        match ended {
            Ok(()) => {
                tracing::warn!(server = %opts.url, ?wait, "the xDS server closed the stream; reconnecting")
            }
            Err(e) => {
                tracing::error!(server = %opts.url, error = %e, ?wait, "xDS stream failed; reconnecting")
            }
        }
        tokio::time::sleep(wait).await;
    }
}

/// What outlives one stream.
#[derive(Default)]
struct State {
    /// The version of the last response ACKed.
    version: String,
    /// Responses processed, over every stream.
    responses: u64,
}

/// The endpoint of the xDS server, TLS files read now (so a rotated certificate is taken at
/// the next connection). An error is a setting that cannot work.
pub fn endpoint(opts: &XdsOptions) -> Result<Endpoint, String> {
    let mut endpoint = Endpoint::from_shared(opts.url.clone())
        .map_err(|e| format!("xDS server {}: {e}", opts.url))?
        .connect_timeout(std::time::Duration::from_secs(10))
        .tcp_nodelay(true)
        // A server gone without a word is noticed within a minute, and the stream redone.
        .http2_keep_alive_interval(std::time::Duration::from_secs(30))
        .keep_alive_timeout(std::time::Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if let Some(tls) = &opts.tls {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        };
        let mut config = ClientTlsConfig::new();
        config = match &tls.ca {
            Some(ca) => config.ca_certificate(Certificate::from_pem(read(ca)?)),
            None => config.with_native_roots(),
        };
        if let Some((cert, key)) = &tls.identity {
            config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(name) = &tls.server_name {
            config = config.domain_name(name.clone());
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| format!("TLS to the xDS server: {e}"))?;
    }
    Ok(endpoint)
}

async fn session(
    opts: &XdsOptions,
    state: &mut State,
    decider: &Decider,
    progress: &watch::Sender<Progress>,
) -> Result<(), String> {
    let channel: Channel = endpoint(opts)?
        .connect()
        .await
        .map_err(|e| format!("cannot connect: {}", chain(&e)))?;
    tracing::info!(server = %opts.url, node = %opts.node_id, "connected to the xDS server");
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    if let Some(n) = opts.max_message_bytes {
        client = client.max_decoding_message_size(n);
    }
    // One request waits at most: each is sent only after the response it answers.
    let (requests, outbound) = mpsc::channel::<DiscoveryRequest>(2);
    let node = node_of(opts);
    let send = |request: DiscoveryRequest| {
        let requests = requests.clone();
        async move {
            requests
                .send(request)
                .await
                .map_err(|_| "the stream closed".to_owned())
        }
    };
    send(DiscoveryRequest {
        version_info: state.version.clone(),
        node: Some(node.clone()),
        type_url: TYPE_URL.into(),
        ..Default::default()
    })
    .await?;
    let mut call = tonic::Request::new(ReceiverStream::new(outbound));
    for (k, v) in &opts.headers {
        call.metadata_mut().insert(k.clone(), v.clone());
    }
    let mut inbound = client
        .stream_aggregated_resources(call)
        .await
        .map_err(|s| format!("the server refused the stream: {s}"))?
        .into_inner();
    loop {
        let response = match inbound.message().await {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(s) => return Err(format!("the stream ended: {s}")),
        };
        let reply = handle(&response, state, decider, progress).await;
        send(DiscoveryRequest {
            node: Some(node.clone()),
            type_url: TYPE_URL.into(),
            ..reply
        })
        .await?;
    }
}

/// Loads one response; the ACK or NACK to send back (node and type left to the caller).
async fn handle(
    response: &DiscoveryResponse,
    state: &mut State,
    decider: &Decider,
    progress: &watch::Sender<Progress>,
) -> DiscoveryRequest {
    let origin = format!("xDS version {:?}", response.version_info);
    let loaded = resource::load(&response.resources);
    if let Err(e) = &loaded {
        tracing::debug!(error = %e, documents = ?response.resources.iter().filter_map(|a| resource::decode(a).ok()).map(|c| resource::document(&c)).collect::<Vec<_>>(), "the refused resources, as the loader read them");
    }
    let outcome = crate::reload::apply(decider, loaded, &origin).await;
    state.responses += 1;
    let reply = match &outcome {
        Ok(_) => {
            state.version = response.version_info.clone();
            DiscoveryRequest {
                version_info: response.version_info.clone(),
                response_nonce: response.nonce.clone(),
                ..Default::default()
            }
        }
        Err(e) => DiscoveryRequest {
            version_info: state.version.clone(),
            response_nonce: response.nonce.clone(),
            error_detail: Some(Status {
                code: INVALID_ARGUMENT,
                message: e.clone(),
                details: Vec::new(),
            }),
            ..Default::default()
        },
    };
    progress.send_modify(|p| {
        p.responses = state.responses;
        if let Ok(domains) = outcome {
            p.domains = Some(domains);
        }
    });
    reply
}

fn node_of(opts: &XdsOptions) -> Node {
    let fields = opts
        .node_metadata
        .iter()
        .map(|(k, v)| {
            let value = prost_types::Value {
                kind: Some(prost_types::value::Kind::StringValue(v.clone())),
            };
            (k.clone(), value)
        })
        .collect();
    Node {
        id: opts.node_id.clone(),
        metadata: Some(prost_types::Struct { fields }),
        user_agent_name: "funnel-server".into(),
        user_agent_version_type: Some(node::UserAgentVersionType::UserAgentVersion(
            env!("CARGO_PKG_VERSION").into(),
        )),
        ..Default::default()
    }
}

/// An error with its sources, which tonic's transport errors keep the cause in.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// A number in [0, 1) for the backoff's jitter, from the standard library's per-process
/// random hash keys (no generator needs to be good for spreading reconnections).
fn random_unit() -> f64 {
    let bits = RandomState::new().build_hasher().finish() >> 11;
    // 53 bits of an f64's mantissa.
    bits as f64 / (1u64 << 53) as f64
}
