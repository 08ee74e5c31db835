//! Copies off the disk: root's configuration of where snapshots are copied.
//!
//! A target is a name with a place: a directory on another mounted Btrfs, or a directory
//! on a backup host reached over SSH (`ssh://[user@]host[:port]/abs/path`). A target with a
//! `seal` object ([`Seal`]) is sealed: its copies are encrypted, authenticated parts kept by
//! the copier, not the stem, on any filesystem, an SSH host or S3-compatible object storage
//! (`s3://host[:port]/bucket[/prefix]`, sealed targets only). Targets are
//! root's configuration, one JSON file ([`CONFIG_PATH`]) both daemons read; a caller only
//! ever names a target, and that name is checked against [`TargetName`]'s grammar and the
//! configured set. Nothing here does I/O: the stem checks the file's owner and mode, then
//! hands its bytes to [`CopiesConfig::parse`].

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::defaults::{
    KEEP_COPIES_DAILY, KEEP_COPIES_LATEST, KEEP_COPIES_MONTHLY, KEEP_COPIES_WEEKLY, SEAL_FULL_EVERY,
};

/// Where root configures the targets. Missing means no targets, not an error.
pub const CONFIG_PATH: &str = "/etc/tacid/copies.json";
/// A configuration file longer than this is refused unread (it holds a few targets).
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;
/// Longest target name.
pub const MAX_TARGET_NAME_BYTES: usize = 32;
/// Longest path (local place, remote path, identity file) the configuration may give.
pub const MAX_PATH_BYTES: usize = 1024;
/// Longest pinned host key (`TYPE BASE64`); an RSA-16384 key is well below this.
pub const MAX_HOST_KEY_BYTES: usize = 4096;
/// Most targets one configuration may hold.
pub const MAX_TARGETS: usize = 64;
/// Largest keep count; more is a typing error, not a policy.
pub const MAX_KEEP: usize = 10_000;
/// The directory beneath a target (and beneath `@snapshots`, for a fetch) where a transfer
/// is received before it is verified and renamed into place. Anything in it is a transfer
/// that died.
pub const INCOMING_DIR_NAME: &str = ".incoming";
/// The default SSH port.
pub const DEFAULT_SSH_PORT: u16 = 22;
/// The longest a target's health threshold may be: ten years.
pub const MAX_HEALTH_SECS: u64 = 10 * 366 * 86_400;

/// A sealed target's S3 region when the configuration names none (Garage's default).
pub const DEFAULT_SEAL_REGION: &str = "garage";
/// Longest S3 region name.
pub const MAX_REGION_BYTES: usize = 64;
/// Largest `seal.full_every`; more is a typing error (a fetch would replay that many streams,
/// one per copy of the chain).
pub const MAX_FULL_EVERY: u32 = 10_000;

/// [`TargetName`]'s grammar as a whole-string POSIX ERE (Nix's `builtins.match`).
pub const TARGET_NAME_PATTERN: &str = "[a-z0-9][a-z0-9-]{0,31}";

/// One path component: not empty, not `.` or `..`, no `/` or control character.
macro_rules! component {
    () => {
        "([^/.[:cntrl:]][^/[:cntrl:]]*|[.][^/.[:cntrl:]][^/[:cntrl:]]*|[.][.][^/[:cntrl:]]+)"
    };
}
/// An absolute, normalized path other than `/`.
macro_rules! abs_path {
    () => {
        concat!("(/", component!(), ")+")
    };
}
/// A DNS name, an IPv4 address (a DNS name's shape) or `[IPv6]`, then an optional port.
macro_rules! host_port {
    () => {
        concat!(
            "([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?([.][A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
            // `[[]` and `[]]`, not `\\[`: Nix's regex engine refuses the escape.
            "|[[][0-9A-Fa-f:.]+[]])",
            "(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?",
        )
    };
}

/// [`Place::parse`]'s grammar as a whole-string POSIX ERE, for the NixOS module. It is the
/// shape; the parser also caps lengths ([`MAX_PATH_BYTES`], 253 bytes of host) and checks
/// that what is between `[` and `]` is an IPv6 address. A test holds the two to one table.
pub const PLACE_PATTERN: &str = concat!(
    "(",
    abs_path!(),
    "|ssh://([a-z_][a-z0-9_-]{0,31}@)?",
    host_port!(),
    abs_path!(),
    "|s3://",
    host_port!(),
    "/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]",
    "(/",
    component!(),
    ")*",
    ")",
);

/// A valid target name: `[a-z0-9][a-z0-9-]{0,31}`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct TargetName(String);

/// Why a string is not a target name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetNameError {
    #[error("a target name is 1 to {MAX_TARGET_NAME_BYTES} bytes")]
    Length,
    #[error(
        "a target name is lower-case letters, digits and '-', starting with a letter or digit"
    )]
    Shape,
}

impl TargetName {
    /// Parse a target name; the length is checked before anything else is looked at.
    pub fn parse(input: &str) -> Result<Self, TargetNameError> {
        if input.is_empty() || input.len() > MAX_TARGET_NAME_BYTES {
            return Err(TargetNameError::Length);
        }
        let bytes = input.as_bytes();
        let first_ok = bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit();
        let rest_ok = bytes[1..]
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
        if !(first_ok && rest_ok) {
            return Err(TargetNameError::Shape);
        }
        Ok(TargetName(input.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TargetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TargetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TargetName({:?})", self.0)
    }
}

/// Where a target's copies live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// A directory on another mounted Btrfs: absolute, normalized (no `.`, `..` or empty
    /// components), no NUL or control characters.
    Local(String),
    /// A directory on a backup host; the far side's forced command fixes the directory,
    /// so `path` is what the configuration says, for display and checks.
    Ssh {
        /// The remote user; `None` means ssh's default (the stem's user, root).
        user: Option<String>,
        /// A DNS name, an IPv4 address, or an IPv6 address (kept without brackets).
        host: String,
        port: u16,
        path: String,
    },
    /// A bucket on S3-compatible object storage, for sealed targets only.
    S3 {
        /// A DNS name, an IPv4 address, or an IPv6 address (kept without brackets).
        host: String,
        /// `None`: the scheme's default (443, or 80 with `seal.http`).
        port: Option<u16>,
        /// An S3 bucket name: 3 to 63 of `a-z 0-9 . -`, a letter or digit at each end.
        bucket: String,
        /// Where under the bucket the copies' objects go: `""` or `a/b` (no leading or
        /// trailing `/`, no empty, `.` or `..` component).
        prefix: String,
    },
}

impl Place {
    /// Parse a `place` string from the configuration.
    pub fn parse(input: &str) -> Result<Self, ConfigError> {
        if let Some(rest) = input.strip_prefix("ssh://") {
            return parse_ssh(rest);
        }
        if let Some(rest) = input.strip_prefix("s3://") {
            return parse_s3(rest);
        }
        check_abs_path(input, "place")?;
        Ok(Place::Local(input.to_owned()))
    }

    pub fn is_ssh(&self) -> bool {
        matches!(self, Place::Ssh { .. })
    }

    pub fn is_s3(&self) -> bool {
        matches!(self, Place::S3 { .. })
    }

    /// The host as ssh's `known_hosts` names it: `host`, or `[host]:port` off port 22.
    pub fn known_hosts_host(&self) -> Option<String> {
        match self {
            Place::Local(_) | Place::S3 { .. } => None,
            Place::Ssh { host, port, .. } => Some(if *port == DEFAULT_SSH_PORT {
                host.clone()
            } else {
                format!("[{host}]:{port}")
            }),
        }
    }

    /// The destination argument ssh takes: `user@host` or `host` (IPv6 without brackets).
    pub fn ssh_destination(&self) -> Option<String> {
        match self {
            Place::Local(_) | Place::S3 { .. } => None,
            Place::Ssh { user, host, .. } => Some(match user {
                Some(user) => format!("{user}@{host}"),
                None => host.clone(),
            }),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Local(path) => f.write_str(path),
            Place::Ssh {
                user,
                host,
                port,
                path,
            } => {
                f.write_str("ssh://")?;
                if let Some(user) = user {
                    write!(f, "{user}@")?;
                }
                if host.contains(':') {
                    write!(f, "[{host}]")?;
                } else {
                    f.write_str(host)?;
                }
                if *port != DEFAULT_SSH_PORT {
                    write!(f, ":{port}")?;
                }
                f.write_str(path)
            }
            Place::S3 {
                host,
                port,
                bucket,
                prefix,
            } => {
                f.write_str("s3://")?;
                if host.contains(':') {
                    write!(f, "[{host}]")?;
                } else {
                    f.write_str(host)?;
                }
                if let Some(port) = port {
                    write!(f, ":{port}")?;
                }
                write!(f, "/{bucket}")?;
                if !prefix.is_empty() {
                    write!(f, "/{prefix}")?;
                }
                Ok(())
            }
        }
    }
}

/// Retention counts on one target (adr/0013's rules, applied to the copies there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Keep {
    pub latest: usize,
    pub daily: usize,
    pub weekly: usize,
    pub monthly: usize,
}

impl Default for Keep {
    fn default() -> Self {
        Keep {
            latest: KEEP_COPIES_LATEST,
            daily: KEEP_COPIES_DAILY,
            weekly: KEEP_COPIES_WEEKLY,
            monthly: KEEP_COPIES_MONTHLY,
        }
    }
}

/// A pinned SSH host key, `TYPE BASE64`: one key, no comment, no options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct HostKey(String);

impl HostKey {
    pub fn parse(input: &str) -> Result<Self, ConfigError> {
        if input.len() > MAX_HOST_KEY_BYTES {
            return Err(ConfigError::HostKey("too long"));
        }
        let (kind, key) = input
            .split_once(' ')
            .ok_or(ConfigError::HostKey("it is TYPE BASE64, one space apart"))?;
        let kind_ok = !kind.is_empty()
            && kind.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'@')
            });
        if !kind_ok {
            return Err(ConfigError::HostKey(
                "the type is like ssh-ed25519 or ecdsa-sha2-nistp256",
            ));
        }
        // Base64 only: no second space (a comment or a second key), no newline (a second
        // known_hosts line).
        let key_ok = key.len() >= 16
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
        if !key_ok {
            return Err(ConfigError::HostKey(
                "the key is base64 with no comment after it",
            ));
        }
        Ok(HostKey(input.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// How a sealed target's copies are sealed and stored (the `seal` object). Its presence
/// makes the target sealed: the copier keeps its copies, the stem never touches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Seal {
    /// The S3 credentials file the copier reads (absolute path): `Some` exactly when the
    /// place is `s3://`.
    pub credentials: Option<String>,
    /// The S3 region to sign requests for ([`DEFAULT_SEAL_REGION`] unless given; s3 only).
    pub region: String,
    /// Speak plain HTTP to the S3 endpoint instead of HTTPS (a store on the same host or
    /// link only; s3 only).
    pub http: bool,
    /// A full copy every this many copies: a chain holds at most this many copies, its
    /// full copy counted (2: full, incremental, full, …; 0 and 1: every copy is full).
    pub full_every: u32,
    /// A full copy once the incrementals since the last full add up to more than this many
    /// stored bytes; `None`: more than the full's own stored bytes.
    pub full_past_bytes: Option<u64>,
}

/// One configured target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    pub name: TargetName,
    pub place: Place,
    /// The SSH private key file: `Some` exactly when `place` is SSH. Root's for a Btrfs
    /// target; the copier's (owned by it) for a sealed one.
    pub identity: Option<String>,
    /// The pinned host key: `Some` exactly when `place` is SSH.
    pub host_key: Option<HostKey>,
    pub keep: Keep,
    /// `Some` for a sealed target (the copier's), `None` for a Btrfs target (the stem's).
    pub seal: Option<Seal>,
    /// How old its newest copies may be before `tacid data health` warns or fails, when its
    /// schedule is not the daily one the global thresholds are derived from (the module
    /// derives these from the target's timer); `None`: the global thresholds.
    pub health: Option<TargetHealth>,
}

/// A target's own health thresholds, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetHealth {
    pub copy_warn_secs: u64,
    pub copy_fail_secs: u64,
    /// A sealed target's verification older than this warns; absent: the global one.
    #[serde(default)]
    pub verify_warn_secs: Option<u64>,
}

impl Target {
    /// A sealed target's copies are the copier's: the stem refuses every act on it, and
    /// the copier refuses every target that is not sealed.
    pub fn is_sealed(&self) -> bool {
        self.seal.is_some()
    }

    /// The one line of the `known_hosts` file the stem writes for this target.
    pub fn known_hosts_line(&self) -> Option<String> {
        let host = self.place.known_hosts_host()?;
        let key = self.host_key.as_ref()?;
        Some(format!("{host} {}\n", key.as_str()))
    }
}

/// Every configured target, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CopiesConfig {
    pub targets: BTreeMap<TargetName, Target>,
}

/// Why the configuration was refused. Messages name the input and the fix; they never
/// quote more than a capped piece of what was read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{CONFIG_PATH} is longer than {MAX_CONFIG_BYTES} bytes")]
    TooLong,
    #[error("{CONFIG_PATH} is not valid: {0}")]
    Json(String),
    #[error("{CONFIG_PATH} has more than {MAX_TARGETS} targets")]
    TooManyTargets,
    #[error("target name {name}: {error}")]
    TargetName {
        name: String,
        error: TargetNameError,
    },
    #[error("target {target}: {error}")]
    Target {
        target: String,
        error: Box<ConfigError>,
    },
    #[error("{0} must be an absolute, normalized path other than / (no '.', '..', '//', NUL or control characters) of at most {MAX_PATH_BYTES} bytes")]
    Path(&'static str),
    #[error("place: ssh://[user@]host[:port]/absolute/path — {0}")]
    SshPlace(&'static str),
    #[error("host_key: {0}")]
    HostKey(&'static str),
    #[error("an ssh:// place needs identity (the private key file) and host_key (the pinned key)")]
    SshNeedsKeys,
    #[error("identity and host_key are for ssh:// places only; remove them from this target")]
    LocalTakesNoKeys,
    #[error("keep.{0} is at most {MAX_KEEP}")]
    KeepTooLarge(&'static str),
    #[error("place: s3://host[:port]/bucket[/prefix] — {0}")]
    S3Place(&'static str),
    #[error("an s3:// place holds sealed copies only: add \"seal\": {{\"credentials\": \"/path/to/credentials\"}} to the target")]
    S3NeedsSeal,
    #[error("seal.credentials: an s3:// place needs the credentials file the copier reads (an absolute path)")]
    S3NeedsCredentials,
    #[error("seal.{0} is for s3:// places only; remove it from this target")]
    S3Only(&'static str),
    #[error("seal.region is 1 to {MAX_REGION_BYTES} letters, digits, '-' and '_' (like \"garage\" or \"eu-west-1\")")]
    Region,
    #[error("health: copy_warn_secs must be above 0 and below copy_fail_secs, and every threshold at most {MAX_HEALTH_SECS} seconds")]
    Health,
    #[error("seal.full_every is at most {MAX_FULL_EVERY}")]
    FullEveryTooLarge,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    targets: BTreeMap<String, RawTarget>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    place: String,
    #[serde(default)]
    identity: Option<String>,
    #[serde(default)]
    host_key: Option<String>,
    #[serde(default)]
    keep: Keep,
    #[serde(default, deserialize_with = "seal_object")]
    seal: Option<RawSeal>,
    #[serde(default)]
    health: Option<TargetHealth>,
}

/// `seal` is a JSON object (serde would also take an array for a struct, which no one
/// means); `null` is no seal, as if it were absent.
fn seal_object<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<RawSeal>, D::Error> {
    use serde::de::Error;
    match Option::<serde_json::Map<String, serde_json::Value>>::deserialize(d)? {
        None => Ok(None),
        Some(map) => serde_json::from_value(serde_json::Value::Object(map))
            .map(Some)
            .map_err(D::Error::custom),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSeal {
    #[serde(default)]
    credentials: Option<String>,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    http: Option<bool>,
    #[serde(default)]
    full_every: Option<u32>,
    #[serde(default)]
    full_past_bytes: Option<u64>,
}

/// At most this many bytes of anything read are quoted in an error.
const QUOTE_CAP: usize = 40;

/// What was read, quoted in an error: capped, control characters escaped as Rust does.
fn capped(s: &str) -> String {
    crate::human::cap(s, QUOTE_CAP).escape_debug().collect()
}

impl CopiesConfig {
    /// Parse and check the configuration file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, ConfigError> {
        if bytes.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLong);
        }
        let raw: RawConfig = serde_json::from_slice(bytes).map_err(|e| {
            // serde_json's message may quote the input; cap it.
            let mut msg = e.to_string();
            if msg.len() > 200 {
                msg = capped(&msg);
            }
            ConfigError::Json(msg)
        })?;
        if raw.targets.len() > MAX_TARGETS {
            return Err(ConfigError::TooManyTargets);
        }
        let mut targets = BTreeMap::new();
        for (name, raw) in raw.targets {
            let name = TargetName::parse(&name).map_err(|error| ConfigError::TargetName {
                name: capped(&name),
                error,
            })?;
            let target =
                Target::from_raw(name.clone(), raw).map_err(|error| ConfigError::Target {
                    target: name.to_string(),
                    error: Box::new(error),
                })?;
            targets.insert(name, target);
        }
        Ok(CopiesConfig { targets })
    }

    /// The configured target a caller named; `None` when the name is not a target name
    /// or not configured (the caller learns nothing about which).
    pub fn target(&self, name: &str) -> Option<&Target> {
        let name = TargetName::parse(name).ok()?;
        self.targets.get(&name)
    }
}

impl Target {
    fn from_raw(name: TargetName, raw: RawTarget) -> Result<Self, ConfigError> {
        let place = Place::parse(&raw.place)?;
        for (field, value) in [
            ("latest", raw.keep.latest),
            ("daily", raw.keep.daily),
            ("weekly", raw.keep.weekly),
            ("monthly", raw.keep.monthly),
        ] {
            if value > MAX_KEEP {
                return Err(ConfigError::KeepTooLarge(field));
            }
        }
        let (identity, host_key) = match (&place, raw.identity, raw.host_key) {
            (Place::Ssh { .. }, Some(identity), Some(host_key)) => {
                check_abs_path(&identity, "identity")?;
                (Some(identity), Some(HostKey::parse(&host_key)?))
            }
            (Place::Ssh { .. }, _, _) => return Err(ConfigError::SshNeedsKeys),
            (Place::Local(_) | Place::S3 { .. }, None, None) => (None, None),
            (Place::Local(_) | Place::S3 { .. }, _, _) => {
                return Err(ConfigError::LocalTakesNoKeys)
            }
        };
        let seal = match raw.seal {
            Some(raw) => Some(Seal::from_raw(&place, raw)?),
            None if place.is_s3() => return Err(ConfigError::S3NeedsSeal),
            None => None,
        };
        if let Some(h) = raw.health {
            let in_range = |s: u64| s <= MAX_HEALTH_SECS;
            if h.copy_warn_secs == 0
                || h.copy_warn_secs >= h.copy_fail_secs
                || !in_range(h.copy_fail_secs)
                || h.verify_warn_secs.is_some_and(|v| v == 0 || !in_range(v))
            {
                return Err(ConfigError::Health);
            }
        }
        Ok(Target {
            name,
            place,
            identity,
            host_key,
            keep: raw.keep,
            seal,
            health: raw.health,
        })
    }
}

impl Seal {
    fn from_raw(place: &Place, raw: RawSeal) -> Result<Self, ConfigError> {
        if place.is_s3() {
            let credentials = raw
                .credentials
                .as_deref()
                .ok_or(ConfigError::S3NeedsCredentials)?;
            check_abs_path(credentials, "seal.credentials")?;
        } else {
            for (field, given) in [
                ("credentials", raw.credentials.is_some()),
                ("region", raw.region.is_some()),
                ("http", raw.http.is_some()),
            ] {
                if given {
                    return Err(ConfigError::S3Only(field));
                }
            }
        }
        let region = raw.region.unwrap_or_else(|| DEFAULT_SEAL_REGION.to_owned());
        let region_ok = !region.is_empty()
            && region.len() <= MAX_REGION_BYTES
            && region
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
        if !region_ok {
            return Err(ConfigError::Region);
        }
        let full_every = raw.full_every.unwrap_or(SEAL_FULL_EVERY);
        if full_every > MAX_FULL_EVERY {
            return Err(ConfigError::FullEveryTooLarge);
        }
        Ok(Seal {
            credentials: raw.credentials,
            region,
            http: raw.http.unwrap_or(false),
            full_every,
            full_past_bytes: raw.full_past_bytes,
        })
    }
}

fn check_abs_path(path: &str, what: &'static str) -> Result<(), ConfigError> {
    let bad = path.len() > MAX_PATH_BYTES
        || !path.starts_with('/')
        || path.chars().any(|c| c.is_control())
        || path[1..]
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        Err(ConfigError::Path(what))
    } else {
        Ok(())
    }
}

fn parse_ssh(rest: &str) -> Result<Place, ConfigError> {
    let slash = rest
        .find('/')
        .ok_or(ConfigError::SshPlace("the path after the host is missing"))?;
    let (authority, path) = rest.split_at(slash);
    check_abs_path(path, "the ssh:// place's path")?;
    let (user, hostport) = match authority.rsplit_once('@') {
        Some((user, hostport)) => (Some(user), hostport),
        None => (None, authority),
    };
    if let Some(user) = user {
        let b = user.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 32
            && (b[0].is_ascii_lowercase() || b[0] == b'_')
            && b[1..]
                .iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-'));
        if !ok {
            return Err(ConfigError::SshPlace(
                "the user is lower-case letters, digits, '_' and '-'",
            ));
        }
    }
    let (host, port) = parse_host_port(hostport).map_err(ConfigError::SshPlace)?;
    Ok(Place::Ssh {
        user: user.map(str::to_owned),
        host,
        port: port.unwrap_or(DEFAULT_SSH_PORT),
        path: path.to_owned(),
    })
}

/// `host[:port]` or `[IPv6][:port]`: the host (IPv6 without brackets) and the port if given.
fn parse_host_port(hostport: &str) -> Result<(String, Option<u16>), &'static str> {
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or("an IPv6 address is closed by ']'")?;
        addr.parse::<Ipv6Addr>()
            .map_err(|_| "not an IPv6 address between [ and ]")?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or("after ']' comes ':port' or the path")?,
            ),
        };
        (addr.to_owned(), port)
    } else {
        match hostport.split_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (hostport.to_owned(), None),
        }
    };
    if !host.contains(':') && host.parse::<Ipv4Addr>().is_err() && !is_dns_name(&host) {
        return Err("the host is a DNS name, an IPv4 address or [an IPv6 address]");
    }
    let port = match port {
        None => None,
        Some(p) => {
            let ok = !p.is_empty()
                && p.len() <= 5
                && !p.starts_with('0')
                && p.bytes().all(|b| b.is_ascii_digit());
            match p.parse::<u16>() {
                Ok(port) if ok && port != 0 => Some(port),
                _ => return Err("the port is 1 to 65535"),
            }
        }
    };
    Ok((host, port))
}

/// The longest prefix of an s3:// place. An object's name is the prefix, `/` and the
/// copier's key (at most 255 bytes), and S3 allows 1024 bytes; some characters are kept
/// spelled as three (`%` as `%25`).
pub const S3_MAX_PREFIX_BYTES: usize = 256;

/// A prefix an s3:// place may have (without its leading `/`): empty, or `/`-separated
/// segments, none empty, `.` or `..`, no control character, at most
/// [`S3_MAX_PREFIX_BYTES`]. The S3 store accepts exactly these.
pub fn check_s3_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() {
        return Ok(());
    }
    if prefix.len() > S3_MAX_PREFIX_BYTES {
        return Err(ConfigError::S3Place("the prefix is at most 256 bytes"));
    }
    check_abs_path(&format!("/{prefix}"), "the s3:// place's prefix")
}

fn parse_s3(rest: &str) -> Result<Place, ConfigError> {
    if rest.len() > MAX_PATH_BYTES {
        return Err(ConfigError::S3Place("too long"));
    }
    let (hostport, path) = rest
        .split_once('/')
        .ok_or(ConfigError::S3Place("the bucket after the host is missing"))?;
    let (host, port) = parse_host_port(hostport).map_err(ConfigError::S3Place)?;
    let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
    let b = bucket.as_bytes();
    let bucket_ok = (3..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'-'))
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit());
    if !bucket_ok {
        return Err(ConfigError::S3Place(
            "the bucket is 3 to 63 of a-z, 0-9, '.' and '-', starting and ending with a letter or digit",
        ));
    }
    if path.len() > bucket.len() {
        check_abs_path(&format!("/{prefix}"), "the s3:// place's prefix")?;
        check_s3_prefix(prefix)?;
    }
    Ok(Place::S3 {
        host,
        port,
        bucket: bucket.to_owned(),
        prefix: prefix.to_owned(),
    })
}

/// A DNS name: dot-separated labels of letters, digits and '-', none starting or ending
/// with '-' (so never an ssh option), at most 253 bytes.
fn is_dns_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHc0bWFkZXVwa2V5Zm9ydGVzdHMxMjM0NTY3";

    fn one(place: &str, extra: &str) -> Result<CopiesConfig, ConfigError> {
        CopiesConfig::parse(
            format!(r#"{{"targets": {{"t": {{"place": {place:?}{extra}}}}}}}"#).as_bytes(),
        )
    }

    fn ssh_extra() -> String {
        format!(r#", "identity": "/etc/tacid/copy-key", "host_key": "{KEY}""#)
    }

    #[test]
    fn the_spec_example_parses() {
        let text = format!(
            r#"{{ "targets": {{
                "usb": {{ "place": "/mnt/backup/tacid",
                          "keep": {{ "latest": 3, "daily": 7, "weekly": 4, "monthly": 6 }} }},
                "offsite": {{ "place": "ssh://root@backup.example:2222/srv/tacid/laptop",
                              "identity": "/etc/tacid/copy-key",
                              "host_key": "{KEY}",
                              "keep": {{ "latest": 1, "daily": 2, "weekly": 3, "monthly": 4 }} }} }} }}"#
        );
        let config = CopiesConfig::parse(text.as_bytes()).unwrap();
        let usb = config.target("usb").unwrap();
        assert_eq!(usb.place, Place::Local("/mnt/backup/tacid".into()));
        assert_eq!(usb.keep, Keep::default());
        assert_eq!(usb.known_hosts_line(), None);
        let off = config.target("offsite").unwrap();
        assert_eq!(
            off.place,
            Place::Ssh {
                user: Some("root".into()),
                host: "backup.example".into(),
                port: 2222,
                path: "/srv/tacid/laptop".into()
            }
        );
        assert_eq!(
            off.keep,
            Keep {
                latest: 1,
                daily: 2,
                weekly: 3,
                monthly: 4
            }
        );
        assert_eq!(
            off.known_hosts_line().unwrap(),
            format!("[backup.example]:2222 {KEY}\n")
        );
        assert_eq!(
            off.place.to_string(),
            "ssh://root@backup.example:2222/srv/tacid/laptop"
        );
        assert_eq!(off.place.ssh_destination().unwrap(), "root@backup.example");
    }

    #[test]
    fn empty_and_default_keep() {
        assert!(CopiesConfig::parse(br#"{"targets":{}}"#)
            .unwrap()
            .targets
            .is_empty());
        let c = one("/b", "").unwrap();
        assert_eq!(c.targets.values().next().unwrap().keep, Keep::default());
        let c = one("/b", r#", "keep": {"latest": 9}"#).unwrap();
        let keep = c.targets.values().next().unwrap().keep;
        assert_eq!(keep.latest, 9);
        assert_eq!(keep.daily, KEEP_COPIES_DAILY);
    }

    #[test]
    fn target_names() {
        for good in ["a", "usb", "0", "off-site-2", &"a".repeat(32)] {
            assert!(TargetName::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-a",
            "A",
            "usb_1",
            "../x",
            "a/b",
            ".incoming",
            "a b",
            "é",
            "a\0",
            &"a".repeat(33),
            &"a".repeat(100_000),
        ] {
            assert!(TargetName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn unknown_names_are_not_found() {
        let c = one("/b", "").unwrap();
        assert!(c.target("t").is_some());
        for name in ["u", "../t", "T", "t\0", &"t".repeat(100_000)] {
            assert!(c.target(name).is_none());
        }
    }

    #[test]
    fn ssh_places() {
        let cases: &[(&str, Option<&str>, &str, u16, &str)] = &[
            ("ssh://h/p", None, "h", 22, "/p"),
            (
                "ssh://u@h.example:22/p/q",
                Some("u"),
                "h.example",
                22,
                "/p/q",
            ),
            (
                "ssh://_b-1@10.0.0.1:65535/x",
                Some("_b-1"),
                "10.0.0.1",
                65535,
                "/x",
            ),
            ("ssh://[::1]/x", None, "::1", 22, "/x"),
            (
                "ssh://root@[fe80::1]:2200/x",
                Some("root"),
                "fe80::1",
                2200,
                "/x",
            ),
        ];
        for (text, user, host, port, path) in cases {
            let place = Place::parse(text).unwrap();
            assert_eq!(
                place,
                Place::Ssh {
                    user: user.map(Into::into),
                    host: (*host).into(),
                    port: *port,
                    path: (*path).into()
                },
                "{text}"
            );
            assert_eq!(Place::parse(&place.to_string()).unwrap(), place);
        }
        assert_eq!(
            Place::parse("ssh://[::1]:2222/x")
                .unwrap()
                .known_hosts_host()
                .unwrap(),
            "[::1]:2222"
        );
    }

    #[test]
    fn hostile_places_are_refused() {
        for bad in [
            "",
            "relative/path",
            "/a/../b",
            "/a/./b",
            "/a//b",
            "/a/",
            "/a\0b",
            "/a\nb",
            "ssh://",
            "ssh://h",
            "ssh://h/",
            "ssh://-oProxyCommand=x/p",
            "ssh://h:0/p",
            "ssh://h:65536/p",
            "ssh://h:-1/p",
            "ssh://h:+22/p",
            "ssh://h:/p",
            "ssh://U@h/p",
            "ssh://@h/p",
            "ssh://a@b@h/p",
            "ssh://h h/p",
            "ssh://[::1/p",
            "ssh://[nothost]/p",
            "ssh://[::1]x/p",
            "ssh://h/p/../q",
            "ssh://h_1/p",
            "http://h/p",
            &format!("/{}", "a".repeat(MAX_PATH_BYTES)),
        ] {
            assert!(Place::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// The NixOS module checks places and names with the patterns; the stem with the
    /// parsers. They must agree.
    #[test]
    fn the_patterns_agree_with_the_parsers() {
        let whole = |p: &str| regex_automata::meta::Regex::new(&format!("^(?:{p})$")).unwrap();
        // Rust's regex nests classes, so `[[]` means something else there: spell the
        // brackets its way (the ERE keeps Nix's spelling).
        let place = whole(&PLACE_PATTERN.replace("[[]", "\\[").replace("[]]", "\\]"));
        let table = [
            "/mnt/backup/tacid",
            "/b",
            "/.hidden/..x/...",
            "/a b/é",
            "/",
            "",
            "relative",
            "/a/../b",
            "/a/./b",
            "/a//b",
            "/a/",
            "/a\nb",
            "/a\tb",
            "ssh://h/p",
            "ssh://root@backup.example:2222/srv/tacid/laptop",
            "ssh://_b-1@10.0.0.1:65535/x",
            "ssh://[::1]/x",
            "ssh://root@[fe80::1]:2200/x",
            "ssh://h",
            "ssh://h/",
            "ssh://-oProxyCommand=x/p",
            "ssh://h-/p",
            "ssh://h..x/p",
            "ssh://h:0/p",
            "ssh://h:022/p",
            "ssh://h:65536/p",
            "ssh://h:99999/p",
            "ssh://h:/p",
            "ssh://U@h/p",
            "ssh://@h/p",
            "ssh://a@b@h/p",
            "ssh://h h/p",
            "ssh://[::1/p",
            "ssh://[nothost]/p",
            "ssh://[::1]x/p",
            "ssh://h/p/../q",
            "ssh://h_1/p",
            "http://h/p",
            "s3://127.0.0.1:3900/bucket",
            "s3://127.0.0.1:3900/bucket/optional/prefix",
            "s3://s3.example.com/my.bucket-1/a b/.x/..y",
            "s3://[::1]:3900/bkt/p",
            "s3://h/b",
            "s3://h/bu",
            "s3://h/Bucket",
            "s3://h/-bucket",
            "s3://h/bucket-",
            "s3://h/b_ucket",
            &format!("s3://h/{}", "b".repeat(63)),
            &format!("s3://h/{}", "b".repeat(64)),
            "s3://h/bucket/",
            "s3://h/bucket//p",
            "s3://h/bucket/../p",
            "s3://h/bucket/./p",
            "s3://h/bucket/p\n",
            "s3://h",
            "s3://h/",
            "s3:///bucket",
            "s3://h:0/bucket",
            "s3://h:65536/bucket",
            "s3://h:/bucket",
            "s3://u@h/bucket",
            "s3://-h/bucket",
            "s3://[::1/bucket",
            "S3://h/bucket",
        ];
        for text in table {
            assert_eq!(
                place.is_match(text),
                Place::parse(text).is_ok(),
                "{text:?}: PLACE_PATTERN and Place::parse disagree"
            );
        }
        let name = whole(TARGET_NAME_PATTERN);
        for text in [
            "a",
            "usb",
            "0",
            "off-site-2",
            "-a",
            "A",
            "a_b",
            "../x",
            "",
            &"a".repeat(32),
            &"a".repeat(33),
        ] {
            assert_eq!(
                name.is_match(text),
                TargetName::parse(text).is_ok(),
                "{text:?}"
            );
        }
    }

    fn sealed(place: &str, extra: &str, seal: &str) -> Result<Target, ConfigError> {
        one(place, &format!(r#"{extra}, "seal": {seal}"#))
            .map(|c| c.targets.into_values().next().unwrap())
    }

    #[test]
    fn sealed_targets_parse() {
        let text = format!(
            r#"{{"targets": {{
              "usb":  {{"place": "/mnt/usb/tacid", "seal": {{}}}},
              "nas":  {{"place": "ssh://tacid@nas:22/srv/tacid", "identity": "/var/lib/tacid-copier/ssh/id_ed25519",
                       "host_key": "{KEY}", "seal": {{}}}},
              "cloud":{{"place": "s3://127.0.0.1:3900/bucket/optional/prefix",
                       "seal": {{"credentials": "/var/lib/tacid-copier/cloud.credentials", "region": "garage",
                                "http": true, "full_every": 30, "full_past_bytes": null}}}},
              "btrfs":{{"place": "/mnt/b"}}
            }}}}"#
        );
        let config = CopiesConfig::parse(text.as_bytes()).unwrap();
        let usb = config.target("usb").unwrap();
        assert!(usb.is_sealed());
        assert_eq!(
            usb.seal,
            Some(Seal {
                credentials: None,
                region: DEFAULT_SEAL_REGION.into(),
                http: false,
                full_every: SEAL_FULL_EVERY,
                full_past_bytes: None,
            })
        );
        let nas = config.target("nas").unwrap();
        assert!(nas.is_sealed());
        assert!(nas.place.is_ssh());
        assert_eq!(
            nas.identity.as_deref(),
            Some("/var/lib/tacid-copier/ssh/id_ed25519")
        );
        let cloud = config.target("cloud").unwrap();
        assert_eq!(
            cloud.place,
            Place::S3 {
                host: "127.0.0.1".into(),
                port: Some(3900),
                bucket: "bucket".into(),
                prefix: "optional/prefix".into(),
            }
        );
        assert_eq!(
            cloud.place.to_string(),
            "s3://127.0.0.1:3900/bucket/optional/prefix"
        );
        assert_eq!(cloud.place.known_hosts_host(), None);
        assert_eq!(cloud.place.ssh_destination(), None);
        let seal = cloud.seal.as_ref().unwrap();
        assert_eq!(
            seal.credentials.as_deref(),
            Some("/var/lib/tacid-copier/cloud.credentials")
        );
        assert!(seal.http);
        assert_eq!(seal.region, "garage");
        assert!(!config.target("btrfs").unwrap().is_sealed());

        let t = sealed("/d", "", r#"{"full_every": 0, "full_past_bytes": 1000}"#).unwrap();
        let seal = t.seal.unwrap();
        assert_eq!((seal.full_every, seal.full_past_bytes), (0, Some(1000)));
    }

    #[test]
    fn s3_places() {
        for (text, host, port, bucket, prefix) in [
            ("s3://h/bkt", "h", None, "bkt", ""),
            (
                "s3://[::1]:3900/b.k-t/a/b c",
                "::1",
                Some(3900),
                "b.k-t",
                "a/b c",
            ),
            ("s3://10.0.0.1:80/bkt/p", "10.0.0.1", Some(80), "bkt", "p"),
        ] {
            let place = Place::parse(text).unwrap();
            assert_eq!(
                place,
                Place::S3 {
                    host: host.into(),
                    port,
                    bucket: bucket.into(),
                    prefix: prefix.into()
                },
                "{text}"
            );
            assert_eq!(place.to_string(), text);
            assert_eq!(Place::parse(&place.to_string()).unwrap(), place);
        }
        assert!(Place::parse(&format!("s3://h/bkt/{}", "p".repeat(MAX_PATH_BYTES))).is_err());
        // What the S3 store can hold under: the prefix, '/' and a key within S3's 1024 bytes.
        assert!(Place::parse(&format!("s3://h/bkt/{}", "p".repeat(S3_MAX_PREFIX_BYTES))).is_ok());
        let e = Place::parse(&format!(
            "s3://h/bkt/{}",
            "p".repeat(S3_MAX_PREFIX_BYTES + 1)
        ))
        .unwrap_err();
        assert!(e.to_string().contains("at most 256 bytes"), "{e}");
        assert!(check_s3_prefix("a b/.x/..y/100%/#1").is_ok());
        for bad in ["a//b", "a/../b", "./a", "a/\n"] {
            assert!(check_s3_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sealed_targets_are_checked() {
        let creds = r#"{"credentials": "/c"}"#;
        assert!(sealed("s3://h/bkt", "", creds).is_ok());
        let err = |place: &str, extra: &str, seal: &str| {
            let e = sealed(place, extra, seal).unwrap_err();
            let ConfigError::Target { target, error } = e else {
                panic!("{e:?}")
            };
            assert_eq!(target, "t");
            (*error, e_text(place, extra, seal))
        };
        fn e_text(place: &str, extra: &str, seal: &str) -> String {
            sealed(place, extra, seal).unwrap_err().to_string()
        }
        // An s3:// place is sealed or nothing; it needs its credentials file.
        let (e, text) = err("s3://h/bkt", "", "{}");
        assert_eq!(e, ConfigError::S3NeedsCredentials);
        assert!(text.contains("seal.credentials"), "{text}");
        let e = one("s3://h/bkt", "").unwrap_err().to_string();
        assert!(e.contains("\"seal\""), "{e}");
        assert!(e.contains("target t"), "{e}");
        assert_eq!(
            err("s3://h/bkt", "", r#"{"credentials": "c"}"#).0,
            ConfigError::Path("seal.credentials")
        );
        // The S3 fields are refused where there is no S3.
        for (field, seal) in [
            ("credentials", r#"{"credentials": "/c"}"#),
            ("region", r#"{"region": "garage"}"#),
            ("http", r#"{"http": false}"#),
        ] {
            let (e, text) = err("/d", "", seal);
            assert_eq!(e, ConfigError::S3Only(field));
            assert!(text.contains(&format!("seal.{field}")), "{text}");
            assert!(text.contains("remove"), "{text}");
        }
        assert_eq!(
            err("s3://h/bkt", &ssh_extra(), creds).0,
            ConfigError::LocalTakesNoKeys
        );
        assert_eq!(err("ssh://h/p", "", "{}").0, ConfigError::SshNeedsKeys);
        for region in ["", "a b", "é", "a/b", &"r".repeat(MAX_REGION_BYTES + 1)] {
            let seal = format!(r#"{{"credentials": "/c", "region": {region:?}}}"#);
            assert_eq!(err("s3://h/bkt", "", &seal).0, ConfigError::Region);
        }
        let (e, text) = err("/d", "", r#"{"full_every": 10001}"#);
        assert_eq!(e, ConfigError::FullEveryTooLarge);
        assert!(text.contains("seal.full_every"), "{text}");
        for bad in [
            r#"{"key": "/k"}"#,
            r#"{"full_every": -1}"#,
            r#"{"full_every": 4294967296}"#,
            r#"{"full_past_bytes": -1}"#,
            r#"{"http": "yes"}"#,
            r#"[]"#,
            r#"true"#,
        ] {
            assert!(
                matches!(sealed("/d", "", bad), Err(ConfigError::Json(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn keys_belong_to_ssh_only() {
        assert!(one("ssh://h/p", &ssh_extra()).is_ok());
        assert!(matches!(
            one("ssh://h/p", ""),
            Err(ConfigError::Target { .. })
        ));
        assert!(one("ssh://h/p", r#", "identity": "/k""#).is_err());
        assert!(one("/b", &ssh_extra()).is_err());
        assert!(one(
            "ssh://h/p",
            &format!(r#", "identity": "k", "host_key": "{KEY}""#)
        )
        .is_err());
    }

    #[test]
    fn hostile_host_keys_are_refused() {
        assert!(HostKey::parse(KEY).is_ok());
        for bad in [
            "",
            "ssh-ed25519",
            "ssh-ed25519 ",
            "AAAAC3NzaC1lZDI1NTE5AAAAIHc0bWFkZXVw",
            &format!("{KEY} comment"),
            &format!("{KEY}\n[evil]:22 {KEY}"),
            "SSH-ED25519 AAAAC3NzaC1lZDI1NTE5AAAA",
            "ssh-ed25519 AAAA$(reboot)AAAAAAAAAAAAAAA",
            &format!("ssh-ed25519 {}", "A".repeat(MAX_HOST_KEY_BYTES)),
        ] {
            assert!(HostKey::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hostile_files_are_refused() {
        for bad in [
            &b""[..],
            b"null",
            b"[]",
            b"{}",
            b"{\"targets\":{},\"extra\":1}",
            b"{\"targets\":{\"t\":{\"place\":\"/b\",\"shell\":\"x\"}}}",
            b"{\"targets\":{\"t\":{\"place\":\"/b\",\"keep\":{\"hourly\":1}}}}",
            b"{\"targets\":{\"t\":{\"place\":\"/b\",\"keep\":{\"latest\":-1}}}}",
            b"{\"targets\":{\"t\":{\"place\":\"/b\",\"keep\":{\"latest\":10001}}}}",
            b"{\"targets\":{\"../x\":{\"place\":\"/b\"}}}",
            b"{\"targets\":{\"t\":{\"place\":7}}}",
            b"\xff\xfe{",
        ] {
            assert!(
                CopiesConfig::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let huge = vec![b' '; MAX_CONFIG_BYTES + 1];
        assert_eq!(CopiesConfig::parse(&huge), Err(ConfigError::TooLong));
        let many: Vec<String> = (0..=MAX_TARGETS)
            .map(|i| format!("\"t{i}\":{{\"place\":\"/b\"}}"))
            .collect();
        let many = format!("{{\"targets\":{{{}}}}}", many.join(","));
        assert_eq!(
            CopiesConfig::parse(many.as_bytes()),
            Err(ConfigError::TooManyTargets)
        );
    }

    #[test]
    fn errors_quote_little() {
        let long = "Z".repeat(10_000);
        let text = format!("{{\"targets\":{{\"{long}\":{{\"place\":\"/b\"}}}}}}");
        let err = CopiesConfig::parse(text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.len() < 300, "{err}");
    }

    #[test]
    fn a_targets_own_health_thresholds_are_read_and_checked() {
        let with = |health: &str| {
            CopiesConfig::parse(
                format!(r#"{{"targets": {{"w": {{"place": "/mnt/w", "health": {health}}}}}}}"#)
                    .as_bytes(),
            )
        };
        let c = with(r#"{"copy_warn_secs": 1213200, "copy_fail_secs": 1814400}"#).unwrap();
        let t = c.targets.values().next().unwrap();
        assert_eq!(
            t.health,
            Some(TargetHealth {
                copy_warn_secs: 1_213_200,
                copy_fail_secs: 1_814_400,
                verify_warn_secs: None
            })
        );
        for bad in [
            r#"{"copy_warn_secs": 0, "copy_fail_secs": 10}"#,
            r#"{"copy_warn_secs": 10, "copy_fail_secs": 10}"#,
            r#"{"copy_warn_secs": 10, "copy_fail_secs": 20, "verify_warn_secs": 0}"#,
            r#"{"copy_warn_secs": 10, "copy_fail_secs": 999999999999}"#,
            r#"{"copy_warn_secs": 10, "copy_fail_secs": 20, "what": 1}"#,
        ] {
            assert!(with(bad).is_err(), "{bad}");
        }
    }
}
