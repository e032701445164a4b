//! The example proxy as a real process: its binary (built by cargo when missing or stale), a
//! running proxy killed when dropped, and a loopback upstream that counts what reaches it.
//!
//! The binary is the one cargo builds from `examples/proxy/` (`cargo test` builds the
//! examples before it runs the tests). When it is missing or older than the crate's sources,
//! as after `cargo test --test it proxy::`, it is built with cargo, into the same target directory
//! and profile. The proxy stays an example, so hyper and tokio stay dev-dependencies; the
//! library pulls none of them.

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;

/// `target/<profile>/examples/proxy`, built if missing or stale.
pub fn proxy_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        // A test runs as target/<profile>/deps/<test>-<hash>.
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let binary = profile_dir
            .join("examples")
            .join(format!("proxy{}", std::env::consts::EXE_SUFFIX));
        if !is_fresh(&binary) {
            build_proxy(profile_dir);
        }
        assert!(binary.exists(), "no proxy binary at {}", binary.display());
        binary
    })
}

/// Newer than every source file of this crate and of funnel's core.
fn is_fresh(binary: &Path) -> bool {
    let Ok(built) = binary.metadata().and_then(|m| m.modified()) else {
        return false;
    };
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = [
        crate_dir.join("src"),
        crate_dir.join("examples"),
        crate_dir.join("Cargo.toml"),
        crate_dir.join("../../src"),
    ];
    sources.iter().all(|p| newest(p) <= built)
}

fn newest(path: &Path) -> SystemTime {
    let own = path
        .metadata()
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    match std::fs::read_dir(path) {
        Ok(entries) => entries
            .flatten()
            .map(|e| newest(&e.path()))
            .fold(own, SystemTime::max),
        Err(_) => own,
    }
}

fn build_proxy(profile_dir: &Path) {
    let target_dir = profile_dir.parent().expect("the target directory");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--quiet",
        "-p",
        "funnel-tower",
        "--example",
        "proxy",
    ])
    .env("CARGO_TARGET_DIR", target_dir);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(other) => {
            cmd.args(["--profile", other]);
        }
        None => panic!("no profile in {}", profile_dir.display()),
    }
    let status = cmd.status().expect("cargo runs");
    assert!(
        status.success(),
        "building the example proxy failed: run `cargo build -p funnel-tower --example proxy`"
    );
}

/// A running proxy; killed when dropped.
pub struct Proxy {
    pub child: Child,
    pub addr: SocketAddr,
    /// What it printed to stderr after the line that says where it listens, line by line.
    stderr: Arc<Mutex<Vec<String>>>,
    /// The thread reading its stderr, done when the proxy has exited.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Sends it SIGTERM.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends it the signal `name` (`TERM`, `INT`).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        // The shell's own `kill` (POSIX requires it built in): no `/bin/kill`, which minimal
        // images lack (it comes with procps on Debian).
        let sent = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -{name} {pid}"))
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{name} {pid}");
    }

    /// Waits at most `limit` for it to exit (panics after that): its exit status, and all it
    /// said on stderr after the line that says where it listens.
    pub fn wait_exit(&mut self, limit: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the proxy did not exit within {limit:?}; it said:\n{}",
                self.stderr.lock().unwrap().join("\n")
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        // Its stderr closed when it exited: the reader ends once it has read it all.
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the stderr reader");
        }
        (status, self.stderr.lock().unwrap().join("\n"))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the proxy on a free port of `host` in front of `upstream`, with `args`.
pub fn start_proxy(host: &str, upstream: SocketAddr, args: &[&str]) -> Proxy {
    let mut child = Command::new(proxy_binary())
        .args(["--listen", &format!("{host}:0")])
        .args(["--upstream", &format!("http://{upstream}")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the proxy starts");
    // Its first line on stderr: "proxy: listening on <addr> -> ...".
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let said = Arc::new(Mutex::new(Vec::new()));
    let keep = said.clone();
    let reader = std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(stderr).lines();
        let _ = tx.send(lines.next());
        // Keep reading, so the proxy never blocks on a full pipe.
        for line in lines.map_while(Result::ok) {
            keep.lock().unwrap().push(line);
        }
    });
    let line = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Some(Ok(line))) => line,
        other => {
            let _ = child.kill();
            panic!("the proxy did not say where it listens: {other:?}");
        }
    };
    let addr = line
        .strip_prefix("proxy: listening on ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    Proxy {
        child,
        addr,
        stderr: said,
        reader: Some(reader),
    }
}

/// The upstream on a free loopback port: answers 200 "upstream" and counts what reached it
/// (on arrival, before it answers); `/sleep/<ms>` answers after that many milliseconds (a slow
/// upstream).
pub async fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let addr = super::serve_each(move |_| {
        let counter = counter.clone();
        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            // Relaxed: a count read after the requests are answered, or polled for one's
            // arrival; it orders nothing else.
            counter.fetch_add(1, Ordering::Relaxed);
            let delay = req
                .uri()
                .path()
                .strip_prefix("/sleep/")
                .and_then(|ms| ms.parse().ok())
                .map(Duration::from_millis);
            async move {
                if let Some(delay) = delay {
                    tokio::time::sleep(delay).await;
                }
                let body = Full::new(Bytes::from_static(b"upstream"));
                Ok::<_, std::convert::Infallible>(Response::new(body))
            }
        })
    })
    .await;
    (addr, hits)
}

/// The requests that reached an [`upstream`] so far.
pub fn hits(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::Relaxed)
}
