//! The preferred slot: the one slot of its first bucket a key takes when it is free, and which
//! a lookup reads before matching tags, while the table is sparse enough that most keys sit
//! there (docs/design/table.md, the preferred slot).
//!
//! A hit there is validated exactly as a slot found through its tag (`lookup.rs`,
//! `validate_live`): the tag match is a filter, never part of what makes a slot the key's, so
//! reading one slot first changes which slots are read, not what a read proves. What it buys
//! is an address known from the hash alone: the funnel word's load need not wait for the tag
//! word and its match, which on a cached table is most of what a decision waits for.
//!
//! A miss costs a mispredicted branch on top of the tag match, so the table reads the preferred
//! slot first only while it holds few keys for its size ([`PREFER_BELOW`]); bindings keep that
//! flag up to date. While it is set, a new key takes its preferred slot when it is unbound
//! (`create.rs`, `create_preferred`).

use std::sync::atomic::{AtomicBool, Ordering};

use super::Table;

/// The share of the slots in use, in twentieths, below which a lookup reads the preferred slot
/// first: where its hits still outweigh the mispredicted branch of its misses, with a margin
/// (the lab's `sparse` finds where they cross).
pub(super) const PREFER_BELOW: u64 = 3;

/// Every how many bindings of a free slot in one stripe of counters the table looks again at
/// how full it is.
const EVERY: u64 = 16;

/// The preferred slot of the key `fp` in its first bucket, from its fingerprint's low byte (its
/// tag's bits, which choose no bucket, so the keys of one bucket spread over its slots).
#[cfg(not(funnel_loom))]
#[inline(always)]
pub(super) fn slot(fp: u64) -> usize {
    (((fp & 0xFF) as usize) * super::SLOTS_PER_BUCKET) >> 8
}

/// Under loom every key prefers slot 0, where the models' placements put the first key of a
/// bucket: their lookups then read first a slot that holds their key in some interleavings and
/// another key, or a slot being rebound, in others, and their creators take it when it is free.
#[cfg(funnel_loom)]
pub(super) fn slot(_fp: u64) -> usize {
    0
}

/// Whether lookups read the preferred slot first (and new keys take it), kept by bindings.
pub(super) struct Preference(AtomicBool);

impl Preference {
    /// A table starts empty: preferred slots first.
    pub(super) fn new() -> Preference {
        Preference(AtomicBool::new(true))
    }

    /// Whether a lookup reads the preferred slot first.
    #[inline(always)]
    pub(super) fn first(&self) -> bool {
        // Relaxed: a hint for the order of reads, which validate what they find either way.
        self.0.load(Ordering::Relaxed)
    }

    /// Sets which slot lookups read first, for tests and loom models that fix it.
    #[cfg(test)]
    pub(super) fn set(&self, first: bool) {
        self.0.store(first, Ordering::Relaxed);
    }
}

impl Table {
    /// After `fp`'s creation or move bound a slot that held no key, the `bound`th of its stripe
    /// of counters: every [`EVERY`] of them, whether lookups should read the preferred slot
    /// first, from how full the table is now.
    #[inline]
    pub(super) fn keep_preference(&self, fp: u64, bound: u64) {
        if bound % EVERY == 0 {
            self.reconsider_preference(fp);
        }
    }

    #[cold]
    #[inline(never)]
    fn reconsider_preference(&self, fp: u64) {
        let sparse = self.holds_fewer_than(fp, PREFER_BELOW);
        // Relaxed: a hint (see `Preference::first`).
        if self.prefer.0.load(Ordering::Relaxed) != sparse {
            self.prefer.0.store(sparse, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(funnel_loom)))]
mod tests {
    use super::*;
    use crate::quota::Quota;
    use crate::table::{Home, WhenFull, SLOTS_PER_BUCKET};
    use std::collections::HashSet;
    use std::time::Duration;

    /// Two requests a second per key, so a key's second request at the same instant is allowed
    /// only if its first one's debt is found, and its third is denied.
    fn quota() -> Quota {
        Quota::per_period(1, Duration::from_secs(1))
            .unwrap()
            .with_limit(2)
            .unwrap()
    }

    fn table(slots: usize) -> Table {
        Table::with_capacity(slots, WhenFull::Deny, Some(false)).unwrap()
    }

    /// Distinct, well-spread hashes.
    fn hashes(n: u64) -> impl Iterator<Item = u64> {
        (1..=n).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i << 7))
    }

    fn admitted(table: &Table, home: &Home) -> bool {
        table.decide(home, 1_000, &quota(), 1).is_allowed()
    }

    #[test]
    fn every_preferred_slot_is_a_slot_and_each_takes_a_fair_share_of_tags() {
        let mut per_slot = [0; SLOTS_PER_BUCKET];
        for byte in 0..256 {
            per_slot[slot(byte)] += 1;
        }
        let fair = 256 / SLOTS_PER_BUCKET;
        assert!(
            per_slot.iter().all(|&n| n == fair || n == fair + 1),
            "{per_slot:?}"
        );
    }

    #[test]
    fn a_new_key_in_a_sparse_table_takes_its_preferred_slot_when_no_earlier_key_has_it() {
        let table = table(70_000);
        let mut claimed = HashSet::new();
        for hash in hashes(300) {
            let home = table.home(hash);
            assert!(admitted(&table, &home));
            let found = table.locate(home.fp).expect("just created");
            let preferred = std::ptr::eq(found.bucket, &table.buckets[home.first])
                && found.slot == slot(home.fp);
            assert_eq!(
                preferred,
                claimed.insert((home.first, slot(home.fp))),
                "a key takes its preferred slot exactly when no earlier key took it"
            );
        }
        assert!(table.prefer.first(), "300 keys in 70,000 slots is sparse");
    }

    #[test]
    fn lookups_read_tags_first_once_the_table_holds_its_threshold_of_keys() {
        let table = table(65_536);
        let threshold = 65_536 * PREFER_BELOW as usize / 20;
        for (i, hash) in hashes(20_000).enumerate() {
            assert!(admitted(&table, &table.home(hash)));
            if i + 1 == threshold * 9 / 10 {
                assert!(
                    table.prefer.first(),
                    "below the threshold: preferred slot first"
                );
            }
        }
        assert!(!table.prefer.first(), "past it: tags first");
    }

    #[test]
    fn a_new_key_takes_its_preferred_slot_over_an_emptier_second_bucket_while_sparse() {
        let table = table(7 * 64);
        let home = hashes(1_000)
            .map(|h| table.home(h))
            .find(|h| h.first != h.second && slot(h.fp) > 0)
            .unwrap();
        // Another key in slot 0 of the first bucket: two choices alone would take the second
        // bucket (more free slots), and the first bucket's first free slot is not the preferred.
        let other = &table.buckets[home.first];
        other.keys[0].store(home.fp ^ 0xFF00, Ordering::Relaxed);
        other.words[0].store(crate::state::live(1, 1 << 40), Ordering::Relaxed);
        assert!(table.prefer.first());
        assert!(admitted(&table, &home));
        let found = table.locate(home.fp).unwrap();
        assert!(std::ptr::eq(found.bucket, other));
        assert_eq!(found.slot, slot(home.fp));
    }

    #[test]
    fn lookups_find_every_key_and_its_debt_whichever_slot_they_read_first() {
        let table = table(700);
        let homes: Vec<Home> = hashes(300).map(|h| table.home(h)).collect();
        for home in &homes {
            assert!(admitted(&table, home), "a new key's first request");
        }
        assert!(
            !table.prefer.first(),
            "300 keys in 700 slots: tags first, and new keys placed by two choices"
        );
        let outside = homes
            .iter()
            .filter(|h| {
                let found = table.locate(h.fp).unwrap();
                !(std::ptr::eq(found.bucket, &table.buckets[h.first]) && found.slot == slot(h.fp))
            })
            .count();
        assert!(
            outside > 50,
            "many keys outside their preferred slot: {outside}"
        );
        for (i, home) in homes.iter().enumerate() {
            // Half the keys looked up with the preferred slot read first, half without: both
            // lookups find the key's funnel, its first request's debt included.
            table.prefer.set(i % 2 == 0);
            let found = Table::find(table.start_words(home)).expect("present and live");
            assert_eq!(found.word, table.locate(home.fp).unwrap().word);
            assert!(admitted(&table, home), "the second request fits the limit");
            assert!(
                !admitted(&table, home),
                "the third does not: the debt was found"
            );
        }
        assert_eq!(table.stats().keys, 300, "no key was created twice");
    }
}
