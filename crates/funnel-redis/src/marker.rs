//! How an instance learns that Redis lost data it had decided on.
//!
//! A Redis that restarts without persistence, gets `FLUSHALL`, or is replaced by a replica that
//! missed the last writes forgives every key it lost, while each instance's deny cache goes on
//! denying them. Nothing on the connection says so (a `FLUSHALL` keeps it open; a failover
//! behind one address reconnects quietly), so the limiter watches two signals:
//!
//! * **the data-set marker**: the script keeps one string key next to the funnels holding its
//!   **epoch**, the server's time (µs) when it was created, and returns it with every decision.
//!   A data set that lost it (a restart with nothing kept, a `FLUSHALL`, a replica that never
//!   received it, an eviction of the marker itself) creates a new one at its next request, with
//!   another epoch. The limiter remembers the epoch of the latest reply (by the server's time),
//!   and a later reply with another one means the data set was emptied. A reply overtaken by a
//!   newer one (its server time earlier) is not compared, so replies read out of order do not
//!   count as a loss.
//! * **the server's identity**: every second, the limiter reads `run_id` (`INFO server`: a new
//!   one for every start of a server) and `master_replid` (`INFO replication`: a new one when a
//!   replica is promoted, or loads a primary's full copy). A replica promoted after missing the
//!   last writes kept the old marker, but not the old replication id. Single server only: on a
//!   cluster, `INFO` reaches one node.
//!
//! Either change empties the deny cache and is counted
//! ([`Stats::data_losses`](crate::Stats::data_losses)). A promotion that lost nothing counts
//! too: the cache is emptied when it need not be, which costs round trips, never a wrong
//! answer.
//!
//! On a single server there is one marker, `<prefix>\0marker`. On a Redis Cluster each hash
//! slot has its own, `<prefix>\0marker{<tag>}` with a tag chosen so that it lands in that slot,
//! so that the script, which may touch only keys of its own slot, can read it; each slot's data
//! loss is then seen on its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::Value;

use crate::cache::DenyCache;
use crate::link::Link;
use crate::policy::Counters;

/// The markers' names and what this instance saw of each.
pub(crate) struct Markers {
    /// The single server's marker, or every slot's (indexed by slot) on a cluster.
    names: Vec<String>,
    /// Per slot (0 on a single server): the epoch of the latest reply and its server time (µs).
    seen: Mutex<HashMap<u16, (u64, u64)>>,
    /// The server's `run_id` and `master_replid` when last read (single server).
    identity: Mutex<Option<(String, String)>>,
}

impl Markers {
    /// The marker of a single server.
    pub(crate) fn single(prefix: &str) -> Markers {
        Markers {
            names: vec![format!("{prefix}\0marker")],
            seen: Mutex::new(HashMap::new()),
            identity: Mutex::new(None),
        }
    }

    /// One marker per hash slot of a Redis Cluster: for each slot, the first `<prefix>\0marker{i}`
    /// that lands in it. A prefix holding a hash tag of its own puts every key in one slot; its
    /// other slots then get no marker (no key lands there).
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(prefix: &str) -> Markers {
        const SLOTS: usize = 16_384;
        let mut names = vec![String::new(); SLOTS];
        let mut found = 0;
        // About 16,384 · ln(16,384) ≈ 160,000 names cover every slot. A prefix with its own
        // hash tag puts them all in one slot: 64 names in one slot say so (by chance, about
        // 16,384^-63), and the search stops there; the bound is a last guard.
        for i in 0..400_000u32 {
            if i == 64 && found == 1 {
                break;
            }
            let name = format!("{prefix}\0marker{{{i}}}");
            let slot = usize::from(redis::cluster_routing::get_slot(name.as_bytes()));
            if names[slot].is_empty() {
                names[slot] = name;
                found += 1;
                if found == SLOTS {
                    break;
                }
            }
        }
        Markers {
            names,
            seen: Mutex::new(HashMap::new()),
            identity: Mutex::new(None),
        }
    }

    /// The marker for `redis_key` and its slot (0 on a single server); `None` where no marker
    /// shares the key's slot (then nothing is detected for it).
    pub(crate) fn for_key(&self, redis_key: &str) -> Option<(u16, &str)> {
        if self.names.len() == 1 {
            return Some((0, &self.names[0]));
        }
        #[cfg(feature = "cluster")]
        {
            let slot = redis::cluster_routing::get_slot(redis_key.as_bytes());
            let name = self.names.get(usize::from(slot))?;
            if name.is_empty() {
                return None;
            }
            Some((slot, name))
        }
        #[cfg(not(feature = "cluster"))]
        {
            let _ = redis_key;
            None
        }
    }

    /// Records the epoch of a reply from `slot` at the server's time `now_us` (0: unknown,
    /// ignored); true when it differs from the latest reply's (see the module documentation).
    pub(crate) fn lost(&self, slot: u16, epoch: u64, now_us: u64) -> bool {
        if epoch == 0 {
            return false;
        }
        let lost = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            match seen.get_mut(&slot) {
                None => {
                    seen.insert(slot, (epoch, now_us));
                    false
                }
                Some((last, _)) if *last == epoch => false,
                Some((_, at)) if now_us < *at => false,
                Some((last, at)) => {
                    *last = epoch;
                    *at = now_us;
                    true
                }
            }
        };
        if lost {
            // A restart is seen by both signals: the identity read next is taken as the first,
            // so that one loss is counted once.
            *self.identity.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        lost
    }

    /// Records the server's identity (`run_id`, `master_replid`); true when it differs from the
    /// one read before.
    pub(crate) fn identity_changed(&self, run_id: String, replid: String) -> bool {
        let mut identity = self.identity.lock().unwrap_or_else(|p| p.into_inner());
        let now = Some((run_id, replid));
        let changed = identity.is_some() && *identity != now;
        *identity = now;
        drop(identity);
        if changed {
            // As in `lost`: the next epoch read is taken as the first.
            self.seen.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        changed
    }
}

/// How often the server's identity is read.
pub(crate) const IDENTITY_EVERY: Duration = Duration::from_secs(1);

/// The task that reads the server's identity every [`IDENTITY_EVERY`] while the limiter lives
/// (it holds the link weakly), and empties the deny cache when it changed. Each reading waits
/// at most `timeout` (at least 100 ms); one that fails is skipped.
pub(crate) async fn watch_identity(
    link: Weak<Link>,
    markers: Arc<Markers>,
    cache: Option<Arc<DenyCache>>,
    counters: Arc<Counters>,
    timeout: Duration,
) {
    loop {
        let conn = match link.upgrade() {
            Some(link) => link.current(),
            None => return,
        };
        if let Some((_, mut conn)) = conn {
            let read = async {
                let server = conn.command(redis::cmd("INFO").arg("server")).await;
                let replication = conn.command(redis::cmd("INFO").arg("replication")).await;
                (text(server), text(replication))
            };
            let limit = timeout.max(Duration::from_millis(100));
            if let Ok((Some(server), Some(replication))) = tokio::time::timeout(limit, read).await {
                if let (Some(run_id), Some(replid)) = (
                    info_field(&server, "run_id"),
                    info_field(&replication, "master_replid"),
                ) {
                    if markers.identity_changed(run_id.to_string(), replid.to_string()) {
                        Counters::add(&counters.data_losses, 1);
                        if let Some(cache) = &cache {
                            cache.invalidate_all();
                        }
                    }
                }
            }
        }
        tokio::time::sleep(IDENTITY_EVERY).await;
    }
}

/// An `INFO` reply's text.
fn text(reply: redis::RedisResult<Value>) -> Option<String> {
    match reply.ok()? {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::VerbatimString { text, .. } => Some(text),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

/// `field`'s value in an `INFO` reply.
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_epoch_is_a_loss_and_an_overtaken_reply_is_not() {
        let m = Markers::single("p:");
        assert!(!m.lost(0, 100, 1_000));
        assert!(!m.lost(0, 100, 1_001));
        // Another epoch: the data set was emptied.
        assert!(m.lost(0, 2_000, 1_002));
        assert!(!m.lost(0, 2_000, 1_003));
        // A reply sent before the loss, read after a newer one: not compared.
        assert!(!m.lost(0, 100, 1_001));
        assert!(!m.lost(0, 2_000, 1_004));
        // Unknown: never compared.
        assert!(!m.lost(0, 0, 1_005));
        assert!(!m.lost(0, 2_000, 1_006));
    }

    #[test]
    fn a_new_run_id_or_replication_id_is_a_change_and_the_first_reading_is_not() {
        let m = Markers::single("p:");
        let id = |r: &str, p: &str| (r.to_string(), p.to_string());
        let (r, p) = id("a", "x");
        assert!(!m.identity_changed(r, p));
        let (r, p) = id("a", "x");
        assert!(!m.identity_changed(r, p));
        let (r, p) = id("a", "y");
        assert!(m.identity_changed(r, p));
        let (r, p) = id("b", "y");
        assert!(m.identity_changed(r, p));
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\n";
        assert_eq!(info_field(info, "run_id"), Some("abc123"));
        assert_eq!(info_field(info, "run"), None);
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn every_slot_gets_a_marker_in_that_slot() {
        let m = Markers::cluster("rl:");
        for slot in 0..16_384u16 {
            let name = &m.names[usize::from(slot)];
            assert_eq!(redis::cluster_routing::get_slot(name.as_bytes()), slot);
        }
        let (slot, name) = m.for_key("rl:{user-1}").unwrap();
        assert_eq!(redis::cluster_routing::get_slot(name.as_bytes()), slot);
        // A prefix with its own hash tag: one slot, one marker.
        let fixed = Markers::cluster("rl:{t}:");
        assert_eq!(fixed.names.iter().filter(|n| !n.is_empty()).count(), 1);
        assert!(fixed.for_key("rl:{t}:anything").is_some());
    }
}
