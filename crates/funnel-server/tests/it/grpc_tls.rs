//! gRPC over TLS and on a Unix domain socket, as envoyproxy/ratelimit serves them
//! (`GRPC_SERVER_USE_TLS`, `GRPC_CLIENT_TLS_CACERT`, `GRPC_CLIENT_TLS_SAN`, `GRPC_UDS`):
//! certificates made by openssl (`funnel_testkit::certificates`), tonic's TLS client. TLS
//! answers and plaintext is refused; mutual TLS refuses a client without a certificate or
//! with one from another CA; the client SAN refuses a certificate without that name; the
//! Unix socket answers; the variables alone start it; bad settings refuse the start by name;
//! a new certificate pair is served without a restart, a broken one logged and not.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use funnel_testkit::certificates::{Authority, Pair};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::common::proto::rate_limit_service_client::RateLimitServiceClient;
use crate::common::*;

/// The name the server certificate carries, besides 127.0.0.1.
const SERVER_NAME: &str = "grpc.test";

/// A CA, the server's pair it signed, and a configuration, in a fresh directory; `None` when
/// openssl is missing (the test is skipped, and says so).
struct Setup {
    dir: PathBuf,
    ca: Authority,
    server: Pair,
    config: PathBuf,
}

fn setup(name: &str) -> Option<Setup> {
    let dir = scratch(name);
    let ca = Authority::new(&dir, "ca")?;
    let server = ca.server("server", &["IP:127.0.0.1", &format!("DNS:{SERVER_NAME}")]);
    let config = write_config(
        &dir,
        "d.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n",
    );
    Some(Setup {
        dir,
        ca,
        server,
        config,
    })
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `--grpc-tls` with the server's pair, then `extra`.
fn tls_args(s: &Setup, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--no-watch".to_owned(),
        "--grpc-tls".into(),
        "--grpc-tls-cert".into(),
        path(&s.server.cert),
        "--grpc-tls-key".into(),
        path(&s.server.key),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    args
}

fn start(s: &Setup, args: &[String]) -> Server {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(&s.config, &args)
}

/// A TLS endpoint at `target` (`https://host:port`) trusting `ca`, presenting
/// `identity` when given.
fn tls(target: &str, ca: &Path, identity: Option<&Pair>) -> Endpoint {
    let mut config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()))
        .domain_name(SERVER_NAME);
    if let Some(pair) = identity {
        config = config.identity(Identity::from_pem(
            std::fs::read(&pair.cert).unwrap(),
            std::fs::read(&pair.key).unwrap(),
        ));
    }
    Endpoint::from_shared(target.to_owned())
        .unwrap()
        .tls_config(config)
        .unwrap()
}

/// One call through `endpoint`: its overall code, or why there was none.
async fn ask(endpoint: Endpoint) -> Result<i32, String> {
    let channel = endpoint
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    call_once(channel).await
}

/// One call over TLS on the Unix socket `socket` (tonic's own `unix:` endpoints have no TLS):
/// a connector that dials the socket, under an `https` endpoint for TLS.
async fn ask_unix(socket: &Path, ca: &Path, identity: Option<&Pair>) -> Result<i32, String> {
    let socket = socket.to_owned();
    let channel = tls(&format!("https://{SERVER_NAME}"), ca, identity)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                tokio::net::UnixStream::connect(socket)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    call_once(channel).await
}

async fn call_once(channel: tonic::transport::Channel) -> Result<i32, String> {
    let mut client = RateLimitServiceClient::new(channel);
    client
        .should_rate_limit(req("d", vec![desc(&[("k", "v")])]))
        .await
        .map(|r| r.into_inner().overall_code)
        .map_err(|e| format!("call: {e:?}"))
}

fn https(s: &Server) -> String {
    format!("https://{}", s.grpc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_answers_and_a_plaintext_client_is_refused() {
    let Some(setup) = setup("grpc-tls") else {
        return;
    };
    let s = start(&setup, &tls_args(&setup, &[]));
    assert_eq!(ask(tls(&https(&s), &setup.ca.cert(), None)).await, Ok(OK));
    let plaintext = Endpoint::from_shared(format!("http://{}", s.grpc)).unwrap();
    assert!(ask(plaintext).await.is_err(), "a plaintext call answered");
    // A client trusting another CA refuses the server.
    let other = Authority::new(&setup.dir, "other").unwrap();
    assert!(ask(tls(&https(&s), &other.cert(), None)).await.is_err());
    assert!(!s.log().contains("panicked"), "{}", s.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_requires_a_client_certificate_signed_by_the_ca() {
    let Some(setup) = setup("grpc-mtls") else {
        return;
    };
    let ca = path(&setup.ca.cert());
    let s = start(&setup, &tls_args(&setup, &["--grpc-tls-client-ca", &ca]));
    let good = setup.ca.client("client", &["DNS:envoy.test"]);
    let other_ca = Authority::new(&setup.dir, "other").unwrap();
    let foreign = other_ca.client("foreign", &["DNS:envoy.test"]);
    let url = https(&s);
    let without = ask(tls(&url, &setup.ca.cert(), None)).await;
    assert!(without.is_err(), "answered without a client certificate");
    let from_other = ask(tls(&url, &setup.ca.cert(), Some(&foreign))).await;
    assert!(from_other.is_err(), "answered a certificate of another CA");
    // A certificate of the CA but for servers only (no clientAuth usage), as Go refuses it.
    let server_only = ask(tls(&url, &setup.ca.cert(), Some(&setup.server))).await;
    assert!(server_only.is_err(), "answered a server certificate");
    assert_eq!(ask(tls(&url, &setup.ca.cert(), Some(&good))).await, Ok(OK));
    assert!(
        s.log().contains("gRPC TLS handshake refused"),
        "the refusals are logged:\n{}",
        s.log()
    );
}

/// The server of `s`, requiring a client certificate of its authority with `san` among its
/// names.
fn start_with_san(s: &Setup, san: &str) -> Server {
    let ca = path(&s.ca.cert());
    start(
        s,
        &tls_args(
            s,
            &["--grpc-tls-client-ca", &ca, "--grpc-tls-client-san", san],
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_san_must_be_among_the_certificates_names() {
    let Some(setup) = setup("grpc-san") else {
        return;
    };
    let named = setup
        .ca
        .client("named", &["DNS:other.test", "DNS:envoy.test"]);
    let wildcard = setup.ca.client("wildcard", &["DNS:*.clients.test"]);
    let unnamed = setup.ca.client("unnamed", &["DNS:other.test"]);
    // Go compares URIs never: the name in a URI SAN is not the DNS name.
    let uri = setup.ca.client("uri", &["URI:spiffe://envoy.test/gateway"]);
    let by_ip = setup.ca.client("by-ip", &["IP:127.0.0.2"]);

    let s = start_with_san(&setup, "envoy.test");
    let url = https(&s);
    let cert = setup.ca.cert();
    assert_eq!(ask(tls(&url, &cert, Some(&named))).await, Ok(OK));
    assert!(ask(tls(&url, &cert, Some(&unnamed))).await.is_err());
    assert!(ask(tls(&url, &cert, Some(&uri))).await.is_err());
    assert!(
        s.log().contains("the SAN is not among its names"),
        "{}",
        s.log()
    );

    // A wildcard matches one label; an IP address is compared with the IP SANs only.
    let s = start_with_san(&setup, "edge.clients.test");
    assert_eq!(ask(tls(&https(&s), &cert, Some(&wildcard))).await, Ok(OK));
    let s = start_with_san(&setup, "127.0.0.2");
    assert_eq!(ask(tls(&https(&s), &cert, Some(&by_ip))).await, Ok(OK));
    assert!(ask(tls(&https(&s), &cert, Some(&named))).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_on_a_unix_socket_answers_and_the_socket_goes_at_exit() {
    let dir = scratch("grpc-uds");
    let config = write_config(
        &dir,
        "d.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n",
    );
    let socket = dir.join("rl.sock");
    // A socket file left by a server that is gone is replaced.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let mut s = Server::start(&config, &["--no-watch", "--grpc-uds", &path(&socket)]);
    assert_eq!(s.grpc_uds.as_deref(), Some(socket.as_path()), "{}", s.line);
    let endpoint = Endpoint::from_shared(format!("unix:{}", socket.display())).unwrap();
    assert_eq!(ask(endpoint).await, Ok(OK));

    // One that a server still accepts on is not.
    let second = Server::try_start(&config, &["--no-watch", "--grpc-uds", &path(&socket)]);
    let err = second
        .err()
        .expect("a second server on the same socket refused");
    assert!(err.contains("cannot bind gRPC to the Unix socket"), "{err}");

    s.terminate();
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(!socket.exists(), "the socket file is removed at exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoyproxy_variables_alone_start_mutual_tls_on_a_unix_socket() {
    let Some(setup) = setup("grpc-tls-env") else {
        return;
    };
    let client = setup.ca.client("client", &["DNS:envoy.test"]);
    let runtime = setup.dir.join("runtime");
    std::fs::create_dir_all(runtime.join("rl/config")).unwrap();
    std::fs::copy(&setup.config, runtime.join("rl/config/d.yaml")).unwrap();
    let socket = setup.dir.join("rl.sock");
    let (cert, key, ca, root, sock) = (
        path(&setup.server.cert),
        path(&setup.server.key),
        path(&setup.ca.cert()),
        path(&runtime),
        path(&socket),
    );
    let vars = [
        ("RUNTIME_ROOT", root.as_str()),
        ("RUNTIME_SUBDIRECTORY", "rl"),
        ("USE_STATSD", "false"),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
        ("GRPC_UDS", sock.as_str()),
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", cert.as_str()),
        ("GRPC_SERVER_TLS_KEY", key.as_str()),
        ("GRPC_CLIENT_TLS_CACERT", ca.as_str()),
        ("GRPC_CLIENT_TLS_SAN", "envoy.test"),
    ];
    let command = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_funnel-server"));
        c.env_clear().envs(vars).env("RUST_LOG", "info").args(args);
        c
    };
    let s = Server::launch(command(&[]), setup.dir.join("stderr-env"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.grpc_uds.as_deref(), Some(socket.as_path()), "{}", s.line);
    assert!(ask_unix(&socket, &setup.ca.cert(), None).await.is_err());
    assert_eq!(
        ask_unix(&socket, &setup.ca.cert(), Some(&client)).await,
        Ok(OK)
    );
    drop(s);

    // A flag wins over its variable: --grpc over GRPC_UDS.
    let s = Server::launch(
        command(&["--grpc", "127.0.0.1:0"]),
        setup.dir.join("stderr-flag"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(s.grpc_uds.is_none(), "{}", s.line);
    assert_eq!(
        ask(tls(&https(&s), &setup.ca.cert(), Some(&client))).await,
        Ok(OK)
    );
}

#[test]
fn bad_tls_settings_refuse_the_start_by_name() {
    let Some(setup) = setup("grpc-tls-bad") else {
        return;
    };
    let other = setup.ca.server("other", &["DNS:other.test"]);
    let (cert, key) = (path(&setup.server.cert), path(&setup.server.key));
    let missing = path(&setup.dir.join("missing.pem"));
    let attempt = std::cell::Cell::new(0);
    let refused = |args: &[&str], env: &[(&str, &str)], said: &[&str]| {
        let mut c = Server::command(Some(&setup.config), args);
        c.envs(env.iter().copied());
        attempt.set(attempt.get() + 1);
        let err = Server::launch(c, setup.dir.join(format!("stderr-{}", attempt.get())))
            .err()
            .unwrap_or_else(|| panic!("{args:?} {env:?} started"));
        for s in said {
            assert!(err.contains(s), "{s:?} not in: {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    };
    refused(&["--grpc-tls"], &[], &["--grpc-tls-cert", "--grpc-tls-key"]);
    refused(
        &["--grpc-tls", "--grpc-tls-cert", &cert],
        &[],
        &["--grpc-tls-key"],
    );
    refused(
        &["--grpc-tls-cert", &cert, "--grpc-tls-key", &key],
        &[],
        &["--grpc-tls"],
    );
    refused(
        &[
            "--grpc-tls",
            "--grpc-tls-cert",
            &missing,
            "--grpc-tls-key",
            &key,
        ],
        &[],
        &[
            "--grpc-tls-cert (GRPC_SERVER_TLS_CERT)",
            &missing,
            "cannot read it",
        ],
    );
    refused(
        &[
            "--grpc-tls",
            "--grpc-tls-cert",
            &cert,
            "--grpc-tls-key",
            &cert,
        ],
        &[],
        &["--grpc-tls-key (GRPC_SERVER_TLS_KEY)", "no PEM private key"],
    );
    refused(
        &[
            "--grpc-tls",
            "--grpc-tls-cert",
            &key,
            "--grpc-tls-key",
            &key,
        ],
        &[],
        &[
            "--grpc-tls-cert (GRPC_SERVER_TLS_CERT)",
            "no PEM certificate",
        ],
    );
    refused(
        &[
            "--grpc-tls",
            "--grpc-tls-cert",
            &cert,
            "--grpc-tls-key",
            &path(&other.key),
        ],
        &[],
        &["not the key of", &cert],
    );
    let with_ca = |ca: &str, san: &str| -> Vec<String> {
        let mut a = tls_args(&setup, &["--grpc-tls-client-ca", ca]);
        if !san.is_empty() {
            a.extend(["--grpc-tls-client-san".to_owned(), san.to_owned()]);
        }
        a
    };
    let a = with_ca(&missing, "");
    refused(
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
        &["--grpc-tls-client-ca (GRPC_CLIENT_TLS_CACERT)", &missing],
    );
    let a = with_ca(&path(&setup.ca.cert()), "spiffe://envoy.test/gateway");
    refused(
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
        &[
            "--grpc-tls-client-san (GRPC_CLIENT_TLS_SAN)",
            "neither a DNS name",
        ],
    );
    refused(
        &["--grpc-tls-client-san", "envoy.test"],
        &[],
        &["--grpc-tls-client-ca"],
    );
    // From the environment: the variable named.
    refused(
        &[],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_KEY", &key),
        ],
        &["GRPC_SERVER_TLS_CERT"],
    );
    refused(
        &[],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &cert),
            ("GRPC_SERVER_TLS_KEY", &missing),
        ],
        &["GRPC_SERVER_TLS_KEY", &missing],
    );
    refused(
        &[],
        &[("GRPC_SERVER_USE_TLS", "yes")],
        &["GRPC_SERVER_USE_TLS"],
    );
}

/// Writes `pair` over `target`'s files, each by a rename, as a secret's update lands.
fn install(pair: &Pair, target: &Pair) {
    for (from, to) in [(&pair.cert, &target.cert), (&pair.key, &target.key)] {
        let tmp = to.with_extension("tmp");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_certificate_pair_is_served_and_a_broken_one_logged_and_not() {
    let Some(setup) = setup("grpc-tls-reload") else {
        return;
    };
    let live = setup.dir.join("live");
    std::fs::create_dir_all(&live).unwrap();
    let served = Pair {
        cert: live.join("tls.crt"),
        key: live.join("tls.key"),
    };
    install(&setup.server, &served);
    let args = vec![
        "--no-watch".to_owned(),
        "--grpc-tls".into(),
        "--grpc-tls-cert".into(),
        path(&served.cert),
        "--grpc-tls-key".into(),
        path(&served.key),
    ];
    let s = start(&setup, &args);
    let url = https(&s);
    assert_eq!(ask(tls(&url, &setup.ca.cert(), None)).await, Ok(OK));

    // Rotated to a pair of another CA: new connections get it, without a restart.
    let next_ca = Authority::new(&setup.dir, "next").unwrap();
    let next = next_ca.server("rotated", &["IP:127.0.0.1", &format!("DNS:{SERVER_NAME}")]);
    install(&next, &served);
    let end = Instant::now() + Duration::from_secs(10);
    while ask(tls(&url, &next_ca.cert(), None)).await.is_err() {
        assert!(
            Instant::now() < end,
            "the new pair is not served\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ask(tls(&url, &setup.ca.cert(), None)).await.is_err());
    assert!(s.log().contains("gRPC certificate reloaded"), "{}", s.log());

    // A broken pair (a key that is not the certificate's) is logged; the previous one stays.
    let stray = setup.ca.server("stray", &["DNS:stray.test"]);
    let before = s.log().len();
    std::fs::copy(&stray.key, &served.key).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while !s.log()[before..].contains("gRPC certificate not reloaded") {
        assert!(
            Instant::now() < end,
            "the broken pair is not logged\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(s.log()[before..].contains("not the key of"), "{}", s.log());
    assert_eq!(ask(tls(&url, &next_ca.cert(), None)).await, Ok(OK));
}
