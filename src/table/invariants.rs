//! The table's invariants, checked at rest by tests and fuzzing: no slot being bound or moved,
//! no key bound twice, every key in one of its candidate buckets with its own tag, no tag byte
//! beyond a bucket's slots, the key counter equal to the bound slots.

use super::bucket::SLOTS_PER_BUCKET;
use super::grow::FIRST_FP;
use super::tags::tag_of;
use super::Table;
use crate::state::{self, SlotState};
use crate::sync::Ordering;

impl Table {
    /// Checks the table's invariants while no other thread uses it: no RESERVED, PENDING or MOVED
    /// slot, no key bound twice, every key in one of its candidate buckets (at the level in use,
    /// or, in the middle of a growth, the level it grows from), the key count equal to the bound
    /// slots. For tests and fuzzing.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let mut seen = std::collections::HashMap::new();
        let mut bound = 0usize;
        let in_use = self.buckets_in_use();
        for (b, bucket) in self.buckets.iter().enumerate() {
            // Acquire: the table is at rest (caller's contract); Acquire makes the last
            // writers' stores visible even if they ran on other threads.
            let tags = bucket.tags.load(Ordering::Acquire);
            // The SSE2 match (`tags.rs`) relies on the bytes beyond the slots staying 0.
            if tags >> (8 * SLOTS_PER_BUCKET) != 0 {
                return Err(format!(
                    "bucket {b}'s tag word {tags:#x} has bytes beyond its slots"
                ));
            }
            for i in 0..SLOTS_PER_BUCKET {
                let word = bucket.words[i].load(Ordering::Acquire);
                let key = bucket.keys[i].load(Ordering::Acquire);
                let at = (b, i);
                match state::decode(word) {
                    SlotState::Empty if key == 0 => {}
                    SlotState::Empty => {
                        return Err(format!("slot {at:?} is EMPTY with key {key:#x}"))
                    }
                    SlotState::Reserved => return Err(format!("slot {at:?} is RESERVED at rest")),
                    SlotState::Pending { .. } => {
                        return Err(format!("slot {at:?} is PENDING at rest"))
                    }
                    SlotState::Moved { .. } => return Err(format!("slot {at:?} is MOVED at rest")),
                    SlotState::Dead { .. } if key >= FIRST_FP => {}
                    SlotState::Dead { .. } => {
                        return Err(format!("slot {at:?} is DEAD with no key that left it"))
                    }
                    SlotState::Live { tat, .. } => {
                        bound += 1;
                        if b >= in_use {
                            return Err(format!("slot {at:?} is live beyond the buckets in use"));
                        }
                        if key < FIRST_FP {
                            return Err(format!("slot {at:?} is live with key word {key}"));
                        }
                        if tat > state::MAX_TAT {
                            return Err(format!("slot {at:?} has TAT {tat} beyond range"));
                        }
                        if (tags >> (8 * i)) & 0xFF != tag_of(key) {
                            return Err(format!("slot {at:?} has a tag that is not its key's"));
                        }
                        let (home, from) = self.homes(key);
                        let candidate = home.buckets().chain(from.iter().flat_map(|h| h.buckets()));
                        if !candidate.into_iter().any(|c| c == b) {
                            return Err(format!(
                                "key {key:#x} in bucket {b}, not one of its candidates"
                            ));
                        }
                        if let Some(other) = seen.insert(key, at) {
                            return Err(format!("key {key:#x} bound twice: {other:?} and {at:?}"));
                        }
                    }
                }
            }
        }
        let counted = self.stats().keys;
        if counted != bound {
            return Err(format!("key counter says {counted}, table holds {bound}"));
        }
        Ok(())
    }
}
