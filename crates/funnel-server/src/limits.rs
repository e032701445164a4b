//! The bounds on what one request may ask and on what the server keeps. A request past any of
//! them is answered `INVALID_ARGUMENT`, naming the bound.

/// The largest encoded request accepted by gRPC and `POST /json`, in bytes.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// The longest domain, in bytes.
pub const MAX_DOMAIN_BYTES: usize = 256;
/// The most descriptors in one request.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries in one descriptor.
pub const MAX_ENTRIES: usize = 16;
/// The longest entry key or value, in bytes.
pub const MAX_ENTRY_BYTES: usize = 1024;
/// The largest `limit.requests_per_unit` a request may override with.
pub const MAX_OVERRIDE: u32 = 1 << 22;
/// The largest fixed or sliding window limit (the count field of funnel's window word).
pub const MAX_WINDOW_LIMIT: u64 = (1 << 22) - 1;
/// The most distinct values a `detailed_metric` rule reports on its own; further values are
/// counted in the rule's totals only.
pub const MAX_DETAILED_VALUES: usize = 1_000;
