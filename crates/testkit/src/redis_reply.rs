//! A plain reading of what Redis answered, written apart from funnel-redis's `reply.rs`, for
//! the `redis_reply` fuzz body (`funnel_redis::fuzzing::reply`) to compare against.

use redis::Value;

/// Whether Redis admitted the request with `value`: the script's four integers with code 1
/// (and a stored time and a clock that are not negative), or, from `CL.THROTTLE` (`cell`), its
/// five integers with `limited` 0.
pub fn admitted(cell: bool, value: &Value) -> bool {
    let Value::Array(items) = value else {
        return false;
    };
    let ints: Vec<i64> = items
        .iter()
        .map_while(|v| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        })
        .collect();
    if ints.len() != items.len() {
        return false;
    }
    match (cell, ints.as_slice()) {
        (false, [1, tat, now, _]) => *tat >= 0 && *now >= 0,
        (true, [0, ..]) => ints.len() == 5,
        _ => false,
    }
}
