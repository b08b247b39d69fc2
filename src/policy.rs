//! How the partitioner reacts to the ZooKeeper session's state: one decision table, kazoo's.

use zookeeper_client::SessionState;

use crate::PartitionState;

/// How a partitioner treats a suspended connection (Curator's `ConnectionStateErrorPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionPolicy {
    /// kazoo's behaviour, the default: a suspended connection moves an `Acquired` member to `Release`, and
    /// `release_set()` then gives up every lock, as if the session were lost.
    #[default]
    Standard,
    /// A suspended connection moves an `Acquired` member to `Release` with
    /// [`Snapshot::suspended`](crate::Snapshot::suspended) set, so the worker pauses; but a `release_set()` made
    /// while suspended waits for the outcome instead of deleting the locks. If the client reconnects with the same
    /// session, the member syncs, checks that each of its lock nodes still exists and is owned by its session, and
    /// returns to `Acquired` with the same locks (and fencing tokens): a stall shorter than the session timeout moves
    /// no item. If the session expires, the member fails as usual; if a lock node is gone, it releases everything.
    ///
    /// Safe because ownership is the lock node, which lives exactly as long as the session: while the session lives,
    /// nobody else can hold those items.
    SessionAware,
}

/// What a member does when the party changes while it holds items.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rebalance {
    /// kazoo's behaviour, the default: every member stops everything (`Release`), gives up every lock, waits for the
    /// party to be stable and allocates again from nothing.
    #[default]
    Eager,
    /// Only what moves stops. The member keeps holding (and its worker keeps processing) the items that stay its own
    /// while the party settles; then it publishes `Release` listing only the items it must give up
    /// ([`Snapshot::revoked`](crate::Snapshot::revoked)), still listing the others in
    /// [`Snapshot::items`](crate::Snapshot::items). `release_set()` releases only the revoked items, the member takes
    /// the items it gained, and returns to `Acquired`. Unmoved items keep their lock nodes (and fencing tokens).
    ///
    /// Worker loop: process `items()` in every state but `Failure`; in `Release`, stop `revoked()` and call
    /// `release_set()`. A suspended connection still stops everything, as in `Eager`.
    ///
    /// Pairs best with [`Rendezvous`](crate::Rendezvous), which moves few items; with [`KazooStride`](crate::KazooStride)
    /// most items move anyway. Mixing with kazoo peers (or `Eager` members) is safe: exclusion comes from the locks,
    /// never from agreement, and every member computes the same assignment; the kazoo peers still stop everything on
    /// each change.
    Incremental,
}

/// What the partitioner does about a session state change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reaction {
    /// Nothing to do.
    Ignore,
    /// Stop processing: move to [`PartitionState::Release`].
    Release,
    /// Pause processing: move to [`PartitionState::Release`], suspended, and wait for the session's fate.
    Suspend,
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
///
/// Under [`SessionPolicy::SessionAware`], an `Acquired` member suspends instead of releasing, and an allocating one
/// carries on (its requests wait for the reconnection, and its locks survive with the session).
pub(crate) fn react(policy: SessionPolicy, session: SessionState, current: PartitionState) -> Reaction {
    if session.is_terminated() {
        return Reaction::Fail;
    }
    let suspended = session == SessionState::Disconnected;
    match (policy, current) {
        (SessionPolicy::Standard, PartitionState::Acquired) => Reaction::Release,
        (SessionPolicy::Standard, PartitionState::Allocating) if suspended => Reaction::Release,
        (SessionPolicy::SessionAware, PartitionState::Acquired) => Reaction::Suspend,
        _ => Reaction::Ignore,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PartitionState::*;
    use SessionState::*;

    #[test]
    fn kazoo_table() {
        let react = |session, state| react(SessionPolicy::Standard, session, state);
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

    #[test]
    fn session_aware_table() {
        let react = |session, state| react(SessionPolicy::SessionAware, session, state);
        for change in [Disconnected, SyncConnected] {
            assert_eq!(react(change, Acquired), Reaction::Suspend);
            assert_eq!(react(change, Allocating), Reaction::Ignore);
            assert_eq!(react(change, Release), Reaction::Ignore);
        }
        assert_eq!(react(Expired, Acquired), Reaction::Fail);
    }
}
