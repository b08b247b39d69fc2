//! The partition states and the snapshot a partitioner publishes on every transition.

use std::fmt;
use std::sync::Arc;

use crate::{Error, Item};

/// Where a partitioner is in kazoo's state machine.
///
/// ```text
///            party stable for time_boundary,
///            every assigned lock held
///  ALLOCATING ───────────────────────────▶ ACQUIRED
///     ▲    │                                  │ party changed, or the
///     │    │ connection suspended             │ connection was suspended
///     │    ▼                                  ▼
///     │  RELEASE ◀───────────────────────────┘
///     └──────────┘ release_set()
///
///  any state ──▶ FAILURE (session lost, finish(), unrecoverable error); FAILURE is terminal
/// ```
///
/// A party change during allocation restarts the allocation without leaving `Allocating`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PartitionState {
    /// Waiting for the party to be stable, then taking the assigned locks. Own nothing yet.
    Allocating,
    /// Every assigned item's lock is held: process the items.
    Acquired,
    /// The party or the connection changed: stop processing and call
    /// [`release_set`](crate::SetPartitioner::release_set) as soon as possible.
    Release,
    /// Terminal: the session was lost, [`finish`](crate::SetPartitioner::finish) was called, or an unrecoverable
    /// error occurred ([`Snapshot::cause`] says which). Build a new partitioner (with a new client if the session is
    /// gone).
    Failure,
}

impl PartitionState {
    /// kazoo's name for the state: `ALLOCATING`, `ACQUIRED`, `RELEASE` or `FAILURE`.
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionState::Allocating => "ALLOCATING",
            PartitionState::Acquired => "ACQUIRED",
            PartitionState::Release => "RELEASE",
            PartitionState::Failure => "FAILURE",
        }
    }
}

impl fmt::Display for PartitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a partitioner published at its latest transition.
///
/// Snapshots are published by the partitioner's background task only, once per transition.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Snapshot {
    /// The current state.
    pub state: PartitionState,
    /// Counts transitions, starting at 0 (kazoo's `state_id`): two snapshots with the same state but different
    /// generations are different episodes, e.g. two separate `Acquired` periods.
    pub generation: u64,
    /// This member's name in the party: `<identifier>-<10-digit sequence>`.
    pub member: Arc<str>,
    /// The items owned: non-empty only in [`PartitionState::Acquired`].
    pub items: Arc<[Item]>,
    /// The party membership the current assignment was computed from (sorted member names); empty until the first
    /// allocation.
    pub members: Arc<[String]>,
    /// Why the partitioner failed: set only in [`PartitionState::Failure`].
    pub cause: Option<Error>,
}

impl Snapshot {
    pub(crate) fn initial(member: Arc<str>) -> Self {
        Snapshot {
            state: PartitionState::Allocating,
            generation: 0,
            member,
            items: Arc::from([]),
            members: Arc::from([]),
            cause: None,
        }
    }
}
