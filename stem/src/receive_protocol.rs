//! The receiver's protocol (adr/0025), both sides' words: one connection is one receive,
//! a header line naming where ([`Where`]), then the plain send stream until the sender
//! half-closes; the answer is one line ([`Answer`]). A place is named by what it is, never
//! by a path.

use layout::copies::TargetName;

/// The first word of every header line: the protocol and its version.
pub const PROTOCOL: &str = "tacid-stem-receive-v1";
/// The longest header line read; more is refused.
pub const MAX_HEADER_BYTES: usize = 128;
/// The most bytes of a reason in the answer.
const REASON_CAP: usize = 400;

/// Where a stream is received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Where {
    /// One stream into the store's `.incoming` (a fetch): stops at the stream's end.
    Store,
    /// A chain of streams into `.incoming` (a sealed fetch: the full copy, then each
    /// incremental on the one before), read to the end of the connection.
    StoreChain,
    /// One stream into a local Btrfs copy target, by its name in root's configuration.
    Target(TargetName),
}

impl Where {
    /// The header line, with its newline.
    pub fn line(&self) -> String {
        match self {
            Where::Store => format!("{PROTOCOL} store\n"),
            Where::StoreChain => format!("{PROTOCOL} store-chain\n"),
            Where::Target(t) => format!("{PROTOCOL} target {}\n", t.as_str()),
        }
    }

    /// Parse a header line (without its newline). Anything but the exact words is refused.
    pub fn parse(line: &str) -> Result<Where, String> {
        let mut words = line.split(' ');
        if words.next() != Some(PROTOCOL) {
            return Err(format!("the header does not start with {PROTOCOL}"));
        }
        let w = match (words.next(), words.next()) {
            (Some("store"), None) => Where::Store,
            (Some("store-chain"), None) => Where::StoreChain,
            (Some("target"), Some(name)) => Where::Target(
                TargetName::parse(name).map_err(|e| format!("the target's name: {e}"))?,
            ),
            _ => return Err("the header names no place this receiver knows".into()),
        };
        if words.next().is_some() {
            return Err("the header has words after the place".into());
        }
        Ok(w)
    }
}

/// How a receive ended, as the one answer line says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Ok,
    /// Refused or failed, and why (`btrfs receive`'s stderr's end, on one line).
    Failed(String),
}

impl Answer {
    pub fn line(&self) -> String {
        match self {
            Answer::Ok => "ok\n".into(),
            Answer::Failed(why) => format!("failed {}\n", one_line(why)),
        }
    }

    /// Parse what the receiver answered (read capped by the caller); `None` for no answer.
    pub fn parse(text: &str) -> Option<Answer> {
        let line = text.lines().next()?;
        if line == "ok" {
            return Some(Answer::Ok);
        }
        line.strip_prefix("failed ")
            .map(|why| Answer::Failed(one_line(why)))
    }
}

fn one_line(text: &str) -> String {
    layout::human::cap_end(text.trim(), REASON_CAP)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_name_places_by_what_they_are_never_by_path() {
        for w in [
            Where::Store,
            Where::StoreChain,
            Where::Target(TargetName::parse("usb").unwrap()),
        ] {
            let line = w.line();
            assert_eq!(Where::parse(line.trim_end_matches('\n')), Ok(w));
        }
        for bad in [
            "",
            "store",
            "tacid-stem-receive-v1",
            "tacid-stem-receive-v1 store extra",
            "tacid-stem-receive-v1 target",
            "tacid-stem-receive-v1 target /mnt/usb",
            "tacid-stem-receive-v1 target ../etc",
            "tacid-stem-receive-v1 path /etc",
            "tacid-stem-receive-v2 store",
        ] {
            assert!(Where::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn answers_are_one_line() {
        assert_eq!(Answer::parse(&Answer::Ok.line()), Some(Answer::Ok));
        let a = Answer::Failed("ERROR: one\nERROR: two\u{1b}[0m".into());
        let line = a.line();
        assert_eq!(line.matches('\n').count(), 1);
        assert!(matches!(Answer::parse(&line), Some(Answer::Failed(w)) if w.contains("two")));
        assert_eq!(Answer::parse(""), None);
        assert_eq!(Answer::parse("okay\n"), None);
    }
}
