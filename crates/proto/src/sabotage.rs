//! The one test-only hook: deliberately broken rules, for showing that the simulation's checker catches each bug of
//! an older driver when it is put back. A transition that can be broken asks [`breaks`] once; the simulation
//! switches one rule on for the thread of one run (`set`). Outside test builds and the `sim` feature (which only
//! zk-partitioner's own tests turn on) [`breaks`] is a constant `false`, so the broken branches compile away.

/// A rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(any(test, feature = "sim")), allow(dead_code))] // named only by test builds
pub enum Sabotage {
    None,
    /// The old driver's resumption after a suspension: publish `Acquired` with whatever is held, as if the
    /// assignment were complete, abandoning a rebalance in progress.
    ResumeAbandonsRebalance,
    /// The old incremental driver awaited releases outside its `select!`: a suspension during a release went
    /// unnoticed while kept items stayed listed.
    UnnoticedSuspensionDuringRelease,
    /// The old driver acknowledged waiting `release_set()` calls before their release happened.
    AckBeforeRelease,
    /// A member that reads the shared set but never applies its changes.
    IgnoreSetChanges,
    /// Nodes of ours in a lock directory that the lock does not track (a lost create that landed late) are left
    /// alone: one that sorts first has the member wait for itself forever.
    OwnStraysKept,
    /// Held-lock watches only once the lock work is quiet (no cap): under churn a deleted held node goes unnoticed.
    HeldWatchOnlyWhenQuiet,
    /// Publications list items in index order (items added to a shared set later come last): the handle's lookups
    /// by binary search miss them.
    IndexOrder,
    /// Nobody undoes or finishes a shared set's update whose writer is gone: it stays unfinished.
    NoSetRecovery,
    /// Readers of a shared set being applied see the base set alone (part of the change): the old chained update's
    /// mix.
    ApplyingReadAsBase,
    /// A shared set being created reads as its children so far (`create_if_missing` returns part of a set).
    CreatingReadAsCommitted,
    /// A writer whose commit's reply was lost does not look for its outcome marker and takes the commit for one that
    /// did not land: it applies its change again (a retried removal undoes another admin's later addition, a retried
    /// split reports its own children as existing).
    LostRepliesUnresolved,
    /// A panicked task deletes its nodes in one pass, without retrying a request lost with the connection.
    CleanupOnce,
    /// A lock node of our own session just ahead of ours (a create that the server applied late, after we had given
    /// it up) is waited for like anyone's: forever.
    OwnPredecessorWaited,
    /// A finished parent puts every child of its in the set, even one still waiting on another parent.
    ChildrenReadyEarly,
    /// Retiring an item leaves its children naming it as their parent: its name used again for a new item becomes
    /// the parent of children already in the set.
    RetireKeepsLinks,
    /// Retiring an item leaves its checkpoint: its name used again for a new item hands the new item's first owner
    /// the old item's checkpoint.
    RetireKeepsCheckpoints,
    /// A change of the target does not clear the remembered "every listed item is in the target": an item that left
    /// the member's share is never revoked, and stays listed after its lock is let go.
    TargetChangeUnseen,
    /// A sticky member computes again from a placement record written for its very inputs instead of handing it out
    /// as it is: the rule is not idempotent at every size, so a member deciding after the record came holds another
    /// assignment than those that decided before it.
    PlacementRecomputed,
    /// A placement record that says something else than the assignment a member computed (from an older record) is
    /// taken note of, but the member does not compute its assignment again from it.
    PlacementChangeIgnored,
    /// The assignment's digest names the owners alone, not the items: a record over another set with the same owners
    /// in the same order reads as a member's own, and it computes from that while the others compute from the
    /// record as it is.
    PlacementDigestOwnersOnly,
    /// A placement record's inputs name the shared set by its version, not by its items and weights: a version that
    /// moves nothing (a close, a split whose children wait, a retirement) makes a member that decides after it
    /// compute again from a record the others hand out as it is.
    PlacementInputsByVersion,
    /// A sticky function's fingerprint does not ask it for a placement from a previous assignment: two sticky rules
    /// that answer the plain probe alike but use the previous assignment differently are not told apart, and the
    /// members that run them wait for each other's items without a word.
    FingerprintWithoutPrevious,
    /// A member on another version of the shared set, or holding another assignment of a sticky function, is
    /// reported the moment it is seen, as the old members did: every routine change is reported (and published) as
    /// a disagreement by the members that followed it first.
    CatchingUpReported,
    /// Every publication is a transition, as the old core made it: a change of what the snapshot says beside the
    /// state (a disagreement, the set's version, a closed item) publishes the same `Acquired` again as a new one,
    /// and a worker that starts work at every `Acquired` runs its items twice.
    RepublishUnchanged,
    /// What is known closed outlives the ownership it was learnt under, and known-closed items are not read again:
    /// an item finished, retired and added again under its name between two versions a member reads, or taken again
    /// later, shows the old item's closing, and the worker finishes a new item it must process.
    ClosedOutlivesOwnership,
    /// The departure fast path is taken on any party change, a join included: a joiner's arrival is divided at the
    /// read, without the quiet period that lets a burst of joins be divided once.
    HandOverJoins,
    /// A hand-over marks as deferred only a target that a load bound's shift changed, as the core first did: a
    /// survivor the hand-over shifted nothing for never takes the assignment again when the quiet period ends, and
    /// at the next departure it computes the departed member's items from another assignment than the others do.
    HandOverDefersOnlyMoves,
    /// A hand-over's orphans are the items of the members gone since the party in force only, as if each hand-over
    /// stood alone: a survivor that read two departures at once and one that read them one by one disagree on where
    /// an item the first hand-over gave away is, and neither takes it.
    OrphansOfTheLatestChangeOnly,
    /// A hand-over keeps an orphan that an earlier hand-over gave us and that the new party gives another survivor,
    /// as the core first did, until our quiet period ends: the other survivor queues behind our lock node and waits
    /// that long, `Allocating`, with every orphan it took meanwhile (the two-departure outliers of
    /// `bench/handover.sh`, issue 47).
    HandOverKeepsEarlierOrphans,
}

#[cfg(any(test, feature = "sim"))]
impl Sabotage {
    /// Every switch but `None`.
    pub const ALL: [Sabotage; 29] = [
        Sabotage::ResumeAbandonsRebalance,
        Sabotage::UnnoticedSuspensionDuringRelease,
        Sabotage::AckBeforeRelease,
        Sabotage::IgnoreSetChanges,
        Sabotage::OwnStraysKept,
        Sabotage::HeldWatchOnlyWhenQuiet,
        Sabotage::IndexOrder,
        Sabotage::NoSetRecovery,
        Sabotage::ApplyingReadAsBase,
        Sabotage::CreatingReadAsCommitted,
        Sabotage::LostRepliesUnresolved,
        Sabotage::CleanupOnce,
        Sabotage::OwnPredecessorWaited,
        Sabotage::ChildrenReadyEarly,
        Sabotage::RetireKeepsLinks,
        Sabotage::RetireKeepsCheckpoints,
        Sabotage::TargetChangeUnseen,
        Sabotage::PlacementRecomputed,
        Sabotage::PlacementChangeIgnored,
        Sabotage::PlacementDigestOwnersOnly,
        Sabotage::PlacementInputsByVersion,
        Sabotage::FingerprintWithoutPrevious,
        Sabotage::CatchingUpReported,
        Sabotage::RepublishUnchanged,
        Sabotage::ClosedOutlivesOwnership,
        Sabotage::HandOverJoins,
        Sabotage::HandOverDefersOnlyMoves,
        Sabotage::OrphansOfTheLatestChangeOnly,
        Sabotage::HandOverKeepsEarlierOrphans,
    ];

    /// The switch of this name (`SIM_SABOTAGE`).
    pub fn named(name: &str) -> Option<Sabotage> {
        Sabotage::ALL.into_iter().find(|s| format!("{s:?}") == name)
    }
}

#[cfg(any(test, feature = "sim"))]
thread_local! {
    /// The rule broken on this thread (the simulation runs one world per thread): set for one run.
    static BROKEN: std::cell::Cell<Sabotage> = const { std::cell::Cell::new(Sabotage::None) };
}

/// Breaks `rule` on this thread until set again (test builds only).
#[cfg(any(test, feature = "sim"))]
pub fn set(rule: Sabotage) {
    BROKEN.with(|cell| cell.set(rule));
}

/// Whether the code running on this thread is to break `rule`: only in a test build, while the simulation asks.
#[cfg(any(test, feature = "sim"))]
pub fn breaks(rule: Sabotage) -> bool {
    BROKEN.with(|cell| cell.get() == rule)
}

/// Never, outside test builds.
#[cfg(not(any(test, feature = "sim")))]
#[inline(always)]
pub const fn breaks(_rule: Sabotage) -> bool {
    false
}
