//! [`SnapshotError`]: every way saving, reading or restoring a limiter's state can fail.

use std::fmt;
use std::io;

/// What went wrong when saving a limiter's state ([`Limiter::save`](crate::Limiter::save)),
/// reading one ([`Snapshot::read`](crate::Snapshot::read)) or giving one to a new limiter
/// ([`Builder::restore`](crate::Builder::restore)). An I/O failure keeps the
/// [`io::Error`], reachable through [`source`](std::error::Error::source).
///
/// # Examples
///
/// ```
/// use std::error::Error as _;
/// use funnel::{Snapshot, SnapshotError};
///
/// let err = Snapshot::read_from("/nonexistent/funnel.state").unwrap_err();
/// assert!(matches!(&err, SnapshotError::Io(e) if e.kind() == std::io::ErrorKind::NotFound));
/// assert!(err.source().is_some());
/// assert!(matches!(Snapshot::read(&b"not a state"[..]), Err(SnapshotError::NotFunnel)));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Reading or writing the saved state failed.
    Io(io::Error),
    /// The input is not a saved limiter state (its first bytes are not funnel's magic).
    NotFunnel,
    /// The saved state is in another format version than this crate reads.
    Version {
        /// The file's version.
        found: u32,
        /// The version this crate reads.
        supported: u32,
    },
    /// The saved state ends before its last byte.
    Truncated,
    /// The saved state's bytes are not the ones written (checksum mismatch, trailing bytes) or
    /// hold a field out of range.
    Corrupt {
        /// What was wrong.
        reason: &'static str,
    },
    /// The saved state was saved under another quota than the limiter restoring it has.
    Quota {
        /// The saved quota's emission interval, ns.
        saved_interval_nanos: u64,
        /// The saved quota's limit.
        saved_limit: u64,
        /// The restoring limiter's emission interval, ns.
        interval_nanos: u64,
        /// The restoring limiter's limit.
        limit: u64,
    },
    /// The saved state was saved by a limiter of another key type.
    KeyType,
    /// The builder restoring a saved state was given a seed other than the saved state's: the
    /// saved fingerprints would match no key.
    Seed,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Io(e) => write!(f, "saved limiter state: {e}"),
            SnapshotError::NotFunnel => f.write_str("not a saved funnel limiter state"),
            SnapshotError::Version { found, supported } => write!(
                f,
                "saved limiter state of format version {found}; this build reads version {supported}"
            ),
            SnapshotError::Truncated => f.write_str("saved limiter state is truncated"),
            SnapshotError::Corrupt { reason } => {
                write!(f, "saved limiter state is corrupt: {reason}")
            }
            SnapshotError::Quota {
                saved_interval_nanos,
                saved_limit,
                interval_nanos,
                limit,
            } => write!(
                f,
                "saved limiter state is for a quota of limit {saved_limit}, one unit every \
                 {saved_interval_nanos} ns; this limiter's is limit {limit}, one every \
                 {interval_nanos} ns"
            ),
            SnapshotError::KeyType => {
                f.write_str("saved limiter state was saved by a limiter of another key type")
            }
            SnapshotError::Seed => f.write_str(
                "saved limiter state holds another hasher seed than the one the builder was given",
            ),
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SnapshotError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for SnapshotError {
    fn from(e: io::Error) -> Self {
        SnapshotError::Io(e)
    }
}
