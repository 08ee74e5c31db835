//! Reading the keeper's list as rows, for both ways the CLI shows it (`render`, `json`):
//! the targets holding a copy of a row, and the switch a pre-switch snapshot was taken before.

use keeper_interface::CopyOfRow;
use layout::switch::Switch;

/// The targets of row `i`, from `copies` (sorted by row) starting at `*at`.
pub fn copies_of<'c, 'a>(
    copies: &'c [CopyOfRow<'a>],
    at: &mut usize,
    i: usize,
) -> &'c [CopyOfRow<'a>] {
    while *at < copies.len() && (copies[*at].row as usize) < i {
        *at += 1;
    }
    let start = *at;
    while *at < copies.len() && copies[*at].row as usize == i {
        *at += 1;
    }
    &copies[start..*at]
}

/// The switch a pre-switch snapshot was taken before, from its reason (adr/0009). The
/// reason arrives escaped; the grammar has no byte escaping changes, so a reason that was
/// escaped is not a switch.
pub fn switch_of(pre_switch: bool, reason: &str) -> Option<Switch> {
    if !pre_switch {
        return None;
    }
    Switch::parse(reason).ok().flatten()
}
