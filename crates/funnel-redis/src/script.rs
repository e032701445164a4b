//! The Lua script: CL.THROTTLE's funnel (GCRA) on one Redis key, atomically.
//!
//! * Time comes from the server's `TIME`, so every instance of a fleet decides on one clock:
//!   the instances' own clocks, and any skew between them, play no part in a decision.
//! * Integer **microseconds** since the Unix epoch: Lua numbers are doubles, exact up to 2^53;
//!   epoch microseconds are about 1.8e15, epoch nanoseconds (1.8e18) would not be exact. The
//!   quota's emission interval must therefore be a whole number of microseconds (checked when
//!   the limiter is built); then every quantity here is a whole number of microseconds and the
//!   decision is exactly the in-process one.
//! * The stored value is the theoretical arrival time (TAT), written with `%.0f` so it never
//!   turns into `1.7e+15`; its TTL is the time until the funnel drains, rounded up to the
//!   millisecond, so a drained funnel disappears just as funnel's table forgets it.
//! * It returns `{code, tat_before, now}`: the Rust side rebuilds the full `Decision` from the
//!   stored TAT and the server's time with `funnel::Quota::decide_at`, the very function the
//!   in-process limiter uses, and checks that both agree on allowed or not.
//!
//! `ARGV`: emission interval (µs), tolerance (µs), limit, cost, and optionally `now` (µs since
//! the Unix epoch) in place of the server's `TIME`. Only `RedisLimiter::check_n_at` (cargo
//! feature `injected-time`, for tests) passes it: the arithmetic can then be checked against the
//! reference model at the replay file's own timestamps. The key's expiry (`PX`) is still
//! measured by the server's real clock, so a test that injects times keeps its keys' TTLs longer
//! than the test takes. A key holding another type makes `GET` fail with `WRONGTYPE`, and a
//! string that is not a whole number of microseconds from 0 to 2^53 (another program's value,
//! `"1.5"`, `"-5"`, `"abc"`) makes the script answer `WRONGTYPE` itself, before any write: a
//! typed error, never a silent overwrite.

pub(crate) const GCRA: &str = r#"
local t = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local now
if ARGV[5] then
  now = tonumber(ARGV[5])
else
  local clock = redis.call('TIME')
  now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
end
local stored = redis.call('GET', KEYS[1])
local tat = 0
if stored then
  tat = tonumber(stored)
  if tat == nil or tat ~= math.floor(tat) or tat < 0 or tat > 9007199254740992 then
    return redis.error_reply('WRONGTYPE the key holds a string that is not an arrival time')
  end
end
if n > limit then
  return {2, tat, now}
end
local base = tat
if now > base then base = now end
local new = base + n * t
if new - tau > now then
  return {0, tat, now}
end
if n > 0 then
  local ttl_ms = math.ceil((new - now) / 1000)
  redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', ttl_ms)
end
return {1, tat, now}
"#;

/// The script's verdict, before the Rust side rebuilds the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Limited,
    Allowed,
    CostExceedsLimit,
}

impl Verdict {
    pub(crate) fn from_code(code: i64) -> Option<Verdict> {
        match code {
            0 => Some(Verdict::Limited),
            1 => Some(Verdict::Allowed),
            2 => Some(Verdict::CostExceedsLimit),
            _ => None,
        }
    }
}
