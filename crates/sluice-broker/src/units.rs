//! Human-friendly durations ("250ms", "5s", "1h") and sizes ("64MiB") for
//! config files and the CLI, with serde support.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

/// Parse a duration such as `250ms`, `5s`, `1m 30s` or `24h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("bad duration {text:?} ({e}); write it like 250ms, 5s, 1m or 24h"))
}

/// Parse a size such as `512KiB`, `64MiB`, `1GiB`, `1MB` or a plain byte count.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("bad size {text:?}; write it like 512KiB, 64MiB or 1GiB");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

/// Render a byte count the way `parse_size` reads it.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, size) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{name}", bytes / size);
        }
    }
    if bytes >= 1 << 20 {
        return format!("{:.1}MiB", bytes as f64 / (1u64 << 20) as f64);
    }
    format!("{bytes}B")
}

/// A `Duration` that deserializes from strings like `"5s"`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);

impl fmt::Debug for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map(Dur).map_err(de::Error::custom)
    }
}

/// A byte count that deserializes from strings like `"64MiB"` or integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Size(n)),
            Raw::Text(t) => parse_size(&t).map(Size).map_err(de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
        let err = parse_duration("5 parsecs").unwrap_err();
        assert!(err.contains("5 parsecs") && err.contains("250ms"), "{err}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1MB").unwrap(), 1_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("64 potatoes").unwrap_err().contains("64MiB"));
        assert!(parse_size("99999999999999999999GiB").is_err());
        assert_eq!(format_size(64 << 20), "64MiB");
        assert_eq!(format_size(1500), "1500B");
    }
}
