//! funnel-tower's fuzz bodies (feature `fuzz-tower`), for what clients and operators write to
//! that crate: the cargo-fuzz targets in `crates/funnel-tower/fuzz/` call them, and that
//! crate's `tests/fuzz_replay.rs` runs them on stable over the committed corpus and seeded
//! random inputs, so `cargo test` runs the same checks without nightly.
//!
//! * [`key`]: the key of a request (forwarding headers from any peer, `Header(name)`, the
//!   route), against a plain reference reading of
//!   [`KeyBy`](funnel_tower::KeyBy)'s documented rules, and the property that a client behind
//!   honest trusted proxies never picks its key;
//! * [`path`]: exempt-path matching, against a reference and against a normalising upstream;
//! * [`spec`]: the `--limit` grammar, against a reference parser, and the round trip of every
//!   accepted spec to the quota it names.
//!
//! The bodies drive funnel-tower through its public API, and the exempt-path matching through
//! the two functions its `fuzzing` feature re-exports. They read their choices from the
//! fuzzer's bytes with [`Input`], which never fails: once the bytes run out every choice is the
//! smallest one. (It is not the core bodies' [`common::Input`](super::common::Input): the
//! committed corpus is written in this decoding.)

pub mod key;
pub mod path;
pub mod spec;

use std::cell::RefCell;
use std::collections::BTreeMap;

thread_local! {
    /// How often each path of interest was reached on this thread (see [`note`]).
    static SEEN: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Counts one pass through a path of interest of a body, so the stable replay test can check
/// that the committed corpus still reaches it (a change in how a body decodes its input must
/// not silently turn the corpus into one that no longer gets there). Bodies call it outside
/// the spans whose allocations they measure.
pub fn note(event: &'static str) {
    SEEN.with(|s| *s.borrow_mut().entry(event).or_insert(0) += 1);
}

/// How often `event` was [noted](note) on this thread since [`clear_seen`].
pub fn seen(event: &str) -> u64 {
    SEEN.with(|s| s.borrow().get(event).copied().unwrap_or(0))
}

/// Forgets what was [noted](note) on this thread.
pub fn clear_seen() {
    SEEN.with(|s| s.borrow_mut().clear());
}

/// Every event noted on this thread, with its count.
pub fn seen_summary() -> String {
    SEEN.with(|s| format!("{:?}", s.borrow()))
}

/// The fuzzer's bytes, read as choices.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// Reads `data`.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// Bytes are left.
    pub fn more(&self) -> bool {
        !self.data.is_empty()
    }

    /// The next byte, 0 once the bytes run out.
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    /// A number below `n` (`n >= 1`), from one byte when `n <= 256`, else from two or more.
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 256 {
            usize::from(self.byte()) % n
        } else {
            let mut v = 0usize;
            for _ in 0..4 {
                v = (v << 8) | usize::from(self.byte());
            }
            v % n
        }
    }

    /// True about once in `n` reads.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// Any `u64`, from eight bytes.
    pub fn u64(&mut self) -> u64 {
        (0..8).fold(0u64, |v, _| (v << 8) | u64::from(self.byte()))
    }

    /// One of `items`.
    pub fn choose<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// Up to `max` raw bytes, fewer when the input runs out.
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let n = self.below(max + 1).min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }
}
