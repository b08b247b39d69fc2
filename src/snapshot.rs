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
    /// generations are different episodes, e.g. two separate `Acquired` periods. A transition is a change of the
    /// state, of the listed [`items`](Snapshot::items) or their tokens, of [`revoked`](Snapshot::revoked), of
    /// [`suspended`](Snapshot::suspended), or a [`cause`](Snapshot::cause). The other fields (the members, the set's
    /// version and change, the disagreements, the load, the closed items) may change within one episode: observers
    /// are woken, and the generation stays. So the same `Acquired` is never published twice as a new one.
    pub generation: u64,
    /// This member's name in the party: `<identifier>-<10-digit sequence>`, or the identifier itself under
    /// [`Builder::static_membership`](crate::Builder::static_membership).
    pub member: Arc<str>,
    /// The items owned and safe to process: non-empty only in [`PartitionState::Acquired`], except under
    /// [`Rebalance::Incremental`](crate::Rebalance::Incremental), where the items a member keeps stay listed while the
    /// party changes (in every state but `Failure`, and never while the connection is suspended).
    pub items: Arc<[Item]>,
    /// The fencing token of each item in [`items`](Snapshot::items), in the same order.
    pub tokens: Arc<[FencingToken]>,
    /// The party membership the current assignment was computed from (sorted member names); empty until the first
    /// allocation.
    pub members: Arc<[String]>,
    /// In [`PartitionState::Release`]: the items the worker must stop processing before calling
    /// [`release_set`](crate::SetPartitioner::release_set) (every item it held, unless the rebalance is incremental).
    pub revoked: Arc<[Item]>,
    /// Why the partitioner failed: set only in [`PartitionState::Failure`].
    pub cause: Option<Error>,
    /// Set in [`PartitionState::Release`] when the connection is suspended under
    /// [`SessionPolicy::SessionAware`](crate::SessionPolicy::SessionAware): stop processing, and call
    /// [`release_set`](crate::SetPartitioner::release_set), which waits for the session's fate and may return
    /// to `Acquired` with the same items.
    pub suspended: bool,
    /// The version of the [shared item set](crate::Builder::shared_item_set) the current assignment was computed
    /// from (`None` with a fixed set, and until the first allocation).
    pub set_version: Option<u64>,
    /// The items the latest change of the shared set added, among those the current assignment covers: empty with a
    /// fixed set, and when the assignment changed for another reason (a party change).
    pub added: Arc<[Item]>,
    /// The items the latest change of the shared set removed (stop any work on them for good); empty otherwise.
    pub removed: Arc<[Item]>,
    /// Members of the party that announce a different item set or partition function: while this is not empty, the
    /// members may compute overlapping shares and wait forever for each other's locks. Reported at the first party
    /// read that shows it, in every state. Kazoo members announce nothing: they are listed
    /// ([`DisagreementKind::Unannounced`]) only when this member's function does not answer as kazoo's does.
    pub disagreements: Arc<[Disagreement]>,
    /// This member's load under the current assignment: its capacity, the weight of its share in each dimension
    /// against its ideal share, and whether it is over what the partition function's load bound allows (an item too
    /// large for any member's room). `None` until the first allocation.
    pub load: Option<Arc<crate::Load>>,
    /// The items of [`items`](Snapshot::items) that are closed, in the same order: their source produces nothing new
    /// ([`ItemSet::close`](crate::ItemSet::close), or a split or merge of them), so drain each, then
    /// [`finish_item`](crate::SetPartitioner::finish_item) it. Only with a [shared item set](crate::Builder::shared_item_set)
    /// that has lineage: each member reads its items' lineage after each version of the set and after it lists new
    /// items, at most once per `time_boundary`, so a close shows here within about `time_boundary`; an item shows
    /// closed only under the ownership it was read under (an item taken again, or a name retired and used again for a
    /// new item, is read again first). The rest of the
    /// set's trees (waiting children, finished items) are read with [`ItemSet::lineage`](crate::ItemSet::lineage) or
    /// [`describe`](crate::describe()).
    pub closed: Arc<[Item]>,
    /// Our lock node's name (in the item's lock directory) for each item in [`items`](Snapshot::items), in the same
    /// order: what a checkpoint save checks.
    pub(crate) lock_nodes: Arc<[String]>,
}

/// What another member disagrees on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DisagreementKind {
    /// Its item set is different (or one member uses the shared set and the other a fixed one).
    ItemSet,
    /// Its partition function answers differently (same set).
    PartitionFn,
    /// It follows another version of the shared item set: it has not caught up with a change (or lost its watch).
    /// Every member follows a change in its own time, so this is reported only once it has lasted past the time a
    /// member needs to follow one (2 × `time_boundary` + 2 s), as read again then.
    ItemSetVersion,
    /// It holds another assignment than this member, under a function that [keeps the
    /// placement](crate::PartitionFn::keeps_placement): it computed from another placement record, or by another
    /// rule, so the two may wait for each other's items for good. Reported, like
    /// [`ItemSetVersion`](DisagreementKind::ItemSetVersion), only once it has lasted past the time a member needs to
    /// follow a change.
    Placement,
    /// It announces nothing: a kazoo member (or a build of this crate from before announcements), which computes
    /// kazoo's function ([`KazooStride`](crate::KazooStride)), while this member's function answers differently (a
    /// [`Rendezvous`](crate::Rendezvous), or any weighted function): they would wait for each other's locks. A
    /// party with kazoo members must use `KazooStride`, which ignores weights and capacities.
    Unannounced,
    /// It announces nothing (a kazoo member, or an older build), and the shared set uses lineage
    /// ([`ItemSet::split`](crate::ItemSet::split) and the like), which such a member knows nothing of: it would take a
    /// child whenever its own item list says, whether or not the child's parents have finished. A party whose set
    /// uses lineage must be of this crate's members only.
    Lineage,
}

impl DisagreementKind {
    /// Whether a member has this difference for a while after every change, as it follows the change in its own
    /// time (another version of the shared set, another assignment of a sticky function): reported only once it
    /// lasts.
    pub(crate) fn catching_up(self) -> bool {
        matches!(self, DisagreementKind::ItemSetVersion | DisagreementKind::Placement)
    }
}

/// A member of the party whose configuration disagrees with this member's (see [`Snapshot::disagreements`]).
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
            DisagreementKind::ItemSet => "item set",
            DisagreementKind::PartitionFn => "partition function",
            DisagreementKind::ItemSetVersion => "version of the shared item set",
            DisagreementKind::Unannounced => "partition function, or none this crate can check",
            DisagreementKind::Lineage => "kind of set: this one has lineage, which it cannot follow",
            DisagreementKind::Placement => "assignment (another placement record, or another sticky rule)",
        };
        write!(f, "member {} uses a different {what} ({} here, {} there)", self.member, self.ours, self.theirs)
    }
}

/// What one publication sets: a publication of the core, in the handles' terms (see `driver::publish`).
pub(crate) struct Transition {
    /// A new episode (the generation counts it), or an update of the same state's other fields.
    pub new_episode: bool,
    pub state: PartitionState,
    pub member: Arc<str>,
    pub items: Arc<[Item]>,
    pub tokens: Arc<[FencingToken]>,
    pub revoked: Arc<[Item]>,
    pub members: Arc<[String]>,
    pub cause: Option<Error>,
    pub suspended: bool,
    /// The shared set's change, when the set in force differs from the one published last.
    pub set: Option<SetChange>,
    pub disagreements: Arc<[Disagreement]>,
    pub load: Option<Arc<crate::Load>>,
    pub closed: Arc<[Item]>,
    pub lock_nodes: Arc<[String]>,
}

/// A new version of the shared set in force: [`Snapshot::set_version`], [`Snapshot::added`], [`Snapshot::removed`].
pub(crate) struct SetChange {
    pub version: Option<u64>,
    pub added: Arc<[Item]>,
    pub removed: Arc<[Item]>,
}

impl Snapshot {
    /// Whether `item` is one of this member's items and closed ([`closed`](Snapshot::closed)).
    pub fn is_closed(&self, item: &Item) -> bool {
        // In item order, as `items`.
        self.closed.binary_search(item).is_ok()
    }

    pub(crate) fn initial(member: Arc<str>) -> Self {
        Snapshot {
            state: PartitionState::Allocating,
            generation: 0,
            member,
            items: Arc::from([]),
            tokens: Arc::from([]),
            revoked: Arc::from([]),
            members: Arc::from([]),
            cause: None,
            suspended: false,
            set_version: None,
            added: Arc::from([]),
            removed: Arc::from([]),
            disagreements: Arc::from([]),
            load: None,
            closed: Arc::from([]),
            lock_nodes: Arc::from([]),
        }
    }

    /// The next snapshot after `transition`: the one place, with [`stop`](Snapshot::stop), where a published snapshot
    /// changes.
    pub(crate) fn apply(&mut self, transition: Transition) {
        let Transition {
            new_episode,
            state,
            member,
            items,
            tokens,
            revoked,
            members,
            cause,
            suspended,
            set,
            disagreements,
            load,
            closed,
            lock_nodes,
        } = transition;
        if let Some(SetChange { version, added, removed }) = set {
            self.set_version = version;
            self.added = added;
            self.removed = removed;
        }
        self.state = state;
        if new_episode {
            self.generation += 1;
        }
        self.member = member;
        self.items = items;
        self.tokens = tokens;
        self.revoked = revoked;
        self.members = members;
        self.cause = cause;
        self.suspended = suspended;
        self.disagreements = disagreements;
        self.load = load;
        self.closed = closed;
        self.lock_nodes = lock_nodes;
    }

    /// The next snapshot for a task that ended without its core's last word (it panicked, or its runtime shut down):
    /// `Failure` with `cause`, holding nothing; the member, the party and the set it followed stay as they were.
    pub(crate) fn stop(&mut self, cause: Error) {
        self.state = PartitionState::Failure;
        self.generation += 1;
        self.items = Arc::from([]);
        self.tokens = Arc::from([]);
        self.revoked = Arc::from([]);
        self.closed = Arc::from([]);
        self.lock_nodes = Arc::from([]);
        self.cause = Some(cause);
        self.suspended = false;
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
