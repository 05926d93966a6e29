//! New source topics that match a mirror's topic pattern (`--add --topic REGEX`), minus
//! `topics.exclude` (default `__.*`: internal topics), are found here; the caller adds them to the
//! replicator (spec §7).

use std::collections::BTreeSet;

use regex::Regex;

use super::groups::SyncError;
use crate::client::{Client, ClientError};

/// Default of `topics.exclude`.
pub const DEFAULT_EXCLUDED_TOPICS: &[&str] = &["__.*"];

/// A mirror's topic pattern with its exclusions; patterns match whole topic names.
#[derive(Debug, Clone)]
pub struct TopicPattern {
    include: Regex,
    exclude: Vec<Regex>,
}

impl TopicPattern {
    /// From the include pattern and the `topics.exclude` patterns.
    ///
    /// # Errors
    /// [`SyncError::InvalidPattern`] naming the setting.
    pub fn new(include: &str, exclude: &[&str]) -> Result<Self, SyncError> {
        let compile = |key: &'static str, p: &str| {
            Regex::new(&format!("^(?:{p})$")).map_err(|e| SyncError::InvalidPattern { key, pattern: p.to_owned(), message: e.to_string() })
        };
        Ok(Self { include: compile("topic", include)?, exclude: exclude.iter().map(|p| compile("topics.exclude", p)).collect::<Result<_, _>>()? })
    }

    /// True if `topic` belongs to the mirror.
    pub fn matches(&self, topic: &str) -> bool {
        self.include.is_match(topic) && !self.exclude.iter().any(|r| r.is_match(topic))
    }
}

/// Source topics matching `pattern` that are not in `mirrored` yet, sorted.
///
/// # Errors
/// [`SyncError::Cluster`] if the source's metadata cannot be read.
pub async fn new_matching_topics(source: &Client, pattern: &TopicPattern, mirrored: &BTreeSet<String>) -> Result<Vec<String>, SyncError> {
    let metadata = source.refresh_metadata(&[]).await.map_err(|source: ClientError| SyncError::Cluster {
        side: "source",
        what: "listing topics".to_owned(),
        source: Box::new(source),
    })?;
    Ok(metadata.topics.values().filter(|t| !t.is_internal && pattern.matches(&t.name) && !mirrored.contains(&t.name)).map(|t| t.name.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_minus_exclusions() {
        let p = TopicPattern::new("orders\\..*|payments", DEFAULT_EXCLUDED_TOPICS).unwrap();
        assert!(p.matches("orders.eu"));
        assert!(p.matches("payments"));
        assert!(!p.matches("payments-dlq"));
        let all = TopicPattern::new(".*", DEFAULT_EXCLUDED_TOPICS).unwrap();
        assert!(!all.matches("__consumer_offsets"));
        assert!(all.matches("x"));
        assert!(matches!(TopicPattern::new("[", &[]), Err(SyncError::InvalidPattern { key: "topic", .. })));
    }
}
