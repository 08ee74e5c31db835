//! A consistent cut: root's list of the units whose processes are paused (their cgroups
//! frozen) while a set's members are taken, so that the set is one moment of what they wrote.
//!
//! Root's configuration, one JSON file ([`CONFIG_PATH`]) the stem reads at start; nothing a
//! caller sends names a unit. Unit names are checked as systemd checks them
//! (`unit_name_is_valid`), and only units that own a cgroup of their own processes
//! (`.service`, `.scope`, `.slice`) can be paused. Nothing here does I/O.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where root configures the paused units. Missing means none: sets are taken unpaused.
pub const CONFIG_PATH: &str = "/etc/tacid/cut.json";
/// A configuration file longer than this is refused unread.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;
/// systemd's longest unit name (`UNIT_NAME_MAX` less the NUL).
pub const MAX_UNIT_NAME_BYTES: usize = 255;
/// Most units one configuration may pause.
pub const MAX_UNITS: usize = 64;
/// How long the stem waits for every unit to report frozen, by default.
pub const FREEZE_TIMEOUT_MS: u32 = crate::defaults::CUT_FREEZE_TIMEOUT_MS;
/// How long units may stay frozen in all (freezing, taking every member, thawing) before the
/// guard thaws them whatever the stem is doing, by default.
pub const HOLD_LIMIT_MS: u32 = crate::defaults::CUT_HOLD_LIMIT_MS;
/// The longest either limit may be: a pause is an instant, not a maintenance window.
pub const MAX_LIMIT_MS: u32 = 120_000;

/// [`UnitName`]'s grammar as a whole-string POSIX ERE (Nix's `builtins.match`); the parser
/// also caps the length at [`MAX_UNIT_NAME_BYTES`].
pub const UNIT_NAME_PATTERN: &str =
    r"[-A-Za-z0-9:_.\]+(@[-A-Za-z0-9:_.\@]+)?[.](service|scope|slice)";

/// The characters systemd allows in a unit name's prefix and instance (`VALID_CHARS`).
fn valid_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b':' | b'-' | b'_' | b'.' | b'\\')
}

/// A unit name as systemd accepts it, of a kind that has a cgroup to freeze.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct UnitName(String);

/// Why a unit name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitNameError {
    #[error("a unit name is empty or longer than {MAX_UNIT_NAME_BYTES} bytes")]
    Length,
    #[error("{0:?} is not a systemd unit name (letters, digits, `:-_.\\`, one `@` before an instance, then `.service`, `.scope` or `.slice`)")]
    Grammar(String),
    #[error("{0:?} is a template, not a unit: name an instance (`name@instance.service`)")]
    Template(String),
    #[error("{0:?} has no processes of its own to pause: name a .service, .scope or .slice")]
    NotFreezable(String),
}

impl UnitName {
    /// Check `name` as systemd's `unit_name_is_valid` does, and that it can be frozen.
    pub fn parse(name: &str) -> Result<UnitName, UnitNameError> {
        let b = name.as_bytes();
        if b.is_empty() || b.len() > MAX_UNIT_NAME_BYTES {
            return Err(UnitNameError::Length);
        }
        let shown = || crate::human::cap(name, 80).into_owned();
        let Some(dot) = name.rfind('.') else {
            return Err(UnitNameError::Grammar(shown()));
        };
        if dot == 0 {
            return Err(UnitNameError::Grammar(shown()));
        }
        let kind = &name[dot + 1..];
        let (stem, at) = (&b[..dot], b[..dot].iter().position(|&c| c == b'@'));
        if stem.iter().any(|&c| !valid_char(c) && c != b'@') || at == Some(0) {
            return Err(UnitNameError::Grammar(shown()));
        }
        const KNOWN: &[&str] = &[
            "service",
            "socket",
            "target",
            "device",
            "mount",
            "automount",
            "swap",
            "timer",
            "path",
            "slice",
            "scope",
        ];
        if !KNOWN.contains(&kind) {
            return Err(UnitNameError::Grammar(shown()));
        }
        if at == Some(stem.len() - 1) {
            return Err(UnitNameError::Template(shown()));
        }
        if !matches!(kind, "service" | "scope" | "slice") {
            return Err(UnitNameError::NotFreezable(shown()));
        }
        Ok(UnitName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UnitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for UnitName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        UnitName::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Root's configuration of the pause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CutConfig {
    /// The units paused while a set is taken, in the order they are frozen.
    #[serde(default)]
    pub units: Vec<UnitName>,
    /// How long to wait for every unit to report frozen before giving up (no set).
    #[serde(default = "freeze_timeout_ms")]
    pub freeze_timeout_ms: u32,
    /// How long the units may stay frozen in all before they are thawed regardless.
    #[serde(default = "hold_limit_ms")]
    pub hold_limit_ms: u32,
}

fn freeze_timeout_ms() -> u32 {
    FREEZE_TIMEOUT_MS
}
fn hold_limit_ms() -> u32 {
    HOLD_LIMIT_MS
}

impl Default for CutConfig {
    fn default() -> Self {
        CutConfig {
            units: Vec::new(),
            freeze_timeout_ms: FREEZE_TIMEOUT_MS,
            hold_limit_ms: HOLD_LIMIT_MS,
        }
    }
}

/// Why a configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CutConfigError {
    #[error("the consistent-cut configuration is longer than {MAX_CONFIG_BYTES} bytes")]
    TooLong,
    #[error("the consistent-cut configuration is not valid: {0}")]
    Invalid(String),
}

impl CutConfig {
    /// Parse and check root's configuration.
    pub fn parse(bytes: &[u8]) -> Result<CutConfig, CutConfigError> {
        if bytes.len() > MAX_CONFIG_BYTES {
            return Err(CutConfigError::TooLong);
        }
        let config: CutConfig = serde_json::from_slice(bytes).map_err(|e| {
            CutConfigError::Invalid(crate::human::cap(&e.to_string(), 300).into_owned())
        })?;
        if config.units.len() > MAX_UNITS {
            return Err(CutConfigError::Invalid(format!(
                "{} units; at most {MAX_UNITS}",
                config.units.len()
            )));
        }
        for (i, u) in config.units.iter().enumerate() {
            if config.units[..i].contains(u) {
                return Err(CutConfigError::Invalid(format!("{u} is named twice")));
            }
        }
        for (what, ms) in [
            ("freeze_timeout_ms", config.freeze_timeout_ms),
            ("hold_limit_ms", config.hold_limit_ms),
        ] {
            if ms == 0 || ms > MAX_LIMIT_MS {
                return Err(CutConfigError::Invalid(format!(
                    "{what} is {ms}; it must be 1 to {MAX_LIMIT_MS}"
                )));
            }
        }
        if config.hold_limit_ms < config.freeze_timeout_ms {
            return Err(CutConfigError::Invalid(format!(
                "hold_limit_ms ({}) is below freeze_timeout_ms ({}): the units would be thawed before they could all be frozen",
                config.hold_limit_ms, config.freeze_timeout_ms
            )));
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The POSIX pattern in Rust's syntax: a backslash in a bracket is literal in POSIX.
    fn whole(pattern: &str) -> regex_automata::meta::Regex {
        let rust = pattern.replace(r"\]", r"\\]");
        regex_automata::meta::Regex::new(&format!("^(?:{rust})$")).unwrap()
    }

    #[test]
    fn unit_names_are_checked_as_systemd_does() {
        for good in [
            "postgresql.service",
            "getty@tty1.service",
            "foo@a@b.service",
            "user-1000.slice",
            "session-3.scope",
            "a:b_c\\x2dd.service",
        ] {
            assert_eq!(UnitName::parse(good).unwrap().as_str(), good);
        }
        for bad in [
            "",
            ".service",
            "postgresql",
            "@x.service",
            "post gres.service",
            "a/b.service",
            "a.servic",
            "x.service\n",
        ] {
            assert!(
                matches!(
                    UnitName::parse(bad),
                    Err(UnitNameError::Grammar(_) | UnitNameError::Length)
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            UnitName::parse("getty@.service"),
            Err(UnitNameError::Template(_))
        ));
        assert!(matches!(
            UnitName::parse("sshd.socket"),
            Err(UnitNameError::NotFreezable(_))
        ));
        assert!(matches!(
            UnitName::parse(&format!("{}.service", "a".repeat(248))),
            Err(UnitNameError::Length)
        ));
    }

    #[test]
    fn the_pattern_for_nix_accepts_what_the_parser_accepts() {
        let re = whole(UNIT_NAME_PATTERN);
        for name in [
            "postgresql.service",
            "getty@tty1.service",
            "foo@a@b.service",
            "user-1000.slice",
            "a:b_c\\x2dd.service",
            "getty@.service",
            "sshd.socket",
            "@x.service",
            "post gres.service",
            ".service",
            "a]b.service",
        ] {
            assert_eq!(re.is_match(name), UnitName::parse(name).is_ok(), "{name:?}");
        }
    }

    #[test]
    fn a_configuration_is_checked_whole() {
        let c = CutConfig::parse(br#"{"units":["a.service","b.slice"]}"#).unwrap();
        assert_eq!(c.units.len(), 2);
        assert_eq!(c.freeze_timeout_ms, FREEZE_TIMEOUT_MS);
        assert_eq!(CutConfig::parse(b"{}").unwrap(), CutConfig::default());
        for bad in [
            &br#"{"units":["a.service","a.service"]}"#[..],
            br#"{"units":["a.socket"]}"#,
            br#"{"units":[],"freeze_timeout_ms":0}"#,
            br#"{"units":[],"freeze_timeout_ms":3000,"hold_limit_ms":2000}"#,
            br#"{"unit":[]}"#,
        ] {
            assert!(
                CutConfig::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
