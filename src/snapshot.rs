//! The partition states and the snapshot a partitioner publishes on every transition.

use std::sync::Arc;

pub use proto::{Disagreement, DisagreementKind};

use crate::{Error, FencingToken, Item, PartitionState};

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
    /// The version of the [shared set](crate::Builder::shared_set) the current assignment was computed
    /// from (`None` with a fixed set, and until the first allocation).
    pub set_version: Option<u64>,
    /// The items the latest change of the shared set added, among those the current assignment covers: empty with a
    /// fixed set, and when the assignment changed for another reason (a party change).
    pub added: Arc<[Item]>,
    /// The items the latest change of the shared set removed (stop any work on them for good); empty otherwise.
    pub removed: Arc<[Item]>,
    /// Members of the party that announce a different set of items or partition function: while this is not empty, the
    /// members may compute overlapping shares and wait forever for each other's locks. Reported at the first party
    /// read that shows it, in every state. Kazoo members announce nothing: they are listed
    /// ([`DisagreementKind::Unannounced`]) only when this member's function does not answer as kazoo's does.
    pub disagreements: Arc<[Disagreement]>,
    /// This member's load under the current assignment: its capacity, the weight of its share in each dimension
    /// against its ideal share, and whether it is over what the partition function's load bound allows (an item too
    /// large for any member's room). `None` until the first allocation.
    pub load: Option<Arc<crate::weighted::Load>>,
    /// The items of [`items`](Snapshot::items) that are closed, in the same order: their source produces nothing new
    /// ([`SharedSet::close`](crate::SharedSet::close), or a split or merge of them), so drain each, then
    /// [`finish_item`](crate::SetPartitioner::finish_item) it. Only with a [shared set](crate::Builder::shared_set)
    /// that has lineage: each member reads its items' lineage after each version of the set and after it lists new
    /// items, at most once per `time_boundary`, so a close shows here within about `time_boundary`; an item shows
    /// closed only under the ownership it was read under (an item taken again, or a name retired and used again for a
    /// new item, is read again first). The rest of the
    /// set's trees (waiting children, finished items) are read with [`SharedSet::lineage`](crate::SharedSet::lineage) or
    /// [`describe`](crate::describe()).
    pub closed: Arc<[Item]>,
    /// Our lock node's name (in the item's lock directory) for each item in [`items`](Snapshot::items), in the same
    /// order: what a checkpoint save checks.
    pub(crate) lock_nodes: Arc<[String]>,
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
    pub load: Option<Arc<crate::weighted::Load>>,
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
    /// The fencing token of `item`, one of [`items`](Snapshot::items): the token of the ownership through which this
    /// member holds it now; `None` for an item it does not list. See [`FencingToken`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) {
    /// use zk_partitioner::Item;
    ///
    /// let item = Item::from("queue-1");
    /// if let Some(token) = partitioner.snapshot().token(&item) {
    ///     // Store the token with every write; the store rejects writes with a token lower than the last one seen.
    ///     println!("writing to {item} as owner #{}", token.get());
    /// }
    /// # }
    /// ```
    pub fn token(&self, item: &Item) -> Option<FencingToken> {
        // `tokens` is in the order of `items`, which is sorted.
        let index = self.items.binary_search(item).ok()?;
        self.tokens.get(index).copied()
    }

    /// Whether `item` is one of this member's items and closed ([`closed`](Snapshot::closed)).
    pub fn is_closed(&self, item: &Item) -> bool {
        // In item order, as `items`.
        self.closed.binary_search(item).is_ok()
    }

    /// What member `member` publishes before its first transition: `Allocating`, generation 0, nothing listed. For
    /// tests of code that reads snapshots (set the public fields to the case at hand), and the test kit's own.
    pub fn initial(member: impl Into<Arc<str>>) -> Self {
        Snapshot {
            state: PartitionState::Allocating,
            generation: 0,
            member: member.into(),
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
