//! The partition states, and what a member disagrees on: what the core publishes, in the user's terms.

use std::fmt;

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
    /// [`release_set`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.SetPartitioner.html#method.release_set) as soon as possible.
    Release,
    /// Terminal: the session was lost, [`finish`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.SetPartitioner.html#method.finish) was called, or an unrecoverable
    /// error occurred ([`Snapshot::cause`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Snapshot.html#structfield.cause) says which). Build a new partitioner (with a new client if the session is
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

/// What another member disagrees on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DisagreementKind {
    /// Its set of items is different (or one member uses the shared set and the other a fixed one).
    Items,
    /// Its partition function answers differently (same set).
    PartitionFn,
    /// It follows another version of the shared set: it has not caught up with a change (or lost its watch).
    /// Every member follows a change in its own time, so this is reported only once it has lasted past the time a
    /// member needs to follow one (2 × `time_boundary` + 2 s), as read again then.
    SetVersion,
    /// It holds another assignment than this member, under a function that [keeps the
    /// placement](crate::PartitionFn::keeps_placement): it computed from another placement record, or by another
    /// rule, so the two may wait for each other's items for good. Reported, like
    /// [`SetVersion`](DisagreementKind::SetVersion), only once it has lasted past the time a member needs to
    /// follow a change.
    Placement,
    /// It announces nothing: a kazoo member (or a build of this crate from before announcements), which computes
    /// kazoo's function ([`KazooStride`](crate::KazooStride)), while this member's function answers differently (a
    /// [`Rendezvous`](crate::Rendezvous), or any weighted function): they would wait for each other's locks. A
    /// party with kazoo members must use `KazooStride`, which ignores weights and capacities.
    Unannounced,
    /// It announces nothing (a kazoo member, or an older build), and the shared set uses lineage
    /// ([`SharedSet::split`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.SharedSet.html#method.split) and the like), which such a member knows nothing of: it would take a
    /// child whenever its own item list says, whether or not the child's parents have finished. A party whose set
    /// uses lineage must be of this crate's members only.
    Lineage,
}

impl DisagreementKind {
    /// Whether a member has this difference for a while after every change, as it follows the change in its own
    /// time (another version of the shared set, another assignment of a sticky function): reported only once it
    /// lasts.
    pub fn catching_up(self) -> bool {
        matches!(self, DisagreementKind::SetVersion | DisagreementKind::Placement)
    }
}

/// A member of the party whose configuration disagrees with this member's (see [`Snapshot::disagreements`](https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Snapshot.html#structfield.disagreements)).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Disagreement {
    /// The other member's name.
    pub member: String,
    /// What differs.
    pub kind: DisagreementKind,
    /// This member's announcement (`zkp/1 set=<digest> fn=<fingerprint>`).
    pub ours: String,
    /// The other member's announcement.
    pub theirs: String,
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            DisagreementKind::Items => "set of items",
            DisagreementKind::PartitionFn => "partition function",
            DisagreementKind::SetVersion => "version of the shared set",
            DisagreementKind::Unannounced => "partition function, or none this crate can check",
            DisagreementKind::Lineage => "kind of set: this one has lineage, which it cannot follow",
            DisagreementKind::Placement => "assignment (another placement record, or another sticky rule)",
        };
        write!(f, "member {} uses a different {what} ({} here, {} there)", self.member, self.ours, self.theirs)
    }
}

/// A number that strictly increases every time an item's lock changes hands: the creation zxid (`czxid`) of the lock
/// node that holds it.
///
/// ZooKeeper orders every write with one increasing zxid, and the holder of an item's lock is always the oldest
/// contender in its directory, so the next holder's node was created later and carries a larger zxid. That holds
/// across releases, crashes, session expiry, and kazoo peers (their lock nodes are ordered the same way).
///
/// A worker that writes an item's results to another store passes its token along; the store remembers the largest
/// token it has accepted for the item and rejects writes with a smaller one. A worker that was paused (a long GC,
/// a stalled VM) and resumes after its lock passed to another member then cannot overwrite the newer owner's work.
/// The token is not a lease: it protects the store, not the worker. It orders the holders of one item only: items
/// whose locks were taken in the same batched request share one zxid, so different items may carry equal tokens.
///
/// ```
/// use zk_partitioner::FencingToken;
///
/// // The downstream store's check, e.g. inside a compare-and-set.
/// fn accept(last_accepted: Option<FencingToken>, writer: FencingToken) -> bool {
///     last_accepted.is_none_or(|last| writer >= last)
/// }
/// let (old_owner, new_owner) = (FencingToken::new(0x1_0000_0002), FencingToken::new(0x1_0000_0040));
/// assert!(accept(Some(old_owner), new_owner));
/// assert!(!accept(Some(new_owner), old_owner));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(i64);

impl FencingToken {
    /// A token with this value (for stores that keep tokens as numbers).
    pub const fn new(value: i64) -> Self {
        FencingToken(value)
    }

    /// The token's value: the lock node's creation zxid.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
