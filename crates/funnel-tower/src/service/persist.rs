//! A layer's debts across a restart: every policy's table saved in one file
//! ([`RateLimitLayer::save_state`]) and given back to the policies of the same name
//! ([`RateLimitLayer::restore_state`]). Each table is saved by `funnel::Limiter::save`; this
//! file names them.
//!
//! Layout, every integer little-endian: magic `b"FUNTOWER"`, version `1` (u32), the number of
//! policies (u32); per policy its name's length (u32), its name, its saved table's length (u64)
//! and the table (`funnel::Snapshot`'s format, with its own checksum); then FNV-1a (u64) of
//! every byte before it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use funnel::{Clock, Limiter, Snapshot, SnapshotError};

use super::RateLimitLayer;
use crate::Error;

const MAGIC: &[u8; 8] = b"FUNTOWER";
const VERSION: u32 = 1;

impl<C: Clock + Clone + 'static> RateLimitLayer<C> {
    /// Writes every policy's keys and debts to `w` (`funnel::Limiter::save` for each table,
    /// named by its policy). Requests go on meanwhile. Returns the number of keys written.
    ///
    /// The file holds each table's hasher seed: keep it as private as the process.
    ///
    /// # Errors
    ///
    /// [`Error::State`] when `w` fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::Quota;
    /// use funnel_tower::{KeyBy, RateLimitLayer};
    ///
    /// let policies = || RateLimitLayer::builder()
    ///     .policy("ip", KeyBy::PeerIp { v6_prefix: 64 }, Quota::per_hour(10).unwrap());
    /// let before = policies().build()?;
    /// let mut state = Vec::new();
    /// before.save_state(&mut state)?;
    ///
    /// // The next process: the same policies, then the saved debts, before serving.
    /// let after = policies().build()?;
    /// assert_eq!(after.restore_state(&state[..])?, 0); // nobody owed anything yet
    /// # Ok::<(), funnel_tower::Error>(())
    /// ```
    pub fn save_state(&self, w: &mut impl Write) -> Result<usize, Error> {
        let (bytes, keys) = self.state()?;
        w.write_all(&bytes)
            .and_then(|()| w.flush())
            .map_err(io_error)?;
        Ok(keys)
    }

    /// [`save_state`](Self::save_state) to the file at `path`, atomically: a new file in the same directory (owner-only on
    /// Unix), flushed to disk, renamed over `path`, and the directory flushed; a crash leaves
    /// the old file or the new one, never part of one.
    ///
    /// # Errors
    ///
    /// [`Error::State`] when the file cannot be written, flushed or renamed (`path` is then
    /// left as it was).
    pub fn save_state_to(&self, path: impl AsRef<Path>) -> Result<usize, Error> {
        let (bytes, keys) = self.state()?;
        write_atomically(path.as_ref(), &bytes).map_err(io_error)?;
        Ok(keys)
    }

    /// Gives the debts of a state saved by [`save_state`](Self::save_state) to this layer's
    /// policies of the same names, each less the wall-clock time since the save
    /// (`funnel::Builder::restore`). Call it after building the layer and before serving: each
    /// restored policy gets a new table, and what the old one counted is dropped. A saved
    /// policy the layer no longer has is ignored; a policy with no saved table keeps its own.
    /// Returns the number of keys restored.
    ///
    /// All or nothing: the whole file is read and checked, and every table rebuilt, before any
    /// policy changes.
    ///
    /// # Errors
    ///
    /// [`Error::State`] with the reason: a truncated or corrupt file, another format version,
    /// or a policy whose quota, or whose key hasher seed, is not the saved one
    /// (`funnel::SnapshotError::Quota`, ...). The layer is then unchanged.
    pub fn restore_state(&self, mut r: impl Read) -> Result<usize, Error> {
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes).map_err(io_error)?;
        let saved = parse(&bytes)?;
        let _writer = self.shared.writer.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.shared.config.load_full();
        let mut next = (*current).clone();
        let mut keys = 0;
        for policy in &mut next.policies {
            let Some(snapshot) = saved.get(&*policy.name) else {
                continue;
            };
            let limiter = Limiter::<[u8]>::builder(policy.quota)
                .capacity(policy.limiter.capacity())
                .clock(self.shared.clock.clone())
                .restore(snapshot.clone())
                .map_err(Error::State)?
                .build()
                .map_err(Error::Funnel)?;
            keys += limiter.len();
            policy.limiter = Arc::new(limiter);
        }
        self.shared.config.store(Arc::new(next));
        Ok(keys)
    }

    /// [`restore_state`](Self::restore_state) from the file at `path`.
    ///
    /// # Errors
    ///
    /// As [`restore_state`](Self::restore_state); a missing file is
    /// `Error::State(funnel::SnapshotError::Io(e))` with `e.kind()` `NotFound`.
    pub fn restore_state_from(&self, path: impl AsRef<Path>) -> Result<usize, Error> {
        self.restore_state(File::open(path).map_err(io_error)?)
    }

    /// The state file's bytes and the number of keys in it.
    fn state(&self) -> Result<(Vec<u8>, usize), Error> {
        let config = self.shared.config.load();
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(config.policies.len() as u32).to_le_bytes());
        let mut keys = 0;
        for policy in &config.policies {
            let mut table = Vec::new();
            keys += policy.limiter.save(&mut table).map_err(Error::State)?;
            out.extend_from_slice(&(policy.name.len() as u32).to_le_bytes());
            out.extend_from_slice(policy.name.as_bytes());
            out.extend_from_slice(&(table.len() as u64).to_le_bytes());
            out.extend_from_slice(&table);
        }
        let sum = fnv1a(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        Ok((out, keys))
    }
}

/// The saved tables by policy name, every byte checked.
fn parse(bytes: &[u8]) -> Result<HashMap<String, Snapshot>, Error> {
    let state = |e| Error::State(e);
    let m = bytes.len().min(MAGIC.len());
    if bytes[..m] != MAGIC[..m] {
        return Err(state(SnapshotError::NotFunnel));
    }
    let mut r = Cursor(bytes, MAGIC.len().min(bytes.len()));
    let version = r.u32()?;
    if version != VERSION {
        return Err(state(SnapshotError::Version {
            found: version,
            supported: VERSION,
        }));
    }
    let body = bytes
        .len()
        .checked_sub(8)
        .ok_or(state(SnapshotError::Truncated))?;
    let policies = r.u32()?;
    let mut tables = Vec::new();
    for _ in 0..policies {
        let len = r_len(r.u32()?.into())?;
        let name = r.take(len)?;
        let len = r_len(r.u64()?)?;
        let table = r.take(len)?;
        tables.push((name, table));
    }
    let sum = r.u64()?;
    if r.1 != bytes.len() {
        return Err(state(corrupt("bytes after the checksum")));
    }
    if fnv1a(&bytes[..body]) != sum {
        return Err(state(corrupt("checksum mismatch")));
    }
    let mut saved = HashMap::new();
    for (name, table) in tables {
        let name = std::str::from_utf8(name).map_err(|_| state(corrupt("a policy name")))?;
        let snapshot = Snapshot::read(table).map_err(Error::State)?;
        if saved.insert(name.to_owned(), snapshot).is_some() {
            return Err(state(corrupt("a policy saved twice")));
        }
    }
    Ok(saved)
}

fn r_len(n: u64) -> Result<usize, Error> {
    usize::try_from(n).map_err(|_| Error::State(SnapshotError::Truncated))
}

/// A reader over the file's bytes: the bytes and the offset.
struct Cursor<'a>(&'a [u8], usize);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let end = self
            .1
            .checked_add(n)
            .filter(|end| *end <= self.0.len())
            .ok_or(Error::State(SnapshotError::Truncated))?;
        let out = &self.0[self.1..end];
        self.1 = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

fn corrupt(reason: &'static str) -> SnapshotError {
    SnapshotError::Corrupt { reason }
}

fn io_error(e: io::Error) -> Error {
    Error::State(SnapshotError::Io(e))
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the new one, never a part
/// of one: a temporary file in the same directory (owner-only on Unix, as it holds hasher
/// seeds; `tempfile` names it and removes it if anything fails), flushed to disk, renamed over
/// `path`, then the directory flushed. On failure `path` is left as it was.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let Some(name) = path.file_name() else {
        let why = format!("{} names no file", path.display());
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    };
    // A bare file name is in the working directory.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // `<name>.<random>.tmp`: one left by a crash says whose it was.
    let mut prefix = name.to_owned();
    prefix.push(".");
    let mut temporary = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".tmp")
        .tempfile_in(dir)?;
    temporary.write_all(bytes)?;
    temporary.as_file().sync_all()?;
    temporary.persist(path).map_err(|e| e.error)?;
    // A rename is durable once its directory is; only Unix opens a directory as a file.
    #[cfg(unix)]
    File::open(dir).and_then(|d| d.sync_all())?;
    Ok(())
}

/// FNV-1a, 64 bits: any one changed byte changes it (`funnel::Snapshot` says why).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyBy;
    use funnel::clock::ManualClock;
    use funnel::Quota;

    fn layer(limit: u64) -> RateLimitLayer<ManualClock> {
        RateLimitLayer::builder()
            .policy("ip", KeyBy::Global, Quota::per_hour(10).unwrap())
            .policy(
                "route",
                KeyBy::Global,
                Quota::per_hour(10).unwrap().with_limit(limit).unwrap(),
            )
            .build_with_clock(ManualClock::new())
            .unwrap()
    }

    fn charge(layer: &RateLimitLayer<ManualClock>) {
        let config = layer.shared.config.load();
        for p in &config.policies {
            assert!(p.limiter.check_n(b"k", 3).is_allowed());
        }
    }

    fn owes(layer: &RateLimitLayer<ManualClock>, name: &str) -> bool {
        let config = layer.shared.config.load();
        let p = config.policies.iter().find(|p| &*p.name == name).unwrap();
        !p.limiter.peek(b"k").reset_after().is_zero()
    }

    #[test]
    fn every_policy_gets_its_own_table_back() {
        let before = layer(10);
        charge(&before);
        let mut state = Vec::new();
        assert_eq!(before.save_state(&mut state).unwrap(), 2);
        let after = layer(10);
        assert_eq!(after.restore_state(&state[..]).unwrap(), 2);
        assert!(owes(&after, "ip") && owes(&after, "route"));
    }

    #[test]
    fn a_saved_file_replaces_the_old_one_whole_and_leaves_nothing_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        std::fs::write(&path, b"the old state").unwrap();
        let before = layer(10);
        charge(&before);
        assert_eq!(before.save_state_to(&path).unwrap(), 2);
        let after = layer(10);
        assert_eq!(after.restore_state_from(&path).unwrap(), 2);
        assert!(owes(&after, "ip") && owes(&after, "route"));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state"], "no temporary file is left");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "the file holds the hasher seeds");
        }
        // A path naming no file, and a directory that does not exist: errors, nothing written.
        for bad in [dir.path().join(".."), dir.path().join("missing/state")] {
            assert!(
                matches!(
                    before.save_state_to(&bad),
                    Err(Error::State(SnapshotError::Io(_)))
                ),
                "{}",
                bad.display()
            );
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_damaged_file_or_another_quota_changes_nothing() {
        let before = layer(10);
        charge(&before);
        let mut state = Vec::new();
        before.save_state(&mut state).unwrap();
        for at in 0..state.len() {
            let mut bad = state.clone();
            bad[at] ^= 0x20;
            let after = layer(10);
            assert!(after.restore_state(&bad[..]).is_err(), "byte {at}");
            assert!(!owes(&after, "ip"), "byte {at}");
        }
        for len in 0..state.len() {
            assert!(
                layer(10).restore_state(&state[..len]).is_err(),
                "length {len}"
            );
        }
        // The second policy's quota changed: neither policy is restored.
        let other = layer(11);
        let err = other.restore_state(&state[..]).unwrap_err();
        assert!(
            matches!(err, Error::State(SnapshotError::Quota { .. })),
            "{err:?}"
        );
        assert!(!owes(&other, "ip") && !owes(&other, "route"));
    }
}
