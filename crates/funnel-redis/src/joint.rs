//! [`check_all`]: several limiters' keys decided together, all or nothing, as
//! [`funnel::check_all`] decides them in process: a request admitted only when every entry
//! admits it, and then charged on every entry; denied, charged on none.
//!
//! * **One script where the keys share a slot.** On a single server always, on a Redis
//!   Cluster when every key of the call lands in one hash slot (a hash tag in the limiters'
//!   prefixes, say `rl:{tenant}:`): the script `script::JOINT` reads every key, decides the
//!   entries in order, and writes only when all admit. Redis runs a script alone, so no other
//!   request sees a partial charge, on any instance of the fleet.
//! * **Check, then charge, across slots.** On a cluster with keys in several slots one script
//!   cannot reach them all. The call first runs the script on every slot without charging (a
//!   peek); a denial there ends it with nothing charged. When every slot admits, each slot is
//!   then charged in turn, all or nothing within the slot; a slot that denies at that point
//!   (another request took the last units between the peek and the charge) leaves the slots
//!   charged before it charged: [`Joint::atomic`] is false. That charge makes later answers
//!   stricter, never laxer.
//!
//! What it does not do: the deny cache is neither read nor taught (a denial needs the other
//! entries' states, which only Redis has), the data-set marker is not kept, and when Redis
//! cannot decide each entry is answered by its own limiter's failure policy, on its own
//! (under [`OnFailure::Local`](crate::OnFailure::Local) an entry's local funnel may be charged
//! while another entry denies).

use funnel::{Decision, Timestamp};
use redis::Value;

use crate::error::{Error, Failure, Sorted};
use crate::link::Conn;
use crate::policy::Counters;
use crate::remote::Call;
use crate::{script, Checked, RedisLimiter, Source};

/// `n` units for `key` on `limiter`: one entry of [`check_all`].
#[derive(Clone, Copy, Debug)]
pub struct JointEntry<'a> {
    /// The limiter (its quota and key prefix).
    pub limiter: &'a RedisLimiter,
    /// The caller's key.
    pub key: &'a str,
    /// The units (0 checks without charging).
    pub n: u64,
}

/// [`check_all`]'s answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Joint {
    /// Per entry, in order: its decision as [`funnel::check_all`] gives it. Admitted: each
    /// entry's charged decision. Denied: the entry that denied has its denial, every other one
    /// the decision its units would get, uncharged (on the state the entries before it would
    /// leave, which for distinct keys is the state before the request).
    pub checked: Vec<Checked>,
    /// Per entry: what was left before the request (a zero-unit decision at the same time), to
    /// report for an entry left uncharged. The policy's answer when Redis could not decide.
    pub before: Vec<Decision>,
    /// The first entry that denied the request, `None` when it was admitted.
    pub denied_by: Option<usize>,
    /// False only when the keys spanned several cluster slots and a slot denied after others
    /// were charged (see the module documentation).
    pub atomic: bool,
}

impl Joint {
    /// Whether every entry admitted the request.
    pub fn is_allowed(&self) -> bool {
        self.denied_by.is_none()
    }
}

/// One slot's reply to the joint script.
struct SlotReply {
    /// The entry (index into the slot's entries) that denied.
    denied: Option<usize>,
    now_us: u64,
    /// Per entry: the arrival time it was decided on, and the key's before the request (µs).
    tats: Vec<(u64, u64)>,
}

/// Decides `entries` together, all or nothing (see the module documentation), within the first
/// limiter's timeout.
///
/// Every limiter must use [`Backend::Script`](crate::Backend::Script) and reach the same Redis
/// (the same URL, or the same cluster seeds): the call runs on the first limiter's connection.
///
/// # Errors
///
/// [`Error::InvalidSetting`] for limiters on different servers or with
/// [`Backend::Cell`](crate::Backend::Cell); a typed [`Error`] for a reply retrying will not fix
/// (a foreign value at one of the keys: nothing is charged); [`Error::Unavailable`] when Redis
/// cannot decide and an entry's limiter has [`OnFailure::Report`](crate::OnFailure::Report).
pub async fn check_all(entries: &[JointEntry<'_>]) -> Result<Joint, Error> {
    joint(entries, true).await
}

/// [`check_all`] without charging anything: what each entry's units would get now, and
/// which entry would deny the request ([`Joint::denied_by`]). For a request already denied
/// elsewhere, whose entries must report their state uncharged.
///
/// # Errors
///
/// As [`check_all`].
pub async fn peek_all(entries: &[JointEntry<'_>]) -> Result<Joint, Error> {
    joint(entries, false).await
}

async fn joint(entries: &[JointEntry<'_>], charge: bool) -> Result<Joint, Error> {
    let Some(first) = entries.first().map(|e| e.limiter) else {
        return Ok(Joint {
            checked: Vec::new(),
            before: Vec::new(),
            denied_by: None,
            atomic: true,
        });
    };
    for e in entries {
        if !matches!(e.limiter.remote.call, Call::Script { .. }) {
            return Err(Error::InvalidSetting {
                setting: "check_all",
                reason: "every limiter must use Backend::Script".into(),
            });
        }
        if e.limiter.servers != first.servers {
            return Err(Error::InvalidSetting {
                setting: "check_all",
                // The URLs are not shown: they may carry a password.
                reason: "every limiter must reach the same Redis (URL or cluster seeds)".into(),
            });
        }
    }
    let redis_keys: Vec<String> = entries.iter().map(|e| e.limiter.redis_key(e.key)).collect();
    let decided = tokio::time::timeout(first.timeout, decide(entries, &redis_keys, charge)).await;
    let sorted = match decided {
        Ok(Ok(joint)) => return Ok(joint),
        Ok(Err(Sorted::Error(e))) => return Err(e),
        Ok(Err(Sorted::NoScript)) => {
            return Err(Error::Script {
                message: "NOSCRIPT after EVAL".into(),
            })
        }
        Ok(Err(Sorted::Failure(f))) => f,
        Err(_elapsed) => first.elapsed(),
    };
    policy_answers(entries, sorted)
}

/// Every entry answered by its own limiter's failure policy.
fn policy_answers(entries: &[JointEntry<'_>], failure: Failure) -> Result<Joint, Error> {
    let mut checked = Vec::with_capacity(entries.len());
    for e in entries {
        checked.push(e.limiter.failed(e.key, e.n, Sorted::Failure(failure))?);
    }
    let before = checked.iter().map(|c| c.decision).collect();
    let denied_by = checked.iter().position(|c| !c.decision.is_allowed());
    Ok(Joint {
        checked,
        before,
        denied_by,
        atomic: true,
    })
}

async fn decide(
    entries: &[JointEntry<'_>],
    redis_keys: &[String],
    charge: bool,
) -> Result<Joint, Sorted> {
    let first = entries[0].limiter;
    let Some((generation, conn)) = first.link.get().await else {
        return Err(first.no_connection());
    };
    let _place = first.remote.place(entries.len())?;
    let groups = crate::limiter::groups(&conn, redis_keys);
    // Per slot: its latest reply, and whether that reply charged it.
    let mut replies: Vec<(SlotReply, bool)> = Vec::with_capacity(groups.len());
    if groups.len() > 1 || !charge {
        // Every slot checked without charging: a denial there charges nothing anywhere.
        for group in &groups {
            let reply = run(entries, redis_keys, group, &conn, generation, false).await?;
            replies.push((reply, false));
        }
        if !charge || replies.iter().any(|(r, _)| r.denied.is_some()) {
            return assemble(entries, &groups, &replies, true);
        }
    }
    for (g, group) in groups.iter().enumerate() {
        let reply = run(entries, redis_keys, group, &conn, generation, true).await?;
        let denied = reply.denied.is_some();
        let charged = !denied;
        if g < replies.len() {
            replies[g] = (reply, charged);
        } else {
            replies.push((reply, charged));
        }
        if denied {
            // Only across slots can an earlier slot have been charged.
            return assemble(entries, &groups, &replies, g == 0);
        }
    }
    assemble(entries, &groups, &replies, true)
}

/// The joint script on one slot's entries (`group`: indices into `entries`).
async fn run(
    entries: &[JointEntry<'_>],
    redis_keys: &[String],
    group: &[usize],
    conn: &Conn,
    generation: u64,
    charge: bool,
) -> Result<SlotReply, Sorted> {
    let first = entries[0].limiter;
    let command = |eval: bool| {
        let mut cmd = if eval {
            let mut c = redis::cmd("EVAL");
            c.arg(script::JOINT);
            c
        } else {
            let mut c = redis::cmd("EVALSHA");
            c.arg(joint_sha());
            c
        };
        cmd.arg(group.len());
        for &i in group {
            cmd.arg(&redis_keys[i]);
        }
        cmd.arg(u8::from(charge));
        for &i in group {
            let e = &entries[i];
            let Call::Script { t_us, tau_us, .. } = e.limiter.remote.call else {
                unreachable!("checked in check_all: every limiter runs the script")
            };
            cmd.arg(t_us)
                .arg(tau_us)
                .arg(e.limiter.quota.limit())
                .arg(e.n);
        }
        cmd
    };
    let key = &redis_keys[group[0]];
    let mut conn = conn.clone();
    let sent = conn.command(&command(false)).await;
    let value = match first.remote.sorted(sent, key, generation) {
        Err(Sorted::NoScript) => {
            let again = conn.command(&command(true)).await;
            first.remote.sorted(again, key, generation)?
        }
        other => other?,
    };
    read(&value, group, redis_keys)
}

/// The joint script's SHA1, computed once.
fn joint_sha() -> &'static str {
    static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SHA.get_or_init(|| redis::Script::new(script::JOINT).get_hash().to_string())
}

/// Reads the joint script's reply for `group` (see `script::JOINT`).
fn read(value: &Value, group: &[usize], redis_keys: &[String]) -> Result<SlotReply, Sorted> {
    let bad = || {
        Sorted::Error(Error::UnexpectedReply {
            reply: format!("{value:?}"),
        })
    };
    let Value::Array(items) = value else {
        return Err(bad());
    };
    if let [Value::Int(3), Value::BulkString(message), Value::Int(entry)] = items.as_slice() {
        // A key's own error, as the one-key script answers it: sorted as the reply it stands for.
        let error = script::reply(Value::Array(vec![
            Value::Int(3),
            Value::BulkString(message.clone()),
        ]));
        let key = usize::try_from(*entry)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|j| group.get(j))
            .map_or(redis_keys[group[0]].as_str(), |&i| redis_keys[i].as_str());
        return match error.extract_error() {
            Err(e) => Err(crate::error::sort(&e, key)),
            Ok(_) => Err(bad()),
        };
    }
    let ints: Option<Vec<u64>> = items
        .iter()
        .map(|v| match v {
            Value::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        })
        .collect();
    let ints = ints.ok_or_else(bad)?;
    if ints.len() != 2 + 2 * group.len() {
        return Err(bad());
    }
    let denied = match ints[0] {
        0 => None,
        i => Some(
            usize::try_from(i - 1)
                .ok()
                .filter(|&j| j < group.len())
                .ok_or_else(bad)?,
        ),
    };
    Ok(SlotReply {
        denied,
        now_us: ints[1],
        tats: ints[2..].chunks(2).map(|c| (c[0], c[1])).collect(),
    })
}

/// The answer from every slot's latest reply (`charged`: that reply charged its slot).
fn assemble(
    entries: &[JointEntry<'_>],
    groups: &[Vec<usize>],
    replies: &[(SlotReply, bool)],
    atomic: bool,
) -> Result<Joint, Sorted> {
    let us = |us: u64| {
        us.checked_mul(1_000)
            .and_then(|ns| Timestamp::from_nanos(ns).ok())
            .ok_or_else(|| {
                Sorted::Error(Error::UnexpectedReply {
                    reply: format!("a time of {us} µs"),
                })
            })
    };
    let denied_by = groups
        .iter()
        .zip(replies)
        .find_map(|(group, (r, _))| r.denied.map(|j| group[j]));
    let mut checked: Vec<Option<Checked>> = entries.iter().map(|_| None).collect();
    let mut before: Vec<Option<Decision>> = entries.iter().map(|_| None).collect();
    for (group, (reply, charged)) in groups.iter().zip(replies) {
        let now = us(reply.now_us)?;
        for (j, (&i, &(decided, was))) in group.iter().zip(&reply.tats).enumerate() {
            let e = &entries[i];
            let quota = &e.limiter.quota;
            let denier = reply.denied == Some(j);
            // Each entry is decided on the arrival time the entries before it leave, as
            // `funnel::check_all` reports them after its rollback; the script gives the
            // stored one to the entries after a denial.
            let (decision, _) = quota.decide_at(us(decided)?, now, e.n);
            if (*charged && !decision.is_allowed()) || (denier && decision.is_allowed()) {
                return Err(Sorted::Error(Error::Disagreement {
                    verdict: i64::from(*charged),
                    decision,
                }));
            }
            Counters::add(&e.limiter.counters.redis_decisions, 1);
            checked[i] = Some(Checked {
                decision,
                source: Source::Redis,
                server_now: Some(now),
                failure: None,
            });
            before[i] = Some(quota.decide_at(us(was)?, now, 0).0);
        }
    }
    let missing = || {
        Sorted::Error(Error::UnexpectedReply {
            reply: "no reply for an entry".into(),
        })
    };
    Ok(Joint {
        checked: checked
            .into_iter()
            .map(|c| c.ok_or_else(missing))
            .collect::<Result<_, _>>()?,
        before: before
            .into_iter()
            .map(|b| b.ok_or_else(missing))
            .collect::<Result<_, _>>()?,
        denied_by,
        atomic,
    })
}
