//! The configuration: envoyproxy/ratelimit's YAML (one domain per file, nested descriptors),
//! read from one file or every `.yaml`/`.yml` file of a directory, plus funnel's additions
//! (`burst` and `algorithm` in `rate_limit`, `algorithm` as a domain's default).
//!
//! Every error names the file and the line it comes from: an unknown field, a value of the
//! wrong type, a bad unit, two descriptors with the same key and value at one level, a
//! `replaces` naming no rule of the domain, a domain defined twice.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode};
use marked_yaml::{LoadError, Node, Span};

/// The most files a configuration directory may hold.
pub const MAX_FILES: usize = 1_000;
/// The largest configuration file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// The deepest nesting of descriptors.
pub const MAX_DEPTH: usize = 16;

/// A configuration error, with where it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or directory) at fault.
    pub file: PathBuf,
    /// The line, counted from 1; 0 when the error is about the file as a whole.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// The unit of a rate limit, as Envoy numbers it (`RateLimitResponse.RateLimit.Unit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days, as envoyproxy/ratelimit counts a month.
    Month,
    /// 365 days, as envoyproxy/ratelimit counts a year.
    Year,
}

impl Unit {
    /// The unit's length.
    pub fn duration(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        })
    }

    /// Envoy's enum number (`SECOND = 1` ... `YEAR = 6`, `WEEK = 7`).
    pub fn envoy_number(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit of Envoy's enum number; `None` for UNKNOWN and numbers it does not define.
    pub fn from_envoy_number(n: i32) -> Option<Unit> {
        Some(match n {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// A unit as the YAML spells it, in any case (`second`, `MINUTE`).
    pub fn parse(s: &str) -> Option<Unit> {
        Some(match s.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }
}

/// How a rule counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// funnel's GCRA: `requests_per_unit` per unit, at most `burst` at once (the default).
    #[default]
    Gcra,
    /// A fixed window per unit, aligned on Unix time: envoyproxy/ratelimit's counting.
    FixedWindow,
    /// A sliding window counter (the previous window weighted by its overlap).
    SlidingWindow,
}

impl Algorithm {
    fn parse(s: &str) -> Option<Algorithm> {
        Some(match s {
            "gcra" => Algorithm::Gcra,
            "fixed_window" => Algorithm::FixedWindow,
            "sliding_window" => Algorithm::SlidingWindow,
            _ => return None,
        })
    }

    /// The name the YAML uses.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Gcra => "gcra",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
        }
    }
}

/// A `rate_limit` block.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// `name`: what `replaces` refers to, and the rule's identity across reloads.
    pub name: Option<String>,
    /// `replaces`: the names of the rules this one replaces when both apply to a request.
    pub replaces: Vec<String>,
    /// `unit`.
    pub unit: Unit,
    /// `requests_per_unit`; 0 denies every request.
    pub requests_per_unit: u32,
    /// `unlimited`: answer OK without counting.
    pub unlimited: bool,
    /// funnel's `burst`: how many may pass at once (GCRA only); `requests_per_unit` if unset.
    pub burst: Option<u32>,
    /// funnel's `algorithm`.
    pub algorithm: Algorithm,
}

/// One descriptor of the tree: a key, maybe a value, maybe a limit, maybe children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// `key`.
    pub key: String,
    /// `value`; `None` matches any value, each with its own count. A value ending in `*` is a
    /// prefix match.
    pub value: Option<String>,
    /// `rate_limit`.
    pub rate_limit: Option<RateLimit>,
    /// `shadow_mode`: decide and count, but always answer OK.
    pub shadow_mode: bool,
    /// `detailed_metric`: count per matched value too.
    pub detailed_metric: bool,
    /// `descriptors`: the next level.
    pub descriptors: Vec<Descriptor>,
    /// The line the descriptor starts on.
    pub line: usize,
}

/// One domain (one file of envoyproxy/ratelimit's configuration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    /// `domain`.
    pub domain: String,
    /// The top-level descriptors.
    pub descriptors: Vec<Descriptor>,
    /// The file it was read from.
    pub file: PathBuf,
}

/// Every domain of a configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The domains, in the order their files were read.
    pub domains: Vec<Domain>,
}

impl Config {
    /// Reads a file, or every `.yaml`/`.yml` file of a directory (not recursing; hidden files
    /// and Kubernetes' `..data` staging entries skipped), in name order.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let whole = |message: String| ConfigError {
            file: path.to_path_buf(),
            line: 0,
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| whole(format!("cannot read: {e}")))?;
        let files = if meta.is_dir() {
            let mut files = Vec::new();
            let entries =
                std::fs::read_dir(path).map_err(|e| whole(format!("cannot list: {e}")))?;
            for entry in entries {
                let entry = entry.map_err(|e| whole(format!("cannot list: {e}")))?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
                if name.starts_with('.') || !yaml {
                    continue;
                }
                let p = entry.path();
                if p.is_file() {
                    files.push(p);
                }
                if files.len() > MAX_FILES {
                    return Err(whole(format!("more than {MAX_FILES} configuration files")));
                }
            }
            files.sort();
            files
        } else {
            vec![path.to_path_buf()]
        };
        let mut config = Config::default();
        let mut seen: HashMap<String, PathBuf> = HashMap::new();
        for file in files {
            let err = |message: String| ConfigError {
                file: file.clone(),
                line: 0,
                message,
            };
            let len = std::fs::metadata(&file)
                .map_err(|e| err(format!("cannot read: {e}")))?
                .len();
            if len > MAX_FILE_BYTES {
                return Err(err(format!("larger than {MAX_FILE_BYTES} bytes")));
            }
            let text =
                std::fs::read_to_string(&file).map_err(|e| err(format!("cannot read: {e}")))?;
            let domain = parse_domain(&text, &file)?;
            if let Some(first) = seen.get(&domain.domain) {
                return Err(err(format!(
                    "domain {:?} is already defined in {}",
                    domain.domain,
                    first.display()
                )));
            }
            seen.insert(domain.domain.clone(), file.clone());
            config.domains.push(domain);
        }
        Ok(config)
    }
}

/// Parses one domain's YAML; `file` names it in errors.
pub fn parse_domain(text: &str, file: &Path) -> Result<Domain, ConfigError> {
    let p = Parser { file };
    let root = marked_yaml::parse_yaml_with_options(
        0,
        text,
        marked_yaml::LoaderOptions::default().error_on_duplicate_keys(true),
    )
    .map_err(|e| p.load_error(&e))?;
    let map = p.mapping(&root, "the file")?;
    p.only(map, &["domain", "descriptors", "algorithm"])?;
    let domain = p.required_str(map, "domain")?;
    if domain.is_empty() {
        return Err(p.at(map.span(), "`domain` is empty".into()));
    }
    let algorithm = match map.get_node("algorithm") {
        Some(n) => p.algorithm(n)?,
        None => Algorithm::Gcra,
    };
    let descriptors = match map.get_node("descriptors") {
        Some(n) => p.descriptors(n, algorithm, 1)?,
        None => Vec::new(),
    };
    let mut names = HashSet::new();
    collect_names(&descriptors, &mut names);
    check_replaces(&p, &descriptors, &names)?;
    Ok(Domain {
        domain,
        descriptors,
        file: file.to_path_buf(),
    })
}

fn collect_names<'a>(list: &'a [Descriptor], names: &mut HashSet<&'a str>) {
    for d in list {
        if let Some(name) = d.rate_limit.as_ref().and_then(|r| r.name.as_deref()) {
            names.insert(name);
        }
        collect_names(&d.descriptors, names);
    }
}

fn check_replaces(
    p: &Parser<'_>,
    list: &[Descriptor],
    names: &HashSet<&str>,
) -> Result<(), ConfigError> {
    for d in list {
        let replaces = d.rate_limit.as_ref().map_or(&[][..], |r| &r.replaces[..]);
        for r in replaces {
            if !names.contains(r.as_str()) {
                return Err(p.line(
                    d.line,
                    format!(
                        "`replaces` names {r:?}, which is the name of no rate_limit in this domain"
                    ),
                ));
            }
        }
        check_replaces(p, &d.descriptors, names)?;
    }
    Ok(())
}

struct Parser<'a> {
    file: &'a Path,
}

fn line_of(span: &Span) -> usize {
    span.start().map_or(0, |m| m.line())
}

impl Parser<'_> {
    fn line(&self, line: usize, message: String) -> ConfigError {
        ConfigError {
            file: self.file.to_path_buf(),
            line,
            message,
        }
    }

    fn at(&self, span: &Span, message: String) -> ConfigError {
        self.line(line_of(span), message)
    }

    fn load_error(&self, e: &LoadError) -> ConfigError {
        let (line, message) = match e {
            LoadError::TopLevelMustBeMapping(m) => (m.line(), "the file must be a mapping".into()),
            LoadError::TopLevelMustBeSequence(m) => (m.line(), "unexpected sequence".into()),
            LoadError::UnexpectedAnchor(m) => (m.line(), "YAML anchors are not supported".into()),
            LoadError::MappingKeyMustBeScalar(m) => (m.line(), "a key must be a scalar".into()),
            LoadError::UnexpectedTag(m) => (m.line(), "YAML tags are not supported".into()),
            LoadError::ScanError(m, se) => (m.line(), format!("not YAML: {}", se.info())),
            LoadError::DuplicateKey(d) => (
                line_of(d.key.span()),
                format!("field `{}` is given twice", d.key.as_str()),
            ),
        };
        self.line(line, message)
    }

    fn mapping<'n>(
        &self,
        node: &'n Node,
        what: &str,
    ) -> Result<&'n MarkedMappingNode, ConfigError> {
        node.as_mapping()
            .ok_or_else(|| self.at(node.span(), format!("{what} must be a mapping")))
    }

    fn scalar<'n>(&self, node: &'n Node, what: &str) -> Result<&'n MarkedScalarNode, ConfigError> {
        node.as_scalar()
            .ok_or_else(|| self.at(node.span(), format!("`{what}` must be a scalar")))
    }

    /// Refuses a field not in `allowed`, naming it and the line it is on.
    fn only(&self, map: &MarkedMappingNode, allowed: &[&str]) -> Result<(), ConfigError> {
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                return Err(self.at(
                    key.span(),
                    format!(
                        "unknown field `{}` (expected one of: {})",
                        key.as_str(),
                        allowed.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    fn required_str(&self, map: &MarkedMappingNode, field: &str) -> Result<String, ConfigError> {
        match map.get_node(field) {
            Some(n) => Ok(self.scalar(n, field)?.as_str().to_owned()),
            None => Err(self.at(map.span(), format!("missing field `{field}`"))),
        }
    }

    fn bool(&self, map: &MarkedMappingNode, field: &str) -> Result<bool, ConfigError> {
        match map.get_node(field) {
            None => Ok(false),
            Some(n) => self
                .scalar(n, field)?
                .as_bool()
                .ok_or_else(|| self.at(n.span(), format!("`{field}` must be true or false"))),
        }
    }

    fn u32(&self, map: &MarkedMappingNode, field: &str) -> Result<Option<u32>, ConfigError> {
        match map.get_node(field) {
            None => Ok(None),
            Some(n) => self.scalar(n, field)?.as_u32().map(Some).ok_or_else(|| {
                self.at(
                    n.span(),
                    format!("`{field}` must be a whole number from 0 to {}", u32::MAX),
                )
            }),
        }
    }

    fn algorithm(&self, node: &Node) -> Result<Algorithm, ConfigError> {
        let s = self.scalar(node, "algorithm")?;
        Algorithm::parse(s.as_str()).ok_or_else(|| {
            self.at(
                node.span(),
                format!(
                    "unknown algorithm {:?} (expected gcra, fixed_window or sliding_window)",
                    s.as_str()
                ),
            )
        })
    }

    fn descriptors(
        &self,
        node: &Node,
        algorithm: Algorithm,
        depth: usize,
    ) -> Result<Vec<Descriptor>, ConfigError> {
        if depth > MAX_DEPTH {
            return Err(self.at(
                node.span(),
                format!("descriptors nest deeper than {MAX_DEPTH} levels"),
            ));
        }
        let seq = node
            .as_sequence()
            .ok_or_else(|| self.at(node.span(), "`descriptors` must be a list".into()))?;
        let mut out: Vec<Descriptor> = Vec::with_capacity(seq.len());
        let mut seen: HashMap<(String, Option<String>), usize> = HashMap::new();
        for item in seq.iter() {
            let d = self.descriptor(item, algorithm, depth)?;
            let id = (d.key.clone(), d.value.clone());
            if let Some(first) = seen.insert(id, d.line) {
                let what = match &d.value {
                    Some(v) => format!("key {:?} with value {:?}", d.key, v),
                    None => format!("key {:?} without a value", d.key),
                };
                return Err(self.line(
                    d.line,
                    format!("duplicate descriptor: {what} is already defined on line {first}"),
                ));
            }
            out.push(d);
        }
        Ok(out)
    }

    fn descriptor(
        &self,
        node: &Node,
        algorithm: Algorithm,
        depth: usize,
    ) -> Result<Descriptor, ConfigError> {
        let map = self.mapping(node, "a descriptor")?;
        self.only(
            map,
            &[
                "key",
                "value",
                "rate_limit",
                "shadow_mode",
                "detailed_metric",
                "replaces",
                "descriptors",
            ],
        )?;
        let line = line_of(map.span());
        let key = self.required_str(map, "key")?;
        if key.is_empty() {
            return Err(self.line(line, "`key` is empty".into()));
        }
        // An empty value is no value, as in envoyproxy/ratelimit.
        let value = match map.get_node("value") {
            Some(n) => Some(self.scalar(n, "value")?.as_str().to_owned()).filter(|v| !v.is_empty()),
            None => None,
        };
        let rate_limit = match map.get_node("rate_limit") {
            Some(n) => Some(self.rate_limit(n, algorithm)?),
            None => None,
        };
        let descriptors = match map.get_node("descriptors") {
            Some(n) => self.descriptors(n, algorithm, depth + 1)?,
            None => Vec::new(),
        };
        Ok(Descriptor {
            key,
            value,
            rate_limit,
            shadow_mode: self.bool(map, "shadow_mode")?,
            detailed_metric: self.bool(map, "detailed_metric")?,
            descriptors,
            line,
        })
    }

    fn rate_limit(&self, node: &Node, default: Algorithm) -> Result<RateLimit, ConfigError> {
        let map = self.mapping(node, "`rate_limit`")?;
        self.only(
            map,
            &[
                "unit",
                "requests_per_unit",
                "unlimited",
                "name",
                "replaces",
                "burst",
                "algorithm",
            ],
        )?;
        let unlimited = self.bool(map, "unlimited")?;
        let unit = match map.get_node("unit") {
            Some(n) => {
                let s = self.scalar(n, "unit")?;
                Unit::parse(s.as_str()).ok_or_else(|| {
                    self.at(
                        n.span(),
                        format!(
                            "unknown unit {:?} (expected second, minute, hour, day, week, month or year)",
                            s.as_str()
                        ),
                    )
                })?
            }
            None if unlimited => Unit::Second,
            None => return Err(self.at(map.span(), "missing field `unit`".into())),
        };
        let requests_per_unit = match self.u32(map, "requests_per_unit")? {
            Some(n) => n,
            None if unlimited => 0,
            None => return Err(self.at(map.span(), "missing field `requests_per_unit`".into())),
        };
        let algorithm = match map.get_node("algorithm") {
            Some(n) => self.algorithm(n)?,
            None => default,
        };
        let burst = self.u32(map, "burst")?;
        if let Some(b) = burst {
            let n = map.get_node("burst").map_or(0, |n| line_of(n.span()));
            if algorithm != Algorithm::Gcra {
                return Err(self.line(
                    n,
                    format!("`burst` applies to gcra only, not {}", algorithm.name()),
                ));
            }
            if b == 0 && requests_per_unit > 0 {
                return Err(self.line(n, "`burst` must be at least 1".into()));
            }
        }
        if algorithm != Algorithm::Gcra
            && u64::from(requests_per_unit) > crate::limits::MAX_WINDOW_LIMIT
        {
            return Err(self.at(
                map.span(),
                format!(
                    "requests_per_unit {requests_per_unit} exceeds {} for {}",
                    crate::limits::MAX_WINDOW_LIMIT,
                    algorithm.name()
                ),
            ));
        }
        let name = match map.get_node("name") {
            Some(n) => Some(self.scalar(n, "name")?.as_str().to_owned()),
            None => None,
        };
        let mut replaces = Vec::new();
        if let Some(n) = map.get_node("replaces") {
            let seq = n
                .as_sequence()
                .ok_or_else(|| self.at(n.span(), "`replaces` must be a list".into()))?;
            for r in seq.iter() {
                let m = self.mapping(r, "an entry of `replaces`")?;
                self.only(m, &["name"])?;
                let target = self.required_str(m, "name")?;
                if target.is_empty() {
                    return Err(
                        self.at(m.span(), "an entry of `replaces` has an empty name".into())
                    );
                }
                if name.as_deref() == Some(target.as_str()) {
                    return Err(self.at(m.span(), format!("rule {target:?} replaces itself")));
                }
                replaces.push(target);
            }
        }
        Ok(RateLimit {
            name,
            replaces,
            unit,
            requests_per_unit,
            unlimited,
            burst,
            algorithm,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Domain, ConfigError> {
        parse_domain(text, Path::new("t.yaml"))
    }

    #[test]
    fn the_readme_example_of_envoyproxy_ratelimit_shape_loads() {
        let d = parse(
            "domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n  - key: database\n    value: default\n    rate_limit:\n      unit: SECOND\n      requests_per_unit: 500\n",
        )
        .unwrap();
        assert_eq!(d.domain, "mongo_cps");
        assert_eq!(d.descriptors.len(), 2);
        assert_eq!(
            d.descriptors[1].rate_limit.as_ref().unwrap().unit,
            Unit::Second
        );
        assert_eq!(d.descriptors[1].line, 8);
    }

    #[test]
    fn an_unknown_field_names_its_line() {
        let e = parse("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burts: 3\n").unwrap_err();
        assert_eq!(e.line, 7, "{e}");
        assert!(e.message.contains("unknown field `burts`"), "{e}");
    }

    #[test]
    fn a_bad_unit_names_its_line() {
        let e = parse("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n").unwrap_err();
        assert_eq!(
            (e.line, e.to_string().contains("t.yaml:5")),
            (5, true),
            "{e}"
        );
    }

    #[test]
    fn a_duplicate_key_names_its_line() {
        let e =
            parse("domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n")
                .unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        assert!(e.message.contains("duplicate"), "{e}");
        // The same key with and without a value is two rules, as in envoyproxy/ratelimit.
        parse("domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n").unwrap();
    }

    #[test]
    fn an_unknown_replaces_target_names_its_line() {
        let e = parse("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: one}\n  - key: b\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: two\n").unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        assert!(e.message.contains("\"two\""), "{e}");
    }

    #[test]
    fn burst_belongs_to_gcra() {
        let e = parse("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: fixed_window\n      burst: 3\n").unwrap_err();
        assert_eq!(e.line, 8, "{e}");
    }
}
