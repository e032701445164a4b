//! A private `redis-server` for the tests: a free 127.0.0.1 port, no persistence, its own
//! directory, killed on drop. Tests fail (never skip) when `redis-server` is not installed.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
}

impl Server {
    /// Starts a server on a free port.
    pub fn start() -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let dir =
            std::env::temp_dir().join(format!("funnel-redis-test-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let mut server = Server {
            child: None,
            port,
            dir,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "redis-server must be installed for these tests (apt-get install redis-server); \
                 .ci/run installs it",
            );
        self.child = Some(child);
        let client = redis::Client::open(self.url()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} never answered PING",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// A blocking connection for the tests' own inspection.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap()
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(sig)
            .arg(self.pid().to_string())
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill {sig} failed");
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws it (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server; its data is gone (no persistence).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a new server on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A stopped server would not die of SIGKILL's cousins; wake it first.
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
