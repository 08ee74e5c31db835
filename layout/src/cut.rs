//! A consistent cut: root's list of the units whose processes are paused (their cgroups
//! frozen) while a set's members are taken, so that the set is one moment of what they wrote.
//!
//! Root's configuration, one JSON file ([`CONFIG_PATH`]) the stem reads at start; nothing a
//! caller sends names a unit. Unit names are checked as systemd checks them
//! (`unit_name_is_valid`), and only units that own a cgroup of their own processes
//! (`.service`, `.scope`, `.slice`) can be paused. Nothing here does I/O.
//!
//! A paused unit may have hooks ([`Hook`]): a command run as the unit's user before the
//! freeze (a database's checkpoint) and one after the thaw, each with a time limit. Root
//! names the command as an argument vector (no shell), its program by absolute path, and
//! the user by name; never root (adr/0026).

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
/// How long a hook may run before its process group is killed, by default.
pub const HOOK_LIMIT_MS: u32 = crate::defaults::CUT_HOOK_LIMIT_MS;
/// The longest a hook's limit may be: a set waits for its hooks before the freeze.
pub const MAX_HOOK_LIMIT_MS: u32 = 600_000;
/// Most arguments (the program included) of a hook's command.
pub const MAX_HOOK_ARGS: usize = 64;
/// Longest one argument of a hook's command may be.
pub const MAX_HOOK_ARG_BYTES: usize = 4096;
/// Most bytes of a hook's output (stdout and stderr together) kept and journalled; the rest
/// is read and counted, not kept.
pub const MAX_HOOK_OUTPUT_BYTES: usize = 16 * 1024;
/// A hook's user name as a whole-string POSIX ERE (the parser also caps it at
/// [`MAX_HOOK_USER_BYTES`]): what `useradd` accepts by default, and not `root`.
pub const HOOK_USER_PATTERN: &str = r"[a-z_][a-z0-9_-]*[$]?";
/// Longest user name a hook may name.
pub const MAX_HOOK_USER_BYTES: usize = 32;

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

/// A user name a hook runs as: `useradd`'s default grammar, never `root`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct HookUser(String);

impl HookUser {
    pub fn parse(name: &str) -> Result<HookUser, String> {
        let b = name.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= MAX_HOOK_USER_BYTES
            && (b[0].is_ascii_lowercase() || b[0] == b'_')
            && b.iter().enumerate().all(|(i, &c)| {
                c.is_ascii_lowercase()
                    || c.is_ascii_digit()
                    || c == b'_'
                    || c == b'-'
                    || (c == b'$' && i == b.len() - 1)
            });
        if !ok {
            return Err(format!(
                "{:?} is not a user name (lower-case letters, digits, `_-`, at most {MAX_HOOK_USER_BYTES} bytes)",
                crate::human::cap(name, 40)
            ));
        }
        if name == "root" {
            return Err("a hook never runs as root: name the unit's own user".into());
        }
        Ok(HookUser(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HookUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for HookUser {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        HookUser::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A hook's command: an argument vector, run without a shell; the program by absolute path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct HookCommand(Vec<String>);

impl HookCommand {
    pub fn parse(argv: Vec<String>) -> Result<HookCommand, String> {
        let Some(program) = argv.first() else {
            return Err("a hook's command is empty: give the program and its arguments".into());
        };
        if argv.len() > MAX_HOOK_ARGS {
            return Err(format!(
                "a hook's command has {} arguments; at most {MAX_HOOK_ARGS}",
                argv.len()
            ));
        }
        if let Some(a) = argv
            .iter()
            .find(|a| a.len() > MAX_HOOK_ARG_BYTES || a.contains('\0'))
        {
            return Err(format!(
                "a hook's argument {:?} is longer than {MAX_HOOK_ARG_BYTES} bytes or holds a NUL",
                crate::human::cap(a, 40)
            ));
        }
        if !program.starts_with('/') || program.split('/').any(|p| p == "..") {
            return Err(format!(
                "a hook's program {:?} is not an absolute path: name it by its full path (no $PATH is searched)",
                crate::human::cap(program, 80)
            ));
        }
        Ok(HookCommand(argv))
    }

    /// The program and its arguments.
    pub fn argv(&self) -> &[String] {
        &self.0
    }
}

impl<'de> Deserialize<'de> for HookCommand {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<String>::deserialize(d)?;
        HookCommand::parse(v).map_err(serde::de::Error::custom)
    }
}

/// A paused unit's hooks: commands run as its user before the freeze and after the thaw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hook {
    /// The unit the hooks are for; one of [`CutConfig::units`].
    pub unit: UnitName,
    /// Who the commands run as (with that user's primary and supplementary groups).
    pub user: HookUser,
    /// Run before any unit is frozen; a failure or its limit passing means no set.
    #[serde(default)]
    pub before: Option<HookCommand>,
    /// How long `before` may run.
    #[serde(default = "hook_limit_ms")]
    pub before_limit_ms: u32,
    /// Run after every unit is thawed; a failure is reported and the set stands.
    #[serde(default)]
    pub after: Option<HookCommand>,
    /// How long `after` may run.
    #[serde(default = "hook_limit_ms")]
    pub after_limit_ms: u32,
}

fn hook_limit_ms() -> u32 {
    HOOK_LIMIT_MS
}

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookWhen {
    /// Before the freeze.
    Before,
    /// After the thaw.
    After,
}

impl HookWhen {
    pub fn as_str(self) -> &'static str {
        match self {
            HookWhen::Before => "before",
            HookWhen::After => "after",
        }
    }
}

impl fmt::Display for HookWhen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Hook {
    /// The command and its limit for `when`, if there is one.
    pub fn command(&self, when: HookWhen) -> Option<(&HookCommand, u32)> {
        match when {
            HookWhen::Before => self.before.as_ref().map(|c| (c, self.before_limit_ms)),
            HookWhen::After => self.after.as_ref().map(|c| (c, self.after_limit_ms)),
        }
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
    /// Commands run for some of `units` before the freeze and after the thaw.
    #[serde(default)]
    pub hooks: Vec<Hook>,
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
            hooks: Vec::new(),
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
        for (i, h) in config.hooks.iter().enumerate() {
            if !config.units.contains(&h.unit) {
                return Err(CutConfigError::Invalid(format!(
                    "a hook is for {}, which is not among the units paused; add it to units",
                    h.unit
                )));
            }
            if config.hooks[..i].iter().any(|o| o.unit == h.unit) {
                return Err(CutConfigError::Invalid(format!(
                    "{} has hooks twice; give one entry with before and after",
                    h.unit
                )));
            }
            if h.before.is_none() && h.after.is_none() {
                return Err(CutConfigError::Invalid(format!(
                    "the hook of {} has neither before nor after",
                    h.unit
                )));
            }
            for (what, ms) in [
                ("before_limit_ms", h.before_limit_ms),
                ("after_limit_ms", h.after_limit_ms),
            ] {
                if ms == 0 || ms > MAX_HOOK_LIMIT_MS {
                    return Err(CutConfigError::Invalid(format!(
                        "{what} of {}'s hook is {ms}; it must be 1 to {MAX_HOOK_LIMIT_MS}",
                        h.unit
                    )));
                }
            }
        }
        Ok(config)
    }

    /// The hooks of `unit`, if it has any.
    pub fn hook_of(&self, unit: &UnitName) -> Option<&Hook> {
        self.hooks.iter().find(|h| &h.unit == unit)
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
    fn hooks_are_parsed_with_their_limits() {
        let c = CutConfig::parse(
            br#"{"units":["pg.service"],"hooks":[{"unit":"pg.service","user":"postgres","before":["/run/current-system/sw/bin/psql","-c","CHECKPOINT"],"before_limit_ms":5000}]}"#,
        )
        .unwrap();
        let h = c.hook_of(&UnitName::parse("pg.service").unwrap()).unwrap();
        assert_eq!(h.user.as_str(), "postgres");
        let (cmd, ms) = h.command(HookWhen::Before).unwrap();
        assert_eq!(cmd.argv()[2], "CHECKPOINT");
        assert_eq!(ms, 5000);
        assert!(h.command(HookWhen::After).is_none());
        assert_eq!(h.after_limit_ms, HOOK_LIMIT_MS);
    }

    #[test]
    fn the_user_pattern_for_nix_accepts_what_the_parser_accepts() {
        let re = whole(HOOK_USER_PATTERN);
        for name in [
            "postgres", "_pg", "a-b_c1", "machine$", "Post", "1pg", "a b", "a$b",
        ] {
            assert_eq!(re.is_match(name), HookUser::parse(name).is_ok(), "{name:?}");
        }
        // The pattern alone admits root; the module refuses it by name, as the parser does.
        assert!(HookUser::parse("root").is_err());
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
            br#"{"units":["a.service"],"hooks":[{"unit":"b.service","user":"pg","before":["/bin/true"]}]}"#,
            br#"{"units":["a.service"],"hooks":[{"unit":"a.service","user":"root","before":["/bin/true"]}]}"#,
            br#"{"units":["a.service"],"hooks":[{"unit":"a.service","user":"pg","before":["true"]}]}"#,
            br#"{"units":["a.service"],"hooks":[{"unit":"a.service","user":"pg","before":[]}]}"#,
            br#"{"units":["a.service"],"hooks":[{"unit":"a.service","user":"pg"}]}"#,
            br#"{"units":["a.service"],"hooks":[{"unit":"a.service","user":"pg","after":["/bin/true"],"after_limit_ms":0}]}"#,
            br#"{"units":["a.service"],"hooks":[{"unit":"a.service","user":"P g","after":["/bin/true"]}]}"#,
            br#"{"units":["a.service"],"hooks":[{"unit":"a.service","user":"pg","after":["/bin/x\u0000y"]}]}"#,
            br#"{"units":["a.service"],"hooks":[{"unit":"a.service","user":"pg","after":["/bin/true"]},{"unit":"a.service","user":"pg","before":["/bin/true"]}]}"#,
        ] {
            assert!(
                CutConfig::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
