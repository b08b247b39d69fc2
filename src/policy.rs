//! How the partitioner reacts to the ZooKeeper session's state: one decision table, kazoo's.

use zookeeper_client::SessionState;

use crate::PartitionState;

/// What the partitioner does about a session state change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reaction {
    /// Nothing to do.
    Ignore,
    /// Stop processing: move to [`PartitionState::Release`].
    Release,
    /// The session is over: move to [`PartitionState::Failure`].
    Fail,
}

/// kazoo's policy (`_establish_sessionwatch`): a lost session is fatal, and any other change (suspended or
/// reconnected) moves a member that may be processing, or about to, to `Release`, because while disconnected it
/// cannot know whether its session and locks survive. The client's state watcher may coalesce a quick
/// disconnect/reconnect into a single `SyncConnected`, so every non-terminal change counts.
pub(crate) fn react(session: SessionState, current: PartitionState) -> Reaction {
    if session.is_terminated() {
        return Reaction::Fail;
    }
    match current {
        PartitionState::Allocating | PartitionState::Acquired => Reaction::Release,
        PartitionState::Release | PartitionState::Failure => Reaction::Ignore,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PartitionState::*;
    use SessionState::*;

    #[test]
    fn kazoo_table() {
        for state in [Allocating, Acquired, Release] {
            for terminal in [Expired, Closed, AuthFailed] {
                assert_eq!(react(terminal, state), Reaction::Fail);
            }
        }
        for change in [Disconnected, SyncConnected, ConnectedReadOnly] {
            assert_eq!(react(change, Allocating), Reaction::Release);
            assert_eq!(react(change, Acquired), Reaction::Release);
            assert_eq!(react(change, Release), Reaction::Ignore);
        }
    }
}
