use serde::{Deserialize, Serialize};

/// What a session (P1) or a task (P2) is waiting on from the human.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingAction {
    Clarification,
    Permission,
}

super::wire_enum!(PendingAction { Clarification => "clarification", Permission => "permission" });

impl PendingAction {
    /// P2: permission outranks clarification when aggregating over a task's sessions.
    pub fn rank(self) -> u8 {
        match self {
            PendingAction::Permission => 2,
            PendingAction::Clarification => 1,
        }
    }

    /// P2 aggregate over the pending actions of a task's input-capable sessions.
    pub fn aggregate<I: IntoIterator<Item = Option<PendingAction>>>(actions: I) -> Option<Self> {
        actions.into_iter().flatten().max_by_key(|a| a.rank())
    }
}

/// P9: ordering of pending-action snapshots across restarts. `epoch` is a decimal string on the
/// wire (it may outgrow JavaScript's safe integers); compare epoch numerically, then sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingActionRevision {
    pub epoch: String,
    pub sequence: u64,
}

impl PendingActionRevision {
    fn key(&self) -> (u128, u64) {
        (self.epoch.parse().unwrap_or(0), self.sequence)
    }

    /// True when `self` is strictly newer than `other` (P9).
    pub fn is_newer_than(&self, other: &PendingActionRevision) -> bool {
        self.key() > other.key()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(epoch: &str, sequence: u64) -> PendingActionRevision {
        PendingActionRevision {
            epoch: epoch.into(),
            sequence,
        }
    }

    #[test]
    fn p9_epoch_compares_numerically_then_sequence() {
        assert!(
            rev("10", 1).is_newer_than(&rev("9", 500)),
            "\"10\" > \"9\" numerically"
        );
        assert!(rev("3", 2).is_newer_than(&rev("3", 1)));
        assert!(
            !rev("3", 1).is_newer_than(&rev("3", 1)),
            "equal is not newer"
        );
        assert!(!rev("2", 9).is_newer_than(&rev("3", 0)));
    }

    #[test]
    fn p2_permission_outranks_clarification() {
        use PendingAction::*;
        assert_eq!(
            PendingAction::aggregate([None, Some(Clarification), Some(Permission)]),
            Some(Permission)
        );
        assert_eq!(
            PendingAction::aggregate([Some(Clarification), None]),
            Some(Clarification)
        );
        assert_eq!(PendingAction::aggregate([None, None]), None);
        assert_eq!(PendingAction::aggregate([]), None);
    }
}
