//! A private `redis-server` for tests, examples and the comparison harness: a free 127.0.0.1
//! port, no persistence (`--save '' --appendonly no`), its own temporary directory and log,
//! stopped, killed and restarted on demand, killed on drop. One launcher, so every caller starts
//! the server the same way.
//!
//! [`RedisCluster`] starts several such servers with `--cluster-enabled yes` and joins them
//! with `redis-cli --cluster create`, each node a master.
//!
//! Over TLS, [`Certificates`] are made with [`Authority`] (an authority, a server certificate
//! for the names a test chooses, a client certificate): [`RedisTls`] is a server
//! listening for TLS too, optionally requiring client certificates, with a sentinel of its own
//! ([`RedisTls::start_sentinel`]); [`RedisTlsCluster`] is a cluster whose nodes speak TLS to
//! clients and to each other.
//!
//! A server that answers PING is checked to be ours (its `process_id` is our child's) before it
//! is handed out; a port taken between our probe and the server's bind is retried (3 tries).
//! Only a signal that kills this process outright (SIGKILL) leaves a server running; its
//! directory (`funnel-redis-<our pid>-<port>-<ns>`) names it.

use std::ffi::OsString;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::certificates::{Authority, Pair, Usage};

/// A `redis-server` child process on a loopback port.
pub struct RedisServer {
    child: Option<Child>,
    bin: PathBuf,
    port: u16,
    dir: PathBuf,
    args: Vec<OsString>,
    /// A configuration file's text, written to the server's directory and read first (a
    /// sentinel needs one it can rewrite).
    config: Option<String>,
    /// The `--requirepass` among the arguments: this launcher's own connections use it.
    password: Option<String>,
    version: String,
}

impl RedisServer {
    /// `redis-server` on `PATH`, if installed.
    pub fn binary() -> Option<PathBuf> {
        crate::skip::on_path("redis-server")
    }

    /// Starts a server with the default settings.
    ///
    /// # Errors
    ///
    /// When `redis-server` is not installed, or does not answer PING within 10 s (the message
    /// carries the end of its log).
    pub fn start() -> Result<RedisServer, String> {
        Self::start_with(&[])
    }

    /// Starts a server with further command-line arguments (`--loadmodule <path>`,
    /// `--cluster-enabled yes`, ...), kept for [`restart`](Self::restart).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with(args: &[&str]) -> Result<RedisServer, String> {
        Self::start_configured(None, args)
    }

    /// Starts a server reading `config` (a configuration file's text) before `args`.
    fn start_configured(config: Option<&str>, args: &[&str]) -> Result<RedisServer, String> {
        let bin = Self::binary().ok_or(
            "redis-server is not installed (apt-get install redis-server; .ci/run installs it)",
        )?;
        let mut last_err = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = std::env::temp_dir().join(format!(
                "funnel-redis-{}-{port}-{nanos}",
                std::process::id()
            ));
            fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            // From here on `Drop` kills the child and removes the directory on every return.
            let mut server = RedisServer {
                child: None,
                bin: bin.clone(),
                port,
                dir,
                args: args.iter().map(OsString::from).collect(),
                config: config.map(str::to_owned),
                password: args
                    .windows(2)
                    .find(|w| w[0] == "--requirepass")
                    .map(|w| w[1].to_owned()),
                version: String::new(),
            };
            match server.spawn() {
                Ok(()) => {
                    server.version = server.info_field("server", "redis_version")?;
                    return Ok(server);
                }
                Err(e) => last_err = e,
            }
        }
        Err(format!(
            "redis-server ({}) failed to start 3 times; last error: {last_err}",
            bin.display()
        ))
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new(&self.bin);
        if let Some(text) = &self.config {
            let path = self.dir.join("redis.conf");
            fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            command.arg(path);
        }
        let child = command
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        self.wait_ready(Duration::from_secs(10))
    }

    /// Polls PING until our child answers it, the child exits, or `limit` passes.
    fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let child = self.child.as_mut().ok_or("no child")?;
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "redis-server exited at start ({status}); log: {}",
                    self.log_tail()
                ));
            }
            let pid = child.id().to_string();
            if let Ok(mut con) = self.connection_with(Duration::from_millis(200)) {
                if let Ok(reply) = redis::cmd("PING").query::<String>(&mut con) {
                    let theirs = info_field_on(&mut con, "server", "process_id")?;
                    if reply == "PONG" && theirs == pid {
                        return Ok(());
                    }
                    return Err(format!(
                        "port {} is answered by another redis-server (pid {theirs})",
                        self.port
                    ));
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "redis-server on port {} did not answer PING within {limit:?}; log: {}",
                    self.port,
                    self.log_tail()
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last five lines of the server's log.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// `redis://127.0.0.1:<port>/`, with no password even when the server requires one
    /// (`--requirepass`; this launcher's own connections use it).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The child's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis_version` from `INFO server`, read at start.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// A blocking connection with 2 s to connect and 10 s to read or write.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached.
    pub fn connection(&self) -> Result<redis::Connection, String> {
        let con = self.connection_with(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(10)))
            .and_then(|()| con.set_write_timeout(Some(Duration::from_secs(10))))
            .map_err(|e| format!("setting socket timeouts: {e}"))?;
        Ok(con)
    }

    fn connection_with(&self, connect: Duration) -> Result<redis::Connection, String> {
        let url = match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}/", self.port),
            None => self.url(),
        };
        let client = redis::Client::open(url).map_err(|e| format!("{e}"))?;
        let con = client
            .get_connection_with_timeout(connect)
            .map_err(|e| format!("cannot connect to 127.0.0.1:{}: {e}", self.port))?;
        con.set_read_timeout(Some(Duration::from_secs(1)))
            .map_err(|e| format!("set_read_timeout: {e}"))?;
        Ok(con)
    }

    /// One field of `INFO <section>`.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or has no such field.
    pub fn info_field(&self, section: &str, field: &str) -> Result<String, String> {
        info_field_on(&mut self.connection()?, section, field)
    }

    /// `FLUSHALL`.
    ///
    /// # Errors
    ///
    /// When the server cannot be reached or refuses.
    pub fn flushall(&self) -> Result<(), String> {
        redis::cmd("FLUSHALL")
            .query::<()>(&mut self.connection()?)
            .map_err(|e| format!("FLUSHALL: {e}"))
    }

    fn signal(&self, sig: &str) {
        let Some(pid) = self.pid() else { return };
        // The shell's own `kill` (POSIX requires it built in): no `/bin/kill`, which minimal
        // images lack (it comes with procps on Debian).
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!("kill {sig} {pid}"))
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill {sig} {pid} failed");
    }

    /// Freezes the server (SIGSTOP): its connections stay open and nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws it (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server (SIGKILL); its data is gone (no persistence).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A stopped process dies of SIGKILL too; SIGCONT first so nothing lingers. The
            // shell's built-in `kill`, as in `signal`.
            let _ = Command::new("sh")
                .arg("-c")
                .arg(format!("kill -CONT {}", child.id()))
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if it runs, then starts a new one on the same port with the same
    /// arguments and an empty data set.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.spawn()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Several `redis-server`s joined into one Redis Cluster, every node a master, no replicas.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` nodes (at least 3, Redis Cluster's minimum) and joins them with
    /// `redis-cli --cluster create`, then waits until every node reports `cluster_state:ok`.
    ///
    /// # Errors
    ///
    /// When a node does not start, `redis-cli` is missing or fails, or the cluster is not ok
    /// within 20 s.
    pub fn start(masters: usize) -> Result<RedisCluster, String> {
        let mut nodes = Vec::with_capacity(masters);
        for _ in 0..masters {
            nodes.push(RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "2000",
            ])?);
        }
        let cli = crate::skip::on_path("redis-cli").ok_or("redis-cli is not installed")?;
        let out = Command::new(cli)
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run redis-cli: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster.is_ok() {
            if Instant::now() >= deadline {
                return Err("the cluster did not reach cluster_state:ok within 20 s".into());
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(cluster)
    }

    fn is_ok(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.connection()
                .and_then(|mut con| {
                    redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query::<String>(&mut con)
                        .map_err(|e| e.to_string())
                })
                .is_ok_and(|info| info.contains("cluster_state:ok"))
        })
    }

    /// The nodes' URLs, the seeds of a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}

/// A primary, one replica of it, and a Redis Sentinel monitoring them as
/// [`RedisSentinel::MASTER_NAME`], with a quorum of one, so that killing the primary makes the
/// sentinel promote the replica within a few seconds.
pub struct RedisSentinel {
    primary: RedisServer,
    replica: RedisServer,
    sentinel: RedisServer,
}

impl RedisSentinel {
    /// The name the sentinel monitors the primary under.
    pub const MASTER_NAME: &'static str = "funnel-primary";

    /// Starts the three and waits until the replica follows the primary and the sentinel knows
    /// the replica.
    ///
    /// # Errors
    ///
    /// When a server does not start or the group does not form within 20 s.
    pub fn start() -> Result<RedisSentinel, String> {
        Self::start_with_sentinel_password(None)
    }

    /// As [`start`](Self::start), the sentinel requiring `password` of its clients
    /// (`requirepass` in sentinel mode) when given; the primary and replica require none.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with_sentinel_password(password: Option<&str>) -> Result<RedisSentinel, String> {
        let primary = RedisServer::start()?;
        let port = primary.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])?;
        wait_for(
            Duration::from_secs(20),
            "the replica to follow the primary",
            || {
                replica
                    .info_field("replication", "master_link_status")
                    .is_ok_and(|s| s == "up")
            },
        )?;
        let name = Self::MASTER_NAME;
        let config = format!(
            "sentinel monitor {name} 127.0.0.1 {port} 1\n\
             sentinel down-after-milliseconds {name} 1000\n\
             sentinel failover-timeout {name} 5000\n"
        );
        let mut args = vec!["--sentinel"];
        if let Some(password) = password {
            args.extend(["--requirepass", password]);
        }
        let sentinel = RedisServer::start_configured(Some(&config), &args)?;
        wait_for(
            Duration::from_secs(20),
            "the sentinel to see the replica",
            || {
                sentinel
                    .connection()
                    .and_then(|mut con| {
                        redis::cmd("SENTINEL")
                            .arg("replicas")
                            .arg(name)
                            .query::<Vec<redis::Value>>(&mut con)
                            .map_err(|e| e.to_string())
                    })
                    .is_ok_and(|replicas| !replicas.is_empty())
            },
        )?;
        Ok(RedisSentinel {
            primary,
            replica,
            sentinel,
        })
    }

    /// The primary it started with.
    pub fn primary(&mut self) -> &mut RedisServer {
        &mut self.primary
    }

    /// The replica it started with.
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// The sentinel's loopback port.
    pub fn sentinel_port(&self) -> u16 {
        self.sentinel.port()
    }

    /// The sentinel's URL (`redis://127.0.0.1:<port>/`).
    pub fn sentinel_url(&self) -> String {
        self.sentinel.url()
    }

    /// The primary's port as the sentinel names it now.
    ///
    /// # Errors
    ///
    /// When the sentinel cannot be asked.
    pub fn primary_port(&self) -> Result<u16, String> {
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(Self::MASTER_NAME)
            .query(&mut self.sentinel.connection()?)
            .map_err(|e| format!("SENTINEL get-master-addr-by-name: {e}"))?;
        Ok(port)
    }
}

/// A primary with a replica and a sentinel for a test, or `None` when the test is skipped
/// ([`available_or_skip`]); panics when an installed server's group does not form.
pub fn sentinel() -> Option<RedisSentinel> {
    available_or_skip()
        .then(|| RedisSentinel::start().unwrap_or_else(|e| panic!("a sentinel group: {e}")))
}

/// How the TLS servers of [`RedisTls`], [`RedisTlsCluster`] and [`TlsSentinel`] check their
/// clients and name themselves.
#[derive(Clone, Debug)]
pub struct TlsOptions {
    /// Require every TLS client to show a certificate signed by the authority
    /// (`--tls-auth-clients yes`); otherwise none is asked for.
    pub require_client_certificates: bool,
    /// The server certificate's subjectAltName, as `openssl` writes it: `IP:127.0.0.1` (the
    /// default, the address clients dial) or a name they do not dial, such as
    /// `DNS:redis.invalid`.
    pub server_names: String,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            require_client_certificates: false,
            server_names: "IP:127.0.0.1".into(),
        }
    }
}

/// A certificate authority in a directory of its own, with a server certificate and a client
/// certificate it signed; the directory is removed on drop.
pub struct Certificates {
    authority: Authority,
    server: Pair,
    client: Pair,
    ca_pem: Vec<u8>,
    require_client_certificates: bool,
    /// Held for its drop: the directory of the files above.
    _dir: RemovedOnDrop,
}

/// A directory removed, with everything in it, when dropped.
struct RemovedOnDrop(PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

impl Certificates {
    /// Makes the authority (`ca.crt`), the server's certificate for `options.server_names`
    /// (`server.crt`, `server.key`) and a client certificate (`client.crt`, `client.key`),
    /// with [`Authority`] and the `openssl` program at `openssl`.
    ///
    /// The server's certificate is for client authentication too: a server shows it when it
    /// connects to another (a cluster's bus, a sentinel's link to the primary), and under
    /// `require_client_certificates` that server checks it as a client's.
    ///
    /// # Errors
    ///
    /// When `openssl` fails.
    pub fn make(openssl: &Path, options: &TlsOptions) -> Result<Certificates, String> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path =
            std::env::temp_dir().join(format!("funnel-redis-tls-{}-{nanos}", std::process::id()));
        fs::create_dir_all(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        // From here on dropping `dir` removes the directory on every return.
        let dir = RemovedOnDrop(path);
        let authority = Authority::make(openssl, &dir.0, "ca")?;
        let server = authority.issue("server", &[&options.server_names], Usage::ServerAndClient)?;
        // Nothing checks the client's name; the subjectAltName is there because every
        // certificate the authority issues has one.
        let client = authority.issue("client", &["DNS:client.invalid"], Usage::Client)?;
        let ca_pem = fs::read(authority.cert()).map_err(|e| format!("reading ca.crt: {e}"))?;
        Ok(Certificates {
            authority,
            server,
            client,
            ca_pem,
            require_client_certificates: options.require_client_certificates,
            _dir: dir,
        })
    }

    /// `redis-server`'s arguments to listen for TLS on `tls_port` with these certificates, and
    /// to check clients as the options say. A server's connections to other servers (a
    /// cluster's bus, a sentinel's to the primary) show the server's certificate.
    fn server_args(&self, tls_port: u16) -> Vec<String> {
        let path = |file: &Path| file.to_string_lossy().into_owned();
        let auth_clients = if self.require_client_certificates {
            "yes"
        } else {
            "no"
        };
        [
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            path(&self.server.cert),
            "--tls-key-file".into(),
            path(&self.server.key),
            "--tls-ca-cert-file".into(),
            path(&self.authority.cert()),
            "--tls-auth-clients".into(),
            auth_clients.into(),
        ]
        .into()
    }

    /// The certificate authority's certificate (PEM), which signed the server's and the
    /// client's.
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca_pem
    }

    /// The certificate authority's certificate file.
    pub fn ca_file(&self) -> PathBuf {
        self.authority.cert()
    }

    /// The client certificate file (PEM), signed by the authority.
    pub fn client_cert_file(&self) -> PathBuf {
        self.client.cert.clone()
    }

    /// The client certificate's private key file (PEM).
    pub fn client_key_file(&self) -> PathBuf {
        self.client.key.clone()
    }

    /// The client certificate (PEM).
    ///
    /// # Panics
    ///
    /// When the file cannot be read.
    pub fn client_cert_pem(&self) -> Vec<u8> {
        fs::read(&self.client.cert).expect("the client certificate")
    }

    /// The client certificate's private key (PEM).
    ///
    /// # Panics
    ///
    /// When the file cannot be read.
    pub fn client_key_pem(&self) -> Vec<u8> {
        fs::read(&self.client.key).expect("the client key")
    }
}

/// A server that also listens for TLS (`--tls-port`), with [`Certificates`] made for it.
pub struct RedisTls {
    server: RedisServer,
    tls_port: u16,
    certificates: Certificates,
}

impl RedisTls {
    /// Makes the certificates with `openssl` (at `openssl`) and starts the server with the
    /// default [`TlsOptions`]; its plain port stays open for the launcher's own checks.
    ///
    /// # Errors
    ///
    /// When `openssl` fails or the server does not start.
    pub fn start(openssl: &Path) -> Result<RedisTls, String> {
        Self::start_with(openssl, &TlsOptions::default())
    }

    /// As [`start`](Self::start), with `options`.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with(openssl: &Path, options: &TlsOptions) -> Result<RedisTls, String> {
        let certificates = Certificates::make(openssl, options)?;
        let tls_port = free_port()?;
        let args = certificates.server_args(tls_port);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = RedisServer::start_with(&args)?;
        Ok(RedisTls {
            server,
            tls_port,
            certificates,
        })
    }

    /// `rediss://127.0.0.1:<tls port>/`.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }

    /// The TLS port.
    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }

    /// The certificates: the authority's, the server's and a client's.
    pub fn certificates(&self) -> &Certificates {
        &self.certificates
    }

    /// The certificate authority's certificate (PEM), which signed the server's.
    pub fn ca_pem(&self) -> &[u8] {
        self.certificates.ca_pem()
    }

    /// The certificate authority's certificate file.
    pub fn ca_file(&self) -> PathBuf {
        self.certificates.ca_file()
    }

    /// The client certificate file (PEM), signed by the authority.
    pub fn client_cert_file(&self) -> PathBuf {
        self.certificates.client_cert_file()
    }

    /// The client certificate's private key file (PEM).
    pub fn client_key_file(&self) -> PathBuf {
        self.certificates.client_key_file()
    }

    /// The client certificate (PEM).
    pub fn client_cert_pem(&self) -> Vec<u8> {
        self.certificates.client_cert_pem()
    }

    /// The client certificate's private key (PEM).
    pub fn client_key_pem(&self) -> Vec<u8> {
        self.certificates.client_key_pem()
    }

    /// The server, for inspection on its plain port.
    pub fn server(&self) -> &RedisServer {
        &self.server
    }

    /// Starts a Redis Sentinel that monitors this server, at its TLS port, as
    /// [`RedisSentinel::MASTER_NAME`] (quorum one, no replica), listening for TLS itself with
    /// the same certificates and options, and reaching the server over TLS
    /// (`tls-replication yes`).
    ///
    /// # Errors
    ///
    /// When the sentinel does not start or does not answer for the name within 20 s.
    pub fn start_sentinel(&self) -> Result<TlsSentinel, String> {
        let name = RedisSentinel::MASTER_NAME;
        let config = format!(
            "sentinel monitor {name} 127.0.0.1 {} 1\n\
             sentinel down-after-milliseconds {name} 1000\n",
            self.tls_port
        );
        let tls_port = free_port()?;
        let mut args = vec![
            "--sentinel".to_owned(),
            "--tls-replication".into(),
            "yes".into(),
        ];
        args.extend(self.certificates.server_args(tls_port));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = RedisServer::start_configured(Some(&config), &args)?;
        wait_for(
            Duration::from_secs(20),
            "the sentinel to name the primary",
            || {
                server
                    .connection()
                    .and_then(|mut con| {
                        redis::cmd("SENTINEL")
                            .arg("get-master-addr-by-name")
                            .arg(name)
                            .query::<Option<(String, u16)>>(&mut con)
                            .map_err(|e| e.to_string())
                    })
                    .is_ok_and(|addr| addr.is_some())
            },
        )?;
        Ok(TlsSentinel { server, tls_port })
    }
}

/// A Redis Sentinel listening for TLS, from [`RedisTls::start_sentinel`].
pub struct TlsSentinel {
    server: RedisServer,
    tls_port: u16,
}

impl TlsSentinel {
    /// The TLS port.
    pub fn tls_port(&self) -> u16 {
        self.tls_port
    }

    /// `rediss://127.0.0.1:<tls port>/`.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }

    /// The sentinel, for inspection on its plain port.
    pub fn server(&self) -> &RedisServer {
        &self.server
    }
}

/// A Redis Cluster whose nodes listen for TLS and talk to each other over it
/// (`--tls-cluster yes`), every node a master, all with the same [`Certificates`]; the plain
/// ports stay open for the launcher's own checks.
pub struct RedisTlsCluster {
    nodes: Vec<RedisServer>,
    tls_ports: Vec<u16>,
    certificates: Certificates,
}

impl RedisTlsCluster {
    /// Makes the certificates, starts `masters` nodes (at least 3) and joins them with
    /// `redis-cli --tls --cluster create` on their TLS ports, then waits until every node
    /// reports `cluster_state:ok`. Each node's cluster bus port is chosen free, not derived
    /// from its port.
    ///
    /// # Errors
    ///
    /// When `openssl` fails, a node does not start, `redis-cli` is missing or fails, or the
    /// cluster is not ok within 20 s.
    pub fn start(
        openssl: &Path,
        masters: usize,
        options: &TlsOptions,
    ) -> Result<RedisTlsCluster, String> {
        let certificates = Certificates::make(openssl, options)?;
        let mut nodes = Vec::with_capacity(masters);
        let mut tls_ports = Vec::with_capacity(masters);
        for _ in 0..masters {
            let tls_port = free_port()?;
            let mut args: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "2000",
                "--tls-cluster",
                "yes",
                "--cluster-port",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            args.push(free_port()?.to_string());
            args.extend(certificates.server_args(tls_port));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            nodes.push(RedisServer::start_with(&args)?);
            tls_ports.push(tls_port);
        }
        let cli = crate::skip::on_path("redis-cli").ok_or("redis-cli is not installed")?;
        let out = Command::new(cli)
            .arg("--tls")
            .arg("--cacert")
            .arg(certificates.ca_file())
            .arg("--cert")
            .arg(certificates.client_cert_file())
            .arg("--key")
            .arg(certificates.client_key_file())
            .arg("--cluster")
            .arg("create")
            .args(tls_ports.iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run redis-cli: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --tls --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        wait_for(Duration::from_secs(20), "cluster_state:ok", || {
            nodes.iter().all(|n| {
                n.connection()
                    .and_then(|mut con| {
                        redis::cmd("CLUSTER")
                            .arg("INFO")
                            .query::<String>(&mut con)
                            .map_err(|e| e.to_string())
                    })
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            })
        })?;
        Ok(RedisTlsCluster {
            nodes,
            tls_ports,
            certificates,
        })
    }

    /// The nodes' `rediss://` URLs, the seeds of a cluster client.
    pub fn tls_urls(&self) -> Vec<String> {
        self.tls_ports
            .iter()
            .map(|p| format!("rediss://127.0.0.1:{p}/"))
            .collect()
    }

    /// The nodes, for inspection on their plain ports.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The certificates every node has.
    pub fn certificates(&self) -> &Certificates {
        &self.certificates
    }
}

/// `openssl` for a TLS test, or `None` when the test is skipped: no `redis-server`
/// ([`available_or_skip`]) or no `openssl` to make certificates.
fn openssl_or_skip() -> Option<PathBuf> {
    if !available_or_skip() {
        return None;
    }
    crate::skip::program("openssl", "apt-get install openssl")
}

/// A server listening for TLS for a test, or `None` when the test is skipped (no
/// `redis-server`, or no `openssl` to make its certificates); panics when it does not start.
pub fn tls_server() -> Option<RedisTls> {
    tls_server_with(&TlsOptions::default())
}

/// [`tls_server`] with `options`.
pub fn tls_server_with(options: &TlsOptions) -> Option<RedisTls> {
    let openssl = openssl_or_skip()?;
    Some(
        RedisTls::start_with(&openssl, options)
            .unwrap_or_else(|e| panic!("a TLS redis-server: {e}")),
    )
}

/// A TLS cluster of `masters` nodes for a test, or `None` when the test is skipped (as
/// [`tls_server`]); panics when an installed server's cluster does not form.
pub fn tls_cluster(masters: usize, options: &TlsOptions) -> Option<RedisTlsCluster> {
    let openssl = openssl_or_skip()?;
    Some(
        RedisTlsCluster::start(&openssl, masters, options)
            .unwrap_or_else(|e| panic!("a {masters}-master TLS cluster: {e}")),
    )
}

/// Polls `done` every 50 ms until it holds or `limit` passes.
fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() >= deadline {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// Why a Redis-backed test is skipped.
const NOT_INSTALLED: &str = "redis-server is not on PATH (apt-get install redis-server)";

/// Whether a Redis-backed test can run here: `redis-server` is on `PATH`. When it is not, the
/// test is skipped ([`skip`](crate::skip::skip): it says so, and is counted), or fails under
/// `FUNNEL_REQUIRE_TOOLS=1`.
pub fn available_or_skip() -> bool {
    if RedisServer::binary().is_some() {
        return true;
    }
    crate::skip::skip(NOT_INSTALLED);
    false
}

/// A private server for a test, or `None` when the test is skipped ([`available_or_skip`]);
/// panics when an installed server does not start.
pub fn server() -> Option<RedisServer> {
    server_with(&[])
}

/// [`server`] with further command-line arguments.
pub fn server_with(args: &[&str]) -> Option<RedisServer> {
    available_or_skip().then(|| RedisServer::start_with(args).unwrap_or_else(|e| panic!("{e}")))
}

/// A private cluster of `masters` nodes for a test, or `None` when the test is skipped
/// ([`available_or_skip`]); panics when an installed server's cluster does not form.
pub fn cluster(masters: usize) -> Option<RedisCluster> {
    available_or_skip().then(|| {
        RedisCluster::start(masters).unwrap_or_else(|e| panic!("a {masters}-master cluster: {e}"))
    })
}

/// A blocking connection for a test's own inspection of `server`; panics when it cannot
/// connect.
pub fn inspect(server: &RedisServer) -> redis::Connection {
    server
        .connection()
        .unwrap_or_else(|e| panic!("a connection: {e}"))
}

/// One field of `INFO <section>` on a connection.
///
/// # Errors
///
/// When `INFO` fails or the field is absent.
pub fn info_field_on(
    con: &mut redis::Connection,
    section: &str,
    field: &str,
) -> Result<String, String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query(con)
        .map_err(|e| format!("INFO {section}: {e}"))?;
    let prefix = format!("{field}:");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
        .ok_or_else(|| format!("INFO {section} has no field {field}"))
}
