//! What can be wrong with a configuration, and where.

use std::fmt;
use std::path::PathBuf;

use super::Algorithm;

/// A configuration error: the file (or directory), the line, and what is wrong.
#[derive(Debug)]
pub struct ConfigError {
    /// The file (or directory) at fault.
    pub file: PathBuf,
    /// The line, counted from 1; 0 when the error is about the file as a whole.
    pub line: usize,
    /// What is wrong.
    pub kind: ConfigErrorKind,
}

/// What is wrong with a configuration.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file or directory cannot be read or listed.
    Read(std::io::Error),
    /// A directory holds more configuration files than [`super::MAX_FILES`].
    TooManyFiles,
    /// A file is larger than [`super::MAX_FILE_BYTES`].
    TooLarge,
    /// The text is not YAML we read: a syntax error, a key given twice, an anchor, a tag.
    Syntax(Box<marked_yaml::LoadError>),
    /// The YAML does not have the configuration's shape: an unknown field, a value of the
    /// wrong type, a list where a mapping belongs.
    Shape {
        /// The field's path from the top of the file (`descriptors[0].rate_limit`), when
        /// known.
        path: Option<String>,
        /// What the reader found.
        error: Box<marked_yaml::Error>,
    },
    /// A number with a fraction or an exponent outside `metadata`, which envoyproxy/ratelimit
    /// refuses wherever it appears.
    Fraction(String),
    /// `metadata` is not a mapping.
    MetadataNotMapping,
    /// The file names no `domain`, or an empty one.
    EmptyDomain,
    /// A descriptor has no `key`, or an empty one.
    EmptyKey,
    /// Two descriptors of one level share their key and value (`key_value`, or `key` alone).
    DuplicateDescriptor {
        /// The descriptor's path from the domain, as envoyproxy/ratelimit names it.
        path: String,
        /// Where the first one is: file and line.
        first: String,
    },
    /// The same domain in two files, without merging.
    DuplicateDomain {
        /// The domain.
        domain: String,
        /// The file that defined it first.
        first: PathBuf,
    },
    /// A `unit` that is not second, minute, hour, day, week, month or year (or none).
    UnknownUnit(String),
    /// `unlimited: true` with a valid `unit`.
    UnitWithUnlimited,
    /// An `algorithm` that is not gcra, fixed_window or sliding_window.
    UnknownAlgorithm(String),
    /// `burst` on a window algorithm.
    BurstNotGcra(Algorithm),
    /// `burst: 0` on a rule that admits requests.
    BurstZero,
    /// A window algorithm asked for more than its count can hold.
    WindowLimitTooLarge {
        /// The configured limit.
        requests_per_unit: u32,
        /// The algorithm.
        algorithm: Algorithm,
    },
    /// An entry of `replaces` without a name.
    EmptyReplaces,
    /// A rule that replaces itself.
    ReplacesItself(String),
    /// `share_threshold: true` on a descriptor whose key and value hold no `*`.
    ShareThresholdWithoutWildcard(String),
    /// Descriptors nested deeper than [`super::MAX_DEPTH`].
    TooDeep,
    /// A forward-auth settings file (`--forward-auth`) that cannot be read as one: what is
    /// wrong, in words.
    ForwardAuth(String),
}

impl fmt::Display for ConfigErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use super::{MAX_DEPTH, MAX_FILES, MAX_FILE_BYTES};
        use ConfigErrorKind::*;
        match self {
            Read(e) => write!(f, "cannot read: {e}"),
            TooManyFiles => write!(f, "more than {MAX_FILES} configuration files"),
            TooLarge => write!(f, "larger than {MAX_FILE_BYTES} bytes"),
            Syntax(e) => write!(f, "not a YAML configuration: {}", syntax_message(e)),
            Shape { path, error } => {
                if let Some(path) = path {
                    write!(f, "{path}: ")?;
                }
                match &**error {
                    marked_yaml::Error::UnknownFieldError(field, expected, _) => write!(
                        f,
                        "unknown field `{field}` (expected one of: {})",
                        expected.join(", ")
                    ),
                    other => write!(f, "{other}"),
                }
            }
            Fraction(v) => write!(
                f,
                "{v:?} is a number with a fraction; only whole numbers, booleans and strings are read here (quote it for a string)"
            ),
            MetadataNotMapping => f.write_str("`metadata` must be a mapping"),
            EmptyDomain => f.write_str("the file has no `domain`, or an empty one"),
            EmptyKey => f.write_str("a descriptor has no `key`, or an empty one"),
            DuplicateDescriptor { path, first } => {
                write!(f, "duplicate descriptor {path:?}: already defined at {first}")
            }
            DuplicateDomain { domain, first } => write!(
                f,
                "domain {domain:?} is already defined in {} (merge the files with --merge-domain-config)",
                first.display()
            ),
            UnknownUnit(u) if u.is_empty() => f.write_str("the rate_limit has no `unit`"),
            UnknownUnit(u) => write!(
                f,
                "unknown unit {u:?} (expected second, minute, hour, day, week, month or year)"
            ),
            UnitWithUnlimited => f.write_str("an `unlimited` rate_limit must not name a `unit`"),
            UnknownAlgorithm(a) => write!(
                f,
                "unknown algorithm {a:?} (expected gcra, fixed_window or sliding_window)"
            ),
            BurstNotGcra(a) => write!(f, "`burst` applies to gcra only, not {}", a.name()),
            BurstZero => f.write_str("`burst` must be at least 1"),
            WindowLimitTooLarge {
                requests_per_unit,
                algorithm,
            } => write!(
                f,
                "requests_per_unit {requests_per_unit} exceeds {} for {}",
                crate::limits::MAX_WINDOW_LIMIT,
                algorithm.name()
            ),
            EmptyReplaces => f.write_str("an entry of `replaces` has no name"),
            ReplacesItself(n) => write!(f, "rule {n:?} replaces itself"),
            ShareThresholdWithoutWildcard(k) => write!(
                f,
                "`share_threshold` needs a wildcard (`*`) in the value, but the descriptor is {k:?}"
            ),
            TooDeep => write!(f, "descriptors nest deeper than {MAX_DEPTH} levels"),
            ForwardAuth(message) => f.write_str(message),
        }
    }
}

/// The loader's message without its own position: the error names file and line already.
fn syntax_message(e: &marked_yaml::LoadError) -> String {
    use marked_yaml::LoadError::*;
    match e {
        TopLevelMustBeMapping(_) => "the file must be a mapping".into(),
        TopLevelMustBeSequence(_) => "unexpected sequence".into(),
        UnexpectedAnchor(_) => "YAML anchors are not supported".into(),
        MappingKeyMustBeScalar(_) => "a key must be a scalar".into(),
        UnexpectedTag(_) => "YAML tags are not supported".into(),
        ScanError(_, se) => se.info().to_owned(),
        DuplicateKey(d) => format!("field `{}` is given twice", d.key.as_str()),
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.kind)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.kind)
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ConfigErrorKind::Read(e) => Some(e),
            ConfigErrorKind::Syntax(e) => Some(e.as_ref()),
            ConfigErrorKind::Shape { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}
