//! Configuration over xDS: an xDS server of the test's own (the Aggregated Discovery Service,
//! state of the world, as Envoy Gateway's controller serves envoyproxy/ratelimit) on a free
//! loopback port, the `funnel-server` binary subscribed to it. A pushed configuration is
//! served; a changed one is served while calls keep flowing; a broken one is NACKed and the
//! one in force stays; a closed stream or an absent server is retried; the environment
//! variables of envoyproxy/ratelimit start it; the health waits for a configuration when
//! asked to.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::proto::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use crate::common::proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use crate::common::proto::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use crate::common::*;
/// The type of the resources served (envoyproxy/ratelimit's `RateLimitConfig`).
const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// What the test's xDS server serves and has seen.
#[derive(Default)]
struct Seen {
    /// Every request of every stream, in arrival order, with its stream's number.
    requests: Vec<(usize, DiscoveryRequest)>,
    /// The `x-tenant` header of each stream.
    tenants: Vec<Option<String>>,
}

#[derive(Clone)]
struct Ads {
    /// The version and resources served; a change is pushed to every stream.
    snapshot: watch::Sender<(String, Vec<RateLimitConfig>)>,
    /// Set to end every open stream with UNAVAILABLE (the client must come back).
    close: watch::Sender<u64>,
    seen: Arc<Mutex<Seen>>,
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = ResponseStream;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<ResponseStream>, Status> {
        let tenant = request
            .metadata()
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let stream_no = {
            let mut seen = self.seen.lock().unwrap();
            seen.tenants.push(tenant);
            seen.tenants.len()
        };
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(4);
        let ads = self.clone();
        tokio::spawn(async move {
            let mut snapshot = ads.snapshot.subscribe();
            let mut close = ads.close.subscribe();
            close.borrow_and_update();
            let mut nonce = 0u64;
            // A request (the subscription, then the ACK or NACK of each response) before
            // each response, as a state-of-the-world server reads them.
            loop {
                let request = tokio::select! {
                    r = inbound.message() => r,
                    _ = close.changed() => {
                        let _ = tx.send(Err(Status::unavailable("the test closes the stream"))).await;
                        return;
                    }
                };
                let Ok(Some(request)) = request else { return };
                ads.seen.lock().unwrap().requests.push((stream_no, request));
                if nonce > 0 {
                    tokio::select! {
                        r = snapshot.changed() => if r.is_err() { return },
                        _ = close.changed() => {
                            let _ = tx.send(Err(Status::unavailable("the test closes the stream"))).await;
                            return;
                        }
                    }
                }
                let (version, configs) = snapshot.borrow_and_update().clone();
                nonce += 1;
                let response = DiscoveryResponse {
                    version_info: version,
                    resources: configs.iter().map(any).collect(),
                    type_url: TYPE_URL.into(),
                    nonce: format!("{stream_no}-{nonce}"),
                    ..Default::default()
                };
                if tx.send(Ok(response)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

fn any(c: &RateLimitConfig) -> prost_types::Any {
    prost_types::Any {
        type_url: TYPE_URL.into(),
        value: c.encode_to_vec(),
    }
}

impl Ads {
    /// Serves on `addr` (port 0: a free one); the address bound.
    async fn serve(&self, addr: SocketAddr) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let bound = listener.local_addr().unwrap();
        let service = AggregatedDiscoveryServiceServer::new(self.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
        });
        bound
    }

    fn new(version: &str, configs: Vec<RateLimitConfig>) -> Ads {
        Ads {
            snapshot: watch::channel((version.to_owned(), configs)).0,
            close: watch::channel(0).0,
            seen: Arc::default(),
        }
    }

    fn push(&self, version: &str, configs: Vec<RateLimitConfig>) {
        self.snapshot.send_replace((version.to_owned(), configs));
    }

    fn requests(&self) -> Vec<(usize, DiscoveryRequest)> {
        self.seen.lock().unwrap().requests.clone()
    }

    /// Waits (at most 20 s) for the first request that `matches`.
    async fn wait_request(
        &self,
        what: &str,
        matches: impl Fn(&DiscoveryRequest) -> bool,
    ) -> DiscoveryRequest {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some((_, r)) = self.requests().into_iter().find(|(_, r)| matches(r)) {
                return r;
            }
            assert!(Instant::now() < end, "no {what}: {:#?}", self.requests());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The ACK or NACK of the response with `nonce`.
    async fn reply(&self, nonce: &str) -> DiscoveryRequest {
        self.wait_request(&format!("reply to nonce {nonce}"), |r| {
            r.response_nonce == nonce
        })
        .await
    }

    /// The ACK of `version`, on whichever stream.
    async fn ack(&self, version: &str) -> DiscoveryRequest {
        self.wait_request(&format!("ACK of {version}"), |r| {
            !r.response_nonce.is_empty() && r.version_info == version && r.error_detail.is_none()
        })
        .await
    }
}

/// A domain of one descriptor `key` limited to `per_minute`, named `name`.
fn domain(name: &str, domain: &str, key: &str, per_minute: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: name.into(),
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            key: key.into(),
            rate_limit: Some(RateLimitPolicy {
                unit: RateLimitUnit::Minute as i32,
                requests_per_unit: per_minute,
                ..Default::default()
            }),
            ..Default::default()
        }],
    }
}

/// A background domain the flowing calls use: never limited within the test.
fn background() -> RateLimitConfig {
    domain("background", "flow", "caller", 1_000_000)
}

/// Starts the binary with `args` and `env` (and nothing of the test's own environment that
/// would choose a configuration), waiting for its listening line.
fn start(args: &[&str], env: &[(&str, &str)]) -> Result<Server, String> {
    let mut cmd = Server::command(None, args);
    cmd.env("RUST_LOG", "info,funnel_server::xds=debug");
    for (k, _) in std::env::vars() {
        if k.starts_with("CONFIG_") || k.starts_with("XDS_") || k.ends_with("_INITIAL_CONFIG") {
            cmd.env_remove(k);
        }
    }
    cmd.env_remove("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED");
    cmd.envs(env.iter().copied());
    Server::launch(cmd, scratch("xds").join("stderr"))
}

/// Waits (at most 20 s) until `calls` reaches `n`.
async fn flowed(calls: &AtomicU64, n: u64) {
    let end = Instant::now() + Duration::from_secs(20);
    while calls.load(Ordering::Relaxed) < n {
        assert!(Instant::now() < end, "the calls stopped flowing");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How many of `n` calls for `domain`/`key`=`value` are allowed, and the limit reported.
async fn allowed(s: &Server, domain: &str, key: &str, value: &str, n: usize) -> (usize, u32) {
    let mut c = s.client().await;
    let mut ok = 0;
    let mut limit = 0;
    for _ in 0..n {
        let r = call(&mut c, req(domain, vec![desc(&[(key, value)])])).await;
        if r.overall_code == OK {
            ok += 1;
        }
        if let Some(l) = r.statuses[0].current_limit.as_ref() {
            limit = l.requests_per_unit;
        }
    }
    (ok, limit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_configurations_are_served_acked_and_a_broken_one_nacked() {
    let ads = Ads::new("1", vec![domain("edge", "edge", "client", 3), background()]);
    let addr = ads.serve("127.0.0.1:0".parse().unwrap()).await;
    let url = format!("http://{addr}");
    let s = start(
        &[
            "--xds",
            &url,
            "--xds-node-id",
            "funnel-test",
            "--xds-node-metadata",
            "zone=a,tier=edge",
            "--xds-headers",
            "x-tenant:blue",
        ],
        &[],
    )
    .unwrap();

    // The listening line comes after the first configuration: it is served from the first call.
    assert_eq!(allowed(&s, "edge", "client", "a", 5).await, (3, 3));
    let first = ads.requests()[0].1.clone();
    let node = first.node.as_ref().expect("the node is sent");
    assert_eq!(node.id, "funnel-test");
    let meta = &node.metadata.as_ref().unwrap().fields;
    let text = |k: &str| match &meta[k].kind {
        Some(prost_types::value::Kind::StringValue(v)) => v.clone(),
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!((text("zone"), text("tier")), ("a".into(), "edge".into()));
    assert_eq!(first.type_url, TYPE_URL);
    assert_eq!(
        (first.version_info.as_str(), first.response_nonce.as_str()),
        ("", "")
    );
    assert!(
        first.resource_names.is_empty(),
        "every resource of the type"
    );
    assert_eq!(ads.seen.lock().unwrap().tenants, [Some("blue".to_owned())]);
    let ack = ads.reply("1-1").await;
    assert_eq!(ack.version_info, "1");
    assert!(ack.error_detail.is_none(), "{ack:?}");
    assert_eq!(
        ack.node.as_ref().unwrap().id,
        "funnel-test",
        "every request names the node"
    );

    // Calls flow on the background domain through every push below.
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failures) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut flow = Vec::new();
    for t in 0..2 {
        let mut c = s.client().await;
        let (stop, calls, failures) = (stop.clone(), calls.clone(), failures.clone());
        flow.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = c
                    .should_rate_limit(req("flow", vec![desc(&[("caller", &t.to_string())])]))
                    .await;
                if matches!(&r, Ok(r) if r.get_ref().overall_code == OK) {
                    calls.fetch_add(1, Ordering::Relaxed);
                } else {
                    // Stop at the first: a failing call may return at once, and a loop that
                    // never waits would hold its worker thread for good.
                    failures.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }));
    }
    // A changed configuration: served once ACKed, while the calls flow.
    flowed(&calls, 50).await;
    ads.push("2", vec![domain("edge", "edge", "client", 5), background()]);
    let ack = ads.reply("1-2").await;
    assert_eq!(ack.version_info, "2");
    assert!(ack.error_detail.is_none(), "{ack:?}");
    assert_eq!(allowed(&s, "edge", "client", "b", 7).await, (5, 5));
    s.wait_metric("ratelimit_service_config_load_success_total", 2);

    // A broken one (a counted rule without a unit): NACKed with the version in force and
    // why, and the version in force still answers.
    let mut broken = domain("edge", "edge", "client", 1);
    broken.descriptors[0].rate_limit.as_mut().unwrap().unit = RateLimitUnit::Unknown as i32;
    let before = calls.load(Ordering::Relaxed);
    flowed(&calls, before + 50).await;
    ads.push("3", vec![broken, background()]);
    let nack = ads.reply("1-3").await;
    assert_eq!(nack.version_info, "2", "a NACK keeps the version in force");
    let why = nack.error_detail.expect("a NACK says why").message;
    assert!(
        why.contains("xDS resource \"edge\"") && why.contains("unit"),
        "{why}"
    );
    s.wait_metric("ratelimit_service_config_load_error_total", 1);
    assert_eq!(allowed(&s, "edge", "client", "c", 7).await, (5, 5));

    // Two resources of one domain: refused as two files of one domain are.
    ads.push(
        "4",
        vec![
            domain("a", "edge", "client", 9),
            domain("b", "edge", "other", 9),
            background(),
        ],
    );
    let nack = ads.reply("1-4").await;
    assert_eq!(nack.version_info, "2");
    let why = nack.error_detail.expect("a NACK says why").message;
    assert!(
        why.contains("already defined in xDS resource \"a\""),
        "{why}"
    );
    s.wait_metric("ratelimit_service_config_load_error_total", 2);

    // And a good one after them is taken.
    ads.push("5", vec![domain("edge", "edge", "client", 2), background()]);
    let ack = ads.reply("1-5").await;
    assert_eq!(ack.version_info, "5");
    assert!(ack.error_detail.is_none(), "{ack:?}");
    assert_eq!(allowed(&s, "edge", "client", "d", 4).await, (2, 2));

    let before = calls.load(Ordering::Relaxed);
    flowed(&calls, before + 50).await;
    stop.store(true, Ordering::Relaxed);
    for t in flow {
        t.await.unwrap();
    }
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "no call failed or was limited"
    );
    let log = s.log();
    assert!(log.contains("configuration rejected"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_server_and_a_closed_stream_are_retried() {
    // A free port with nothing on it yet.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{addr}");
    let ads = Ads::new("1", vec![domain("edge", "edge", "client", 2)]);
    let starting = std::thread::spawn(move || {
        start(
            &[
                "--xds",
                &url,
                "--xds-backoff-initial",
                "100ms",
                "--xds-backoff-max",
                "200ms",
            ],
            &[],
        )
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !starting.is_finished(),
        "no listening line before a configuration"
    );
    ads.serve(addr).await;
    let s = starting.join().unwrap().unwrap();
    assert_eq!(allowed(&s, "edge", "client", "a", 3).await, (2, 2));
    assert!(s.log().contains("xDS stream failed"), "{}", s.log());

    // The server ends the stream; the client comes back on a new one, saying what it has.
    ads.push("2", vec![domain("edge", "edge", "client", 4)]);
    ads.ack("2").await;
    ads.close.send_modify(|n| *n += 1);
    let end = Instant::now() + Duration::from_secs(20);
    while !ads.requests().iter().any(|(stream, _)| *stream == 2) {
        assert!(Instant::now() < end, "no second stream: {}", s.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ads.push("3", vec![domain("edge", "edge", "client", 6)]);
    ads.ack("3").await;
    let requests = ads.requests();
    let (second_stream, resubscribe) = requests
        .iter()
        .find(|(stream, _)| *stream == 2)
        .expect("a second stream");
    assert_eq!(*second_stream, 2);
    assert_eq!(
        resubscribe.version_info, "2",
        "the version in force, on a new stream"
    );
    assert_eq!(resubscribe.response_nonce, "", "no nonce of another stream");
    assert_eq!(allowed(&s, "edge", "client", "b", 8).await, (6, 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoyproxy_environment_starts_it_and_health_waits_for_a_domain() {
    let ads = Ads::new("empty", vec![]);
    let addr = ads.serve("127.0.0.1:0".parse().unwrap()).await;
    let target = addr.to_string();
    let s = start(
        &[],
        &[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", &target),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "team=edge"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms"),
        ],
    )
    .unwrap();
    let ack = ads.ack("empty").await;
    assert_eq!(ack.node.as_ref().unwrap().id, "envoy-ratelimit");
    assert_eq!(s.get("/healthcheck").0, 503, "no domain yet");
    ads.push("1", vec![domain("edge", "edge", "client", 1)]);
    ads.ack("1").await;
    let end = Instant::now() + Duration::from_secs(10);
    while s.get("/healthcheck").0 != 200 {
        assert!(Instant::now() < end, "healthy once a domain is in force");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(allowed(&s, "edge", "client", "a", 2).await, (1, 1));
    // Back to no domain: unhealthy again.
    ads.push("2", vec![]);
    ads.ack("2").await;
    let end = Instant::now() + Duration::from_secs(10);
    while s.get("/healthcheck").0 != 503 {
        assert!(Instant::now() < end, "unhealthy with no domain");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn a_missing_or_doubled_source_and_bad_settings_refuse_the_start() {
    let refused = |args: &[&str], env: &[(&str, &str)], says: &str| {
        let e = start(args, env)
            .err()
            .unwrap_or_else(|| panic!("{args:?} {env:?} started"));
        assert!(e.contains(says), "{args:?} {env:?}: {e}");
    };
    refused(&[], &[], "--config");
    refused(&[], &[("CONFIG_TYPE", "KUBERNETES")], "CONFIG_TYPE");
    refused(&["--xds", "unix:///tmp/x"], &[], "host:port");
    refused(
        &["--xds", "127.0.0.1:1", "--xds-node-metadata", "k1:v1"],
        &[],
        "key=value",
    );
    refused(
        &[
            "--xds",
            "127.0.0.1:1",
            "--xds-tls-ca",
            "/nonexistent/ca.pem",
        ],
        &[],
        "TLS",
    );
    refused(
        &[
            "--xds",
            "https://127.0.0.1:1",
            "--xds-tls-ca",
            "/nonexistent/ca.pem",
        ],
        &[],
        "/nonexistent/ca.pem",
    );
    refused(
        &["--xds", "127.0.0.1:1"],
        &[("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "soon")],
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_to_the_xds_server_as_envoy_gateway_runs_it() {
    let dir = scratch("xds-tls");
    let Some(ca) = funnel_testkit::certificates::Authority::new(&dir, "ca") else {
        return;
    };
    ca.server("server", &["IP:127.0.0.1", "DNS:xds.test"]);
    ca.client("client", &["DNS:funnel-server"]);
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let tls = tonic::transport::ServerTlsConfig::new()
        .identity(tonic::transport::Identity::from_pem(
            read("server.crt"),
            read("server.key"),
        ))
        .client_ca_root(tonic::transport::Certificate::from_pem(read("ca.crt")));
    let ads = Ads::new("1", vec![domain("edge", "edge", "client", 2)]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = AggregatedDiscoveryServiceServer::new(ads.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
    });
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let target = addr.to_string();

    // Without a client certificate the server refuses the handshake: nothing is subscribed.
    let refused = start(
        &[
            "--xds",
            &format!("https://{addr}"),
            "--xds-tls-ca",
            &path("ca.crt"),
            "--force-start-without-initial-config",
            "--xds-backoff-initial",
            "100ms",
        ],
        &[],
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while !refused.log().contains("xDS stream failed") {
        assert!(Instant::now() < end, "{}", refused.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        ads.requests().is_empty(),
        "no stream without a client certificate"
    );
    drop(refused);

    // Envoy Gateway's settings: host:port, TLS on, the client's pair and the CA.
    let s = start(
        &[],
        &[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", &target),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", &path("client.crt")),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", &path("client.key")),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", &path("ca.crt")),
            ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.test"),
        ],
    )
    .unwrap();
    assert_eq!(allowed(&s, "edge", "client", "a", 3).await, (2, 2));
    ads.ack("1").await;
}
