//! How a string somebody chose is shown: one visible form for any bytes (adr/0017).
//!
//! File names, user names and reasons are bytes a user chose. Printed raw, one can carry
//! terminal controls (`ESC [ 31 m`), start a line of its own (`LF`), rewrite one (`CR`,
//! cursor movement), reorder the text around it (bidi overrides), hide (zero-width
//! characters), or be bytes that are not UTF-8 at all. So every such string is shown in
//! one form, in the CLI's text and its JSON alike:
//!
//! - a backslash is `\\`;
//! - anything not shown as itself is `\xHH` for each of its bytes (two upper-case hex
//!   digits): bytes that are not UTF-8, control characters (C0, DEL, C1), format
//!   characters (bidi controls, zero-width characters), line and paragraph separators,
//!   spaces other than U+0020 and the letters that show as blank (Hangul fillers, the blank
//!   Braille pattern), private-use, surrogate and unassigned code points, and a combining
//!   mark with nothing shown before it to combine with;
//! - every other character is itself (`é`, `日本`, `🙂`).
//!
//! The output never holds a control character, so a terminal shows what the bytes are,
//! one name per line. It is reversible: [`unescape`] gives the bytes back, and so does a
//! shell's `printf '%b\n' 'TEXT'`.

use std::fmt::{self, Write as _};

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// `bytes` in the visible form (see the module doc).
pub fn escape(bytes: &[u8]) -> String {
    Escaped(bytes).to_string()
}

/// Displays its bytes in the visible form, without an allocation of its own:
/// `format!("{}", Escaped(name))`.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a [u8]);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Whether the last thing written was a character shown as itself, which a
        // combining mark may sit on.
        let mut after_shown = false;
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                if c == '\\' {
                    f.write_str("\\\\")?;
                    after_shown = true;
                } else if shown_as_itself(c, after_shown) {
                    f.write_char(c)?;
                    after_shown = true;
                } else {
                    hex(f, c.encode_utf8(&mut [0; 4]).as_bytes())?;
                    after_shown = false;
                }
            }
            if !chunk.invalid().is_empty() {
                hex(f, chunk.invalid())?;
                after_shown = false;
            }
        }
        Ok(())
    }
}

fn hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    bytes.iter().try_for_each(|b| write!(f, "\\x{b:02X}"))
}

/// Whether `c` may be printed as itself; `after_shown`: right after a character that was.
fn shown_as_itself(c: char, after_shown: bool) -> bool {
    if c.is_ascii() {
        return matches!(c, ' '..='~');
    }
    // Letters and a symbol that show as blank space or nothing at all (Hangul fillers,
    // the blank Braille pattern): alike to a space, escaped like the other spaces.
    if matches!(
        c,
        '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}' | '\u{2800}'
    ) {
        return false;
    }
    use GeneralCategory as G;
    match c.general_category() {
        G::Control
        | G::Format
        | G::Surrogate
        | G::PrivateUse
        | G::Unassigned
        | G::LineSeparator
        | G::ParagraphSeparator
        | G::SpaceSeparator => false,
        // Alone it would sit on whatever the terminal shows before the string.
        G::NonspacingMark | G::SpacingMark | G::EnclosingMark => after_shown,
        _ => true,
    }
}

/// Text that is not in the visible form: a backslash not followed by `\` or `xHH`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("byte {at} of an escaped string: a backslash is followed by `\\` or `xHH` (two hex digits), nothing else")]
pub struct UnescapeError {
    /// Where the stray backslash is, in bytes from the start.
    pub at: usize,
}

/// The bytes that [`escape`] showed as `text`. Hex digits of either case are taken.
pub fn unescape(text: &str) -> Result<Vec<u8>, UnescapeError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        if b != b'\\' {
            out.push(b);
            at += 1;
            continue;
        }
        match (bytes.get(at + 1), bytes.get(at + 2..at + 4)) {
            (Some(b'\\'), _) => {
                out.push(b'\\');
                at += 2;
            }
            (Some(b'x'), Some(&[hi, lo])) => {
                let digit = |d: u8| char::from(d).to_digit(16);
                let (Some(hi), Some(lo)) = (digit(hi), digit(lo)) else {
                    return Err(UnescapeError { at });
                };
                out.push((hi * 16 + lo) as u8);
                at += 4;
            }
            _ => return Err(UnescapeError { at }),
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_forms_of_the_adr() {
        for (raw, shown) in [
            (&b"notes.txt"[..], "notes.txt"),
            (b"two words", "two words"),
            (b"esc\x1b[31mRED", r"esc\x1B[31mRED"),
            (b"line\nbreak", r"line\x0Abreak"),
            (b"over\rwrite", r"over\x0Dwrite"),
            (b"up\x1b[1A\x1b[2K", r"up\x1B[1A\x1B[2K"),
            (b"tab\there", r"tab\x09here"),
            (b"del\x7f", r"del\x7F"),
            (b"nul\0", r"nul\x00"),
            (b"not utf-8 \xff\xfe", r"not utf-8 \xFF\xFE"),
            (b"cut \xc3", r"cut \xC3"),
            (br"back\slash", r"back\\slash"),
            (br"\x41", r"\\x41"),
            (
                "caf\u{e9} 日本 🙂 \u{fffd}".as_bytes(),
                "café 日本 🙂 \u{fffd}",
            ),
            // C1 controls: CSI as a character.
            ("c1 \u{9b}31m".as_bytes(), r"c1 \xC2\x9B31m"),
            // Bidi: an override, an isolate, a mark; zero-width space and joiner; BOM.
            ("evil\u{202e}txt.exe".as_bytes(), r"evil\xE2\x80\xAEtxt.exe"),
            (
                "\u{2066}a\u{2069}\u{200f}".as_bytes(),
                r"\xE2\x81\xA6a\xE2\x81\xA9\xE2\x80\x8F",
            ),
            (
                "zero\u{200b}width\u{200d}\u{feff}".as_bytes(),
                r"zero\xE2\x80\x8Bwidth\xE2\x80\x8D\xEF\xBB\xBF",
            ),
            // Line and paragraph separators, a no-break space, private use.
            (
                "\u{2028}\u{2029}\u{a0}\u{e000}".as_bytes(),
                r"\xE2\x80\xA8\xE2\x80\xA9\xC2\xA0\xEE\x80\x80",
            ),
            // Blank letters: a Hangul filler, the blank Braille pattern.
            (
                "a\u{3164}b\u{2800}".as_bytes(),
                r"a\xE3\x85\xA4b\xE2\xA0\x80",
            ),
            // A combining mark on a letter stays; with nothing before it, it is escaped.
            ("e\u{301}".as_bytes(), "e\u{301}"),
            ("\u{301}x".as_bytes(), r"\xCC\x81x"),
            ("\n\u{301}".as_bytes(), r"\x0A\xCC\x81"),
        ] {
            assert_eq!(escape(raw), shown, "{raw:?}");
            assert_eq!(unescape(shown).unwrap(), raw, "{shown:?}");
        }
    }

    #[test]
    fn only_the_two_escapes_are_taken() {
        assert_eq!(unescape(r"\xff\xFF").unwrap(), b"\xff\xff");
        for (bad, at) in [
            (r"\", 0),
            (r"a\n", 1),
            (r"\x4", 0),
            (r"\xg0", 0),
            (r"ab\u{41}", 2),
        ] {
            assert_eq!(unescape(bad), Err(UnescapeError { at }), "{bad:?}");
        }
    }

    /// A shell gives the bytes back too (coreutils' printf, as the ADR says).
    #[test]
    fn printf_b_gives_the_bytes_back() {
        let raw: &[u8] = b"a\\b\x1b[31m\n\xff\xe2\x80\xae\xc3\xa9%s";
        let out = std::process::Command::new("printf")
            .arg("%b")
            .arg(escape(raw))
            .output()
            .expect("printf runs");
        assert_eq!(out.stdout, raw);
    }

    proptest! {
        #[test]
        fn any_bytes_round_trip(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(unescape(&escape(&raw)).unwrap(), raw);
        }

        #[test]
        fn any_text_round_trips(text in any::<String>()) {
            prop_assert_eq!(unescape(&escape(text.as_bytes())).unwrap(), text.as_bytes());
        }

        #[test]
        fn the_output_holds_no_control(raw in proptest::collection::vec(any::<u8>(), 0..64),
                                       text in ".{0,16}") {
            let mut bytes = raw;
            bytes.extend_from_slice(text.as_bytes());
            let shown = escape(&bytes);
            for c in shown.chars() {
                let category = c.general_category();
                prop_assert!(
                    !matches!(
                        category,
                        GeneralCategory::Control
                            | GeneralCategory::Format
                            | GeneralCategory::LineSeparator
                            | GeneralCategory::ParagraphSeparator
                    ),
                    "{:?} in {:?}", c, shown
                );
            }
            // A backslash only ever starts one of the two escapes.
            prop_assert!(unescape(&shown).is_ok());
        }

        #[test]
        fn printable_ascii_is_itself(text in "[ -\\[\\]-~]*") {
            prop_assert_eq!(escape(text.as_bytes()), text);
        }
    }
}
