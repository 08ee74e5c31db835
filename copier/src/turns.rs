//! One act per target at a time, and what each is doing (Progress).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The act on one target in flight.
#[derive(Debug, Clone)]
struct Act {
    name: String,
    doing: &'static str,
    moved: Arc<AtomicU64>,
}

/// The targets' turns. Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct Turns {
    acts: Arc<Mutex<BTreeMap<String, Act>>>,
}

/// Held while an act runs on a target; dropping it frees the target.
#[derive(Debug)]
pub struct Turn {
    turns: Turns,
    target: String,
    moved: Arc<AtomicU64>,
}

/// One line of Progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub target: String,
    pub name: String,
    pub doing: String,
    pub moved: u64,
}

impl Turns {
    /// The turn on `target` for `doing` `name`, or the words of what holds it.
    pub fn take(&self, target: &str, name: &str, doing: &'static str) -> Result<Turn, String> {
        let mut acts = self.acts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(act) = acts.get(target) {
            let what = if act.name.is_empty() {
                String::new()
            } else {
                format!(" {}", act.name)
            };
            return Err(format!(
                "target {target} is busy ({}{what}, {} bytes so far); one act at a time per \
                 target: try again when it is done",
                act.doing,
                act.moved.load(Ordering::Relaxed)
            ));
        }
        let moved = Arc::new(AtomicU64::new(0));
        acts.insert(
            target.to_owned(),
            Act {
                name: name.to_owned(),
                doing,
                moved: moved.clone(),
            },
        );
        Ok(Turn {
            turns: self.clone(),
            target: target.to_owned(),
            moved,
        })
    }

    /// Every act in flight, by target.
    pub fn in_flight(&self) -> Vec<InFlight> {
        let acts = self.acts.lock().unwrap_or_else(|p| p.into_inner());
        acts.iter()
            .map(|(target, a)| InFlight {
                target: target.clone(),
                name: a.name.clone(),
                doing: a.doing.to_owned(),
                moved: a.moved.load(Ordering::Relaxed),
            })
            .collect()
    }
}

impl Turn {
    /// The counter of bytes moved, which Progress reads.
    pub fn moved(&self) -> &AtomicU64 {
        &self.moved
    }

    /// Say what the act is doing now (its counter starts again).
    pub fn now(&self, name: &str, doing: &'static str) {
        let mut acts = self.turns.acts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(act) = acts.get_mut(&self.target) {
            act.name = name.to_owned();
            act.doing = doing;
        }
        self.moved.store(0, Ordering::Relaxed);
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut acts = self.turns.acts.lock().unwrap_or_else(|p| p.into_inner());
        acts.remove(&self.target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_has_one_act_at_a_time_and_progress_shows_it() {
        let turns = Turns::default();
        let turn = turns.take("usb", "@home.x", "seal").expect("free");
        turn.moved().store(42, Ordering::Relaxed);
        let busy = turns.take("usb", "", "list").expect_err("busy");
        assert!(
            busy.contains("target usb is busy (seal @home.x, 42 bytes so far)"),
            "{busy}"
        );
        let other = turns
            .take("nas", "", "list")
            .expect("another target is free");
        assert_eq!(
            turns.in_flight(),
            vec![
                InFlight {
                    target: "nas".into(),
                    name: "".into(),
                    doing: "list".into(),
                    moved: 0
                },
                InFlight {
                    target: "usb".into(),
                    name: "@home.x".into(),
                    doing: "seal".into(),
                    moved: 42
                },
            ]
        );
        drop(turn);
        drop(other);
        assert!(turns.in_flight().is_empty());
        assert!(turns.take("usb", "", "list").is_ok());
    }
}
