//! Certificates for TLS tests, made with the `openssl` program: a certificate authority, and
//! server and client certificates it signs with the subject alternative names a test needs.
//! Elliptic-curve keys (P-256), valid for two days. The testkit's one caller of openssl: the
//! Redis launcher's certificates are made here too.
//!
//! A test calls [`Authority::new`], which skips the test when openssl is not installed, and
//! [`Authority::server`] and [`Authority::client`], which panic when openssl fails; a launcher
//! that reports failures as errors calls [`Authority::make`] and [`Authority::issue`].
//!
//! ```no_run
//! # fn a_test(dir: &std::path::Path) {
//! use funnel_testkit::certificates::Authority;
//! let Some(ca) = Authority::new(dir, "ca") else {
//!     return; // skipped: no openssl, and said so
//! };
//! let server = ca.server("server", &["IP:127.0.0.1", "DNS:grpc.test"]);
//! let client = ca.client("client", &["DNS:envoy.test"]);
//! # let _ = (server.cert, client.key, ca.cert());
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A certificate authority: `<name>.crt` and `<name>.key` in its directory.
pub struct Authority {
    openssl: PathBuf,
    dir: PathBuf,
    name: String,
}

/// A certificate and its private key, PEM files.
#[derive(Clone, Debug)]
pub struct Pair {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// What a certificate may be shown for: the extendedKeyUsage it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// A server's, shown to its clients (`serverAuth`).
    Server,
    /// A client's (`clientAuth`): rustls and OpenSSL servers refuse a client certificate
    /// whose extendedKeyUsage leaves it out.
    Client,
    /// A server's that the server also shows as a client when it connects to other servers
    /// with it (`serverAuth,clientAuth`): a Redis cluster node on its bus, a sentinel reaching
    /// the primary, each checked by a peer that requires client certificates.
    ServerAndClient,
}

impl Usage {
    fn extended_key_usage(self) -> &'static str {
        match self {
            Usage::Server => "serverAuth",
            Usage::Client => "clientAuth",
            Usage::ServerAndClient => "serverAuth,clientAuth",
        }
    }
}

/// The elliptic-curve key of every certificate.
const EC: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

impl Authority {
    /// A new authority named `name` in `dir`, or `None` after [`crate::skip`]ping the running
    /// test when `openssl` is not installed.
    ///
    /// # Panics
    ///
    /// When openssl fails.
    pub fn new(dir: &Path, name: &str) -> Option<Authority> {
        let openssl = crate::skip::program("openssl", "apt-get install openssl")?;
        Some(Self::make(&openssl, dir, name).unwrap_or_else(|e| panic!("{e}")))
    }

    /// A new authority named `name` in `dir`, made by the `openssl` program at `openssl`: for
    /// a caller that found the program itself and reports failures as errors (the Redis
    /// launcher's certificates).
    ///
    /// # Errors
    ///
    /// When openssl cannot be run or fails.
    pub fn make(openssl: &Path, dir: &Path, name: &str) -> Result<Authority, String> {
        let ca = Authority {
            openssl: openssl.to_owned(),
            dir: dir.to_owned(),
            name: name.to_owned(),
        };
        let (key, crt, subject) = (
            format!("{name}.key"),
            format!("{name}.crt"),
            format!("/CN={name} test CA"),
        );
        ca.run(
            &[
                &["req", "-x509"][..],
                &EC,
                &[
                    "-keyout",
                    &key,
                    "-out",
                    &crt,
                    "-days",
                    "2",
                    "-subj",
                    &subject,
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ],
            ]
            .concat(),
        )?;
        Ok(ca)
    }

    /// The authority's certificate.
    pub fn cert(&self) -> PathBuf {
        self.dir.join(format!("{}.crt", self.name))
    }

    /// A server certificate `<name>.crt` (and `<name>.key`) for `sans` (`DNS:grpc.test`,
    /// `IP:127.0.0.1`, `URI:spiffe://...`).
    ///
    /// # Panics
    ///
    /// When openssl fails.
    pub fn server(&self, name: &str, sans: &[&str]) -> Pair {
        self.issue(name, sans, Usage::Server)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A client certificate `<name>.crt` (and `<name>.key`) for `sans`.
    ///
    /// # Panics
    ///
    /// When openssl fails.
    pub fn client(&self, name: &str, sans: &[&str]) -> Pair {
        self.issue(name, sans, Usage::Client)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A certificate `<name>.crt` (and `<name>.key`) for `sans` (at least one) and `usage`,
    /// signed by this authority.
    ///
    /// # Errors
    ///
    /// When openssl cannot be run or fails, or the extensions file cannot be written.
    ///
    /// # Panics
    ///
    /// When `name` is the authority's own: its files would be overwritten.
    pub fn issue(&self, name: &str, sans: &[&str], usage: Usage) -> Result<Pair, String> {
        assert_ne!(
            name, self.name,
            "a certificate named as its CA overwrites it"
        );
        let ext = format!(
            "subjectAltName={}\nextendedKeyUsage={}\nbasicConstraints=CA:FALSE\n",
            sans.join(","),
            usage.extended_key_usage()
        );
        let (key, csr, crt, extfile) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        let ext_path = self.dir.join(&extfile);
        std::fs::write(&ext_path, ext)
            .map_err(|e| format!("cannot write {}: {e}", ext_path.display()))?;
        let subject = format!("/CN={name}");
        self.run(
            &[
                &["req"][..],
                &EC,
                &["-keyout", &key, "-out", &csr, "-subj", &subject],
            ]
            .concat(),
        )?;
        let (ca_crt, ca_key) = (format!("{}.crt", self.name), format!("{}.key", self.name));
        self.run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &extfile,
        ])?;
        Ok(Pair {
            cert: self.dir.join(crt),
            key: self.dir.join(key),
        })
    }

    /// Runs openssl with `args` in the authority's directory.
    fn run(&self, args: &[&str]) -> Result<(), String> {
        let out = Command::new(&self.openssl)
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.openssl.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}
