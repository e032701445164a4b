//! Debts that survive a restart: [`Limiter::save`] writes every tracked key's debt, and
//! [`Builder::restore`] gives them to a new limiter (`docs/design/persistence.md`).
//! The funnel (GCRA) limiter only: its state is a debt, a span of time that means the same in
//! any process; a window counter's state is a count in a window numbered from its process's
//! clock origin, which another process's windows do not line up with.

use std::hash::Hash;
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use super::{Builder, Limiter};
use crate::clock::Clock;
use crate::hasher::KeyHash;
use crate::quota::Quota;
use crate::snapshot::{key_type, write_atomically, Snapshot, SnapshotError, FUNNEL};

impl<K: Hash + ?Sized, C: Clock> Limiter<K, C, Quota> {
    /// Writes every tracked key's debt to `w`, with the quota, the key hasher's seed and the
    /// wall-clock time, so that [`Builder::restore`] can give the debts to a limiter in another
    /// process. Returns the number of keys written.
    ///
    /// Keys are written as their fingerprints, which mean something only with the seed: the
    /// file holds the seed, so keep it as private as the limiter (anyone holding it could aim
    /// keys at one bucket, `docs/design/persistence.md`). Each key's debt is its funnel's fill as time
    /// (how long until it has drained) at the clock reading the save starts from; a funnel
    /// already drained is not written, as it is the same as an absent key.
    ///
    /// Other threads may go on deciding while it runs: no decision waits for it, and a new key
    /// waits at most for one pass over the table. Every key present throughout the save is
    /// written, with a debt at least what it had when the save started (a key moved by a
    /// growth or a cuckoo step while the save passed is found again: see
    /// `docs/design/persistence.md`). Decisions made at times of the caller's own (`check_at`) are measured
    /// against the limiter's clock, like everything here.
    ///
    /// # Errors
    ///
    /// [`SnapshotError::Io`] when `w` fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use funnel::{Limiter, Quota, Snapshot};
    ///
    /// let quota = Quota::per_hour(10)?;
    /// let before = Limiter::<str>::new(quota);
    /// for _ in 0..10 {
    ///     assert!(before.check("abuser").is_allowed());
    /// }
    /// assert!(!before.check("abuser").is_allowed());
    /// let mut state = Vec::new();
    /// assert_eq!(before.save(&mut state)?, 1);
    ///
    /// // In the next process: the same quota, the saved debts.
    /// let after = Limiter::<str>::builder(quota)
    ///     .restore(Snapshot::read(&state[..])?)?
    ///     .build()?;
    /// assert!(!after.check("abuser").is_allowed()); // still limited
    /// assert!(after.check("someone else").is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save(&self, w: &mut impl Write) -> Result<usize, SnapshotError> {
        let snapshot = self.snapshot();
        snapshot.write(w)?;
        Ok(snapshot.len())
    }

    /// [`save`](Self::save)s to the file at `path`, atomically: the state goes to a new file
    /// in the same directory (readable and writable by its owner only, on Unix), which is
    /// flushed to disk and then renamed over `path`, and the directory is flushed too. A crash
    /// at any moment leaves either the old file or the new one, never a part of one.
    /// Returns the number of keys written.
    ///
    /// # Errors
    ///
    /// [`SnapshotError::Io`] when the file cannot be written, flushed or renamed (the
    /// temporary file is then removed, and `path` left as it was).
    pub fn save_to(&self, path: impl AsRef<Path>) -> Result<usize, SnapshotError> {
        let snapshot = self.snapshot();
        let mut bytes = Vec::new();
        snapshot.write(&mut bytes)?;
        write_atomically(path.as_ref(), &bytes)?;
        Ok(snapshot.len())
    }

    /// Every tracked key's debt now, with what a restore needs to trust it.
    fn snapshot(&self) -> Snapshot {
        // The wall clock and the limiter's clock read together, before the table: a debt is
        // `tat - now`, and a key charged while the table is read then counts its charge from
        // this earlier `now`, a little more debt, never less.
        let saved_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let now = self.clock.now().as_nanos();
        let tau = self.quota.tau;
        let keys: Vec<(u64, u64)> = self
            .table
            .snapshot(now, |tat| tat)
            .into_iter()
            // A key charged at a time of the caller's ahead of this clock may owe more than
            // the tolerance from `now`: kept at the tolerance, the most the quota can owe.
            .map(|(fp, tat)| (fp, (tat - now).min(tau)))
            .collect();
        Snapshot {
            algorithm: FUNNEL,
            interval: self.quota.t,
            limit: self.quota.limit,
            key_type: key_type::<K>(),
            seeds: self.hasher.seeds(),
            saved_at,
            keys,
        }
    }
}

impl<K: Hash + ?Sized, C: Clock> Builder<K, C, Quota> {
    /// Builds the limiter with the debts of a saved state: its key hasher's seed (so the saved
    /// fingerprints are this limiter's keys again), and every saved key with its debt less the
    /// wall-clock time since the save; a debt that has drained by then is dropped. Keys are
    /// loaded largest debt first, under the builder's [`WhenFull`](crate::WhenFull) if the
    /// table is smaller than the saved state.
    ///
    /// # Errors
    ///
    /// Fails, and restores nothing (build without `restore` to start empty), when the state
    /// was saved under another quota ([`SnapshotError::Quota`]), by a limiter of another key
    /// type ([`SnapshotError::KeyType`]), or when the builder was given another seed
    /// ([`SnapshotError::Seed`]). A file that is truncated, corrupt or of another version
    /// fails earlier, in [`Snapshot::read`]. A seed given after `restore` that differs from
    /// the saved one makes [`build`](Self::build) fail with
    /// [`Error::SeedConflict`](crate::Error::SeedConflict).
    ///
    /// The elapsed time is wall-clock time (`SystemTime`): the limiter's own clock counts
    /// from its process's start, which a restart resets. A wall clock set back between save
    /// and restore makes the debts drain later (stricter); one set forward, sooner.
    ///
    /// # Examples
    ///
    /// See [`Limiter::save`].
    pub fn restore(mut self, snapshot: Snapshot) -> Result<Self, SnapshotError> {
        let hasher = hasher_for::<K>(&snapshot, &self.quota, self.seeded())?;
        self.restore = Some((snapshot, hasher));
        Ok(self)
    }
}

/// What `Builder::restore` checks of a saved state against the builder, giving the limiter's
/// hasher. Then [`load`] fills the table when it is built.
fn hasher_for<K: ?Sized>(
    snapshot: &Snapshot,
    quota: &Quota,
    seeded: Option<KeyHash>,
) -> Result<KeyHash, SnapshotError> {
    if (quota.t, quota.limit) != (snapshot.interval, snapshot.limit) {
        return Err(SnapshotError::Quota {
            saved_interval_nanos: snapshot.interval,
            saved_limit: snapshot.limit,
            interval_nanos: quota.t,
            limit: quota.limit,
        });
    }
    if snapshot.key_type != key_type::<K>() {
        return Err(SnapshotError::KeyType);
    }
    let [a, b, c, d] = snapshot.seeds;
    if seeded.is_some_and(|h| h.seeds() != snapshot.seeds) {
        return Err(SnapshotError::Seed);
    }
    Ok(KeyHash::with_seeds(a, b, c, d))
}

/// Loads a checked saved state into a new limiter's empty table.
pub(super) fn load<K: ?Sized, C: Clock, Q: crate::quota_kind::QuotaKind>(
    limiter: &Limiter<K, C, Q>,
    snapshot: Snapshot,
) {
    let elapsed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .saturating_sub(snapshot.saved_at);
    let now = limiter.clock.now().as_nanos();
    let mut keys = snapshot.keys;
    keys.retain(|&(_, debt)| debt > elapsed);
    // Largest debts first: if the table is too small, the keys it turns away or evicts are
    // the ones that owe least.
    keys.sort_unstable_by_key(|&(_, debt)| std::cmp::Reverse(debt));
    for (fp, debt) in keys {
        // `debt - elapsed <= tolerance` (checked when read), so the arrival time is in range.
        let tat = now + (debt - elapsed);
        let home = limiter.table.home(fp);
        limiter.table.update(&home, now, &limiter.quota, |current| {
            (tat > current).then_some(tat)
        });
    }
}
