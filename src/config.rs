//! [`LiveConfig`]: any configuration (a tower layer's set of policies, a table of quotas)
//! replaced while traffic flows, read on the hot path with one atomic load (a read lock only
//! on the first read after a replacement).
//!
//! Each reader keeps its own handle, a [`ConfigReader`], holding an `Arc` of the configuration
//! it last saw and that configuration's version. Reading compares the handle's version with
//! the cell's (one Acquire load); only after a replacement does the handle take the cell's lock,
//! once, to pick up the new `Arc`. An old configuration is freed when the last handle still
//! holding it moves on or is dropped: reclamation by reference count, with no `unsafe` (an
//! epoch-reclaimed pointer would need it, and the crate denies `unsafe_code`).
//! `docs/DESIGN.md`, "Live reconfiguration".

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// A configuration shared by many readers and replaced at any time.
///
/// # Examples
///
/// ```
/// use funnel::{LiveConfig, Quota};
///
/// // A proxy's policies: (route prefix, quota).
/// let policies = LiveConfig::new(vec![("/api", Quota::per_second(100)?)]);
/// let mut reader = policies.reader(); // one per worker or connection
/// assert_eq!(reader.get().len(), 1);
///
/// policies.store(vec![("/api", Quota::per_second(50)?), ("/login", Quota::per_minute(5)?)]);
/// assert_eq!(reader.get().len(), 2); // the next read sees the new set
/// # Ok::<(), funnel::Error>(())
/// ```
///
/// A `LiveConfig` is a cheap handle (an `Arc`): clones share one cell, so a reload task can
/// keep one and the services another. Readers own what they hold and borrow nothing.
#[derive(Debug)]
pub struct LiveConfig<T> {
    cell: Arc<Cell<T>>,
}

#[derive(Debug)]
struct Cell<T> {
    /// Replacements so far; a reader holding an older version refreshes.
    version: AtomicU64,
    /// The current configuration and its version. Readers take it only to refresh.
    current: RwLock<(u64, Arc<T>)>,
}

impl<T> Clone for LiveConfig<T> {
    fn clone(&self) -> Self {
        LiveConfig {
            cell: self.cell.clone(),
        }
    }
}

impl<T> LiveConfig<T> {
    /// A cell holding `config`.
    pub fn new(config: T) -> LiveConfig<T> {
        LiveConfig {
            cell: Arc::new(Cell {
                version: AtomicU64::new(0),
                current: RwLock::new((0, Arc::new(config))),
            }),
        }
    }

    /// Replaces the configuration. Readers see it on their next [`ConfigReader::get`]; a read
    /// under way finishes with the configuration it holds.
    pub fn store(&self, config: T) {
        let config = Arc::new(config);
        // A poisoned lock only means a writer panicked before its (single) assignment.
        let mut current = self.cell.current.write().unwrap_or_else(|e| e.into_inner());
        let version = current.0 + 1;
        *current = (version, config);
        // Release: a reader whose Acquire load sees `version` then takes the lock and finds
        // this configuration (the lock orders it anyway; Release keeps the fast check honest
        // on its own).
        self.cell.version.store(version, Ordering::Release);
    }

    /// The current configuration, taking the lock: for occasional reads. Hot paths keep a
    /// [`reader`](Self::reader).
    pub fn load(&self) -> Arc<T> {
        self.cell
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// A handle for one reader (a worker thread, a connection's service).
    pub fn reader(&self) -> ConfigReader<T> {
        let (version, config) = {
            let current = self.cell.current.read().unwrap_or_else(|e| e.into_inner());
            (current.0, current.1.clone())
        };
        ConfigReader {
            cell: self.cell.clone(),
            version,
            config,
        }
    }

    /// Replacements made so far.
    pub fn version(&self) -> u64 {
        // Acquire: as in `ConfigReader::get`.
        self.cell.version.load(Ordering::Acquire)
    }
}

/// One reader's view of a [`LiveConfig`]: the configuration it last saw, refreshed on `get`
/// after a replacement.
#[derive(Debug)]
pub struct ConfigReader<T> {
    cell: Arc<Cell<T>>,
    version: u64,
    config: Arc<T>,
}

impl<T> ConfigReader<T> {
    /// The current configuration: one atomic load when nothing changed; after a replacement,
    /// one read lock to pick up the new one.
    #[inline]
    pub fn get(&mut self) -> &T {
        // Acquire: pairs with the Release store in `store`.
        if self.cell.version.load(Ordering::Acquire) != self.version {
            self.refresh();
        }
        &self.config
    }

    /// The version of the configuration this reader holds.
    pub fn version(&self) -> u64 {
        self.version
    }

    #[cold]
    fn refresh(&mut self) {
        let current = self.cell.current.read().unwrap_or_else(|e| e.into_inner());
        self.version = current.0;
        self.config = current.1.clone();
    }
}

impl<T> Clone for ConfigReader<T> {
    fn clone(&self) -> Self {
        ConfigReader {
            cell: self.cell.clone(),
            version: self.version,
            config: self.config.clone(),
        }
    }
}
