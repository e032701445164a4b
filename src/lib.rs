//! # funnel
//!
//! A bounded-memory keyed rate limiter for the hot path of proxies and gateways: updates of
//! present keys are lock-free; creating a new key takes a per-stripe creation lock.
//!
//! Each key (a client IP, a token, a `user:action` string) gets a **funnel** (a leaky bucket used
//! as a meter): a burst capacity, the *limit*, that leaks back at `count` actions per `period`;
//! a request of cost `n` passes while it fits. The answer is the same as redis-cell's
//! `CL.THROTTLE` gives (allowed, limit, remaining, retry-after, reset-after) without a round trip
//! to Redis: a few nanoseconds in process.
//!
//! * **One word per funnel.** A funnel is one `AtomicU64` holding its theoretical arrival time
//!   (GCRA); an allowed request is one compare-and-swap, a denied one is loads only.
//! * **Bounded memory.** [`Limiter`] keeps funnels in a table of 18-byte slots whose size (or,
//!   with [`Builder::max_capacity`], largest size) is fixed at build time. A funnel that has
//!   fully drained is the same as an absent one, so its slot is reused lazily; a flood of new
//!   keys never grows memory past that size, and the default eviction victim is the funnel
//!   whose loss admits the fewest extra requests.
//! * **Exact.** Integer nanoseconds, no floats; CL.THROTTLE's five integers bit for bit on sane
//!   input; a typed [`Error`] instead of a panic or a wrap everywhere else; never more than the
//!   limit under contention.
//!
//! ## Quick start
//!
//! ```
//! use std::time::Duration;
//! use funnel::{Limiter, Quota};
//!
//! // 30 per minute per key, bursts of up to 16.
//! let limiter = Limiter::<str>::new(Quota::per_minute(30)?.with_limit(16)?);
//!
//! let d = limiter.check("user:42:login");
//! if d.is_allowed() {
//!     // serve; headers: d.limit(), d.remaining(), d.reset_after()
//! } else {
//!     // 429 with Retry-After: d.retry_after()
//! }
//! assert_eq!((d.limit(), d.remaining(), d.reset_after()), (16, 15, Duration::from_secs(2)));
//! // The same answer as CL.THROTTLE <key> 15 30 60 (whose limit is max_burst + 1).
//! assert_eq!(Quota::from_cl_throttle(15, 30, 60)?, *limiter.quota());
//! assert_eq!(d.to_cl_throttle(), [0, 16, 15, -1, 2]);
//! # Ok::<(), funnel::Error>(())
//! ```
//!
//! A single funnel for one key is [`Funnel`]; a proxy that already read the time for its event
//! loop calls the `*_at` variants with a [`Timestamp`] and pays for no clock read. Tests use
//! [`clock::ManualClock`].
//!
//! ## Where things are
//!
//! * `gcra` — the arithmetic (pure, no atomics); [`Decision`] — the answer;
//! * `state` — the bit layout of the packed word;
//! * `table` — the slot protocol and lazy eviction (see `docs/design/slot-protocol.md`);
//! * [`Limiter`], [`Funnel`] — the public layer, with the calls every keyed limiter shares in
//!   `keyed`; `replay` (cargo feature `replay`) — CL.THROTTLE traffic replay.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
mod decision;
mod error;
mod funnel;
mod gcra;
mod hasher;
mod keyed;
mod limiter;
mod quota;
mod quota_kind;
#[cfg(feature = "replay")]
pub mod replay;
mod snapshot;
mod state;
mod sync;
mod table;
mod with_quota;

pub use clock::{Clock, Timestamp};
pub use decision::{Decision, Outcome};
pub use error::Error;
pub use funnel::Funnel;
pub use limiter::{Builder, FixedWindowLimiter, Limiter, SlidingWindowLimiter, DEFAULT_CAPACITY};
pub use quota::Quota;
pub use quota_kind::QuotaKind;
pub use snapshot::{Snapshot, SnapshotError};
pub use table::{Stats, WhenFull, MAX_CAPACITY};
pub use with_quota::WithQuota;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// Policies beyond one limit per request (`docs/design/policies.md`): several limits all or
// nothing, settle-later costs, the near-limit signal, live reconfiguration, and the window
// algorithms.
mod live;
mod multi;
mod near;
mod settle;
pub mod window;

pub use live::{LiveLimiter, LiveQuota};
pub use multi::{check_all, Charge, CheckAllEntry, MultiDecision};
pub use settle::{Reservation, Settled};
