//! Generates the Envoy rate-limit messages, server and client for the `funnel-loadgen`
//! example from funnel-server's `proto/` (protox: no `protoc` needed), with the module tree
//! that nests them as their protobuf packages nest (`envoy_rls.rs`), so the example writes
//! none of it by hand.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "../funnel-server/proto";
    println!("cargo:rerun-if-changed={root}");
    let set = protox::compile(
        [format!("{root}/envoy/service/ratelimit/v3/rls.proto")],
        [root],
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .include_file("envoy_rls.rs")
        .compile_fds(set)?;
    Ok(())
}
