//! The handler's configuration: the `[config]` table of its sidecar
//! `NAME.toml`, as text values.

use std::fmt;
use std::str::FromStr;

use crate::host;

/// The value of `key`, or `None` when it is not set.
pub fn get(key: &str) -> Option<String> {
    host::config_get(key)
}

/// Every key and value set for the handler.
pub fn get_all() -> Vec<(String, String)> {
    host::config_get_all()
}

/// The value of `key` parsed as a `T` (surrounding whitespace ignored):
/// `Ok(None)` when it is not set, an error naming the key and the value
/// when it does not parse.
///
/// ```no_run
/// let delay_ms: u64 = sluice_sdk::config::parse("delay_ms")
///     .unwrap_or_else(|e| {
///         sluice_sdk::warn!("{e}; using 10");
///         None
///     })
///     .unwrap_or(10);
/// ```
pub fn parse<T>(key: &str) -> Result<Option<T>, ConfigError>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    get(key).map(|value| parse_value(key, value)).transpose()
}

fn parse_value<T>(key: &str, value: String) -> Result<T, ConfigError>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    value.trim().parse().map_err(|e: T::Err| ConfigError {
        key: key.to_string(),
        reason: e.to_string(),
        value,
    })
}

/// A config value that does not parse as the type asked for. Its text is
/// `config KEY="VALUE" does not parse: REASON`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    key: String,
    value: String,
    reason: String,
}

impl ConfigError {
    /// The key whose value does not parse.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The value, as set.
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "config {}={:?} does not parse: {}",
            self.key, self.value, self.reason
        )
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;

    #[test]
    fn parses_values_and_names_bad_ones() {
        let _host = FakeHost::new()
            .with_config("delay_ms", " 250 ")
            .with_config("name", "x")
            .with_config("bad", "ten");
        assert_eq!(parse::<u64>("delay_ms"), Ok(Some(250)));
        assert_eq!(parse::<u64>("unset"), Ok(None));
        let e = parse::<u64>("bad").unwrap_err();
        assert_eq!((e.key(), e.value()), ("bad", "ten"));
        assert_eq!(
            e.to_string(),
            r#"config bad="ten" does not parse: invalid digit found in string"#
        );
        assert_eq!(get("name").as_deref(), Some("x"));
        assert_eq!(get_all().len(), 3);
    }
}
