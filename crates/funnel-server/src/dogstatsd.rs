//! DogStatsD lines: the statsd statistics (`crate::statsd`, which sends them) written as
//! Datadog's agent reads them, the way envoyproxy/ratelimit's `USE_DOG_STATSD` writes them.
//!
//! A counter's increase is `name:delta|c`, followed by `|#tag:value,tag:value` when it has
//! tags (no sample rate: every increase is sent). The tags are the extra tags
//! (`--extra-tags`, `EXTRA_TAGS`) first, as real tags rather than the `.__tag=value` plain
//! statsd appends to the name, then the tags of the first mogrifier that matches the name
//! ([`crate::mogrifier`]), which also gives the name sent. A name no mogrifier matches is sent
//! as it is. envoyproxy/ratelimit's Go client writes gauges as `|g` and timers as `|ms` the
//! same way; funnel-server sends counters only, as its plain statsd does.
//!
//! Names are cleaned before the mogrifiers see them, as for plain statsd. In a tag, the
//! characters that would cut the line short (`|`, `,`, line breaks) become `_`.

use crate::mogrifier::{mogrify, Mogrifier};

/// The DogStatsD line of `name`'s increase by `delta`.
pub(crate) fn line(
    name: &str,
    delta: u64,
    extra_tags: &[(String, String)],
    mogrifiers: &[Mogrifier],
) -> String {
    let (name, tags) = mogrify(mogrifiers, name);
    let mut out = format!("{name}:{delta}|c");
    let mut tags = extra_tags.iter().chain(&tags);
    if let Some((tag, value)) = tags.next() {
        out.push_str("|#");
        push_tag(&mut out, tag, value);
        for (tag, value) in tags {
            out.push(',');
            push_tag(&mut out, tag, value);
        }
    }
    out
}

/// `tag:value`, cleaned.
fn push_tag(out: &mut String, tag: &str, value: &str) {
    let clean = |c: char| {
        if matches!(c, '|' | ',' | '\n' | '\r') {
            '_'
        } else {
            c
        }
    };
    out.extend(tag.chars().map(clean));
    out.push(':');
    out.extend(value.chars().map(clean));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_counter_without_tags_is_a_plain_statsd_line() {
        assert_eq!(
            line("ratelimit.service.config_load_success", 1, &[], &[]),
            "ratelimit.service.config_load_success:1|c"
        );
    }

    #[test]
    fn extra_tags_come_first_then_the_mogrifiers() {
        let hits = Mogrifier::new(
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
            "ratelimit.service.rate_limit.$3",
            "domain:$1,descriptor:$2",
        )
        .unwrap();
        assert_eq!(
            line(
                "ratelimit.service.rate_limit.shop.client.total_hits",
                3,
                &pairs(&[("cluster", "blue")]),
                &[hits],
            ),
            "ratelimit.service.rate_limit.total_hits:3|c|#cluster:blue,domain:shop,descriptor:client"
        );
        assert_eq!(
            line(
                "a.b",
                2,
                &pairs(&[("cluster", "blue"), ("zone", "z1")]),
                &[]
            ),
            "a.b:2|c|#cluster:blue,zone:z1"
        );
    }

    #[test]
    fn a_tag_cannot_cut_the_line_short() {
        let m = Mogrifier::new("(?s)^x(.*)$", "x", "v:$1").unwrap();
        assert_eq!(line("xa,b|c\nd", 1, &[], &[m]), "x:1|c|#v:a_b_c_d");
    }
}
