//! Compiles the Envoy rate-limit messages in `proto/` with protox (pure Rust, so building
//! needs no `protoc`), generates the tonic service and client from them, and keeps the
//! encoded descriptor set for `POST /json` (proto3's JSON mapping through prost-reflect). The
//! xDS messages (`ads.proto`, `rls_conf.proto`) are compiled the same way, client and server:
//! the server side serves the tests' own xDS server.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/envoy/service/ratelimit/v3/rls.proto",
        // The xDS side: the ADS stream and the configuration resource it carries.
        "proto/envoy/service/discovery/v3/ads.proto",
        "proto/ratelimit/config/ratelimit/v3/rls_conf.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let set = protox::compile(files, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("descriptors.bin"),
        prost::Message::encode_to_vec(&set),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // The module tree that nests the packages as protobuf nests them (`src/proto.rs`
        // includes it), so that no one writes it by hand.
        .include_file("protos.rs")
        .compile_fds(set)?;
    Ok(())
}
