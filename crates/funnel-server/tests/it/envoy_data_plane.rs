//! An independent implementation of Envoy's v3 messages calls the server: PyPI's
//! `envoy-data-plane` (betterproto2) with `grpcio`, running `tests/envoy_check.py`.
//! `.ci/run` installs both; without them this test is skipped and says how to install them
//! (`FUNNEL_REQUIRE_TOOLS=1` makes that a failure).

use std::process::Command;

use crate::common::*;

#[test]
fn envoy_data_plane_client_gets_the_documented_answers() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    if !funnel_testkit::skip::python_modules(
        &["grpc", "envoy_data_plane"],
        "pip install envoy-data-plane grpcio",
    ) {
        return;
    }
    let dir = scratch("python");
    let yaml = std::fs::read_to_string(here.join("envoy_check.yaml")).unwrap();
    let s = Server::start(&write_config(&dir, "edge.yaml", &yaml), &["--no-watch"]);
    let out = Command::new("python3")
        .arg(here.join("envoy_check.py"))
        .arg(s.grpc.to_string())
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
