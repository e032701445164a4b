//! [`Snapshot`]: a keyed limiter's saved state, its file format, and its reader. What is saved
//! and how a limiter takes it back are `Limiter::save` and `Builder::restore`
//! (`src/limiter/persist.rs`); why the format is what it is, `docs/design/persistence.md`.
//!
//! Layout, every integer little-endian:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | magic `b"FUNNELST"` |
//! | 8 | 4 | format version, [`VERSION`] |
//! | 12 | 4 | algorithm: `1`, the funnel (GCRA) |
//! | 16 | 8 | the quota's emission interval, ns |
//! | 24 | 8 | the quota's limit |
//! | 32 | 8 | FNV-1a of the key type's name |
//! | 40 | 32 | the key hasher's four seed words |
//! | 72 | 8 | wall-clock time of the save, ns since the Unix epoch |
//! | 80 | 8 | `n`, the number of keys |
//! | 88 | 16 `n` | per key: its fingerprint, its debt at the save in ns |
//! | 88 + 16 `n` | 8 | FNV-1a (64 bits) of every byte before it |

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::state::MAX_TOLERANCE_NANOS;

mod error;
mod file;

pub use error::SnapshotError;
pub(crate) use file::write_atomically;

/// The first eight bytes of every saved state.
const MAGIC: [u8; 8] = *b"FUNNELST";
/// The format version this crate writes and reads.
pub(crate) const VERSION: u32 = 1;
/// The algorithm code of the funnel (GCRA).
pub(crate) const FUNNEL: u32 = 1;
/// Bytes before the keys.
const HEADER: usize = 88;

/// A keyed limiter's saved state, read and checked: every tracked key's fingerprint and its
/// debt at the save, the quota it was saved under, the key hasher's seed and the wall-clock
/// time of the save. Written by [`Limiter::save`](crate::Limiter::save), given to a new limiter
/// by [`Builder::restore`](crate::Builder::restore).
///
/// Reading checks the whole file (its magic, version, length, checksum and every field) before
/// anything uses it: a file that fails any check is a [`SnapshotError`] and nothing of it is
/// loaded.
///
/// # Examples
///
/// ```
/// use funnel::{Limiter, Quota, Snapshot, SnapshotError};
///
/// let quota = Quota::per_minute(1)?;
/// let limiter = Limiter::<str>::new(quota);
/// assert!(limiter.check("abuser").is_allowed());
/// let mut file = Vec::new();
/// limiter.save(&mut file)?;
///
/// let snapshot = Snapshot::read(&file[..])?;
/// assert_eq!(snapshot.len(), 1);
/// // One byte changed anywhere: a typed error, nothing loaded.
/// file[100] ^= 1;
/// assert!(matches!(Snapshot::read(&file[..]), Err(SnapshotError::Corrupt { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub(crate) algorithm: u32,
    pub(crate) interval: u64,
    pub(crate) limit: u64,
    pub(crate) key_type: u64,
    pub(crate) seeds: [u64; 4],
    /// Wall-clock ns since the Unix epoch.
    pub(crate) saved_at: u64,
    /// `(fingerprint, debt in ns)`.
    pub(crate) keys: Vec<(u64, u64)>,
}

/// The quota, the size and the time; not the seed (it keeps keys from being aimed, as
/// [`Builder`](crate::Builder)'s `Debug` hides it) nor the keys.
impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("interval_nanos", &self.interval)
            .field("limit", &self.limit)
            .field("keys", &self.keys.len())
            .field("saved_at", &self.saved_at())
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// Reads and checks a saved state.
    ///
    /// # Errors
    ///
    /// [`SnapshotError::NotFunnel`] (not a saved state), [`SnapshotError::Version`] (another
    /// format version), [`SnapshotError::Truncated`], [`SnapshotError::Corrupt`] (a checksum
    /// mismatch, trailing bytes or a field out of range), [`SnapshotError::Io`].
    pub fn read(r: impl Read) -> Result<Snapshot, SnapshotError> {
        let mut r = Checksummed::new(BufReader::new(r));
        let mut header = [0u8; HEADER];
        let got = r.fill(&mut header)?;
        let magic = got.min(MAGIC.len());
        if header[..magic] != MAGIC[..magic] {
            return Err(SnapshotError::NotFunnel);
        }
        if got < 12 {
            return Err(SnapshotError::Truncated);
        }
        let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
        let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(SnapshotError::Version {
                found: version,
                supported: VERSION,
            });
        }
        if got < HEADER {
            return Err(SnapshotError::Truncated);
        }
        let n = word(80);
        // Not sized from the file's count: a hostile count would allocate before the file ends.
        let mut keys = Vec::with_capacity(n.min(1 << 16) as usize);
        let mut entry = [0u8; 16];
        for _ in 0..n {
            if r.fill(&mut entry)? < entry.len() {
                return Err(SnapshotError::Truncated);
            }
            let fp = u64::from_le_bytes(entry[..8].try_into().expect("8 bytes"));
            let debt = u64::from_le_bytes(entry[8..].try_into().expect("8 bytes"));
            keys.push((fp, debt));
        }
        let computed = r.sum;
        let mut sum = [0u8; 8];
        if r.fill(&mut sum)? < sum.len() {
            return Err(SnapshotError::Truncated);
        }
        if r.fill(&mut [0u8; 1])? != 0 {
            return Err(corrupt("bytes after the checksum"));
        }
        if u64::from_le_bytes(sum) != computed {
            return Err(corrupt("checksum mismatch"));
        }
        let s = Snapshot {
            algorithm: u32::from_le_bytes(header[12..16].try_into().expect("4 bytes")),
            interval: word(16),
            limit: word(24),
            key_type: word(32),
            seeds: [word(40), word(48), word(56), word(64)],
            saved_at: word(72),
            keys,
        };
        s.check()?;
        Ok(s)
    }

    /// [`read`](Self::read)s the file at `path`.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read); a file that cannot be opened is [`SnapshotError::Io`].
    pub fn read_from(path: impl AsRef<Path>) -> Result<Snapshot, SnapshotError> {
        Snapshot::read(File::open(path).map_err(SnapshotError::Io)?)
    }

    /// Keys in the saved state (every key that was in debt when it was saved).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True when no key was in debt when the state was saved.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The wall-clock time of the save, from which a restore counts how much of each debt has
    /// drained.
    pub fn saved_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.saved_at)
    }

    /// The fields' ranges, once the checksum has said the bytes are the ones written.
    fn check(&self) -> Result<(), SnapshotError> {
        if self.algorithm != FUNNEL {
            return Err(corrupt("unknown algorithm"));
        }
        let tolerance = u128::from(self.interval) * u128::from(self.limit);
        if self.interval == 0 || self.limit == 0 || tolerance > u128::from(MAX_TOLERANCE_NANOS) {
            return Err(corrupt("quota out of range"));
        }
        for &(fp, debt) in &self.keys {
            if fp == 0 {
                return Err(corrupt("a key fingerprint of 0"));
            }
            if debt == 0 || u128::from(debt) > tolerance {
                return Err(corrupt("a debt beyond the quota's tolerance"));
            }
        }
        Ok(())
    }

    /// Writes the state in the format above.
    pub(crate) fn write(&self, w: &mut impl Write) -> Result<(), SnapshotError> {
        let mut w = Checksummed::new(io::BufWriter::new(w));
        w.put(&MAGIC)?;
        w.put(&VERSION.to_le_bytes())?;
        w.put(&self.algorithm.to_le_bytes())?;
        for x in [self.interval, self.limit, self.key_type] {
            w.put(&x.to_le_bytes())?;
        }
        for x in self.seeds {
            w.put(&x.to_le_bytes())?;
        }
        w.put(&self.saved_at.to_le_bytes())?;
        w.put(&(self.keys.len() as u64).to_le_bytes())?;
        for &(fp, debt) in &self.keys {
            w.put(&fp.to_le_bytes())?;
            w.put(&debt.to_le_bytes())?;
        }
        let sum = w.sum;
        w.put(&sum.to_le_bytes())?;
        w.inner.flush().map_err(SnapshotError::Io)
    }
}

/// A reader or writer that keeps the FNV-1a hash of the bytes through it. FNV-1a steps
/// `h = (h ^ byte) * p` with an odd `p`: for a given byte a bijection of `h`, and for a given
/// `h` a different result for every byte, so two streams of one length that differ in exactly
/// one byte always end with different hashes. That is why a checksum this small catches every
/// single corrupted byte (the tests try every position).
struct Checksummed<T> {
    inner: T,
    sum: u64,
}

impl<T> Checksummed<T> {
    fn new(inner: T) -> Self {
        Checksummed {
            inner,
            sum: FNV_OFFSET,
        }
    }

    fn hash(&mut self, bytes: &[u8]) {
        self.sum = fnv1a(self.sum, bytes);
    }
}

impl<R: Read> Checksummed<R> {
    /// Fills `buf` unless the input ends first; the bytes read, hashed.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, SnapshotError> {
        let mut got = 0;
        while got < buf.len() {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SnapshotError::Io(e)),
            }
        }
        self.hash(&buf[..got]);
        Ok(got)
    }
}

impl<W: Write> Checksummed<W> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        self.hash(bytes);
        self.inner.write_all(bytes).map_err(SnapshotError::Io)
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits, continued from `h`.
pub(crate) fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    h
}

/// The key type's tag in a saved state: FNV-1a of its name, so a state saved by a limiter of
/// one key type is not read as another's (their fingerprints would mean nothing).
pub(crate) fn key_type<K: ?Sized>() -> u64 {
    fnv1a(FNV_OFFSET, std::any::type_name::<K>().as_bytes())
}

fn corrupt(reason: &'static str) -> SnapshotError {
    SnapshotError::Corrupt { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_its_published_test_vectors() {
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET, b"foobar"), 0x8594_4171_f739_67e8);
    }
}
