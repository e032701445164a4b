//! The forward-auth endpoint through the real nginx and Caddy, configured with the files of
//! `deploy/` (only their addresses replaced): exact admissions per client, the 429 the client
//! sees, forged forwarding headers ignored, one limit shared by several proxies, and what each
//! proxy does while funnel-server is down. Skipped, with a notice, without nginx or Caddy.
//!
//! The clients connect from their own loopback addresses (127.0.0.2, 127.0.0.3, ...), so that
//! each proxy sees distinct clients; every program listens on 127.0.0.1.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{scratch, Server};
use funnel_testkit::skip;

/// The limit of `deploy/rules/web.yaml`: per client, per minute, all at once.
const LIMIT: usize = 5;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

/// A free loopback port (bound, read, released: the proxies bind it next).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A repository file with its example addresses replaced by this test's.
fn templated(path: &str, addrs: &[(&str, String)]) -> String {
    let mut text = std::fs::read_to_string(deploy(path)).unwrap();
    for (from, to) in addrs {
        assert!(text.contains(from), "{path} names {from}");
        text = text.replace(from, to);
    }
    text
}

/// The plain application behind the proxies: 200 "ok" to every request, counted.
struct Upstream {
    addr: SocketAddr,
    served: Arc<AtomicUsize>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let count = count.clone();
                std::thread::spawn(move || serve_upstream(conn, &count));
            }
        });
        Upstream { addr, served }
    }
}

/// Answers every request of one connection until it closes.
fn serve_upstream(conn: TcpStream, served: &AtomicUsize) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut content_length = 0usize;
        let mut first = true;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" && !first {
                break;
            }
            first = false;
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    content_length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; content_length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        served.fetch_add(1, Ordering::Relaxed);
        if writer
            .write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n",
            )
            .is_err()
        {
            return;
        }
    }
}

/// A proxy process, stopped when dropped.
struct Proxy {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Proxy {
    fn wait_ready(mut self) -> Proxy {
        let end = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(self.addr).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the proxy exited ({status}): {}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < end,
                "the proxy never listened on {}",
                self.addr
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self
    }

    /// nginx with `deploy/nginx/funnel.conf` inside a main configuration of the test's own
    /// (pid, logs and temporary files in `dir`, in the foreground).
    fn nginx(bin: &Path, dir: &Path, funnel: SocketAddr, upstream: SocketAddr) -> Proxy {
        Proxy::nginx_with(bin, dir, funnel, upstream, false)
    }

    /// As [`nginx`](Self::nginx), with the README's fail-open line uncommented if `fail_open`.
    fn nginx_with(
        bin: &Path,
        dir: &Path,
        funnel: SocketAddr,
        upstream: SocketAddr,
        fail_open: bool,
    ) -> Proxy {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut site = templated(
            "nginx/funnel.conf",
            &[
                ("127.0.0.1:8000", addr.to_string()),
                ("127.0.0.1:8080", funnel.to_string()),
                ("127.0.0.1:3000", upstream.to_string()),
            ],
        );
        if fail_open {
            let line = "# error_page 500 = @funnel_unavailable;";
            assert!(site.contains(line));
            site = site.replace(line, "error_page 500 = @funnel_unavailable;");
        }
        std::fs::write(dir.join("funnel.conf"), site).unwrap();
        // Running as root (a container), the workers would switch to nobody: stay root.
        // SAFETY: geteuid(2) has no preconditions.
        let user = if unsafe { libc::geteuid() } == 0 {
            "user root;"
        } else {
            ""
        };
        let d = dir.display();
        let main = format!(
            "{user}\ndaemon off;\nmaster_process on;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             include {d}/funnel.conf;\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), main).unwrap();
        let log = dir.join("stderr.log");
        let child = Command::new(bin)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("nginx starts");
        Proxy { child, addr, log }.wait_ready()
    }

    /// Caddy with `deploy/caddy/Caddyfile` (its data and configuration directories in `dir`).
    fn caddy(bin: &Path, dir: &Path, funnel: SocketAddr, upstream: SocketAddr) -> Proxy {
        Proxy::caddy_with(bin, dir, funnel, upstream, false)
    }

    /// As [`caddy`](Self::caddy), with the README's `handle_errors` block uncommented if
    /// `fail_open`.
    fn caddy_with(
        bin: &Path,
        dir: &Path,
        funnel: SocketAddr,
        upstream: SocketAddr,
        fail_open: bool,
    ) -> Proxy {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut file = templated(
            "caddy/Caddyfile",
            &[
                (":8001", format!(":{}", addr.port())),
                ("127.0.0.1:8080", funnel.to_string()),
                ("127.0.0.1:3000", upstream.to_string()),
            ],
        );
        if fail_open {
            let mut inside = false;
            let mut lines = Vec::new();
            for line in file.lines() {
                inside |= line.trim_start().starts_with("# handle_errors {");
                if inside {
                    lines.push(line.replacen("# ", "", 1));
                    inside = line.trim() != "# }";
                } else {
                    lines.push(line.to_owned());
                }
            }
            let open = lines.join("\n");
            assert!(open.contains("\thandle_errors {"), "{open}");
            file = open;
        }
        let caddyfile = dir.join("Caddyfile");
        std::fs::write(&caddyfile, file).unwrap();
        let log = dir.join("stderr.log");
        let child = Command::new(bin)
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&caddyfile)
            .env("HOME", dir)
            .env("XDG_DATA_HOME", dir.join("data"))
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("caddy starts");
        Proxy { child, addr, log }.wait_ready()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // SIGTERM: nginx's master stops its workers; Caddy stops. Then reaped, or killed.
        // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One response as the client saw it.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// A TCP connection to `to` from the loopback address `from`.
fn connect_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let stream = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(from, 0)).unwrap();
        socket.connect(to).await.unwrap()
    });
    let std = stream.into_std().unwrap();
    std.set_nonblocking(false).unwrap();
    std
}

/// `GET path` from `from` through the proxy at `to`, with `extra` header lines.
fn get(from: &str, to: SocketAddr, path: &str, extra: &[(&str, &str)]) -> Reply {
    let mut s = connect_from(from.parse().unwrap(), to);
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: app.example\r\nConnection: close\r\n");
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// funnel-server with the repository's rules and forward-auth file.
fn funnel(dir: &Path) -> Server {
    funnel_with(dir, &[])
}

/// As [`funnel`], with `extra` arguments.
fn funnel_with(dir: &Path, extra: &[&str]) -> Server {
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::copy(deploy("rules/web.yaml"), rules.join("web.yaml")).unwrap();
    let fa = deploy("forward-auth.yaml");
    let args = ["--no-watch", "--forward-auth", fa.to_str().unwrap()];
    Server::start(&rules, &[&args[..], extra].concat())
}

/// The proxy binaries, or `None` after the skip notice.
fn nginx() -> Option<PathBuf> {
    skip::program("nginx", "apt-get install nginx")
}

fn caddy() -> Option<PathBuf> {
    skip::program("caddy", "apt-get install caddy")
}

/// Sends `LIMIT + 3` requests from `client` through `proxy`, each with a forged
/// `X-Forwarded-For` of its own, and checks exactly `LIMIT` pass, then 429s as the README says.
fn exact_limit(proxy: &Proxy, client: &str, upstream: &Upstream) {
    let before = upstream.served.load(Ordering::Relaxed);
    let mut statuses = Vec::new();
    for i in 0..LIMIT + 3 {
        let forged = format!("203.0.113.{i}");
        let r = get(
            client,
            proxy.addr,
            &format!("/page/{i}?q=1"),
            &[("X-Forwarded-For", &forged), ("X-Real-IP", &forged)],
        );
        if r.status == 200 {
            assert_eq!(r.body, "ok\n", "the upstream's answer");
        } else {
            assert_eq!(r.status, 429, "{r:?}");
            let retry: u64 = r
                .header("retry-after")
                .unwrap_or_else(|| panic!("Retry-After in {r:?}"))
                .parse()
                .unwrap();
            // 5 per minute: the next one in 12 s.
            assert!((1..=12).contains(&retry), "{r:?}");
            assert!(
                r.header("ratelimit").is_some_and(|v| v.contains("r=0")),
                "{r:?}"
            );
            assert!(
                r.header("ratelimit-policy")
                    .is_some_and(|v| v.contains("q=5") && v.contains("w=60")),
                "{r:?}"
            );
        }
        statuses.push(r.status);
    }
    let mut want = vec![200; LIMIT];
    want.extend([429; 3]);
    assert_eq!(statuses, want, "from {client}");
    assert_eq!(
        upstream.served.load(Ordering::Relaxed) - before,
        LIMIT,
        "only admitted requests reach the upstream"
    );
}

#[test]
fn nginx_admits_exactly_the_limit_per_client_and_ignores_forged_headers() {
    let Some(bin) = nginx() else { return };
    let dir = scratch("fa-nginx");
    let server = funnel(&dir);
    let upstream = Upstream::start();
    let ngx_dir = dir.join("nginx");
    std::fs::create_dir_all(&ngx_dir).unwrap();
    let proxy = Proxy::nginx(&bin, &ngx_dir, server.http, upstream.addr);
    exact_limit(&proxy, "127.0.0.2", &upstream);
    // Another client keeps its own count.
    exact_limit(&proxy, "127.0.0.3", &upstream);
    // An admitted response carries funnel-server's fields too.
    let r = get("127.0.0.4", proxy.addr, "/", &[]);
    assert_eq!(r.status, 200);
    assert!(
        r.header("ratelimit").is_some_and(|v| v.contains("r=4")),
        "{r:?}"
    );
}

#[test]
fn caddy_admits_exactly_the_limit_per_client_and_ignores_forged_headers() {
    let Some(bin) = caddy() else { return };
    let dir = scratch("fa-caddy");
    let server = funnel(&dir);
    let upstream = Upstream::start();
    let caddy_dir = dir.join("caddy");
    std::fs::create_dir_all(&caddy_dir).unwrap();
    let proxy = Proxy::caddy(&bin, &caddy_dir, server.http, upstream.addr);
    exact_limit(&proxy, "127.0.0.2", &upstream);
    exact_limit(&proxy, "127.0.0.3", &upstream);
}

#[test]
fn two_nginx_and_a_caddy_share_one_limit() {
    let Some(ngx) = nginx() else { return };
    let Some(cad) = caddy() else { return };
    let dir = scratch("fa-shared");
    let server = funnel(&dir);
    let upstream = Upstream::start();
    let mut proxies = Vec::new();
    for (i, kind) in ["nginx", "nginx", "caddy"].iter().enumerate() {
        let d = dir.join(format!("{kind}-{i}"));
        std::fs::create_dir_all(&d).unwrap();
        proxies.push(if *kind == "nginx" {
            Proxy::nginx(&ngx, &d, server.http, upstream.addr)
        } else {
            Proxy::caddy(&cad, &d, server.http, upstream.addr)
        });
    }
    // One client's requests spread over the three proxies: one count.
    let statuses: Vec<u16> = (0..LIMIT + 4)
        .map(|i| get("127.0.0.5", proxies[i % 3].addr, "/", &[]).status)
        .collect();
    let mut want = vec![200; LIMIT];
    want.extend([429; 4]);
    assert_eq!(statuses, want);
}

#[test]
fn with_funnel_server_down_nginx_and_caddy_fail_closed() {
    let Some(ngx) = nginx() else { return };
    let Some(cad) = caddy() else { return };
    let dir = scratch("fa-down");
    let mut server = funnel(&dir);
    let upstream = Upstream::start();
    let (nd, cd) = (dir.join("nginx"), dir.join("caddy"));
    std::fs::create_dir_all(&nd).unwrap();
    std::fs::create_dir_all(&cd).unwrap();
    let n = Proxy::nginx(&ngx, &nd, server.http, upstream.addr);
    let c = Proxy::caddy(&cad, &cd, server.http, upstream.addr);
    assert_eq!(get("127.0.0.2", n.addr, "/", &[]).status, 200);
    assert_eq!(get("127.0.0.2", c.addr, "/", &[]).status, 200);
    server.terminate();
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
    let before = upstream.served.load(Ordering::Relaxed);
    // As the README says: nginx answers 500, Caddy 502; nothing reaches the upstream.
    assert_eq!(get("127.0.0.2", n.addr, "/", &[]).status, 500);
    assert_eq!(get("127.0.0.2", c.addr, "/", &[]).status, 502);
    assert_eq!(upstream.served.load(Ordering::Relaxed), before);
}

/// Hostile requests through each proxy: whatever the proxy makes of them, funnel-server's
/// answer is an admission or a denial, never an error (nginx would turn any other status
/// into a 500, Caddy would pass it on).
#[test]
fn hostile_requests_through_the_proxies_get_no_5xx() {
    let Some(ngx) = nginx() else { return };
    let Some(cad) = caddy() else { return };
    let dir = scratch("fa-hostile");
    let server = funnel(&dir);
    let upstream = Upstream::start();
    let (nd, cd) = (dir.join("nginx"), dir.join("caddy"));
    std::fs::create_dir_all(&nd).unwrap();
    std::fs::create_dir_all(&cd).unwrap();
    let proxies = [
        Proxy::nginx(&ngx, &nd, server.http, upstream.addr),
        Proxy::caddy(&cad, &cd, server.http, upstream.addr),
    ];
    let long = "9".repeat(6000);
    let many = vec!["10.0.0.1"; 500].join(",");
    let hostile: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "/",
            vec![("X-Forwarded-For", "not an address, [::1]:80, 999.1.1.1")],
        ),
        ("/", vec![("X-Forwarded-For", &long)]),
        ("/", vec![("X-Forwarded-For", &many)]),
        (
            "/",
            vec![("X-Forwarded-Uri", &long), ("X-Forwarded-Method", &long)],
        ),
        ("/", vec![("X-Forwarded-Host", "\u{7f}\u{1}")]),
        ("/%ff%fe/../..//?a=%00", vec![]),
        ("/", vec![("Forwarded", "for=_hidden;by=\"[::1\"")]),
        (
            "/",
            vec![
                ("X-Forwarded-For", ""),
                ("X-Real-IP", "::ffff:1.2.3.4%eth0"),
            ],
        ),
    ];
    for proxy in &proxies {
        for (i, (path, headers)) in hostile.iter().enumerate() {
            // A fresh client each time: the limit never hides the answer.
            let client = format!("127.0.1.{}", i + 1);
            let r = get(&client, proxy.addr, path, headers);
            assert!(
                (200..500).contains(&r.status),
                "request {i} through {}: {r:?}\n{}",
                proxy.addr,
                server.log()
            );
        }
    }
}

#[test]
fn with_the_fail_open_lines_uncommented_nginx_and_caddy_fail_open() {
    let Some(ngx) = nginx() else { return };
    let Some(cad) = caddy() else { return };
    let dir = scratch("fa-open");
    let mut server = funnel(&dir);
    let upstream = Upstream::start();
    let (nd, cd) = (dir.join("nginx"), dir.join("caddy"));
    std::fs::create_dir_all(&nd).unwrap();
    std::fs::create_dir_all(&cd).unwrap();
    let n = Proxy::nginx_with(&ngx, &nd, server.http, upstream.addr, true);
    let c = Proxy::caddy_with(&cad, &cd, server.http, upstream.addr, true);
    // Up: the limit holds through both.
    let statuses: Vec<u16> = (0..LIMIT + 1)
        .map(|i| get("127.0.0.6", [n.addr, c.addr][i % 2], "/", &[]).status)
        .collect();
    let mut want = vec![200; LIMIT];
    want.push(429);
    assert_eq!(statuses, want);
    server.terminate();
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
    // Down: requests go upstream.
    let before = upstream.served.load(Ordering::Relaxed);
    let r = get("127.0.0.6", n.addr, "/", &[]);
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"), "{r:?}");
    let r = get("127.0.0.6", c.addr, "/", &[]);
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"), "{r:?}");
    assert_eq!(upstream.served.load(Ordering::Relaxed), before + 2);
}

/// The fleet mode through the endpoint: two funnel-servers sharing one Redis, each behind its
/// own nginx, admit one client's limit once between them.
#[test]
fn two_funnel_servers_on_one_redis_behind_two_nginx_share_the_limit() {
    let Some(ngx) = nginx() else { return };
    let Some(redis) = funnel_testkit::redis_server::server() else {
        return;
    };
    let dir = scratch("fa-fleet");
    let url = redis.url();
    // A generous timeout: on a loaded machine a slow reply must not become a policy answer.
    let fleet = ["--redis", &url, "--redis-timeout-ms", "5000"];
    let (da, db) = (dir.join("a"), dir.join("b"));
    let servers = [funnel_with(&da, &fleet), funnel_with(&db, &fleet)];
    let upstream = Upstream::start();
    let proxies: Vec<Proxy> = servers
        .iter()
        .zip([&da, &db])
        .map(|(s, d)| {
            let nd = d.join("nginx");
            std::fs::create_dir_all(&nd).unwrap();
            Proxy::nginx(&ngx, &nd, s.http, upstream.addr)
        })
        .collect();
    let statuses: Vec<u16> = (0..LIMIT + 3)
        .map(|i| get("127.0.0.7", proxies[i % 2].addr, "/", &[]).status)
        .collect();
    let mut want = vec![200; LIMIT];
    want.extend([429; 3]);
    assert_eq!(statuses, want);
    for s in &servers {
        assert!(s.metric("funnel_server_redis_round_trips_total") > 0);
    }
}
