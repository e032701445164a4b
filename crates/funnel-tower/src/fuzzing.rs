//! What the fuzz bodies need that is not public (feature `fuzzing`, not an API). The bodies,
//! and the references they compare against, live in the test kit
//! (`funnel_testkit::fuzz::tower`): `key` checks [`read_key`], `path` the exempt-path rule.

use http::request::Parts;

pub use crate::config::{exempt_prefix, path_is_exempt};
use crate::KeyBy;

/// Hands `f` the key `by` reads from a request head, as the layer reads it: borrowed, so the
/// body can check that the reading itself allocates nothing.
pub fn read_key<R>(by: &KeyBy, parts: &Parts, f: impl FnOnce(&[u8]) -> R) -> R {
    f(by.key(parts).as_slice())
}
