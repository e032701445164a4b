//! Connection ages (envoyproxy/ratelimit's `GRPC_MAX_CONNECTION_AGE` and
//! `GRPC_MAX_CONNECTION_AGE_GRACE`): a gRPC connection is sent a GOAWAY at its age, so its
//! client opens a new one, which a load balancer may give to another instance; calls in
//! flight may go on for the grace, then the connection is closed.
//!
//! tonic sends the GOAWAY (its `max_connection_age`), but given a grace as well it sends none
//! and only closes the connection when age and grace are over. So tonic gets the age alone,
//! and [`Aged`] closes the connection at age plus grace: its reads and writes fail from then
//! on, which makes the HTTP/2 connection end.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Sleep};
use tonic::transport::server::Connected;

/// How long a gRPC connection lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionAge {
    /// The age at which the GOAWAY is sent, before the spread.
    pub max: Duration,
    /// How long calls in flight may go on after it; none: as long as they take.
    pub grace: Option<Duration>,
}

impl ConnectionAge {
    /// `max` spread uniformly over ±10%, as gRPC's servers spread it, so that connections
    /// opened together (after a restart, say) are not all sent away together. tonic ages
    /// every connection of a server alike, so the draw is made once per process: instances of
    /// a fleet differ, the connections of one instance do not.
    pub fn spread(&self) -> Duration {
        use std::hash::{BuildHasher, Hasher};
        // A fresh `RandomState` is seeded from the operating system's randomness.
        let bits = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
        self.max.mul_f64(0.9 + 0.2 * unit)
    }
}

/// A connection that fails every read and write once its deadline, if any, has passed.
#[derive(Debug)]
pub struct Aged<T> {
    inner: T,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<T> Aged<T> {
    /// `inner`, closed `after` from now; never when `after` is none.
    pub fn new(inner: T, after: Option<Duration>) -> Aged<T> {
        Aged {
            inner,
            deadline: after.map(|after| Box::pin(sleep(after))),
        }
    }

    /// An error once the deadline has passed. Polling the deadline registers the task's waker
    /// with it, so a connection waiting on a read is woken at the deadline.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let deadline = self.deadline.as_mut()?;
        deadline.as_mut().poll(cx).is_ready().then(|| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection outlived its age and grace",
            )
        })
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Aged<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(e) = self.expired(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Aged<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.expired(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.expired(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<T: Connected> Connected for Aged<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn ages_spread_within_ten_percent() {
        let age = ConnectionAge {
            max: Duration::from_secs(1000),
            grace: None,
        };
        let draws: Vec<Duration> = (0..200).map(|_| age.spread()).collect();
        for d in &draws {
            assert!(
                (Duration::from_secs(900)..=Duration::from_secs(1100)).contains(d),
                "{d:?}"
            );
        }
        // 200 draws all within a second of each other would mean no randomness.
        let (lo, hi) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        assert!(*hi - *lo > Duration::from_secs(1), "{lo:?}..{hi:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_read_fails_at_the_deadline() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut aged = Aged::new(near, Some(Duration::from_secs(5)));
        far.write_all(b"hi").await.unwrap();
        let mut buf = [0u8; 2];
        aged.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hi");
        aged.write_all(b"ok").await.unwrap();
        // Nothing more to read: the read waits until the deadline, then fails.
        let started = tokio::time::Instant::now();
        let e = aged.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        assert!(aged.write_all(b"late").await.is_err());
    }
}
