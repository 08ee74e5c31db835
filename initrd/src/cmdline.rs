//! The kernel command line, as the initrd reads it from `/proc/cmdline`.

/// The words of a kernel command line (double quotes group, as the kernel does).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cmdline {
    words: Vec<String>,
}

impl Cmdline {
    pub fn parse(text: &str) -> Cmdline {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut quoted = false;
        for c in text.chars() {
            match c {
                '"' => quoted = !quoted,
                c if c.is_whitespace() && !quoted => {
                    if !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                }
                c => word.push(c),
            }
        }
        if !word.is_empty() {
            words.push(word);
        }
        Cmdline { words }
    }

    /// Read `/proc/cmdline`; an empty command line when it cannot be read (tests, containers).
    pub fn from_proc() -> Cmdline {
        Cmdline::parse(&std::fs::read_to_string("/proc/cmdline").unwrap_or_default())
    }

    /// The value of the last `key=value` (the kernel's rule: later words win).
    pub fn value(&self, key: &str) -> Option<&str> {
        self.words
            .iter()
            .rev()
            .find_map(|w| w.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
    }

    /// True when the bare word `flag` is present.
    pub fn has_flag(&self, flag: &str) -> bool {
        self.words.iter().any(|w| w == flag)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is how a test reports
mod tests {
    use super::*;

    #[test]
    fn values_and_flags() {
        let c = Cmdline::parse(
            "BOOT_IMAGE=/vmlinuz root=LABEL=tacid tacid.device=/dev/vda2 quiet \"x=a b\" tacid.device=/dev/vdb noresume\n",
        );
        assert_eq!(c.value("tacid.device"), Some("/dev/vdb"));
        assert_eq!(c.value("root"), Some("LABEL=tacid"));
        assert_eq!(c.value("x"), Some("a b"));
        assert_eq!(c.value("tacid"), None);
        assert!(c.has_flag("noresume"));
        assert!(!c.has_flag("quiet2"));
        assert_eq!(Cmdline::parse("").value("root"), None);
    }
}
