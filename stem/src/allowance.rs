//! What the stem logs within an allowance: calls anybody can make again and again through
//! the keeper are logged within an allowance per caller and time (adr/0016), the rest only
//! counted. Shared by the interface, copies and opens, each of which logs its own answers.

/// Whether a line of `kind` about `uid` (u32::MAX: the keeper passed none) may be logged
/// now.
pub fn allowed(kind: &'static str, uid: u32) -> layout::allowance::Logging {
    static LOGS: std::sync::LazyLock<
        std::sync::Mutex<layout::allowance::LogAllowance<(&'static str, u32)>>,
    > = std::sync::LazyLock::new(|| {
        std::sync::Mutex::new(layout::allowance::LogAllowance::new(
            std::time::Instant::now(),
        ))
    });
    LOGS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .admit(&(kind, uid), std::time::Instant::now())
}
