//! cargo-fuzz target `server_request`: the body is `funnel_server::fuzz::request`
//! (`crates/funnel-server/src/fuzz.rs`), shared with the stable replay test
//! `crates/funnel-server/tests/it/fuzz_bodies.rs`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| funnel_server::fuzz::request(data));
