//! [`LiveConfig`]: any configuration (a tower layer's set of policies, a table of quotas)
//! replaced while traffic flows; reading it never blocks, and old configurations are reclaimed
//! with epoch-based reclamation (`crossbeam-epoch`).
//!
//! The cell holds a pointer to a node `(version, Arc<T>)` and, beside it, the version alone in
//! an `AtomicU64`. Each reader keeps its own handle, a [`ConfigReader`], holding an `Arc` of
//! the configuration it last saw and that configuration's version.
//!
//! * **Reading** compares the handle's version with the cell's (one Acquire load, nothing
//!   else, while nothing changed). After a replacement the handle *refreshes*: it pins the
//!   epoch, loads the node, clones its `Arc` and unpins. No lock anywhere: a writer stalled at
//!   any point never makes a reader wait (the reader sees the old node or the new one, both
//!   whole). A refresh is lock-free, as crossbeam's pin is: a thread's first pin registers it
//!   with a CAS loop, and one pin in 128 also tries to advance the epoch and runs up to eight
//!   bags of deferred destructors (of any user of crossbeam's default collector).
//! * **Writing** builds the new node and swaps it in with a compare-and-swap on the pointer
//!   (writers never wait for each other either: a writer whose CAS fails retries on top of the
//!   winner's node), hands the old node to the epoch collector (`defer_destroy`), then
//!   publishes the version.
//! * **Reclamation.** A node is freed once every thread that was pinned when it was replaced
//!   has unpinned; its configuration is freed when, in addition, no handle holds its `Arc`.
//!   The exact bound on what stays alive is in `docs/DESIGN.md`, "Live reconfiguration".
//!
//! This module holds the crate's only `unsafe` outside the table and the clock's `rdtsc`:
//! dereferences and releases of epoch-protected pointers, each with its argument (`// SAFETY:`),
//! and tests that would catch their misuse (`tests/live_config.rs`: every configuration dropped
//! exactly once and never while a reader reads it; the compile-fail examples on
//! [`store`](LiveConfig::store)).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

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
pub struct LiveConfig<T> {
    cell: Arc<Cell<T>>,
}

/// What the pointer points to: one configuration and its version, never changed once
/// published (a replacement publishes a new node).
struct Node<T> {
    version: u64,
    config: Arc<T>,
}

struct Cell<T> {
    /// Replacements published so far: the version of the current node, or (briefly, while a
    /// writer is between its swap and its publication) one less. Never decreases.
    version: AtomicU64,
    /// The current node; never null.
    current: Atomic<Node<T>>,
}

impl<T> Cell<T> {
    /// The current node's version and configuration: pins the epoch for the time of one load
    /// and one `Arc` clone.
    fn load(&self) -> (u64, Arc<T>) {
        let guard = epoch::pin();
        let node = self.current_node(&guard);
        (node.version, node.config.clone())
    }

    /// The current node, alive for as long as `guard` stays pinned.
    fn current_node<'g>(&self, guard: &'g Guard) -> &'g Node<T> {
        // Acquire: pairs with the Release CAS in `LiveConfig::store` that published the node,
        // so its version and `Arc` (written before the CAS) are visible.
        let current = self.current.load(Ordering::Acquire, guard);
        // SAFETY: the pointer is never null (`new` stores a node; `store` only ever swaps in
        // another). The node stays alive while `guard` is pinned: a node is destroyed only
        // through `defer_destroy` after a CAS has replaced it, and the collector runs that
        // destruction only after every thread that was pinned at the replacement has unpinned;
        // we loaded the pointer while pinned, so either it had not been replaced yet (and we
        // are one of those threads) or it is the current node. The borrow is tied to `guard`'s
        // lifetime, so it cannot outlive the pin; and no one writes to a published node, so a
        // shared borrow is sound.
        #[allow(unsafe_code)]
        unsafe {
            current.deref()
        }
    }
}

impl<T> Drop for Cell<T> {
    fn drop(&mut self) {
        let current = std::mem::take(&mut self.current);
        // SAFETY: `&mut self` in `drop`: the last `Arc` of the cell is going, so no handle
        // (`LiveConfig` or `ConfigReader`) is left to load the pointer, and every reader that
        // loaded it earlier did so inside a pin and kept only an `Arc` of the configuration,
        // not a borrow of the node. The current node was never passed to `defer_destroy` (only
        // replaced nodes are), so this is its only release.
        #[allow(unsafe_code)]
        drop(unsafe { current.into_owned() });
    }
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
                current: Atomic::new(Node {
                    version: 0,
                    config: Arc::new(config),
                }),
            }),
        }
    }

    /// The current configuration, pinning the epoch for one load: for occasional reads. Hot
    /// paths keep a [`reader`](Self::reader).
    pub fn load(&self) -> Arc<T> {
        self.cell.load().1
    }

    /// A handle for one reader (a worker thread, a connection's service).
    pub fn reader(&self) -> ConfigReader<T> {
        let (version, config) = self.cell.load();
        ConfigReader {
            cell: self.cell.clone(),
            version,
            config,
        }
    }

    /// Replacements published so far.
    pub fn version(&self) -> u64 {
        // Acquire: as in `ConfigReader::get`.
        self.cell.version.load(Ordering::Acquire)
    }
}

impl<T: Send + Sync + 'static> LiveConfig<T> {
    /// Replaces the configuration. Readers see it on their next [`ConfigReader::get`]; a read
    /// under way finishes with the configuration it holds. Never blocks, and never waits for
    /// readers or other writers; concurrent stores each publish, in the order of their swaps.
    ///
    /// The old configuration is freed once no reader holds it and the epoch collector has
    /// reclaimed its node (see the module docs); its destructor may therefore run on another
    /// thread, which is why `T` must be `Send + Sync`, and at a later time, which is why it
    /// must be `'static`. Neither compiles otherwise:
    ///
    /// ```compile_fail
    /// use std::rc::Rc;
    /// let config = funnel::LiveConfig::new(Rc::new(1)); // an Rc must be dropped on its thread
    /// config.store(Rc::new(2));
    /// ```
    ///
    /// ```compile_fail
    /// let name = String::from("policy");
    /// let config = funnel::LiveConfig::new(name.as_str()); // a borrow could be dropped late
    /// config.store(name.as_str());
    /// ```
    pub fn store(&self, config: T) {
        let mut new = Owned::new(Node {
            version: 0,
            config: Arc::new(config),
        });
        let guard = epoch::pin();
        // Acquire: pairs with the Release CAS of the store that published the node, whose
        // version we read.
        let mut current = self.cell.current.load(Ordering::Acquire, &guard);
        let (old, version) = loop {
            // SAFETY: as in `Cell::current_node`: never null, alive while `guard` is pinned.
            #[allow(unsafe_code)]
            let version = unsafe { current.deref() }.version + 1;
            new.version = version;
            // Release on success: publishes the node's version and `Arc` to the readers'
            // Acquire loads. Acquire on failure: the winner's node, read on the next round.
            match self.cell.current.compare_exchange(
                current,
                new,
                Ordering::Release,
                Ordering::Acquire,
                &guard,
            ) {
                Ok(_) => break (current, version),
                Err(failed) => {
                    current = failed.current;
                    new = failed.new;
                }
            }
        };
        // SAFETY: our CAS unlinked `old`, so no thread can load it from now on; a thread that
        // loaded it before is pinned until it is done with it (it only clones the `Arc`), and
        // the collector destroys `old` only after every such thread has unpinned. Only the
        // writer whose CAS replaced a node retires it, so it is retired exactly once. It may
        // be destroyed on any thread and at any later time: `Node<T>` is `Send` because `T` is
        // `Send + Sync`, and holds no borrow because `T: 'static`.
        #[allow(unsafe_code)]
        unsafe {
            guard.defer_destroy(old)
        };
        // Release: pairs with the Acquire version load in `ConfigReader::get`; a reader that
        // sees `version` then loads the pointer and finds this node or a later one. `fetch_max`
        // keeps the version from going back when two writers publish out of order.
        self.cell.version.fetch_max(version, Ordering::Release);
        drop(guard);
        // Hand the old node to the collector's global queue and free it now if nothing holds
        // it back. Each flush tries to advance the epoch one step (never past the flushing
        // thread's own pin, hence a fresh pin each time) and frees queued nodes two steps old;
        // the queue seals our node with the global epoch, which may already be one step ahead
        // of our pin: three steps in the worst case.
        for _ in 0..3 {
            epoch::pin().flush();
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for LiveConfig<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (version, config) = self.cell.load();
        f.debug_struct("LiveConfig")
            .field("version", &version)
            .field("config", &config)
            .finish()
    }
}

/// One reader's view of a [`LiveConfig`]: the configuration it last saw, refreshed on `get`
/// after a replacement.
pub struct ConfigReader<T> {
    cell: Arc<Cell<T>>,
    version: u64,
    config: Arc<T>,
}

impl<T> ConfigReader<T> {
    /// The current configuration: one atomic load when nothing changed; after a replacement,
    /// one epoch pin (no lock) to pick up the new one.
    #[inline]
    pub fn get(&mut self) -> &T {
        // Acquire: pairs with the Release `fetch_max` in `store`. `>`, not `!=`: a refresh may
        // have picked up a node whose version its writer has not published yet.
        if self.cell.version.load(Ordering::Acquire) > self.version {
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
        let (version, config) = self.cell.load();
        self.version = version;
        // The old `Arc` is dropped here, after the pin: if it was the last one, the old
        // configuration's destructor runs outside it.
        self.config = config;
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

impl<T: fmt::Debug> fmt::Debug for ConfigReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigReader")
            .field("version", &self.version)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its drops.
    struct Counted(Arc<AtomicU64>);

    impl Drop for Counted {
        fn drop(&mut self) {
            // Relaxed: read by the same thread.
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The deferred destruction that `defer_destroy`'s SAFETY argument relies on: a node
    /// borrowed under a pin stays alive, with its configuration, through any number of
    /// replacements, until that pin ends. (Freeing the replaced node at once fails here.)
    #[test]
    fn a_node_borrowed_under_a_pin_outlives_its_replacement_until_the_pin_ends() {
        let drops = Arc::new(AtomicU64::new(0));
        let config = LiveConfig::new(Counted(drops.clone()));
        let guard = epoch::pin();
        let node = config.cell.current_node(&guard);
        let other = std::thread::spawn({
            let config = config.clone();
            move || {
                config.store(Counted(Arc::new(AtomicU64::new(0))));
                config.store(Counted(Arc::new(AtomicU64::new(0))));
            }
        });
        other.join().unwrap();
        assert_eq!(config.version(), 2);
        assert_eq!(node.version, 0);
        assert_eq!(drops.load(Ordering::Relaxed), 0, "freed under a pin");
        assert_eq!(Arc::strong_count(&node.config), 1);
        drop(guard);
        for _ in 0..3 {
            epoch::pin().flush();
        }
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    }
}
