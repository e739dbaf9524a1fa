//! The manifest's `[config]` values.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::str::FromStr;
use std::time::Duration;

/// The `[config]` section of the plugin's manifest: string keys with string values.
///
/// Every value arrives as text; the helpers below parse it and, when a value is missing or
/// malformed, return an error message that names the key and says what was expected. Their
/// error type is `String`, which `?` turns into the [`Error`](crate::Error) of
/// [`Reconciler::init`](crate::Reconciler::init), passing the message on to the host:
///
/// ```
/// # use leasehold_guest::{Config, Error};
/// # use std::time::Duration;
/// # fn main() -> Result<(), Error> {
/// let config = Config::from_iter([("batch", "50"), ("pause", "1.5s")]);
/// let batch: u32 = config.parse_or("batch", 10)?;
/// let pause = config.duration_or("pause", Duration::from_secs(1))?;
/// let mode = config.choice("mode", &["fast", "careful"], "careful")?;
/// assert_eq!((batch, pause, mode), (50, Duration::from_millis(1500), "careful"));
/// assert_eq!(
///     config.parse::<u32>("pause").unwrap_err(),
///     r#"config key "pause": "1.5s" is not a valid u32 (invalid digit found in string)"#
/// );
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    values: BTreeMap<String, String>,
}

impl Config {
    /// The value of `key`, as written.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// The value of `key`, or `default` when the key is absent.
    pub fn get_or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.get(key).unwrap_or(default)
    }

    /// The value of `key`, or an error saying that it is missing.
    pub fn require(&self, key: &str) -> Result<&str, String> {
        self.get(key).ok_or_else(|| {
            format!("config key {key:?} is missing: set it in the manifest's [config] section")
        })
    }

    /// Whether `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }

    /// The value of `key` parsed as a `T` (any type implementing [`FromStr`], such as integers,
    /// floats or [`std::net::SocketAddr`]), `None` when absent, or an error naming the key and
    /// the expected type. Leading and trailing whitespace is ignored.
    pub fn parse<T>(&self, key: &str) -> Result<Option<T>, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        let Some(raw) = self.get(key) else {
            return Ok(None);
        };
        raw.trim().parse::<T>().map(Some).map_err(|e| {
            format!(
                "config key {key:?}: {raw:?} is not a valid {} ({e})",
                short_type_name::<T>()
            )
        })
    }

    /// Like [`Config::parse`], with `default` when the key is absent.
    pub fn parse_or<T>(&self, key: &str, default: T) -> Result<T, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        Ok(self.parse(key)?.unwrap_or(default))
    }

    /// Like [`Config::parse`], with an error when the key is absent.
    pub fn parse_required<T>(&self, key: &str) -> Result<T, String>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.require(key)?;
        Ok(self.parse(key)?.expect("the key is present"))
    }

    /// The value of `key` as a yes/no flag (`true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0`, in
    /// any case), `default` when absent, or an error for anything else.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, String> {
        let Some(raw) = self.get(key) else {
            return Ok(default);
        };
        match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(true),
            "false" | "no" | "off" | "0" => Ok(false),
            _ => Err(format!(
                "config key {key:?}: {raw:?} is not a yes/no value (use true or false)"
            )),
        }
    }

    /// The value of `key` as a duration, `None` when absent, or an error for a malformed one.
    ///
    /// A duration is one or more numbers each followed by a unit: `ns`, `us`, `ms`, `s`, `m`
    /// (or `min`), `h` or `d`, for example `"250ms"`, `"5s"`, `"1.5s"` or `"1m30s"`. A plain
    /// `"0"` is zero.
    pub fn duration(&self, key: &str) -> Result<Option<Duration>, String> {
        let Some(raw) = self.get(key) else {
            return Ok(None);
        };
        parse_duration(raw.trim()).map(Some).map_err(|why| {
            format!("config key {key:?}: {raw:?} is not a valid duration ({why}; e.g. \"500ms\", \"5s\", \"1m30s\")")
        })
    }

    /// Like [`Config::duration`], with `default` when the key is absent.
    pub fn duration_or(&self, key: &str, default: Duration) -> Result<Duration, String> {
        Ok(self.duration(key)?.unwrap_or(default))
    }

    /// The value of `key`, which must be one of `allowed`; `default` when the key is absent.
    pub fn choice<'a>(
        &'a self,
        key: &str,
        allowed: &[&str],
        default: &'a str,
    ) -> Result<&'a str, String> {
        let Some(raw) = self.get(key) else {
            return Ok(default);
        };
        if allowed.contains(&raw) {
            Ok(raw)
        } else {
            let allowed: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
            Err(format!(
                "config key {key:?}: {raw:?} is not one of {}",
                allowed.join(", ")
            ))
        }
    }

    /// An error naming every key that is not in `known`, so that a misspelt key in the manifest
    /// is reported instead of silently ignored.
    pub fn deny_unknown(&self, known: &[&str]) -> Result<(), String> {
        let unknown: Vec<String> = self
            .values
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .map(|k| format!("{k:?}"))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        let known: Vec<String> = known.iter().map(|k| format!("{k:?}")).collect();
        Err(format!(
            "unknown config key{} {} (known keys: {})",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", "),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))
    }

    /// Every key and value, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many keys are set.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no key is set.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Builds a config from key-value pairs (a later duplicate key wins), e.g. to test a plugin's
/// `init` outside a host.
impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Config {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        Config {
            values: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

/// The pairs as the host hands them over.
impl From<Vec<(String, String)>> for Config {
    fn from(pairs: Vec<(String, String)>) -> Self {
        pairs.into_iter().collect()
    }
}

/// `u32` rather than `core::primitive::u32`, `Duration` rather than `core::time::Duration`.
fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    let base = full.split('<').next().unwrap_or(full);
    match base.rfind("::") {
        Some(i) if !full.contains('<') => &full[i + 2..],
        _ => full,
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.is_empty() {
        return Err("it is empty".into());
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit = unit.trim();
        if number.is_empty() {
            return Err(format!("expected a number before {unit:?}"));
        }
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{number:?} is not a number"))?;
        let seconds_per_unit = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            "" => return Err(format!("{number:?} has no unit")),
            other => return Err(format!("unknown unit {other:?}")),
        };
        let part = Duration::try_from_secs_f64(value * seconds_per_unit)
            .map_err(|_| "it is out of range".to_string())?;
        total = total
            .checked_add(part)
            .ok_or_else(|| "it is out of range".to_string())?;
        rest = after.trim_start();
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Config {
        pairs.iter().copied().collect()
    }

    #[test]
    fn lookups_and_defaults() {
        let c = config(&[("a", "1"), ("b", " 2 "), ("a", "3")]);
        assert_eq!(c.get("a"), Some("3"), "a later duplicate wins");
        assert_eq!(c.get_or("zzz", "dflt"), "dflt");
        assert_eq!(c.parse::<u8>("b"), Ok(Some(2)));
        assert_eq!(c.parse_or::<u8>("zzz", 9), Ok(9));
        assert_eq!(c.len(), 2);
        assert!(c.require("zzz").unwrap_err().contains("\"zzz\" is missing"));
        assert!(c.parse_required::<u8>("zzz").is_err());
        assert_eq!(c.parse_required::<u8>("a"), Ok(3));
    }

    #[test]
    fn parse_errors_name_the_key_and_type() {
        let c = config(&[("n", "-1"), ("f", "x"), ("flag", "maybe")]);
        assert_eq!(
            c.parse::<u64>("n").unwrap_err(),
            r#"config key "n": "-1" is not a valid u64 (invalid digit found in string)"#
        );
        assert!(c.parse::<f64>("f").unwrap_err().contains("valid f64"));
        assert!(c.bool_or("flag", true).unwrap_err().contains("\"flag\""));
        assert_eq!(c.bool_or("zzz", true), Ok(true));
        assert_eq!(config(&[("b", "Off")]).bool_or("b", true), Ok(false));
    }

    #[test]
    fn durations() {
        let d = |s: &str| parse_duration(s);
        assert_eq!(d("0"), Ok(Duration::ZERO));
        assert_eq!(d("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(d("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(d("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(d("2h 1min"), Ok(Duration::from_secs(7260)));
        assert_eq!(d("10us"), Ok(Duration::from_micros(10)));
        assert!(d("5").unwrap_err().contains("no unit"));
        assert!(d("5 parsecs").unwrap_err().contains("unknown unit"));
        assert!(d("").is_err());
        assert!(d("ms").is_err());
        let c = config(&[("t", "soon")]);
        assert!(c.duration("t").unwrap_err().starts_with("config key \"t\""));
    }

    #[test]
    fn choices_and_unknown_keys() {
        let c = config(&[("mode", "fast"), ("typo", "1")]);
        assert_eq!(c.choice("mode", &["fast", "slow"], "slow"), Ok("fast"));
        assert_eq!(c.choice("zzz", &["fast", "slow"], "slow"), Ok("slow"));
        assert_eq!(
            c.choice("mode", &["slow"], "slow").unwrap_err(),
            r#"config key "mode": "fast" is not one of "slow""#
        );
        assert_eq!(
            c.deny_unknown(&["mode"]).unwrap_err(),
            r#"unknown config key "typo" (known keys: "mode")"#
        );
        assert_eq!(c.deny_unknown(&["mode", "typo"]), Ok(()));
    }
}
