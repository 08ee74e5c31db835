//! Paths inside a subvolume, relative to its root, as bytes (`alice/notes.txt`; empty for
//! the root itself): the stem narrows a person's changes by them and the keeper an
//! approver's, so both judge "inside" the same way.

/// Whether `path` is `subtree` or beneath it (every path is beneath the empty subtree);
/// `alice2/x` is not beneath `alice`.
pub fn within(path: &[u8], subtree: &[u8]) -> bool {
    subtree.is_empty()
        || path == subtree
        || (path.starts_with(subtree) && path.get(subtree.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_a_subtree_means_the_subtree_or_below_it() {
        assert!(within(b"alice", b"alice"));
        assert!(within(b"alice/notes.txt", b"alice"));
        assert!(!within(b"alice2/notes.txt", b"alice"));
        assert!(!within(b"alic", b"alice"));
        assert!(!within(b"", b"alice"));
        assert!(within(b"bob/x", b""));
    }
}
