//! cargo-fuzz target `server_config`: the body is `funnel_server::fuzzing::config`
//! (`crates/funnel-server/src/fuzzing.rs`), shared with the stable replay test
//! `crates/funnel-server/tests/it/fuzz_bodies.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_server::fuzzing::config(data));
