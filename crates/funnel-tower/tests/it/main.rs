//! funnel-tower's integration tests, one module per topic, in one test binary. The fuzz
//! bodies stay a binary of their own, `fuzz_replay.rs`: it installs a counting global
//! allocator.
//!
//! The layer in a hyper server (`http`) and in an axum router (`axum`), its policy set
//! replaced while requests flow (`reconfigure`), and the example proxy as a process
//! (`proxy`), under hostile requests (`hostile`).

mod common;

mod axum;
mod hostile;
mod http;
mod proxy;
mod reconfigure;
