//! Why [`crate::run`] could not start the server, or why a listener failed while serving.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::ConfigError;
use crate::grpc_tls::TlsError;
use crate::rules::CompileError;

/// What stopped the server.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The configuration could not be read.
    Config(ConfigError),
    /// The configuration was read but its rules could not be built (a limit funnel cannot
    /// count, a Redis limiter that could not be made).
    Rules(CompileError),
    /// The forward-auth file (`--forward-auth`) could not be read.
    ForwardAuth(ConfigError),
    /// `--recent-clock`'s interval was refused, or its upkeep thread could not start.
    Clock {
        /// The interval asked.
        interval: Duration,
        /// Why.
        source: std::io::Error,
    },
    /// A listener could not bind its address.
    Bind {
        /// Which listener (`gRPC`, `HTTP`, `debug`, `Prometheus`).
        listener: &'static str,
        /// The address asked.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The gRPC listener's Unix domain socket (`--grpc-uds`) could not be bound.
    BindUnix {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The gRPC listener's TLS (`--grpc-tls-*`) could not be set up: a file that cannot be
    /// read, a key that is not the certificate's.
    GrpcTls(TlsError),
    /// The configuration could not be watched for changes.
    Watch(String),
    /// The xDS subscription could not start (its settings, a TLS file).
    Xds(String),
    /// The statsd server's address could not be resolved or its socket opened.
    Statsd {
        /// The `host:port` given.
        target: String,
        /// Why.
        source: std::io::Error,
    },
    /// A listener failed while serving.
    Serve {
        /// Which listener.
        listener: &'static str,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Config(e) => write!(f, "{e}"),
            Error::Rules(e) => write!(f, "{e}"),
            Error::ForwardAuth(e) => write!(f, "--forward-auth: {e}"),
            Error::Clock { interval, .. } => write!(f, "--recent-clock {interval:?}"),
            Error::Bind { listener, addr, .. } => write!(f, "cannot bind {listener} to {addr}"),
            Error::BindUnix { path, .. } => {
                write!(f, "cannot bind gRPC to the Unix socket {}", path.display())
            }
            Error::GrpcTls(e) => write!(f, "gRPC TLS: {e}"),
            Error::Watch(e) => write!(f, "{e}"),
            Error::Xds(e) => write!(f, "xDS: {e}"),
            Error::Statsd { target, .. } => write!(f, "statsd at {target}"),
            Error::Serve { listener, .. } => write!(f, "the {listener} listener failed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Config(e) | Error::ForwardAuth(e) => Some(e),
            Error::Rules(e) => Some(e),
            Error::GrpcTls(e) => e.source(),
            Error::Clock { source, .. }
            | Error::Bind { source, .. }
            | Error::BindUnix { source, .. }
            | Error::Statsd { source, .. } => Some(source),
            Error::Serve { source, .. } => Some(source.as_ref()),
            Error::Watch(_) | Error::Xds(_) => None,
        }
    }
}
