//! The gRPC listener: a TCP address, every connection with `TCP_NODELAY` (see `server`), or a
//! Unix domain socket (`--grpc-uds`, envoyproxy/ratelimit's `GRPC_UDS`); TLS over either
//! when asked (`grpc_tls`).
//!
//! The TLS handshakes run each in a task of its own, so that a slow or silent client holds
//! up no other; a connection whose handshake fails or does not finish in time is dropped
//! and logged, never handed to the gRPC server.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
#[cfg(unix)]
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
#[cfg(unix)]
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::{Router, TcpIncoming};

use crate::connection_age::Aged;

/// A bound gRPC listener.
pub enum Bound {
    /// A TCP address.
    Tcp(TcpListener),
    /// A Unix domain socket, its file removed when dropped.
    #[cfg(unix)]
    Unix(UnixListener, SocketFile),
}

/// Binds a Unix domain socket at `path`. A socket file left by a server that is gone (a crash,
/// a killed container on a shared volume) is replaced; one that still accepts is not.
#[cfg(unix)]
pub fn bind_unix(path: &Path) -> io::Result<Bound> {
    use std::os::unix::fs::FileTypeExt;
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another server accepts on this socket",
                ))
            }
            Err(_) => std::fs::remove_file(path)?,
        }
    }
    let listener = UnixListener::bind(path)?;
    Ok(Bound::Unix(listener, SocketFile(path.to_owned())))
}

/// No Unix domain sockets here.
#[cfg(not(unix))]
pub fn bind_unix(_path: &Path) -> io::Result<Bound> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "Unix domain sockets are not supported on this system",
    ))
}

impl Bound {
    /// Where it listens, for the line printed at start: `host:port`, or `unix:path`.
    pub fn describe(&self) -> io::Result<String> {
        match self {
            Bound::Tcp(l) => l.local_addr().map(|a: SocketAddr| a.to_string()),
            #[cfg(unix)]
            Bound::Unix(_, file) => Ok(format!("unix:{}", file.0.display())),
        }
    }
}

/// The socket's file, removed when the listener stops.
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The longest a client may take over its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Serves `router` on `bound`, over TLS when `tls` is given, until `stop` completes; each
/// connection closed `lifetime` after it was accepted, when given (`connection_age`).
pub async fn serve(
    router: Router,
    bound: Bound,
    tls: Option<TlsAcceptor>,
    lifetime: Option<Duration>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    match (bound, tls) {
        (Bound::Tcp(l), None) => {
            // tonic's own `tcp_nodelay` applies only to listeners it binds; this one is ours.
            let incoming = TcpIncoming::from(l).with_nodelay(Some(true));
            router
                .serve_with_incoming_shutdown(aged(incoming, lifetime), stop)
                .await
        }
        (Bound::Tcp(l), Some(tls)) => {
            let incoming = TcpIncoming::from(l).with_nodelay(Some(true));
            let incoming = handshakes(incoming, tls);
            router
                .serve_with_incoming_shutdown(aged(incoming, lifetime), stop)
                .await
        }
        #[cfg(unix)]
        (Bound::Unix(l, _file), None) => {
            let incoming = UnixListenerStream::new(l);
            router
                .serve_with_incoming_shutdown(aged(incoming, lifetime), stop)
                .await
        }
        #[cfg(unix)]
        (Bound::Unix(l, _file), Some(tls)) => {
            let incoming = handshakes(UnixListenerStream::new(l), tls);
            router
                .serve_with_incoming_shutdown(aged(incoming, lifetime), stop)
                .await
        }
    }
}

/// The connections of `incoming`, each closed `lifetime` after it was accepted.
fn aged<S, IO>(incoming: S, lifetime: Option<Duration>) -> impl Stream<Item = io::Result<Aged<IO>>>
where
    S: Stream<Item = io::Result<IO>>,
{
    incoming.map(move |io| io.map(|io| Aged::new(io, lifetime)))
}

/// The connections of `incoming` once their TLS handshake with `tls` succeeded; accept errors
/// passed on as they come (the gRPC server decides which end it).
fn handshakes<S, IO>(incoming: S, tls: TlsAcceptor) -> ReceiverStream<io::Result<TlsStream<IO>>>
where
    S: Stream<Item = io::Result<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut incoming = std::pin::pin!(incoming);
        loop {
            let next = tokio::select! {
                next = incoming.next() => next,
                // The gRPC server stopped and dropped the stream.
                () = tx.closed() => None,
            };
            let io = match next {
                None => break,
                Some(Err(e)) => {
                    if tx.send(Err(e)).await.is_err() {
                        break;
                    }
                    continue;
                }
                Some(Ok(io)) => io,
            };
            let (tls, tx) = (tls.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE, tls.accept(io)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => tracing::info!(error = %e, "gRPC TLS handshake refused"),
                    Err(_) => tracing::info!("gRPC TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
