//! The ranges a window quota must keep for its word to fit a slot: [`validate`].

use std::time::Duration;

use crate::error::Error;

/// Validates `limit` units per `window` for a word with `count_bits` of count and a window
/// index that must stay below `2^index_bits` over the clock's whole range.
pub(crate) fn validate(
    limit: u64,
    window: Duration,
    count_bits: u32,
    min_window: Duration,
) -> Result<u64, Error> {
    if limit == 0 {
        return Err(Error::ZeroLimit);
    }
    let max = (1 << count_bits) - 1;
    if limit > max {
        return Err(Error::WindowLimitTooLarge { limit, max });
    }
    if window < min_window {
        return Err(Error::WindowTooShort {
            window,
            min: min_window,
        });
    }
    let nanos = window.as_nanos();
    if nanos.saturating_mul(u128::from(limit)) > 1 << 62 {
        return Err(Error::WindowTooLong { window, limit });
    }
    Ok(nanos as u64) // < 2^62: checked just above (limit >= 1)
}
