//! [`Builder`]: the settings of a [`RedisLimiter`], checked once.

use std::sync::Arc;
use std::time::Duration;

use funnel::Quota;
use tokio::sync::Semaphore;

use crate::cache::{DenyCache, Monotonic};
use crate::error::Error;
use crate::link::{Link, Target, LONGEST_BACKOFF};
use crate::marker::{self, Markers};
use crate::policy::{Counters, OnFailure, Policy};
use crate::remote::{Call, Remote, GIVE_UP};
use crate::{cell, script, Backend, RedisLimiter};

/// Builds a [`RedisLimiter`].
#[must_use]
pub struct Builder {
    urls: Vec<String>,
    #[cfg(feature = "cluster")]
    cluster: bool,
    /// The master name, when `urls` are sentinels.
    sentinel: Option<String>,
    /// User and password for every Redis server (not the sentinels), over the URLs' own.
    auth: Option<(Option<String>, String)>,
    /// User and password for the sentinels, over their URLs' own.
    sentinel_auth: Option<(Option<String>, String)>,
    /// How `rediss://` servers are checked, and the certificate shown to them.
    #[cfg(feature = "tls")]
    tls: crate::tls::Tls,
    quota: Quota,
    backend: Backend,
    prefix: String,
    hash_tag: bool,
    timeout: Duration,
    connect_timeout: Duration,
    on_failure: OnFailure,
    outage_retry_after: Duration,
    max_pending: usize,
    cache_capacity: usize,
}

/// [`Builder::max_pending`]'s default.
const DEFAULT_MAX_PENDING: usize = 1_024;

/// The longest [`Builder::outage_retry_after`]: a day.
const MAX_OUTAGE_RETRY_AFTER: Duration = Duration::from_secs(86_400);

impl RedisLimiter {
    /// A builder for a limiter on the Redis at `url` (`redis://host:port/db`) with `quota`.
    pub fn builder(url: impl Into<String>, quota: Quota) -> Builder {
        Builder {
            urls: vec![url.into()],
            #[cfg(feature = "cluster")]
            cluster: false,
            sentinel: None,
            auth: None,
            sentinel_auth: None,
            #[cfg(feature = "tls")]
            tls: crate::tls::Tls::default(),
            quota,
            backend: Backend::Script,
            prefix: "funnel:".into(),
            hash_tag: false,
            timeout: Duration::from_millis(10),
            connect_timeout: Duration::from_secs(1),
            on_failure: OnFailure::Closed,
            outage_retry_after: LONGEST_BACKOFF,
            max_pending: DEFAULT_MAX_PENDING,
            cache_capacity: 0,
        }
    }
}

impl Builder {
    /// The prefix of every Redis key (default `funnel:`); instances sharing limits share it.
    /// Limiters with different backends must not share a prefix: the script keeps arrival
    /// times in microseconds, `CL.THROTTLE` in nanoseconds.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Wraps the caller's key in a hash tag (`prefix{key}`), so the key's slot in a Redis
    /// Cluster depends on the caller's key alone, not on the prefix. Every request touches
    /// one Redis key, so a cluster works without it; it matters only to keep the funnels of one
    /// caller's key under several prefixes (several limits) on one node.
    pub fn hash_tag(mut self, on: bool) -> Self {
        self.hash_tag = on;
        self
    }

    /// How long a decision may wait for Redis, connecting included, before the failure policy
    /// answers (default 10 ms).
    ///
    /// **A request that timed out may still be charged.** Once sent, it is in Redis's queue:
    /// a frozen or slow server runs it later (a frozen one when it thaws), and charges the key,
    /// although the caller got the policy's answer. [`Stats::late_replies`](crate::Stats::late_replies)
    /// counts the replies that came after the timeout and
    /// [`Stats::late_charges`](crate::Stats::late_charges) those that admitted (charged) the
    /// request. At most [`max_pending`](Self::max_pending) requests wait on Redis at once, so
    /// at most that many can be charged late. A request still unanswered at four times the
    /// timeout makes the limiter drop its connection and make a new one, so a frozen server
    /// gets nothing more from this limiter until it answers a new connection; the requests
    /// sent keep waiting for their replies, and are given up (their places freed, a later
    /// reply not counted) 10 s after they were sent, or four times the timeout if longer.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long one attempt to connect may take, and how long [`build`](Self::build) waits
    /// for the first one (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// What to answer when Redis cannot decide (default [`OnFailure::Closed`]).
    pub fn on_failure(mut self, policy: OnFailure) -> Self {
        self.on_failure = policy;
        self
    }

    /// The retry-after of a denial by [`OnFailure::Closed`] while Redis cannot decide: how long
    /// a client is told to wait out an outage, whatever the quota (default 1 s, the link's
    /// longest reconnect backoff: once Redis is back, the limiter decides again within it). A
    /// quota's own retry-after (one emission interval, an hour for one an hour) would keep
    /// clients away long after a blip of milliseconds. More than zero, at most a day.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use funnel::Quota;
    /// # use funnel_redis::{OnFailure, RedisLimiter};
    /// # async fn demo() -> Result<(), funnel_redis::Error> {
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379/", Quota::per_hour(1)?)
    ///     .on_failure(OnFailure::Closed)
    ///     .outage_retry_after(Duration::from_secs(5))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn outage_retry_after(mut self, retry_after: Duration) -> Self {
        self.outage_retry_after = retry_after;
        self
    }

    /// How many requests of this limiter may wait on Redis at once (default 1,024; at least
    /// 1): sent, and neither answered nor given up (10 s after they were sent, or four times
    /// the [`timeout`](Self::timeout) if longer). A [`check_many`](RedisLimiter::check_many)
    /// pipeline takes one place per key it sends. A request that finds no place is not sent,
    /// and the failure policy answers it at once as [`Failure::Overloaded`](crate::Failure::Overloaded)
    /// (counted in [`Stats::overloaded`](crate::Stats::overloaded)): a server slower than the
    /// timeout makes nothing queue beyond this bound, in this process or in Redis.
    pub fn max_pending(mut self, requests: usize) -> Self {
        self.max_pending = requests;
        self
    }

    /// A local deny cache for up to `keys` keys (0, the default, turns it off).
    pub fn deny_cache(mut self, keys: usize) -> Self {
        self.cache_capacity = keys;
        self
    }

    /// How Redis decides (default [`Backend::Script`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// A Redis Cluster, reached through `seeds` (any of its nodes), instead of the single
    /// server given to [`RedisLimiter::builder`]. Cargo feature `cluster`.
    #[cfg(feature = "cluster")]
    pub fn cluster(mut self, seeds: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.urls = seeds.into_iter().map(Into::into).collect();
        self.cluster = true;
        self
    }

    /// A primary found through Redis Sentinel: `sentinels` (`redis://host:port`, with the
    /// sentinels' own password if they require one) are asked for the address of the primary
    /// they monitor as `master_name` (`SENTINEL get-master-addr-by-name`) at every connection,
    /// and the server found is checked to be a primary (`ROLE`). After a failover the lost
    /// connection (or the old primary's `READONLY`) makes the limiter ask again, and it reaches
    /// the promoted replica. The primary takes the credentials of [`auth`](Self::auth), else
    /// those and the database of the first sentinel URL, and TLS when that URL is `rediss://`.
    pub fn sentinel(
        mut self,
        master_name: impl Into<String>,
        sentinels: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.urls = sentinels.into_iter().map(Into::into).collect();
        self.sentinel = Some(master_name.into());
        #[cfg(feature = "cluster")]
        {
            self.cluster = false;
        }
        self
    }

    /// The user (`None`: Redis's `default`) and password of every Redis server, over those
    /// the URLs carry (`redis://user:password@host:port/`); the sentinels keep their URLs'.
    pub fn auth(mut self, user: Option<String>, password: impl Into<String>) -> Self {
        self.auth = Some((user, password.into()));
        self
    }

    /// The user (`None`: Redis's `default`) and password of the sentinels themselves
    /// ([`sentinel`](Self::sentinel)), over those their URLs carry, for sentinels that require
    /// a password of their own (`requirepass` in sentinel mode). The primary's credentials are
    /// not taken from these: they stay [`auth`](Self::auth)'s, else the first sentinel URL's.
    pub fn sentinel_auth(mut self, user: Option<String>, password: impl Into<String>) -> Self {
        self.sentinel_auth = Some((user, password.into()));
        self
    }

    /// The certificate authority (PEM) that `rediss://` servers' certificates must chain to,
    /// instead of the system's root certificates: for a private CA. Cargo feature `tls`.
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root = Some(pem.into());
        self
    }

    /// The certificate chain and private key (both PEM, the chain leaf first) this client shows
    /// to `rediss://` servers that require one (`tls-auth-clients yes`): every server, a
    /// cluster's nodes, the sentinels and the primary they name. Checked when the limiter is
    /// built ([`Error::InvalidSetting`] for a file that holds no certificate or no key).
    /// Cargo feature `tls`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use funnel::Quota;
    /// # use funnel_redis::RedisLimiter;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RedisLimiter::builder("rediss://redis.internal:6380/", Quota::per_second(10)?)
    ///     .tls_root_certificate(std::fs::read("/etc/redis/ca.crt")?)
    ///     .tls_client_certificate(
    ///         std::fs::read("/etc/redis/client.crt")?,
    ///         std::fs::read("/etc/redis/client.key")?,
    ///     )
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Accept a `rediss://` server's certificate although none of its names is the host
    /// dialed (default `false`: the name is checked). The certificate must still chain to a
    /// trusted root, the [`tls_root_certificate`](Self::tls_root_certificate) or the system's,
    /// and be valid now: only the name is not compared. For servers reached by an address their
    /// certificate does not name, such as cluster nodes announcing their IP addresses; any
    /// certificate the authority signed, for whatever host, is then accepted from this one.
    /// Cargo feature `tls`.
    ///
    /// The `redis` crate's `#insecure` URL fragment, which checks nothing, is refused
    /// ([`Error::InvalidSetting`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use funnel::Quota;
    /// # use funnel_redis::RedisLimiter;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// // The server's certificate names `redis.internal`; it is dialed at its address.
    /// let limiter = RedisLimiter::builder("rediss://10.0.0.7:6380/", Quota::per_second(10)?)
    ///     .tls_root_certificate(std::fs::read("/etc/redis/ca.crt")?)
    ///     .tls_skip_hostname_verification(true)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_skip_hostname_verification(mut self, skip: bool) -> Self {
        self.tls.skip_hostname_verification = skip;
        self
    }

    /// A client for `info`, with the TLS settings when built with them.
    fn client(&self, info: redis::ConnectionInfo) -> Result<redis::Client, Error> {
        #[cfg(feature = "tls")]
        return self.tls.client(info).map_err(Error::InvalidUrl);
        #[cfg(not(feature = "tls"))]
        redis::Client::open(info).map_err(Error::InvalidUrl)
    }

    /// Checks the settings, starts connecting, and waits for the first attempt to end
    /// (at most the connect timeout). Redis being down does not fail the build, except under
    /// [`OnFailure::Report`]: the limiter answers by its policy and connects in the background.
    /// Needs a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::SubMicrosecondQuota`], [`Error::NotCellQuota`], [`Error::Funnel`] for a bad
    /// cache size or fallback quota, [`Error::InvalidSetting`] for an outage retry-after of
    /// zero or over a day, or a `max_pending` of zero, [`Error::InvalidUrl`]; [`Error::CellModuleMissing`] when
    /// [`Backend::Cell`] is chosen, Redis answers, and `MODULE LIST` does not list redis-cell;
    /// [`Error::Connect`] under [`OnFailure::Report`] when the first attempt fails;
    /// [`Error::NoPermission`] under every policy when the server refuses the connection (a
    /// wrong password, a missing ACL permission, a database index out of range), which requests
    /// also get, rather than the policy's answer, until a connection succeeds.
    pub async fn build(self) -> Result<RedisLimiter, Error> {
        let t_ns = self.quota.emission_interval().as_nanos();
        if t_ns % 1_000 != 0 {
            return Err(Error::SubMicrosecondQuota {
                emission_interval_ns: t_ns,
            });
        }
        let call = match self.backend {
            Backend::Script => Call::Script {
                sha: redis::Script::new(script::GCRA).get_hash().to_string(),
                t_us: u64::try_from(t_ns / 1_000).unwrap_or(u64::MAX),
                tau_us: u64::try_from(self.quota.tolerance().as_nanos() / 1_000)
                    .unwrap_or(u64::MAX),
            },
            Backend::Cell => Call::Cell {
                arguments: cell::cl_arguments(&self.quota)?,
            },
        };
        if self.outage_retry_after.is_zero() || self.outage_retry_after > MAX_OUTAGE_RETRY_AFTER {
            return Err(Error::InvalidSetting {
                setting: "outage_retry_after",
                reason: format!(
                    "{:?} is not within (0, {MAX_OUTAGE_RETRY_AFTER:?}]",
                    self.outage_retry_after
                ),
            });
        }
        if self.max_pending == 0 || self.max_pending > Semaphore::MAX_PERMITS {
            return Err(Error::InvalidSetting {
                setting: "max_pending",
                reason: format!(
                    "{} is not within [1, {}]",
                    self.max_pending,
                    Semaphore::MAX_PERMITS
                ),
            });
        }
        #[cfg(feature = "tls")]
        self.tls.check()?;
        let policy = Policy::new(self.on_failure, self.quota, self.outage_retry_after)?;
        let cache = match self.cache_capacity {
            0 => None,
            keys => Some(Arc::new(DenyCache::new(self.quota, keys)?)),
        };
        #[cfg(feature = "cluster")]
        let markers = if self.cluster {
            Markers::cluster(&self.prefix)
        } else {
            Markers::single(&self.prefix)
        };
        #[cfg(not(feature = "cluster"))]
        let markers = Markers::single(&self.prefix);
        let link = Link::start(self.target()?);
        let connected = tokio::time::timeout(self.connect_timeout, link.first_attempt())
            .await
            .is_ok()
            && link.current().is_some();
        let counters = Arc::new(Counters::default());
        let markers = Arc::new(markers);
        let remote = Arc::new(Remote {
            link: link.clone(),
            call,
            limit: self.quota.limit(),
            markers: markers.clone(),
            counters: counters.clone(),
            pending: Arc::new(Semaphore::new(self.max_pending)),
            stale_after: self.stale_after(),
        });
        let servers = self.servers();
        let limiter = RedisLimiter {
            link,
            remote,
            quota: self.quota,
            prefix: self.prefix,
            hash_tag: self.hash_tag,
            timeout: self.timeout,
            policy,
            cache,
            clock: Monotonic::new(),
            counters,
            markers,
            servers,
        };
        // A server that refused us (a wrong password, say) is a setting to fix: no policy
        // answers for it, or `OnFailure::Open` would run without a limit until someone looked.
        if let Some(message) = limiter.link.refused() {
            return Err(Error::NoPermission { message });
        }
        if !connected && limiter.policy.on_failure() == OnFailure::Report {
            return Err(Error::Connect {
                reason: limiter
                    .link
                    .last_error()
                    .unwrap_or_else(|| format!("no connection within {:?}", self.connect_timeout)),
            });
        }
        if connected && self.backend == Backend::Cell {
            // Where MODULE LIST is not allowed (some managed services), the first
            // CL.THROTTLE tells instead.
            if let Ok(false) = limiter.redis_cell_loaded().await {
                return Err(Error::CellModuleMissing);
            }
        }
        #[cfg(feature = "cluster")]
        let single = !self.cluster;
        #[cfg(not(feature = "cluster"))]
        let single = true;
        if single {
            tokio::spawn(marker::watch_identity(
                Arc::downgrade(&limiter.link),
                limiter.markers.clone(),
                limiter.cache.clone(),
                limiter.counters.clone(),
                self.timeout,
            ));
        }
        Ok(limiter)
    }

    /// Four times a request's timeout (at least 1 ms), saturating, so `timeout(Duration::MAX)`
    /// is accepted: a request unanswered for this long makes the connection stale (`remote.rs`).
    fn stale_after(&self) -> Duration {
        self.timeout.max(Duration::from_millis(1)).saturating_mul(4)
    }

    /// The connection's own response timeout, when a request is given up (`remote.rs`).
    fn response_timeout(&self) -> Duration {
        self.stale_after().max(GIVE_UP)
    }

    /// The servers reached: the kind of target and its URLs.
    fn servers(&self) -> String {
        #[cfg(feature = "cluster")]
        let kind = if self.cluster { "cluster" } else { "single" };
        #[cfg(not(feature = "cluster"))]
        let kind = "single";
        let kind = match &self.sentinel {
            Some(master) => format!("sentinel {master}"),
            None => kind.to_owned(),
        };
        format!("{kind} {}", self.urls.join(","))
    }

    fn target(&self) -> Result<Target, Error> {
        #[cfg(feature = "cluster")]
        if self.cluster {
            let builder = redis::cluster::ClusterClient::builder(self.infos()?)
                .connection_timeout(self.connect_timeout)
                .response_timeout(self.response_timeout())
                .retries(2);
            #[cfg(feature = "tls")]
            let builder = self.tls.cluster(builder);
            let client = builder.build().map_err(Error::InvalidUrl)?;
            return Ok(Target::Cluster(client));
        }
        if let Some(master) = &self.sentinel {
            return self.sentinel_target(master);
        }
        let info = self
            .infos()?
            .into_iter()
            .next()
            .ok_or_else(|| Error::InvalidSetting {
                setting: "url",
                reason: "no Redis URL given".into(),
            })?;
        let client = self.client(info)?;
        // No retries inside the manager: its retry delays come from a jitter generator with a
        // fixed seed (the redis crate builds `backon` without `std`), so a refused first
        // connection was retried after about 1.5 s and then after about 2 minutes, and the
        // link's own backoff (10 ms doubling to 1 s, `link.rs`) never ran in between. With
        // none, a failed attempt returns at once and the link retries on its schedule; a
        // dropped connection is re-opened by the manager on the next request, and a request
        // that fails meanwhile takes the failure policy like any other.
        Ok(Target::Single(client, self.manager_config()))
    }

    fn manager_config(&self) -> redis::aio::ConnectionManagerConfig {
        redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(self.connect_timeout)
            .set_response_timeout(self.response_timeout())
            .set_number_of_retries(0)
    }

    /// The URLs parsed, with [`auth`](Self::auth) applied.
    fn infos(&self) -> Result<Vec<redis::ConnectionInfo>, Error> {
        use redis::IntoConnectionInfo as _;
        self.urls
            .iter()
            .map(|url| {
                let mut info = url
                    .as_str()
                    .into_connection_info()
                    .map_err(Error::InvalidUrl)?;
                #[cfg(feature = "tls")]
                crate::tls::refuse_insecure(&info)?;
                overlay(&mut info.redis, self.auth.as_ref());
                Ok(info)
            })
            .collect()
    }

    fn sentinel_target(&self, master: &str) -> Result<Target, Error> {
        use redis::IntoConnectionInfo as _;
        let mut sentinels = Vec::with_capacity(self.urls.len());
        let mut first = None;
        for url in &self.urls {
            let mut info = url
                .as_str()
                .into_connection_info()
                .map_err(Error::InvalidUrl)?;
            #[cfg(feature = "tls")]
            crate::tls::refuse_insecure(&info)?;
            first.get_or_insert_with(|| info.clone());
            overlay(&mut info.redis, self.sentinel_auth.as_ref());
            sentinels.push(self.client(info)?);
        }
        let first = first.ok_or_else(|| Error::InvalidSetting {
            setting: "sentinel",
            reason: "no sentinel given".into(),
        })?;
        if master.is_empty() {
            return Err(Error::InvalidSetting {
                setting: "sentinel",
                reason: "the master name is empty".into(),
            });
        }
        let mut settings = first.redis.clone();
        overlay(&mut settings, self.auth.as_ref());
        Ok(Target::Sentinel(std::sync::Arc::new(
            crate::link::Sentinel {
                master: master.to_owned(),
                sentinels,
                settings,
                tls: matches!(first.addr, redis::ConnectionAddr::TcpTls { .. }),
                #[cfg(feature = "tls")]
                tls_settings: self.tls.clone(),
                connect_timeout: self.connect_timeout,
                config: self.manager_config(),
            },
        )))
    }
}

/// `credentials` (a user, `None` for Redis's `default`, and a password), when given, over those
/// `settings` took from a URL.
fn overlay(
    settings: &mut redis::RedisConnectionInfo,
    credentials: Option<&(Option<String>, String)>,
) {
    if let Some((user, password)) = credentials {
        settings.username.clone_from(user);
        settings.password = Some(password.clone());
    }
}
