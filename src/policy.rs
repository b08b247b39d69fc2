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

/// kazoo's policy (`_establish_sessionwatch`), minus one of its quirks:
///
/// - a lost session is fatal;
/// - while `Acquired`, any other change moves to `Release`: a suspended member cannot know whether its session and
///   locks survive. The client's state watcher may coalesce a quick disconnect/reconnect into a single
///   `SyncConnected`, so a reconnect counts too;
/// - while `Allocating`, a suspension moves to `Release` (kazoo parity), but a reconnect does not. kazoo releases on
///   reconnect because it loses its watches; zookeeper-client re-registers them, and the allocation redoes any lock
///   request lost with the connection. (kazoo would bounce a worker that called `release_set()` during an outage
///   straight back to `Release` when the connection returns.)
pub(crate) fn react(session: SessionState, current: PartitionState) -> Reaction {
    if session.is_terminated() {
        return Reaction::Fail;
    }
    let suspended = session == SessionState::Disconnected;
    match current {
        PartitionState::Acquired => Reaction::Release,
        PartitionState::Allocating if suspended => Reaction::Release,
        PartitionState::Allocating | PartitionState::Release | PartitionState::Failure => Reaction::Ignore,
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
            assert_eq!(react(change, Acquired), Reaction::Release, "{change}");
            assert_eq!(react(change, Release), Reaction::Ignore, "{change}");
        }
        assert_eq!(react(Disconnected, Allocating), Reaction::Release);
        assert_eq!(react(SyncConnected, Allocating), Reaction::Ignore);
    }
}
