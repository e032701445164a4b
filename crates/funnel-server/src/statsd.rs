//! Statistics sent to a statsd server with envoyproxy/ratelimit's names, so that dashboards
//! built on its statsd output (directly, or through a statsd exporter's mapping) keep working.
//!
//! Every flush interval, each counter that moved since the last flush is sent as a statsd
//! counter of its increase (`name:delta|c`), over UDP, lines packed into datagrams that fit
//! a common path MTU:
//!
//! * `ratelimit.service.rate_limit.<domain>.<key>.<stat>` per rule, `<key>` its path of keys
//!   and values (`key_value.key2`), `<stat>` one of [`RULE_STATS`] (and per value for a
//!   `detailed_metric` rule, `<key>` the request's keys and values);
//! * `ratelimit.service.config_load_success`, `ratelimit.service.config_load_error`,
//!   `ratelimit.service.call.should_rate_limit.service_error`,
//!   `ratelimit_server.ShouldRateLimit.total_requests`.
//!
//! Names are cleaned as envoyproxy/ratelimit cleans them (`:` and `|` become `_`, and so do the
//! dots of an IPv4 address). Extra tags are appended to every name as `.__<tag>=<value>`, the
//! way envoyproxy/ratelimit's statistics library writes tags for plain statsd.
//!
//! In the DogStatsD dialect the same increases go as `crate::dogstatsd` writes them: tags as
//! tags, names rewritten by the mogrifiers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::decide::Decider;
use crate::mogrifier::Mogrifier;
use crate::stats::{RULE_STATS, SERVER_STATS};

/// Where and how often statistics go to statsd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statsd {
    /// The statsd server, `host:port` (UDP).
    pub target: String,
    /// How often the counters' increases are sent.
    pub flush_interval: Duration,
    /// Tags added to every statistic, as `(tag, value)`.
    pub extra_tags: Vec<(String, String)>,
    /// How the lines are written.
    pub dialect: Dialect,
}

/// How the lines sent are written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    /// Plain statsd: `name.__tag=value:delta|c`.
    #[default]
    Statsd,
    /// Datadog's DogStatsD: `name:delta|c|#tag:value,...`, each name rewritten by the first
    /// of the mogrifiers that matches it (envoyproxy/ratelimit's `USE_DOG_STATSD`).
    DogStatsd {
        /// Tried in order.
        mogrifiers: Vec<Mogrifier>,
    },
}

/// The most bytes of lines in one datagram: below the 1500-byte Ethernet MTU less the IP and
/// UDP headers, so that no datagram is fragmented on a common path.
const MAX_DATAGRAM: usize = 1_400;

/// A UDP socket connected to the statsd server: an unknown host fails the start, not the first
/// flush.
pub(crate) async fn connect(target: &str) -> std::io::Result<UdpSocket> {
    let addr = tokio::net::lookup_host(target)
        .await?
        .next()
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "the name has no address")
        })?;
    let local: std::net::SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(addr).await?;
    Ok(socket)
}

/// Sends the counters' increases every flush interval until `stop` turns true, then once more.
pub(crate) fn spawn(
    socket: UdpSocket,
    settings: Statsd,
    decider: Arc<Decider>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut sent = HashMap::new();
        // Warned once per outage: a statsd server that is down is logged, not every flush.
        let mut failing = false;
        let mut ticks = tokio::time::interval(settings.flush_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: nothing has moved yet.
        ticks.tick().await;
        loop {
            let last = tokio::select! {
                _ = ticks.tick() => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            let lines = increases(&decider, &settings, &mut sent);
            for datagram in pack(&lines) {
                match socket.send(datagram.as_bytes()).await {
                    Ok(_) => failing = false,
                    // A statsd server that is down must not stop the service: log and go on.
                    Err(e) => {
                        if !failing {
                            tracing::warn!(error = %e, target = %settings.target, "cannot send statistics to statsd");
                        }
                        failing = true;
                        break;
                    }
                }
            }
            if last {
                return;
            }
        }
    })
}

/// Every statistic's total, by statsd name.
pub(crate) fn totals(decider: &Decider) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for stat in &SERVER_STATS {
        out.push((stat.statsd.to_owned(), stat.read(decider.stats())));
    }
    let rules = decider.rules();
    let mut domains: Vec<_> = rules.domains.iter().collect();
    domains.sort_by(|a, b| a.0.cmp(b.0));
    for (domain, d) in domains {
        for r in d.rules() {
            let base = format!("ratelimit.service.rate_limit.{domain}.{}", r.stat_key);
            for stat in &RULE_STATS {
                out.push((format!("{base}.{}", stat.name), stat.read(&r.stats.total)));
            }
            {
                for (value, c) in r.stats.detailed() {
                    let base = format!("ratelimit.service.rate_limit.{domain}.{value}");
                    for stat in &RULE_STATS {
                        out.push((format!("{base}.{}", stat.name), stat.read(&c)));
                    }
                }
            }
        }
    }
    for (name, _) in &mut out {
        *name = sanitize(name);
    }
    out
}

/// The lines of what moved since `sent` (which it updates), in `settings`' dialect.
fn increases(decider: &Decider, settings: &Statsd, sent: &mut HashMap<String, u64>) -> Vec<String> {
    let mut suffix = String::new();
    for (tag, value) in &settings.extra_tags {
        suffix.push_str(&format!(".__{}={}", sanitize(tag), sanitize(value)));
    }
    let mut lines = Vec::new();
    for (name, total) in totals(decider) {
        let before = sent.insert(name.clone(), total).unwrap_or(0);
        // A rule dropped and added back starts again from zero: all of its count is new.
        let delta = if total >= before {
            total - before
        } else {
            total
        };
        if delta > 0 {
            lines.push(match &settings.dialect {
                Dialect::Statsd => format!("{name}{suffix}:{delta}|c"),
                Dialect::DogStatsd { mogrifiers } => {
                    crate::dogstatsd::line(&name, delta, &settings.extra_tags, mogrifiers)
                }
            });
        }
    }
    lines
}

/// Lines joined by `\n` into datagrams of at most [`MAX_DATAGRAM`] bytes (a longer line goes
/// alone).
fn pack(lines: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for line in lines {
        if !cur.is_empty() && cur.len() + 1 + line.len() > MAX_DATAGRAM {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push('\n');
        }
        cur.push_str(line);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A statistic name as envoyproxy/ratelimit cleans it: `:` and `|` (statsd's separators)
/// become `_`, and so do the dots of anything shaped like an IPv4 address (four runs of one to
/// three digits joined by dots), which would otherwise split the name into levels.
pub(crate) fn sanitize(name: &str) -> String {
    let b: Vec<u8> = name
        .bytes()
        .map(|c| if c == b':' || c == b'|' { b'_' } else { c })
        .collect();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match ipv4_end(&b, i, 0) {
            Some(end) => {
                out.extend(b[i..end].iter().map(|&c| if c == b'.' { b'_' } else { c }));
                i = end;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    // Only ASCII bytes were replaced, by ASCII: the text is still UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The end of an IPv4-shaped run starting at `at`, its `group`th group of digits first:
/// greedy, three digits before two before one, as a backtracking regular expression reads it.
fn ipv4_end(b: &[u8], at: usize, group: usize) -> Option<usize> {
    for len in (1..=3).rev() {
        let Some(run) = b.get(at..at + len) else {
            continue;
        };
        if !run.iter().all(u8::is_ascii_digit) {
            continue;
        }
        let end = at + len;
        if group == 3 {
            return Some(end);
        }
        if b.get(end) == Some(&b'.') {
            if let Some(e) = ipv4_end(b, end + 1, group + 1) {
                return Some(e);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cleaned_as_envoyproxy_cleans_them() {
        assert_eq!(sanitize("a:b|c.d"), "a_b_c.d");
        assert_eq!(
            sanitize("rl.remote_address_10.0.0.12.total_hits"),
            "rl.remote_address_10_0_0_12.total_hits"
        );
        // Four runs of up to three digits, taken greedily from the left.
        assert_eq!(sanitize("x1234.5.6.7"), "x1234_5_6_7");
        assert_eq!(sanitize("v1.2.3"), "v1.2.3");
        assert_eq!(sanitize("é:1.2.3.4"), "é_1_2_3_4");
    }

    #[test]
    fn lines_are_packed_below_the_datagram_bound() {
        let lines: Vec<String> = (0..300).map(|i| format!("stat.{i:03}:{i}|c")).collect();
        let packed = pack(&lines);
        assert!(packed.len() > 1);
        assert!(packed.iter().all(|d| d.len() <= MAX_DATAGRAM));
        let back: Vec<&str> = packed.iter().flat_map(|d| d.split('\n')).collect();
        assert_eq!(back, lines.iter().map(String::as_str).collect::<Vec<_>>());
    }
}
