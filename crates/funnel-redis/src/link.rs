//! The connection to Redis, established lazily and re-established in the background.
//!
//! A [`Link`] starts with no connection and one background task that connects, retrying with
//! a backoff (10 ms doubling to 1 s) until it succeeds. A request waits for that first
//! connection within its own timeout; once an attempt has failed, requests do not wait at all
//! (a [`Failure::Connection`](crate::Failure::Connection) at once) until a connection is
//! made, so recovery after a startup outage takes up to the backoff (1 s). Once connected:
//!
//! * a single server is reached through the `redis` crate's `ConnectionManager`, which
//!   multiplexes (pipelines) concurrent requests on one connection and reconnects by itself
//!   when the connection drops (a killed and restarted server);
//! * a Redis Cluster (cargo feature `cluster`) through its async cluster connection, which
//!   follows `MOVED`/`ASK` and refreshes the slot map itself.
//!
//! A `READONLY` reply (a failover demoted our server) makes the limiter drop the connection
//! and start a new one, which reaches the new primary when the address follows it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, RedisResult, Value};
use tokio::sync::Notify;

/// The longest wait between two attempts to connect: once Redis is back, the limiter connects
/// within it.
pub(crate) const LONGEST_BACKOFF: Duration = Duration::from_secs(1);

/// Where to connect.
// One per limiter, cloned once per attempt to connect: its size does not matter, and without the
// `cluster` feature the single server's client is the one large variant.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Target {
    Single(redis::Client, ConnectionManagerConfig),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster::ClusterClient),
    Sentinel(Arc<Sentinel>),
}

/// A primary found through Redis Sentinel: asked of the sentinels at every connection, so that a
/// new connection after a failover reaches the promoted replica.
pub(crate) struct Sentinel {
    /// The name the sentinels monitor the primary under.
    pub(crate) master: String,
    /// The sentinels, asked in order until one answers.
    pub(crate) sentinels: Vec<redis::Client>,
    /// The primary's credentials and database (its address comes from the sentinels).
    pub(crate) settings: redis::RedisConnectionInfo,
    /// Whether the primary is reached over TLS.
    pub(crate) tls: bool,
    /// How the primary's certificate is checked, and the certificate shown to it.
    #[cfg(feature = "tls")]
    pub(crate) tls_settings: crate::tls::Tls,
    /// How long asking one sentinel may take.
    pub(crate) connect_timeout: Duration,
    pub(crate) config: ConnectionManagerConfig,
}

impl Sentinel {
    /// The primary's address as the first sentinel that answers gives it, connected, and
    /// checked to be a primary (`ROLE`): a sentinel can name a demoted server for a moment
    /// after a failover.
    async fn open(&self) -> RedisResult<ConnectionManager> {
        let mut last = None;
        for sentinel in &self.sentinels {
            let asked = tokio::time::timeout(self.connect_timeout, async {
                let mut conn = sentinel.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.master)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            })
            .await;
            match asked {
                Ok(Ok(Some((host, port)))) => return self.primary(host, port).await,
                Ok(Ok(None)) => {
                    last = Some(redis::RedisError::from((
                        redis::ErrorKind::ResponseError,
                        "the sentinel does not monitor this master name",
                        self.master.clone(),
                    )))
                }
                Ok(Err(e)) => last = Some(e),
                Err(_elapsed) => {
                    last = Some(redis::RedisError::from(std::io::Error::from(
                        std::io::ErrorKind::TimedOut,
                    )))
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no sentinel given"))
        }))
    }

    async fn primary(&self, host: String, port: u16) -> RedisResult<ConnectionManager> {
        let addr = if self.tls {
            redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            redis::ConnectionAddr::Tcp(host, port)
        };
        let info = redis::ConnectionInfo {
            addr,
            redis: self.settings.clone(),
        };
        #[cfg(feature = "tls")]
        let client = self.tls_settings.client(info)?;
        #[cfg(not(feature = "tls"))]
        let client = redis::Client::open(info)?;
        let mut conn = ConnectionManager::new_with_config(client, self.config.clone()).await?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
        match role.first() {
            Some(Value::BulkString(r)) if r == b"master" => Ok(conn),
            _ => Err(redis::RedisError::from((
                redis::ErrorKind::ReadOnly,
                "the sentinels named a server that is not a primary",
            ))),
        }
    }
}

/// One established connection (cheap to clone: handles to the same multiplexed connection).
// Cloned for every request; boxing the larger variant would add an allocation to each clone.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    /// Sends one command; the reply may be a `Value::ServerError`.
    pub(crate) async fn command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd).await,
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.req_packed_command(cmd).await,
        }
    }

    /// Sends a pipeline of `count` commands in one round trip. On a single server each reply
    /// stands alone (a `Value::ServerError` among them); a cluster connection turns the first
    /// error reply into the error of the whole pipeline (which is why the script answers a
    /// key's own error as a value: `script.rs`).
    pub(crate) async fn pipeline(
        &mut self,
        pipe: &Pipeline,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipe, 0, count).await,
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.req_packed_commands(pipe, 0, count).await,
        }
    }
}

impl Target {
    async fn open(&self) -> RedisResult<Conn> {
        match self {
            Target::Single(client, config) => Ok(Conn::Single(
                ConnectionManager::new_with_config(client.clone(), config.clone()).await?,
            )),
            #[cfg(feature = "cluster")]
            Target::Cluster(client) => Ok(Conn::Cluster(client.get_async_connection().await?)),
            Target::Sentinel(sentinel) => Ok(Conn::Single(sentinel.open().await?)),
        }
    }
}

pub(crate) struct Link {
    target: Target,
    /// The connection and its generation (bumped on every install).
    slot: RwLock<Option<(u64, Conn)>>,
    generation: AtomicU64,
    /// Woken when a connection is installed.
    installed: Notify,
    /// Woken when an attempt to connect ends, either way; `attempts` counts them.
    settled: Notify,
    attempts: AtomicU64,
    /// True while a connecting task runs.
    connecting: AtomicBool,
    /// True from a failed attempt to connect until the next connection.
    failing: AtomicBool,
    /// The last connection error, for `build` under `OnFailure::Report`.
    last_error: RwLock<Option<String>>,
    /// The server's refusal of the last attempt (a wrong password, a missing permission, a
    /// database that does not exist): a setting to fix, not an outage, so requests get it as
    /// an error instead of the failure policy's answer.
    refused: RwLock<Option<String>>,
}

impl Link {
    /// A link with no connection yet, and its connecting task started (needs a tokio runtime).
    pub(crate) fn start(target: Target) -> Arc<Link> {
        let link = Arc::new(Link {
            target,
            slot: RwLock::new(None),
            generation: AtomicU64::new(0),
            installed: Notify::new(),
            settled: Notify::new(),
            attempts: AtomicU64::new(0),
            connecting: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            last_error: RwLock::new(None),
            refused: RwLock::new(None),
        });
        link.ensure_connecting();
        link
    }

    /// The connection, if there is one now, with its generation.
    pub(crate) fn current(&self) -> Option<(u64, Conn)> {
        self.slot.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The connection. With none yet, waits for the connecting task while it has not failed
    /// since the last connection (the first connection of a new limiter, say), and answers
    /// `None` at once after a failed attempt: requests during an outage do not queue. The
    /// caller bounds the wait with its timeout.
    pub(crate) async fn get(self: &Arc<Self>) -> Option<(u64, Conn)> {
        loop {
            let installed = self.installed.notified();
            tokio::pin!(installed);
            // Registered before the check, so an install between the check and the await
            // still wakes us.
            installed.as_mut().enable();
            if let Some(c) = self.current() {
                return Some(c);
            }
            self.ensure_connecting();
            // Acquire: pairs with the Release store after a failed attempt.
            if self.failing.load(Ordering::Acquire) {
                return None;
            }
            installed.await;
        }
    }

    /// Whether the server's address is asked of sentinels at each connection: then a lost
    /// connection is made again through them, so that it follows a failover.
    pub(crate) fn follows_sentinels(&self) -> bool {
        matches!(self.target, Target::Sentinel(_))
    }

    /// Drops the connection of generation `generation` (not a newer one) and connects again.
    pub(crate) fn reconnect(self: &Arc<Self>, generation: u64) {
        {
            let mut slot = self.slot.write().unwrap_or_else(|p| p.into_inner());
            if matches!(&*slot, Some((g, _)) if *g == generation) {
                *slot = None;
            }
        }
        self.ensure_connecting();
    }

    /// Returns once the link is connected or one attempt to connect has failed.
    pub(crate) async fn first_attempt(&self) {
        let settled = self.settled.notified();
        tokio::pin!(settled);
        settled.as_mut().enable();
        // Acquire: pairs with the Release increment after an attempt.
        if self.current().is_some() || self.attempts.load(Ordering::Acquire) > 0 {
            return;
        }
        settled.await;
    }

    /// The server's refusal of the last attempt to connect, if it refused (see `refused`).
    pub(crate) fn refused(&self) -> Option<String> {
        self.refused
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn ensure_connecting(self: &Arc<Self>) {
        // AcqRel: one task at a time; the task's final store (Release) pairs with this.
        if self.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(self);
        let target = self.target.clone();
        tokio::spawn(connect(weak, target));
    }

    fn install(&self, conn: Conn) {
        // Relaxed: the generation only needs to be unique, and the slot's lock orders it.
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *self.slot.write().unwrap_or_else(|p| p.into_inner()) = Some((generation, conn));
        *self.last_error.write().unwrap_or_else(|p| p.into_inner()) = None;
        *self.refused.write().unwrap_or_else(|p| p.into_inner()) = None;
        // Relaxed: read with the slot, which the lock above published.
        self.failing.store(false, Ordering::Relaxed);
        // Release: pairs with the AcqRel swap in `ensure_connecting`.
        self.connecting.store(false, Ordering::Release);
        self.installed.notify_waiters();
    }

    fn attempted(&self) {
        // Release: pairs with the Acquire load in `first_attempt`.
        self.attempts.fetch_add(1, Ordering::Release);
        self.settled.notify_waiters();
    }
}

/// The connecting task: tries until it connects or the limiter is dropped. Holds only a weak
/// reference while it waits, so a dropped limiter ends it.
async fn connect(link: Weak<Link>, target: Target) {
    let mut backoff = Duration::from_millis(10);
    loop {
        let opened = target.open().await;
        let Some(link) = link.upgrade() else { return };
        match opened {
            Ok(conn) => {
                link.install(conn);
                link.attempted();
                return;
            }
            Err(e) => {
                *link.last_error.write().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                *link.refused.write().unwrap_or_else(|p| p.into_inner()) =
                    refusal(&e).then(|| e.to_string());
                // Release: pairs with the Acquire load in `get`.
                link.failing.store(true, Ordering::Release);
                link.attempted();
            }
        }
        drop(link);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(LONGEST_BACKOFF);
    }
}

/// Whether a failed connection was the server refusing us (authentication, permissions, a
/// database index out of range) rather than the server being unreachable or busy.
fn refusal(e: &redis::RedisError) -> bool {
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        return true;
    }
    if matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM")) {
        return true;
    }
    let detail = e.detail().unwrap_or_default().to_ascii_lowercase();
    detail.contains("db index is out of range") || detail.contains("invalid db index")
}
