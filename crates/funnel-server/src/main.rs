//! `funnel-server`: Envoy's rate-limit service on funnel. See the crate's README.

fn main() -> std::process::ExitCode {
    funnel_server::main()
}
