//! Mogrifiers: envoyproxy/ratelimit's rules that turn a DogStatsD statistic's dotted name into
//! a shorter name and tags, so that Datadog can group by domain or descriptor.
//!
//! A mogrifier is a regular expression, a name template and tag templates. A statistic's name
//! is tried against each mogrifier in order; the first whose pattern matches anywhere in the
//! name (unanchored unless the pattern anchors itself) gives the name and tags sent, `$0` the
//! whole match and `$1`, `$2`, ... its groups substituted in the templates. A `$n` beyond the
//! pattern's groups stays as written; a group that took no part in the match is empty. A name
//! no mogrifier matches is sent as it is.
//!
//! From the environment, as envoyproxy/ratelimit reads it: `USE_DOG_STATSD_MOGRIFIERS` lists
//! the mogrifiers by name (`DOMAIN,HITS`), in the order they are tried; mogrifier `X` reads
//! `DOG_STATSD_MOGRIFIER_X_PATTERN`, `DOG_STATSD_MOGRIFIER_X_NAME` (both required) and
//! `DOG_STATSD_MOGRIFIER_X_TAGS` (`tag:template,tag:template`, optional).
//!
//! Patterns are read by the `regex` crate, whose syntax is RE2's, as Go's `regexp` reads
//! them, with two differences: `\d`, `\w`, `\s` and `\b` match Unicode digits, word
//! characters and spaces here and ASCII ones in Go (`[0-9]` or `(?-u:\d)` means the same in
//! both), and Go's quoting `\Q...\E` is refused here (escape each character instead).

use std::borrow::Cow;
use std::fmt;

use regex::{Captures, Regex};

/// One mogrifier: a pattern, and the name and tags a matching statistic is sent with.
///
/// # Examples
///
/// ```
/// use funnel_server::Mogrifier;
///
/// let hits = Mogrifier::new(
///     r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
///     "ratelimit.service.rate_limit.$3",
///     "domain:$1,descriptor:$2",
/// )?;
/// let (name, tags) = hits
///     .mogrify("ratelimit.service.rate_limit.shop.client.over_limit")
///     .expect("the pattern matches");
/// assert_eq!(name, "ratelimit.service.rate_limit.over_limit");
/// assert_eq!(tags, [("domain".into(), "shop".into()), ("descriptor".into(), "client".into())]);
/// assert!(hits.mogrify("ratelimit.service.config_load_success").is_none());
/// # Ok::<(), funnel_server::MogrifierError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Mogrifier {
    pattern: Regex,
    name: String,
    /// Each tag's name and value template, in the order written.
    tags: Vec<(String, String)>,
}

/// Why a mogrifier was refused, naming the setting (the environment variable or the flag)
/// that holds the wrong part.
#[derive(Debug)]
#[non_exhaustive]
pub enum MogrifierError {
    /// The pattern or the name is unset or empty.
    Unset {
        /// The setting.
        setting: String,
    },
    /// The pattern is not a regular expression.
    Pattern {
        /// The setting.
        setting: String,
        /// The pattern as given.
        pattern: String,
        /// What the regular expression parser said.
        source: regex::Error,
    },
    /// A tag is not `tag:template` with both halves.
    Tag {
        /// The setting.
        setting: String,
        /// The tag as written.
        tag: String,
    },
}

impl fmt::Display for MogrifierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MogrifierError::Unset { setting } => write!(f, "{setting} is unset or empty"),
            MogrifierError::Pattern {
                setting, pattern, ..
            } => write!(f, "{setting}: {pattern:?} is not a regular expression"),
            MogrifierError::Tag { setting, tag } => {
                write!(f, "{setting}: {tag:?}: expected tag:value, both non-empty")
            }
        }
    }
}

impl std::error::Error for MogrifierError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MogrifierError::Pattern { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The settings a mogrifier's three parts came from, for errors.
struct Settings<'a> {
    pattern: &'a str,
    name: &'a str,
    tags: &'a str,
}

impl Mogrifier {
    /// A mogrifier from its pattern, its name template and its tags
    /// (`tag:template,tag:template`, or empty for none).
    ///
    /// # Errors
    ///
    /// An empty pattern or name, a pattern that is not a regular expression, a tag without
    /// both halves.
    pub fn new(pattern: &str, name: &str, tags: &str) -> Result<Mogrifier, MogrifierError> {
        let settings = Settings {
            pattern: "the pattern",
            name: "the name",
            tags: "the tags",
        };
        Mogrifier::read(pattern, name, tags, &settings)
    }

    fn read(
        pattern: &str,
        name: &str,
        tags: &str,
        settings: &Settings<'_>,
    ) -> Result<Mogrifier, MogrifierError> {
        let unset = |setting: &str| MogrifierError::Unset {
            setting: setting.to_owned(),
        };
        if pattern.is_empty() {
            return Err(unset(settings.pattern));
        }
        let regex = Regex::new(pattern).map_err(|source| MogrifierError::Pattern {
            setting: settings.pattern.to_owned(),
            pattern: pattern.to_owned(),
            source,
        })?;
        if name.is_empty() {
            return Err(unset(settings.name));
        }
        Ok(Mogrifier {
            pattern: regex,
            name: name.to_owned(),
            tags: parse_tags(tags, settings.tags)?,
        })
    }

    /// The name and tags `name` is sent with, when this mogrifier's pattern matches it.
    pub fn mogrify(&self, name: &str) -> Option<(String, Vec<(String, String)>)> {
        let found = self.pattern.captures(name)?;
        let tags = self
            .tags
            .iter()
            .map(|(tag, value)| (tag.clone(), expand(value, &found)))
            .collect();
        Some((expand(&self.name, &found), tags))
    }

    /// The pattern, as given.
    pub fn pattern(&self) -> &str {
        self.pattern.as_str()
    }
}

/// Two mogrifiers are equal when written the same.
impl PartialEq for Mogrifier {
    fn eq(&self, other: &Self) -> bool {
        self.pattern.as_str() == other.pattern.as_str()
            && self.name == other.name
            && self.tags == other.tags
    }
}

impl Eq for Mogrifier {}

/// The name and tags of `name` under the first of `mogrifiers` that matches it; `name` itself
/// and no tags when none does.
pub(crate) fn mogrify<'a>(
    mogrifiers: &[Mogrifier],
    name: &'a str,
) -> (Cow<'a, str>, Vec<(String, String)>) {
    mogrifiers
        .iter()
        .find_map(|m| m.mogrify(name))
        .map_or((Cow::Borrowed(name), Vec::new()), |(n, tags)| {
            (Cow::Owned(n), tags)
        })
}

/// `tag:template,tag:template`: a tag named twice keeps its last template, in the place of its
/// first (envoyproxy/ratelimit reads the list into a map).
fn parse_tags(tags: &str, setting: &str) -> Result<Vec<(String, String)>, MogrifierError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for written in tags.split(',').filter(|t| !t.trim().is_empty()) {
        let bad = || MogrifierError::Tag {
            setting: setting.to_owned(),
            tag: written.to_owned(),
        };
        let (tag, value) = written.split_once(':').ok_or_else(bad)?;
        let (tag, value) = (tag.trim(), value.trim());
        // One colon only, as envoyproxy/ratelimit's reader splits the pair.
        if tag.is_empty() || value.is_empty() || value.contains(':') {
            return Err(bad());
        }
        match out.iter_mut().find(|(t, _)| t == tag) {
            Some(slot) => slot.1 = value.to_owned(),
            None => out.push((tag.to_owned(), value.to_owned())),
        }
    }
    Ok(out)
}

/// `template` with each `$n` (`$` and decimal digits, as many as follow) replaced by group
/// `n` of `found`: empty when the group took no part, `$n` as written when there is no such
/// group.
fn expand(template: &str, found: &Captures<'_>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let group = after[..digits].parse::<usize>().ok();
        match group.filter(|&g| g < found.len()) {
            Some(g) => out.push_str(found.get(g).map_or("", |m| m.as_str())),
            None => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// The mogrifiers `USE_DOG_STATSD_MOGRIFIERS` lists, read through `get` as envoyproxy/ratelimit
/// reads them (a mogrifier's name is upper-cased to find its variables); none when unset.
///
/// # Errors
///
/// The first mogrifier refused, naming its variable.
pub(crate) fn from_environment(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Mogrifier>, MogrifierError> {
    let list = get(LIST).unwrap_or_default();
    let mut out = Vec::new();
    for key in list.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        let prefix = format!("DOG_STATSD_MOGRIFIER_{}", key.to_ascii_uppercase());
        let (pattern, name, tags) = (
            format!("{prefix}_PATTERN"),
            format!("{prefix}_NAME"),
            format!("{prefix}_TAGS"),
        );
        let read = |var: &str| get(var).unwrap_or_default();
        let settings = Settings {
            pattern: &pattern,
            name: &name,
            tags: &tags,
        };
        out.push(Mogrifier::read(
            &read(&pattern),
            &read(&name),
            &read(&tags),
            &settings,
        )?);
    }
    Ok(out)
}

/// The variable listing the mogrifiers.
pub(crate) const LIST: &str = "USE_DOG_STATSD_MOGRIFIERS";

/// A mogrifier from `--dogstatsd-mogrifier PATTERN NAME TAGS`.
pub(crate) fn from_flag(values: &[String]) -> Result<Mogrifier, MogrifierError> {
    let part = |i: usize| values.get(i).map_or("", String::as_str);
    let settings = Settings {
        pattern: "--dogstatsd-mogrifier's PATTERN",
        name: "--dogstatsd-mogrifier's NAME",
        tags: "--dogstatsd-mogrifier's TAGS",
    };
    Mogrifier::read(part(0), part(1), part(2), &settings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The README's DOMAIN mogrifier.
    const DOMAIN: [(&str, &str); 3] = [
        (
            "DOG_STATSD_MOGRIFIER_DOMAIN_PATTERN",
            r"^some\.original\.metric\.(.*)$",
        ),
        ("DOG_STATSD_MOGRIFIER_DOMAIN_NAME", "some.original.metric"),
        ("DOG_STATSD_MOGRIFIER_DOMAIN_TAGS", "domain:$1"),
    ];

    /// The README's HITS mogrifier.
    const HITS: [(&str, &str); 3] = [
        (
            "DOG_STATSD_MOGRIFIER_HITS_PATTERN",
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
        ),
        (
            "DOG_STATSD_MOGRIFIER_HITS_NAME",
            "ratelimit.service.rate_limit.$3",
        ),
        ("DOG_STATSD_MOGRIFIER_HITS_TAGS", "domain:$1,descriptor:$2"),
    ];

    fn env(vars: &[(&str, &str)]) -> Result<Vec<Mogrifier>, MogrifierError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        from_environment(|k| map.get(k).cloned())
    }

    fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_readme_examples_turn_names_into_names_and_tags() {
        let mut vars = vec![(LIST, "DOMAIN,HITS")];
        vars.extend(DOMAIN);
        vars.extend(HITS);
        let m = env(&vars).unwrap();
        assert_eq!(m.len(), 2);
        let (name, t) = mogrify(&m, "some.original.metric.TAG");
        assert_eq!(
            (name.as_ref(), t),
            ("some.original.metric", tags(&[("domain", "TAG")]))
        );
        let (name, t) = mogrify(
            &m,
            "ratelimit.service.rate_limit.shop.path_/cart.user.over_limit",
        );
        assert_eq!(
            (name.as_ref(), t),
            (
                "ratelimit.service.rate_limit.over_limit",
                tags(&[("domain", "shop"), ("descriptor", "path_/cart.user")])
            )
        );
    }

    #[test]
    fn a_name_no_mogrifier_matches_is_sent_as_it_is() {
        let mut vars = vec![(LIST, "HITS")];
        vars.extend(HITS);
        let m = env(&vars).unwrap();
        let (name, t) = mogrify(&m, "ratelimit.service.config_load_success");
        assert_eq!(
            (name.as_ref(), t),
            ("ratelimit.service.config_load_success", vec![])
        );
        let (name, t) = mogrify(&[], "ratelimit.service.rate_limit.a.b.c");
        assert_eq!(
            (name.as_ref(), t),
            ("ratelimit.service.rate_limit.a.b.c", vec![])
        );
    }

    #[test]
    fn the_first_mogrifier_in_the_list_that_matches_wins() {
        let specific = Mogrifier::new(r"^rl\.(.*)\.(.*)\.foo$", "custom.foo", "d:$1").unwrap();
        let wildcard = Mogrifier::new(r"^rl\.(.*)\.(.*)\.(.*)$", "rl.$3", "d:$1,k:$2").unwrap();
        let both = [specific.clone(), wildcard.clone()];
        assert_eq!(mogrify(&both, "rl.a.b.foo").0, "custom.foo");
        assert_eq!(mogrify(&both, "rl.a.b.bar").0, "rl.bar");
        assert_eq!(mogrify(&[wildcard, specific], "rl.a.b.foo").0, "rl.foo");
        // The list's order, not the alphabet's.
        let mut vars = vec![(LIST, "HITS,DOMAIN")];
        vars.extend(DOMAIN);
        vars.extend(HITS);
        assert!(env(&vars).unwrap()[0].pattern().contains("rate_limit"));
    }

    #[test]
    fn templates_take_groups_by_number_and_leave_the_rest_as_written() {
        let m = Mogrifier::new(r"a(b)?(c)", "$0.$1.$2.$3.$$2.$x.$", "n:$12,o:p").unwrap();
        let (name, t) = m.mogrify("xacx").unwrap();
        // `$1` took no part: empty; `$3` and `$12` name no group: as written.
        assert_eq!(name, "ac..c.$3.$c.$x.$");
        assert_eq!(t, tags(&[("n", "$12"), ("o", "p")]));
        // Unanchored, as Go's FindStringSubmatch: the leftmost match.
        assert_eq!(m.mogrify("zabc").unwrap().0, "abc.b.c.$3.$c.$x.$");
        assert!(m.mogrify("zzz").is_none());
    }

    #[test]
    fn tags_keep_their_written_order_and_a_repeated_tag_its_last_value() {
        let m = Mogrifier::new("(.*)", "n", " b:$1 , a:2,,b:3").unwrap();
        assert_eq!(m.mogrify("x").unwrap().1, tags(&[("b", "3"), ("a", "2")]));
        assert!(Mogrifier::new("(.*)", "n", "")
            .unwrap()
            .mogrify("x")
            .unwrap()
            .1
            .is_empty());
    }

    #[test]
    fn names_are_upper_cased_to_find_their_variables() {
        let mut vars = vec![(LIST, " hits ")];
        vars.extend(HITS);
        assert_eq!(env(&vars).unwrap().len(), 1);
        assert!(env(&[]).unwrap().is_empty());
        assert!(env(&[(LIST, "")]).unwrap().is_empty());
    }

    #[test]
    fn a_wrong_mogrifier_is_refused_naming_its_variable() {
        let cases: [(&[(&str, &str)], &str); 6] = [
            (&[], "DOG_STATSD_MOGRIFIER_X_PATTERN"),
            (
                &[("DOG_STATSD_MOGRIFIER_X_PATTERN", "(")],
                "DOG_STATSD_MOGRIFIER_X_PATTERN",
            ),
            (
                &[("DOG_STATSD_MOGRIFIER_X_PATTERN", "a")],
                "DOG_STATSD_MOGRIFIER_X_NAME",
            ),
            (
                &[
                    ("DOG_STATSD_MOGRIFIER_X_PATTERN", "a"),
                    ("DOG_STATSD_MOGRIFIER_X_NAME", "n"),
                    ("DOG_STATSD_MOGRIFIER_X_TAGS", ":5"),
                ],
                "DOG_STATSD_MOGRIFIER_X_TAGS",
            ),
            (
                &[
                    ("DOG_STATSD_MOGRIFIER_X_PATTERN", "a"),
                    ("DOG_STATSD_MOGRIFIER_X_NAME", "n"),
                    ("DOG_STATSD_MOGRIFIER_X_TAGS", "domain:$1,descriptor:"),
                ],
                "DOG_STATSD_MOGRIFIER_X_TAGS",
            ),
            (
                &[
                    ("DOG_STATSD_MOGRIFIER_X_PATTERN", "a"),
                    ("DOG_STATSD_MOGRIFIER_X_NAME", "n"),
                    ("DOG_STATSD_MOGRIFIER_X_TAGS", "domain"),
                ],
                "DOG_STATSD_MOGRIFIER_X_TAGS",
            ),
        ];
        for (vars, named) in cases {
            let mut all = vec![(LIST, "X")];
            all.extend_from_slice(vars);
            let e = env(&all).unwrap_err();
            assert!(e.to_string().starts_with(named), "{named}: {e}");
        }
        // Go's quoting, which the regex crate does not read: refused at start, not misread.
        let e = Mogrifier::new(r"^\Q.\E$", "n", "").unwrap_err();
        assert!(matches!(e, MogrifierError::Pattern { .. }), "{e:?}");
        let e = env(&[(LIST, "X"), ("DOG_STATSD_MOGRIFIER_X_PATTERN", "(")]).unwrap_err();
        assert!(matches!(e, MogrifierError::Pattern { .. }), "{e:?}");
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn a_flag_names_the_part_that_is_wrong() {
        let flag = |v: &[&str]| from_flag(&v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert!(flag(&["^a$", "b", ""]).is_ok());
        assert!(flag(&["^a$", "b", "t:$0"]).is_ok());
        let e = flag(&["[", "b", ""]).unwrap_err();
        assert!(e.to_string().contains("PATTERN"), "{e}");
        let e = flag(&["a", "b", "t"]).unwrap_err();
        assert!(e.to_string().contains("TAGS"), "{e}");
    }
}
