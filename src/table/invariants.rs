//! The table's invariants, checked at rest by tests and fuzzing: no RESERVED slot, no key bound
//! twice, every key in one of its candidate buckets with its own tag, the key counter equal to
//! the bound slots.

use super::bucket::{tag_of, SLOTS_PER_BUCKET};
use super::Table;
use crate::state::{self, SlotState};
use crate::sync::Ordering;

impl Table {
    /// Checks the table's invariants while no other thread uses it: no RESERVED slot, no key
    /// bound twice, every key in one of its candidate buckets, the key count equal to the
    /// bound slots. For tests and fuzzing.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        let mut seen = std::collections::HashMap::new();
        let mut bound = 0usize;
        for (b, bucket) in self.buckets.iter().enumerate() {
            // Acquire: the table is at rest (caller's contract); Acquire makes the last
            // writers' stores visible even if they ran on other threads.
            let tags = bucket.tags.load(Ordering::Acquire);
            for i in 0..SLOTS_PER_BUCKET {
                let word = bucket.words[i].load(Ordering::Acquire);
                let key = bucket.keys[i].load(Ordering::Acquire);
                match state::decode(word) {
                    SlotState::Empty if key == 0 => {}
                    SlotState::Empty => {
                        return Err(format!("slot {b}.{i} is EMPTY but has key {key:#x}"))
                    }
                    SlotState::Reserved => return Err(format!("slot {b}.{i} is RESERVED at rest")),
                    SlotState::Live { tat, .. } => {
                        bound += 1;
                        if tat > state::MAX_TAT {
                            return Err(format!("slot {b}.{i} has TAT {tat} beyond range"));
                        }
                        if (tags >> (8 * i)) & 0xFF != tag_of(key) {
                            return Err(format!("slot {b}.{i} has a tag that is not its key's"));
                        }
                        let home = self.home(key);
                        if b != home.first && b != home.second {
                            return Err(format!(
                                "key {key:#x} in bucket {b}, not one of its candidates"
                            ));
                        }
                        if let Some(other) = seen.insert(key, (b, i)) {
                            return Err(format!(
                                "key {key:#x} bound twice: {other:?} and {:?}",
                                (b, i)
                            ));
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
