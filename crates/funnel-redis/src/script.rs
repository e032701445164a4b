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
//! * It returns `{code, tat_before, now, epoch}`: the Rust side rebuilds the full `Decision`
//!   from the stored TAT and the server's time with `funnel::Quota::decide_at`, the very
//!   function the in-process limiter uses, and checks that both agree on allowed or not.
//!   `epoch` is the data-set marker `KEYS[2]` (`marker.rs`): read on every call, and created,
//!   holding the server's `TIME` in µs, when missing. Epoch 0 means unknown (the marker holds
//!   something else, or could not be created, say under `OOM`): the limiter then compares
//!   nothing. A caller's key equal to the marker's name is refused as a typed error rather than
//!   mixing the two.
//! * A key's own error is a **value**, `{3, message}`, never an error reply: the message is the
//!   error reply's text (Redis's, or the script's own), and the Rust side turns it back into
//!   that reply before sorting it (`reply`), so a key gets the same typed error whichever way it
//!   was sent. Its `GET` and its `SET` run under `redis.pcall`: a key holding another type makes
//!   `GET` answer `WRONGTYPE`, a write refused (`OOM` under `maxmemory`, `READONLY` on a replica)
//!   makes `SET` answer its error, and a string that is not a whole number of microseconds from 0
//!   to 2^53 (another program's value, `"1.5"`, `"-5"`, `"abc"`) gets the script's own
//!   `WRONGTYPE`, before any write: a typed error, never a silent overwrite. Why a value: a Redis
//!   Cluster pipeline (the `redis` crate's) reports the first error reply among its commands for
//!   every command of it, so one foreign key would take the decisions of every other key of its
//!   hash slot with it.
//!
//! `KEYS`: the funnel, then the marker. `ARGV`: emission interval (µs), tolerance (µs), limit, cost, and optionally `now` (µs since
//! the Unix epoch) in place of the server's `TIME`. Only `RedisLimiter::check_n_at` (cargo
//! feature `injected-time`, for tests) passes it: the arithmetic can then be checked against the
//! reference model at the replay file's own timestamps. The key's expiry (`PX`) is still
//! measured by the server's real clock, so a test that injects times keeps its keys' TTLs longer
//! than the test takes.

use redis::Value;

pub(crate) const GCRA: &str = r#"
local t = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local clock = redis.call('TIME')
local server_now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local now = server_now
if ARGV[5] then
  now = tonumber(ARGV[5])
end
if KEYS[2] == KEYS[1] then
  return {3, "ERR the key is funnel-redis's data-set marker"}
end
local stored = redis.pcall('GET', KEYS[1])
if type(stored) == 'table' and stored.err then
  return {3, stored.err}
end
local tat = 0
if stored then
  tat = tonumber(stored)
  if tat == nil or tat ~= math.floor(tat) or tat < 0 or tat > 9007199254740992 then
    return {3, 'WRONGTYPE the key holds a string that is not an arrival time'}
  end
end
local epoch = 0
if KEYS[2] then
  local mark = redis.pcall('GET', KEYS[2])
  if mark == false then
    local made = redis.pcall('SET', KEYS[2], string.format('%.0f', server_now))
    if type(made) == 'table' and made.ok then
      epoch = server_now
    end
  elseif type(mark) == 'string' then
    epoch = tonumber(mark) or 0
  end
end
if n > limit then
  return {2, tat, now, epoch}
end
local base = tat
if now > base then base = now end
local new = base + n * t
if new - tau > now then
  return {0, tat, now, epoch}
end
if n > 0 then
  local ttl_ms = math.ceil((new - now) / 1000)
  local set = redis.pcall('SET', KEYS[1], string.format('%.0f', new), 'PX', ttl_ms)
  if type(set) == 'table' and set.err then
    return {3, set.err}
  end
end
return {1, tat, now, epoch}
"#;

/// Several funnels decided together, all or nothing (`joint.rs`), in one script so that no other
/// command runs between the check and the charge.
///
/// `KEYS`: the funnels, in the caller's order (a key may appear twice: the second entry sees the
/// first's charge). `ARGV[1]`: `1` to charge when every entry admits, `0` to charge nothing
/// (a peek). Then four per key: emission interval (µs), tolerance (µs), limit, cost.
///
/// Every key is read and checked before anything is written: a foreign value answers
/// `{3, message, i}` (entry `i`, from 1) and nothing is charged. The entries are then decided
/// in order on the arrival times the earlier entries would leave; the first that does not
/// admit stops the walk (`denied`, from 1; 0 when all admit), and nothing is written. When all
/// admit (and `ARGV[1]` is `1`), every key's final arrival time is written, with the TTL its
/// funnel takes to drain.
///
/// Reply: `{denied, now, decided_1, before_1, decided_2, before_2, ...}`: per entry the arrival
/// time it was decided on (`decided`; the key's stored one for entries after the one that
/// denied) and the key's stored arrival time before the request (`before`). The Rust side
/// rebuilds each decision with `funnel::Quota::decide_at`, as for the one-key script.
pub(crate) const JOINT: &str = r#"
local charge = ARGV[1] == '1'
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local before = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  if before[key] == nil then
    local stored = redis.pcall('GET', key)
    if type(stored) == 'table' and stored.err then
      return {3, stored.err, i}
    end
    local tat = 0
    if stored then
      tat = tonumber(stored)
      if tat == nil or tat ~= math.floor(tat) or tat < 0 or tat > 9007199254740992 then
        return {3, 'WRONGTYPE the key holds a string that is not an arrival time', i}
      end
    end
    before[key] = tat
  end
end
local current = {}
for key, tat in pairs(before) do current[key] = tat end
local out = {0, now}
local denied = 0
for i = 1, #KEYS do
  local key = KEYS[i]
  local a = 1 + (i - 1) * 4
  local t = tonumber(ARGV[a + 1])
  local tau = tonumber(ARGV[a + 2])
  local limit = tonumber(ARGV[a + 3])
  local n = tonumber(ARGV[a + 4])
  local tat = current[key]
  if denied > 0 then
    tat = before[key]
  else
    local base = tat
    if now > base then base = now end
    local new = base + n * t
    if n > limit or new - tau > now then
      denied = i
    elseif n > 0 then
      current[key] = new
    end
  end
  out[#out + 1] = tat
  out[#out + 1] = before[key]
end
out[1] = denied
if denied == 0 and charge then
  for key, tat in pairs(current) do
    if tat ~= before[key] then
      local ttl_ms = math.ceil((tat - now) / 1000)
      local set = redis.pcall('SET', key, string.format('%.0f', tat), 'PX', ttl_ms)
      if type(set) == 'table' and set.err then
        return {3, set.err, 0}
      end
    end
  end
end
return out
"#;

/// The code of the script's `{3, message}`: the key's own error, as a value.
const KEY_ERROR: i64 = 3;

/// The script's reply, with its `{3, message}` turned back into the error reply `message` it
/// stands for: a `Value::ServerError` read by the `redis` crate's own parser, so that it is
/// sorted exactly as that reply would have been. Every other reply is returned unchanged.
pub(crate) fn reply(value: Value) -> Value {
    let Value::Array(items) = &value else {
        return value;
    };
    let [Value::Int(KEY_ERROR), Value::BulkString(message)] = items.as_slice() else {
        return value;
    };
    // An error reply is one line; Redis's messages are, and this keeps any other on one.
    let mut line = Vec::with_capacity(message.len() + 3);
    line.push(b'-');
    line.extend(message.iter().map(|&b| match b {
        b'\r' | b'\n' => b' ',
        b => b,
    }));
    line.extend_from_slice(b"\r\n");
    match redis::parse_redis_value(&line) {
        Ok(error @ Value::ServerError(_)) => error,
        _ => value,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted_code(value: Value) -> String {
        let e = value.extract_error().expect_err("an error reply");
        e.code().unwrap_or_default().to_string()
    }

    #[test]
    fn a_key_error_becomes_the_error_reply_it_stands_for() {
        let of = |message: &str| {
            reply(Value::Array(vec![
                Value::Int(KEY_ERROR),
                Value::BulkString(message.as_bytes().to_vec()),
            ]))
        };
        let wrong_type = of("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert_eq!(sorted_code(wrong_type), "WRONGTYPE");
        let own = of("WRONGTYPE the key holds a string that is not an arrival time");
        assert_eq!(sorted_code(own), "WRONGTYPE");
        let oom = of("OOM command not allowed when used memory > 'maxmemory'.");
        assert_eq!(sorted_code(oom), "OOM");
        let read_only = of("READONLY You can't write against a read only replica.");
        let e = read_only.extract_error().unwrap_err();
        assert_eq!(e.kind(), redis::ErrorKind::ReadOnly);
        let two_lines = of("ERR one\r\nEXTRA two");
        assert_eq!(sorted_code(two_lines), "ERR");
    }

    #[test]
    fn a_decision_is_left_as_it_came() {
        for code in 0..3 {
            let decision = Value::Array(vec![Value::Int(code), Value::Int(5), Value::Int(6)]);
            assert_eq!(reply(decision.clone()), decision);
        }
        let short = Value::Array(vec![Value::Int(KEY_ERROR)]);
        assert_eq!(reply(short.clone()), short);
    }
}
