//! The reason a pre-switch set carries: which NixOS generation was left and which was
//! switched to (adr/0009).
//!
//! The NixOS module's pre-switch check writes it as the set's reason, in one of these
//! forms (each part present only when the check could tell it):
//!
//! ```text
//! before switching
//! before switching from generation 42
//! before switching from generation 42 to 43
//! before switching from generation 42 to /nix/store/…-nixos-system-…
//! before switching to generation 43
//! before switching to /nix/store/…-nixos-system-…
//! ```
//!
//! It travels as the reason, not as new arguments, because the check runs the *running*
//! system's CLI: an older one knows no new flag, and a switch must not fail for it. The
//! keeper refuses a pre-switch reason that starts like these and is none of them, so what
//! it shows as a generation is a number and what it shows as a toplevel is a bounded path
//! of store-path characters.

use std::fmt;

/// Where NixOS keeps its system profile and the generation links beside it.
pub const SYSTEM_PROFILES_DIR: &str = "/nix/var/nix/profiles";
/// The system profile's name in [`SYSTEM_PROFILES_DIR`]; generation `N` is
/// `system-N-link` beside it.
pub const SYSTEM_PROFILE: &str = "system";
/// The longest toplevel path a reason may name (a store path is at most
/// `/nix/store/` + 32 + 1 + 211 bytes).
pub const MAX_TOPLEVEL_BYTES: usize = 256;
/// The most digits a generation number may have (it fits an `i64`).
pub const MAX_GENERATION_DIGITS: usize = 18;

const PREFIX: &str = "before switching";

/// The path of generation `n`'s link (`/nix/var/nix/profiles/system-42-link`).
pub fn generation_link(n: u64) -> String {
    format!("{SYSTEM_PROFILES_DIR}/{SYSTEM_PROFILE}-{n}-link")
}

/// What a switch went to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwitchTo {
    /// A generation of the system profile.
    Generation(u64),
    /// A toplevel no generation link names (a `./result`, a specialisation).
    Toplevel(String),
}

/// The switch a pre-switch set was taken before.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Switch {
    /// The generation that was running, when known.
    pub from: Option<u64>,
    /// What was switched to, when known.
    pub to: Option<SwitchTo>,
}

/// A reason that starts like a switch's and is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a pre-switch reason that begins \"{PREFIX}\" must be \"{PREFIX}[ from generation N][ to \
     generation M| to /nix/store/…]\" (generations are numbers of at most \
     {MAX_GENERATION_DIGITS} digits, a toplevel an absolute path of at most \
     {MAX_TOPLEVEL_BYTES} bytes of store-path characters); {0}"
)]
pub struct SwitchReasonError(&'static str);

impl Switch {
    /// The switch a reason names: `Ok(None)` when it does not begin like one (a reason of
    /// the person's own), an error when it begins like one and is malformed.
    pub fn parse(reason: &str) -> Result<Option<Switch>, SwitchReasonError> {
        let Some(rest) = reason.strip_prefix(PREFIX) else {
            return Ok(None);
        };
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return Ok(None);
        }
        let mut switch = Switch::default();
        let mut rest = rest;
        if let Some(r) = rest.strip_prefix(" from generation ") {
            let (n, r) = generation(r)?;
            switch.from = Some(n);
            rest = r;
        }
        if let Some(r) = rest.strip_prefix(" to ") {
            let r = match r.strip_prefix("generation ") {
                Some(r) => r,
                // "to 43" only after "from generation 42".
                None if switch.from.is_some() && r.starts_with(|c: char| c.is_ascii_digit()) => r,
                None => {
                    switch.to = Some(SwitchTo::Toplevel(toplevel(r)?.to_owned()));
                    return Ok(Some(switch));
                }
            };
            let (n, r) = generation(r)?;
            switch.to = Some(SwitchTo::Generation(n));
            rest = r;
        }
        if !rest.is_empty() {
            return Err(SwitchReasonError("something follows the forms"));
        }
        Ok(Some(switch))
    }
}

/// A generation number at the start of `s`, and what follows it.
fn generation(s: &str) -> Result<(u64, &str), SwitchReasonError> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(SwitchReasonError("a generation is not a number"));
    }
    if digits > MAX_GENERATION_DIGITS {
        return Err(SwitchReasonError("a generation number is too long"));
    }
    if s.starts_with('0') {
        return Err(SwitchReasonError("a generation number starts with 0"));
    }
    let n = s[..digits]
        .parse()
        .map_err(|_| SwitchReasonError("a generation is not a number"))?;
    Ok((n, &s[digits..]))
}

/// `s` when it is a toplevel path a reason may name.
fn toplevel(s: &str) -> Result<&str, SwitchReasonError> {
    if s.len() > MAX_TOPLEVEL_BYTES {
        return Err(SwitchReasonError("the toplevel path is too long"));
    }
    let Some(inner) = s.strip_prefix('/') else {
        return Err(SwitchReasonError("the toplevel is not an absolute path"));
    };
    for part in inner.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(SwitchReasonError(
                "the toplevel path has an empty, . or .. component",
            ));
        }
        if !part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-._?=".contains(&b))
        {
            return Err(SwitchReasonError(
                "the toplevel path has a character no store path has",
            ));
        }
    }
    Ok(s)
}

impl fmt::Display for Switch {
    /// The reason's canonical form (the module's check writes exactly this).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PREFIX)?;
        if let Some(n) = self.from {
            write!(f, " from generation {n}")?;
        }
        match (&self.to, self.from) {
            (Some(SwitchTo::Generation(n)), Some(_)) => write!(f, " to {n}"),
            (Some(SwitchTo::Generation(n)), None) => write!(f, " to generation {n}"),
            (Some(SwitchTo::Toplevel(t)), _) => write!(f, " to {t}"),
            (None, _) => Ok(()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sw(from: Option<u64>, to: Option<SwitchTo>) -> Switch {
        Switch { from, to }
    }

    #[test]
    fn every_form_the_check_writes_parses_and_renders_back() {
        let top = "/nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-m-25.05.2_x+y?z=1";
        for (text, want) in [
            ("before switching", sw(None, None)),
            ("before switching from generation 42", sw(Some(42), None)),
            (
                "before switching from generation 42 to 43",
                sw(Some(42), Some(SwitchTo::Generation(43))),
            ),
            (
                "before switching to generation 43",
                sw(None, Some(SwitchTo::Generation(43))),
            ),
            (
                &format!("before switching from generation 42 to {top}"),
                sw(Some(42), Some(SwitchTo::Toplevel(top.into()))),
            ),
            (
                &format!("before switching to {top}"),
                sw(None, Some(SwitchTo::Toplevel(top.into()))),
            ),
        ] {
            assert_eq!(Switch::parse(text), Ok(Some(want.clone())), "{text}");
            assert_eq!(want.to_string(), text);
        }
        // Accepted though not written: "to generation" after "from".
        assert_eq!(
            Switch::parse("before switching from generation 1 to generation 2"),
            Ok(Some(sw(Some(1), Some(SwitchTo::Generation(2)))))
        );
        assert_eq!(
            Switch::parse(&format!(
                "before switching from generation {} to 1",
                "9".repeat(MAX_GENERATION_DIGITS)
            ))
            .unwrap()
            .unwrap()
            .from,
            Some(999_999_999_999_999_999)
        );
    }

    #[test]
    fn a_reason_of_ones_own_is_no_switch() {
        for text in [
            "",
            "before the upgrade",
            "before switchingx",
            "Before switching",
        ] {
            assert_eq!(Switch::parse(text), Ok(None), "{text}");
        }
    }

    #[test]
    fn hostile_reasons_are_refused() {
        let long = format!("/nix/store/{}", "a".repeat(MAX_TOPLEVEL_BYTES));
        let too_many = "1".repeat(MAX_GENERATION_DIGITS + 1);
        for text in [
            "before switching configuration",
            "before switching from generation",
            "before switching from generation ",
            "before switching from generation x",
            "before switching from generation 4x2 to 43",
            "before switching from generation -1",
            "before switching from generation 042",
            "before switching from generation 0",
            "before switching from generation 42 to 43 and more",
            "before switching from generation 42  to 43",
            "before switching from generation 42 to 43\n",
            "before switching from generation 42 to 4\u{663}",
            "before switching from generation ٤٢",
            &format!("before switching from generation {too_many}"),
            "before switching to 43",
            "before switching to generation",
            "before switching to generation 43 from generation 42",
            "before switching to nix/store/x",
            "before switching to /nix/store/x y",
            "before switching to /nix/store/x;rm -rf /",
            "before switching to /nix/store/$(reboot)",
            "before switching to /nix/store/x\u{1b}[2J",
            "before switching to /nix/store/\u{e9}",
            "before switching to /nix//store",
            "before switching to /nix/store/../../etc",
            "before switching to /nix/store/./x",
            "before switching to /nix/store/",
            "before switching to /",
            "before switching to `touch x`",
            &format!("before switching to {long}"),
            "before switching from generation 42 to /nix/store/x to 43",
        ] {
            assert!(Switch::parse(text).is_err(), "{text:?} must be refused");
        }
        let why = Switch::parse("before switching from generation 4x2")
            .unwrap_err()
            .to_string();
        assert!(why.contains("from generation N"), "{why}");
    }

    #[test]
    fn the_longest_toplevel_is_accepted_and_one_more_byte_is_not() {
        let at_most = format!("/nix/store/{}", "a".repeat(MAX_TOPLEVEL_BYTES - 11));
        assert_eq!(at_most.len(), MAX_TOPLEVEL_BYTES);
        assert!(Switch::parse(&format!("before switching to {at_most}")).is_ok());
        assert!(Switch::parse(&format!("before switching to {at_most}a")).is_err());
    }

    #[test]
    fn a_generation_link_is_beside_the_profile() {
        assert_eq!(generation_link(42), "/nix/var/nix/profiles/system-42-link");
    }
}
