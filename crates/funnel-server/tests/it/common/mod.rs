//! What the server tests share: the `funnel-server` binary started as a process on free
//! loopback ports, a tonic client, requests built in one line, a plain HTTP/1.1 client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use proto::rate_limit_service_client::RateLimitServiceClient;
use proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

/// The Envoy messages and the tonic client, from the code the build script generated for the
/// library (the library keeps them to itself).
#[path = "../../../src/proto.rs"]
pub mod proto;

/// A running server, killed when dropped.
pub struct Server {
    pub child: Child,
    /// The gRPC address; unspecified when gRPC is on a Unix socket (`grpc_uds`).
    pub grpc: SocketAddr,
    /// The gRPC listener's Unix socket, when it is on one (`--grpc-uds`).
    pub grpc_uds: Option<PathBuf>,
    pub http: SocketAddr,
    pub stderr: PathBuf,
    /// The line the server printed once bound.
    pub line: String,
}

/// A fresh directory under the target directory for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "funnel-server-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `yaml` as `dir/name` atomically (a rename over the old file, as editors and
/// configuration tools do).
pub fn write_config(dir: &Path, name: &str, yaml: &str) -> PathBuf {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

impl Server {
    /// Starts the binary on `config` with free ports and `extra` arguments, and waits for the
    /// line naming its addresses.
    pub fn start(config: &Path, extra: &[&str]) -> Server {
        Server::try_start(config, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// As [`start`](Self::start); `Err` with the server's stderr when it exits instead.
    pub fn try_start(config: &Path, extra: &[&str]) -> Result<Server, String> {
        let stderr = config.with_extension(format!("stderr-{}", unique()));
        Server::launch(Server::command(Some(config), extra), stderr)
    }

    /// The binary on free loopback ports with `extra` arguments, logging at `info`, reading
    /// `config` when given; without one, `extra` or the environment names the source (xDS,
    /// envoyproxy/ratelimit's variables). Not started: [`launch`](Self::launch) starts it.
    pub fn command(config: Option<&Path>, extra: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_funnel-server"));
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        command
            .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(extra)
            .env("RUST_LOG", "info");
        command
    }

    /// Starts `command` (the binary, arguments and environment set by the caller), its stderr
    /// in `stderr`, and waits for the line naming its addresses.
    pub fn launch(mut command: Command, stderr: PathBuf) -> Result<Server, String> {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("the funnel-server binary starts");
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let read = out.read_line(&mut line).unwrap_or(0);
        if read == 0 {
            let status = child.wait().unwrap();
            let err = std::fs::read_to_string(&stderr).unwrap_or_default();
            return Err(format!("funnel-server exited ({status}): {err}"));
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = out.read_to_end(&mut sink);
        });
        let field = |name: &str| -> SocketAddr {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        };
        let grpc = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("grpc="))
            .unwrap_or_else(|| panic!("no grpc= in {line:?}"));
        let (grpc, grpc_uds) = match grpc.strip_prefix("unix:") {
            Some(path) => (
                SocketAddr::from(([0, 0, 0, 0], 0)),
                Some(PathBuf::from(path)),
            ),
            None => (field("grpc="), None),
        };
        Ok(Server {
            grpc,
            grpc_uds,
            http: field("http="),
            child,
            stderr,
            line,
        })
    }

    /// The address the server printed for `listener` (`debug`, `prometheus`), if any.
    pub fn listening(&self, listener: &str) -> Option<SocketAddr> {
        let prefix = format!("{listener}=");
        self.line
            .split_whitespace()
            .find_map(|w| w.strip_prefix(prefix.as_str()))
            .and_then(|a| a.parse().ok())
    }

    /// A connected gRPC client.
    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("the gRPC port accepts")
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        // SAFETY: kill(2) with a pid this test spawned and still owns (not yet reaped).
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0, "SIGTERM delivered");
    }

    /// Waits for the process to exit, at most `limit`; its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// `GET path` on the HTTP port: (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        http(self.http, "GET", path, "")
    }

    /// `POST /json`: (status, body).
    pub fn post_json(&self, body: &str) -> (u16, String) {
        http(self.http, "POST", "/json", body)
    }

    /// One counter of `/metrics`: the value of the line starting with `series ` exactly.
    pub fn metric(&self, series: &str) -> u64 {
        let (_, body) = self.get("/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no {series} in\n{body}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// Polls `/metrics` until `series` reaches `value`, at most 10 s.
    pub fn wait_metric(&self, series: &str, value: u64) {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self.metric(series);
            if v >= value {
                assert_eq!(v, value, "{series}");
                return;
            }
            assert!(
                Instant::now() < end,
                "{series} stayed at {v}, expected {value}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unique() -> usize {
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A minimal HTTP/1.1 exchange with `Connection: close`.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("the HTTP port accepts");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A descriptor of `(key, value)` entries.
pub fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

/// The same descriptor charged `n` units on its own (`hits_addend`, 0 = check only).
pub fn with_hits(mut d: RateLimitDescriptor, n: u64) -> RateLimitDescriptor {
    d.hits_addend = Some(n);
    d
}

/// The same descriptor under a limit sent with the request.
pub fn with_limit(
    mut d: RateLimitDescriptor,
    requests_per_unit: u32,
    unit: i32,
) -> RateLimitDescriptor {
    d.limit = Some(RateLimitOverride {
        requests_per_unit,
        unit,
    });
    d
}

/// A request.
pub fn req(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// `OK` = 1, `OVER_LIMIT` = 2.
pub const OK: i32 = 1;
pub const OVER: i32 = 2;

/// Calls and returns the response, panicking on a gRPC error.
pub async fn call(
    c: &mut RateLimitServiceClient<Channel>,
    r: RateLimitRequest,
) -> RateLimitResponse {
    c.should_rate_limit(r)
        .await
        .expect("the call succeeds")
        .into_inner()
}

/// The codes of a response: (overall, per descriptor).
pub fn codes(r: &RateLimitResponse) -> (i32, Vec<i32>) {
    (r.overall_code, r.statuses.iter().map(|s| s.code).collect())
}

/// How many of `n` one-unit calls for one descriptor are allowed.
pub async fn admitted(
    c: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    d: &RateLimitDescriptor,
    n: usize,
) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        if call(c, req(domain, vec![d.clone()])).await.overall_code == OK {
            ok += 1;
        }
    }
    ok
}

/// Starts the binary on `config`, not watching it, with its statistics flushed often
/// (`--stats-flush-interval 100ms`) to a UDP socket of the test's standing in for the statsd
/// or DogStatsD agent, and `extra` arguments (`--dogstatsd`, ...): the server and the socket,
/// for [`receive_until`].
pub fn start_with_statsd(config: &Path, extra: &[&str]) -> (Server, UdpSocket) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = socket.local_addr().unwrap().to_string();
    let mut args = vec![
        "--no-watch",
        "--statsd",
        target.as_str(),
        "--stats-flush-interval",
        "100ms",
    ];
    args.extend_from_slice(extra);
    (Server::start(config, &args), socket)
}

/// The calls the statsd and DogStatsD tests count (against `metrics::CONFIG`): three for
/// `client` (two within the limit, one over), one for the nested rule with a detailed value.
pub async fn statsd_calls(s: &Server) {
    let mut c = s.client().await;
    for _ in 0..3 {
        call(&mut c, req("shop", vec![desc(&[("client", "10.0.0.1")])])).await;
    }
    call(
        &mut c,
        req("shop", vec![desc(&[("path", "/cart"), ("user", "bo:b")])]),
    )
    .await;
}

/// Asserts that every line of `want` arrives on `socket` (within [`receive_until`]'s 10 s).
pub fn assert_received(socket: &UdpSocket, want: &[&str]) {
    let lines = receive_until(socket, want);
    for w in want {
        assert!(lines.iter().any(|l| l == w), "{w} not in {lines:#?}");
    }
}

/// Reads datagrams from `socket` (a statsd or DogStatsD receiver) until every line of `want`
/// has arrived, at most 10 s; the lines received.
pub fn receive_until(socket: &UdpSocket, want: &[&str]) -> Vec<String> {
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let mut lines: Vec<String> = Vec::new();
    let mut buf = [0u8; 65_536];
    while Instant::now() < end && !want.iter().all(|w| lines.iter().any(|l| l == w)) {
        if let Ok(n) = socket.recv(&mut buf) {
            let text = std::str::from_utf8(&buf[..n]).expect("statsd lines are text");
            lines.extend(text.lines().map(str::to_owned));
        }
    }
    lines
}
