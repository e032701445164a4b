//! The configuration: envoyproxy/ratelimit's YAML (one domain per file, nested descriptors),
//! read from one file or every `.yaml`/`.yml` file of a directory, plus funnel's additions
//! (`burst` and `algorithm` in `rate_limit`, `algorithm` as a domain's default).
//!
//! What envoyproxy/ratelimit accepts loads here and means the same; what it refuses is
//! refused here, with the file and the line: an unknown field, a value of the wrong type, a
//! bad unit, a `unit` on an `unlimited` rule, two descriptors with the same `key_value` at
//! one level, an empty or self-naming `replaces`, `share_threshold` without a wildcard, a
//! domain defined twice (unless domains are merged, as with its `MERGE_DOMAIN_CONFIG`).
//! The YAML is read as YAML 1.1, as envoyproxy/ratelimit reads it (`config/yaml.rs`).

#[cfg(test)]
mod conformance;
mod error;
#[cfg(test)]
mod tests;
mod yaml;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use marked_yaml::{LoaderOptions, Node, Spanned};

pub use error::{ConfigError, ConfigErrorKind};
use yaml::{line_of, DescriptorYaml, FileYaml, RateLimitYaml};

/// The most files a configuration directory may hold.
pub const MAX_FILES: usize = 1_000;
/// The largest configuration file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// The deepest nesting of descriptors.
pub const MAX_DEPTH: usize = 16;
/// The deepest nesting of YAML nodes read at all (descriptors, their blocks, `metadata`).
const MAX_NODE_DEPTH: usize = 4 * MAX_DEPTH;

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
    /// `unit` (`second` for an `unlimited` rule, which names none).
    pub unit: Unit,
    /// `requests_per_unit`; 0 (or none) denies every request.
    pub requests_per_unit: u32,
    /// `unlimited`: answer OK without counting.
    pub unlimited: bool,
    /// funnel's `burst`: how many may pass at once (GCRA only); `requests_per_unit` if unset.
    pub burst: Option<u32>,
    /// funnel's `algorithm`.
    pub algorithm: Algorithm,
}

/// A descriptor's `metadata`, sent back as response dynamic metadata when its rule applies.
pub type Metadata = serde_json::Map<String, serde_json::Value>;

/// One descriptor of the tree: a key, maybe a value, maybe a limit, maybe children.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// `key`.
    pub key: String,
    /// `value`; `None` (or empty) matches any value, each with its own count. A value with
    /// `*` in it is a wildcard: each `*` matches any run of characters, the empty one too.
    pub value: Option<String>,
    /// `rate_limit`.
    pub rate_limit: Option<RateLimit>,
    /// `shadow_mode`: decide and count, but always answer OK.
    pub shadow_mode: bool,
    /// `quota_mode`: the request is over the limit only if every quota-mode descriptor is.
    pub quota_mode: bool,
    /// `detailed_metric`: statistics per matched value.
    pub detailed_metric: bool,
    /// `value_to_metric`: the matched value in the statistics' name at this level.
    pub value_to_metric: bool,
    /// `share_threshold`: every value matching this wildcard shares one count.
    pub share_threshold: bool,
    /// `metadata`, when given and not empty.
    pub metadata: Option<Metadata>,
    /// `descriptors`: the next level.
    pub descriptors: Vec<Descriptor>,
    /// The file it was read from.
    pub file: Arc<Path>,
    /// The line the descriptor starts on.
    pub line: usize,
}

impl Descriptor {
    /// Its name at its level, as envoyproxy/ratelimit indexes it: `key_value`, or `key` alone.
    pub fn composite_key(&self) -> String {
        match &self.value {
            Some(v) => format!("{}_{}", self.key, v),
            None => self.key.clone(),
        }
    }
}

/// One domain: one file of envoyproxy/ratelimit's configuration, or several merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Domain {
    /// `domain`.
    pub domain: String,
    /// The top-level descriptors.
    pub descriptors: Vec<Descriptor>,
    /// The file it was first read from.
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
    /// and Kubernetes' `..data` staging entries skipped), in name order. With
    /// `merge_domains`, files naming the same domain add their descriptors to it (refused when
    /// two define the same `key_value`); without, a domain in two files is refused.
    pub fn load(path: &Path, merge_domains: bool) -> Result<Config, ConfigError> {
        let whole = |kind| ConfigError {
            file: path.to_path_buf(),
            line: 0,
            kind,
        };
        let meta = std::fs::metadata(path).map_err(|e| whole(ConfigErrorKind::Read(e)))?;
        let files = if meta.is_dir() {
            let mut files = Vec::new();
            let entries = std::fs::read_dir(path).map_err(|e| whole(ConfigErrorKind::Read(e)))?;
            for entry in entries {
                let entry = entry.map_err(|e| whole(ConfigErrorKind::Read(e)))?;
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
                    return Err(whole(ConfigErrorKind::TooManyFiles));
                }
            }
            files.sort();
            files
        } else {
            vec![path.to_path_buf()]
        };
        let mut config = Config::default();
        for file in files {
            let err = |kind| ConfigError {
                file: file.clone(),
                line: 0,
                kind,
            };
            let len = std::fs::metadata(&file)
                .map_err(|e| err(ConfigErrorKind::Read(e)))?
                .len();
            if len > MAX_FILE_BYTES {
                return Err(err(ConfigErrorKind::TooLarge));
            }
            let text = std::fs::read_to_string(&file).map_err(|e| err(ConfigErrorKind::Read(e)))?;
            config.add(parse_domain(&text, &file)?, merge_domains)?;
        }
        Ok(config)
    }

    /// Adds one file's domain: a domain already held is refused, or with `merge_domains` its
    /// descriptors are added to the first one's (a `key_value` both define is refused).
    pub fn add(&mut self, domain: Domain, merge_domains: bool) -> Result<(), ConfigError> {
        match self.domains.iter_mut().find(|d| d.domain == domain.domain) {
            None => {
                self.domains.push(domain);
                Ok(())
            }
            Some(first) if merge_domains => merge(first, domain),
            Some(first) => Err(ConfigError {
                file: domain.file.clone(),
                line: 0,
                kind: ConfigErrorKind::DuplicateDomain {
                    domain: domain.domain,
                    first: first.file.clone(),
                },
            }),
        }
    }
}

/// Adds `more`'s descriptors to `into`, refusing a `key_value` both define at the top.
fn merge(into: &mut Domain, more: Domain) -> Result<(), ConfigError> {
    for d in more.descriptors {
        let key = d.composite_key();
        if let Some(first) = into.descriptors.iter().find(|f| f.composite_key() == key) {
            return Err(ConfigError {
                file: d.file.to_path_buf(),
                line: d.line,
                kind: ConfigErrorKind::DuplicateDescriptor {
                    path: format!("{}.{key}", into.domain),
                    first: format!("{}:{}", first.file.display(), first.line),
                },
            });
        }
        into.descriptors.push(d);
    }
    Ok(())
}

/// Parses one domain's YAML; `file` names it in errors.
pub fn parse_domain(text: &str, file: &Path) -> Result<Domain, ConfigError> {
    let reader = Reader {
        file: Arc::from(file),
    };
    let mut root = marked_yaml::parse_yaml_with_options(
        0,
        text,
        // A quoted scalar is a string, as in YAML 1.1: `"5"` is not a number, `"true"` not a
        // boolean.
        LoaderOptions::default()
            .error_on_duplicate_keys(true)
            .prevent_coercion(true),
    )
    .map_err(|e| reader.err(syntax_line(&e), ConfigErrorKind::Syntax(Box::new(e))))?;
    if let Some(line) = too_deep(&root) {
        return Err(reader.err(line, ConfigErrorKind::TooDeep));
    }
    yaml::normalize(&mut root).map_err(|(line, kind)| reader.err(line, kind))?;
    let shape: FileYaml = marked_yaml::from_node(&root).map_err(|e| {
        let path = e.path().map(str::to_owned);
        let line = match &*e {
            // Errors found in a scalar carry its position.
            marked_yaml::Error::NotBoolean(_)
            | marked_yaml::Error::IntegerParseFailure(..)
            | marked_yaml::Error::FloatParseFailure(..) => e.start_mark().map(|m| m.line()),
            // The others are placed by their path: an unknown field at its key.
            _ => None,
        }
        .or_else(|| path.as_deref().map(|p| yaml::line_of_path(&root, p)))
        .unwrap_or(0);
        reader.err(
            line,
            ConfigErrorKind::Shape {
                path,
                error: Box::new(e.into_inner()),
            },
        )
    })?;
    let domain = match &shape.domain {
        Some(d) if !d.is_empty() => d.as_str().to_owned(),
        Some(d) => return Err(reader.err(line_of(d.span()), ConfigErrorKind::EmptyDomain)),
        None => return Err(reader.err(line_of(root.span()), ConfigErrorKind::EmptyDomain)),
    };
    let algorithm = match &shape.algorithm {
        Some(a) => reader.algorithm(a)?,
        None => Algorithm::Gcra,
    };
    let nodes = root.as_mapping().and_then(|m| m.get_node("descriptors"));
    let descriptors = reader.descriptors(
        &shape.descriptors,
        nodes,
        algorithm,
        1,
        &format!("{domain}."),
    )?;
    Ok(Domain {
        domain,
        descriptors,
        file: file.to_path_buf(),
    })
}

fn syntax_line(e: &marked_yaml::LoadError) -> usize {
    use marked_yaml::LoadError::*;
    match e {
        TopLevelMustBeMapping(m)
        | TopLevelMustBeSequence(m)
        | UnexpectedAnchor(m)
        | MappingKeyMustBeScalar(m)
        | UnexpectedTag(m)
        | ScanError(m, _) => m.line(),
        DuplicateKey(d) => line_of(d.key.span()),
    }
}

/// The line of the first node nested deeper than [`MAX_NODE_DEPTH`], if any: bounds the
/// recursion of the readers that follow.
fn too_deep(root: &Node) -> Option<usize> {
    let mut stack = vec![(root, 1usize)];
    while let Some((node, depth)) = stack.pop() {
        if depth > MAX_NODE_DEPTH {
            return Some(line_of(node.span()));
        }
        match node {
            Node::Scalar(_) => {}
            Node::Sequence(s) => stack.extend(s.iter().map(|n| (n, depth + 1))),
            Node::Mapping(m) => stack.extend(m.values().map(|n| (n, depth + 1))),
        }
    }
    None
}

struct Reader {
    file: Arc<Path>,
}

impl Reader {
    fn err(&self, line: usize, kind: ConfigErrorKind) -> ConfigError {
        ConfigError {
            file: self.file.to_path_buf(),
            line,
            kind,
        }
    }

    fn algorithm(&self, a: &Spanned<String>) -> Result<Algorithm, ConfigError> {
        Algorithm::parse(a.as_str()).ok_or_else(|| {
            self.err(
                line_of(a.span()),
                ConfigErrorKind::UnknownAlgorithm(a.as_str().to_owned()),
            )
        })
    }

    /// One level of descriptors; `nodes` is the level's sequence node, for `metadata`.
    fn descriptors(
        &self,
        list: &[Spanned<DescriptorYaml>],
        nodes: Option<&Node>,
        algorithm: Algorithm,
        depth: usize,
        parent: &str,
    ) -> Result<Vec<Descriptor>, ConfigError> {
        let mut out: Vec<Descriptor> = Vec::with_capacity(list.len());
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, item) in list.iter().enumerate() {
            let line = line_of(item.span());
            if depth > MAX_DEPTH {
                return Err(self.err(line, ConfigErrorKind::TooDeep));
            }
            let node = nodes
                .and_then(Node::as_sequence)
                .and_then(|s| s.get(i))
                .and_then(Node::as_mapping);
            let d = self.descriptor(item, node, algorithm, depth, parent)?;
            let key = d.composite_key();
            if let Some(first) = seen.insert(key.clone(), d.line) {
                return Err(self.err(
                    d.line,
                    ConfigErrorKind::DuplicateDescriptor {
                        path: format!("{parent}{key}"),
                        first: format!("{}:{first}", self.file.display()),
                    },
                ));
            }
            out.push(d);
        }
        Ok(out)
    }

    fn descriptor(
        &self,
        item: &Spanned<DescriptorYaml>,
        node: Option<&marked_yaml::types::MarkedMappingNode>,
        algorithm: Algorithm,
        depth: usize,
        parent: &str,
    ) -> Result<Descriptor, ConfigError> {
        let line = line_of(item.span());
        if item.key.is_empty() {
            return Err(self.err(line, ConfigErrorKind::EmptyKey));
        }
        // An empty value is no value, as in envoyproxy/ratelimit.
        let value = Some(item.value.clone()).filter(|v| !v.is_empty());
        let rate_limit = match &item.rate_limit {
            Some(r) => Some(self.rate_limit(r, algorithm)?),
            None => None,
        };
        let mut d = Descriptor {
            key: item.key.clone(),
            value,
            rate_limit,
            shadow_mode: item.shadow_mode,
            quota_mode: item.quota_mode,
            detailed_metric: item.detailed_metric,
            value_to_metric: item.value_to_metric,
            share_threshold: item.share_threshold,
            metadata: None,
            descriptors: Vec::new(),
            file: self.file.clone(),
            line,
        };
        let key = d.composite_key();
        if d.share_threshold && !key.contains('*') {
            return Err(self.err(line, ConfigErrorKind::ShareThresholdWithoutWildcard(key)));
        }
        if item.metadata.is_some() {
            if let Some(serde_json::Value::Object(m)) = node
                .and_then(|n| n.get_node("metadata"))
                .map(yaml::metadata_json)
            {
                d.metadata = Some(m).filter(|m| !m.is_empty());
            }
        }
        d.descriptors = self.descriptors(
            &item.descriptors,
            node.and_then(|n| n.get_node("descriptors")),
            algorithm,
            depth + 1,
            &format!("{parent}{key}."),
        )?;
        Ok(d)
    }

    fn rate_limit(
        &self,
        r: &Spanned<RateLimitYaml>,
        default: Algorithm,
    ) -> Result<RateLimit, ConfigError> {
        let line = line_of(r.span());
        let at = |s: Option<&marked_yaml::Span>| s.map_or(line, line_of);
        let unit_text = r.unit.as_ref().map_or("", |u| u.as_str());
        let unit_line = at(r.unit.as_ref().map(|u| u.span()));
        let unit = match (r.unlimited, Unit::parse(unit_text)) {
            (true, Some(_)) => return Err(self.err(unit_line, ConfigErrorKind::UnitWithUnlimited)),
            // An unlimited rule counts nothing; its unit is never read.
            (true, None) => Unit::Second,
            (false, Some(u)) => u,
            (false, None) => {
                return Err(self.err(
                    unit_line,
                    ConfigErrorKind::UnknownUnit(unit_text.to_owned()),
                ))
            }
        };
        let requests_per_unit = r.requests_per_unit;
        let algorithm = match &r.algorithm {
            Some(a) => self.algorithm(a)?,
            None => default,
        };
        let burst = r.burst.as_ref().map(|b| **b);
        if let Some(b) = &r.burst {
            let burst_line = line_of(b.span());
            if algorithm != Algorithm::Gcra {
                return Err(self.err(burst_line, ConfigErrorKind::BurstNotGcra(algorithm)));
            }
            if **b == 0 && requests_per_unit > 0 {
                return Err(self.err(burst_line, ConfigErrorKind::BurstZero));
            }
        }
        if algorithm != Algorithm::Gcra
            && u64::from(requests_per_unit) > crate::limits::MAX_WINDOW_LIMIT
        {
            return Err(self.err(
                line,
                ConfigErrorKind::WindowLimitTooLarge {
                    requests_per_unit,
                    algorithm,
                },
            ));
        }
        let name = r.name.clone().filter(|n| !n.is_empty());
        let mut replaces = Vec::with_capacity(r.replaces.len());
        for entry in &r.replaces {
            let entry_line = line_of(entry.span());
            if entry.name.is_empty() {
                return Err(self.err(entry_line, ConfigErrorKind::EmptyReplaces));
            }
            if name.as_deref() == Some(entry.name.as_str()) {
                return Err(self.err(
                    entry_line,
                    ConfigErrorKind::ReplacesItself(entry.name.clone()),
                ));
            }
            replaces.push(entry.name.clone());
        }
        Ok(RateLimit {
            name,
            replaces,
            unit,
            requests_per_unit,
            unlimited: r.unlimited,
            burst,
            algorithm,
        })
    }
}
