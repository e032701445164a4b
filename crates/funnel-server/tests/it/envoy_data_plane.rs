//! An independent implementation of Envoy's v3 messages calls the server: PyPI's
//! `envoy-data-plane` (betterproto2) with `grpcio`, running `tests/envoy_check.py`, in plain
//! text and over mutual TLS (grpcio's TLS, not rustls, on the client side).
//! `.ci/run` installs both; without them this test is skipped and says how to install them
//! (`FUNNEL_REQUIRE_TOOLS=1` makes that a failure).

use std::path::Path;
use std::process::Command;

use funnel_testkit::certificates::Authority;

use crate::common::*;

#[test]
fn envoy_data_plane_client_gets_the_documented_answers() {
    if !funnel_testkit::skip::python_modules(
        &["grpc", "envoy_data_plane"],
        "pip install envoy-data-plane grpcio",
    ) {
        return;
    }
    let dir = scratch("python");
    check(&dir, &[], &[]);
}

#[test]
fn envoy_data_plane_client_gets_them_over_mutual_tls() {
    if !funnel_testkit::skip::python_modules(
        &["grpc", "envoy_data_plane"],
        "pip install envoy-data-plane grpcio",
    ) {
        return;
    }
    let dir = scratch("python-tls");
    let Some(ca) = Authority::new(&dir, "ca") else {
        return;
    };
    let server = ca.server("server", &["IP:127.0.0.1"]);
    let client = ca.client("client", &["DNS:envoy.test"]);
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let (ca, server_cert, server_key) = (path(&ca.cert()), path(&server.cert), path(&server.key));
    check(
        &dir,
        &[
            "--grpc-tls",
            "--grpc-tls-cert",
            &server_cert,
            "--grpc-tls-key",
            &server_key,
            "--grpc-tls-client-ca",
            &ca,
            "--grpc-tls-client-san",
            "envoy.test",
        ],
        &[&ca, &path(&client.cert), &path(&client.key)],
    );
}

/// Runs `envoy_check.py` (with `client_args` after the address) against a server started
/// with `server_args` on `tests/envoy_check.yaml`.
fn check(dir: &Path, server_args: &[&str], client_args: &[&str]) {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let yaml = std::fs::read_to_string(here.join("envoy_check.yaml")).unwrap();
    let mut args = vec!["--no-watch"];
    args.extend(server_args);
    let s = Server::start(&write_config(dir, "edge.yaml", &yaml), &args);
    let out = Command::new("python3")
        .arg(here.join("envoy_check.py"))
        .arg(s.grpc.to_string())
        .args(client_args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "envoy_check.py failed:\n{}{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        s.log()
    );
}
