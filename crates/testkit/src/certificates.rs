//! Certificates for TLS tests, made with the `openssl` program: a certificate authority, and
//! server and client certificates it signs with the subject alternative names a test needs.
//! Elliptic-curve keys (P-256), valid for two days.
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
use std::process::Command;

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
        let ca = Authority {
            openssl,
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
        );
        Some(ca)
    }

    /// The authority's certificate.
    pub fn cert(&self) -> PathBuf {
        self.dir.join(format!("{}.crt", self.name))
    }

    /// A server certificate `<name>.crt` (and `<name>.key`) for `sans` (`DNS:grpc.test`,
    /// `IP:127.0.0.1`, `URI:spiffe://...`).
    pub fn server(&self, name: &str, sans: &[&str]) -> Pair {
        self.sign(name, sans, "serverAuth")
    }

    /// A client certificate `<name>.crt` (and `<name>.key`) for `sans`.
    pub fn client(&self, name: &str, sans: &[&str]) -> Pair {
        self.sign(name, sans, "clientAuth")
    }

    fn sign(&self, name: &str, sans: &[&str], usage: &str) -> Pair {
        assert_ne!(
            name, self.name,
            "a certificate named as its CA overwrites it"
        );
        let ext = format!(
            "subjectAltName={}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n",
            sans.join(",")
        );
        let (key, csr, crt, extfile) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        std::fs::write(self.dir.join(&extfile), ext).expect("the extensions file is written");
        let subject = format!("/CN={name}");
        self.run(
            &[
                &["req"][..],
                &EC,
                &["-keyout", &key, "-out", &csr, "-subj", &subject],
            ]
            .concat(),
        );
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
        ]);
        Pair {
            cert: self.dir.join(crt),
            key: self.dir.join(key),
        }
    }

    fn run(&self, args: &[&str]) {
        let out = Command::new(&self.openssl)
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
