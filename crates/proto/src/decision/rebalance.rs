//! Rebalancing: the only place that tells the modes apart. Eager is kazoo's way (everything stops on a change, then
//! everything is taken again); Incremental stops only what moves.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Core, Owed, Reason};
use crate::sabotage::{Sabotage, breaks};
use crate::{PartitionState, Rebalance};

/// Our share under the latest stable party, and what it weighs.
pub(super) struct Share {
    /// `None` while the party settles.
    target: Option<BTreeSet<usize>>,
    /// The shared set changed since `target` was computed (incremental): it is still worked towards, and replaced
    /// once the quiet period ends.
    outdated: bool,
    /// A departure was handed over at once: the assignment is taken again once the quiet period ends, when what it
    /// also moves between survivors moves, and every member's view of who holds what starts again from it (a member
    /// whose own share the hand-over did not shift takes it again too: others' moves changed what they hold). Another
    /// departure may still be handed over meanwhile, unlike a set change's wait.
    deferred: bool,
    /// Every listed item was in `target` when last checked, and neither has changed since: the check walks both
    /// sets, and a member releasing or taking 50,000 locks runs it on each of their events. Cleared wherever either
    /// changes (`show`, and every write of `target`).
    listed_in_target: bool,
    /// Our load under that share (weights against capacity).
    load: Option<Arc<crate::Load>>,
}

impl Share {
    /// No share yet: the party settles.
    pub(super) fn new() -> Self {
        Self { target: None, outdated: false, deferred: false, listed_in_target: false, load: None }
    }

    /// Our share, `None` while the party settles.
    pub(super) fn target(&self) -> Option<&BTreeSet<usize>> {
        self.target.as_ref()
    }

    /// Whether the set changed since the target was computed (incremental).
    pub(super) fn outdated(&self) -> bool {
        self.outdated
    }

    /// Whether a hand-over left moves between survivors for the quiet period's end.
    pub(super) fn deferred(&self) -> bool {
        self.deferred
    }

    /// Our load under the share, for the publication.
    pub(super) fn load(&self) -> Option<Arc<crate::Load>> {
        self.load.clone()
    }

    /// A new target, up to date.
    pub(super) fn set(&mut self, target: BTreeSet<usize>) {
        self.target = Some(target);
        self.outdated = false;
        self.deferred = false;
        self.changed();
    }

    /// The load under the target just set.
    pub(super) fn set_load(&mut self, load: crate::Load) {
        self.load = Some(Arc::new(load));
    }

    /// The party settles again: no target. Returns whether there was one.
    pub(super) fn clear(&mut self) -> bool {
        self.outdated = false;
        self.deferred = false;
        self.changed();
        self.target.take().is_some()
    }

    /// The set changed under a stable party (incremental): the target keeps only the items `kept`, and is outdated.
    /// Returns whether it was up to date until now (a new episode starts).
    pub(super) fn outdate(&mut self, kept: impl Fn(usize) -> bool) -> bool {
        if let Some(target) = &mut self.target {
            target.retain(|&item| kept(item));
            self.changed();
        }
        !std::mem::replace(&mut self.outdated, true)
    }

    /// The party lost members only (the departure fast path): of the departed members' items (`orphans`), the
    /// target holds at once exactly those that `new` gives us. Whatever else `new` changes (a load bound's shifts
    /// between survivors) waits: the target is deferred, replaced once the quiet period ends.
    ///
    /// So after any run of hand-overs the target is our share when the quiet period last decided plus our part of
    /// the orphans under the latest party, the same whether the departures were read one by one or together, and
    /// no two survivors' targets meet. An orphan an earlier hand-over gave us that `new` gives another survivor
    /// (a load bound's shift between survivors) leaves the target now: kept, it would hold that survivor
    /// behind our lock until our quiet period ended.
    pub(super) fn hand_over(&mut self, new: BTreeSet<usize>, orphans: &BTreeSet<usize>) {
        let mut target = self.target.take().unwrap_or_default();
        if !breaks(Sabotage::HandOverKeepsEarlierOrphans) {
            target.retain(|item| !orphans.contains(item));
        }
        target.extend(new.intersection(orphans).copied());
        // Deferred even when `new` adds nothing else for us: every member takes the assignment again when its quiet
        // period ends, so that the next hand-over's orphans are computed from the same decided party by all.
        if breaks(Sabotage::HandOverDefersOnlyMoves) {
            self.deferred |= target != new;
        } else {
            self.deferred = true;
        }
        self.target = Some(target);
        self.changed();
    }

    /// What was listed changed: whether it is within the target is checked again.
    pub(super) fn listed_changed(&mut self) {
        self.listed_in_target = false;
    }

    /// To be called after every write of `target`: what was checked against the old one is checked again.
    fn changed(&mut self) {
        if !breaks(Sabotage::TargetChangeUnseen) {
            self.listed_in_target = false;
        }
    }
}

impl Core {
    /// With the target known (or settling), the rows of the table by mode.
    pub(super) fn decide_rebalance(&mut self) {
        match self.cfg.rebalance {
            Rebalance::Eager => self.decide_eager(),
            Rebalance::Incremental => self.decide_incremental(),
        }
    }

    /// The set changed under a stable party, with the target in force: Eager restarts the quiet period (everyone
    /// releases on the new episode); under Incremental nobody stops what they keep, and a quarter of `time_boundary`
    /// batches the stream of versions.
    pub(super) fn debounce_set_change(&mut self) {
        match self.cfg.rebalance {
            Rebalance::Eager => self.party.restart_quiet_period(self.now),
            Rebalance::Incremental => self.party.set_changed_quiet_period(self.now),
        }
    }

    /// Whether a party change is judged on its read, so that one that is only departures is handed over at once
    /// (the departure fast path, [`party`](super::party)): under Incremental, with a function whose departures move
    /// only the departed member's items. Eager keeps kazoo's rule: every change waits the quiet period.
    pub(super) fn hands_over_departures(&self) -> bool {
        match self.cfg.rebalance {
            Rebalance::Eager => false,
            Rebalance::Incremental => {
                self.cfg.departure_fast_path && self.cfg.partition_fn.departures_move_only_theirs()
            }
        }
    }

    /// Whether a set change under a stable party keeps the target in force (less the items that left the set) until
    /// the quiet period ends: Incremental's way; Eager starts a new episode.
    pub(super) fn keeps_target_through_set_changes(&self) -> bool {
        match self.cfg.rebalance {
            Rebalance::Eager => false,
            Rebalance::Incremental => true,
        }
    }

    /// The party or the set changed, and the assignment in force was the party's: a new episode.
    pub(super) fn on_new_episode(&mut self, reason: Reason) {
        match (self.cfg.rebalance, self.published.shown().state()) {
            // During a suspension, the resumption deals with it.
            (Rebalance::Eager, PartitionState::Acquired) if !self.session.suspended() => {
                self.ask_release_all(reason);
            }
            (Rebalance::Incremental, PartitionState::Acquired) => self.start_allocation_clock_unless_running(),
            _ => {}
        }
    }

    /// Someone else deleted the lock node of a listed item: stop listing it at once (eager: everything stops, as on
    /// any loss; incremental: only this item).
    pub(super) fn on_listed_lock_lost(&mut self, item: usize) {
        let reason = Reason::HeldLockDeleted;
        match self.cfg.rebalance {
            Rebalance::Eager => {
                self.published.set_owed(Some(Owed::All));
                self.stop_allocation_clock();
                let mut revoked = self.locks.held().clone();
                revoked.insert(item);
                self.show(PartitionState::Release, BTreeSet::new(), revoked, false, None, reason);
            }
            Rebalance::Incremental => {
                let mut listed = self.published.shown().listed().clone();
                listed.remove(&item);
                let state = match self.published.shown().state() {
                    PartitionState::Acquired => PartitionState::Allocating,
                    state => state,
                };
                let revoked = self.published.shown().revoked().clone();
                self.show(state, listed, revoked, false, None, reason);
                if self.published.owed().is_none() {
                    self.start_allocation_clock_unless_running();
                }
            }
        }
    }

    /// Whether finishing the lock work can complete the assignment in the state shown: while allocating; and,
    /// incremental, also while `Acquired` (gains taken while the rest stays listed).
    pub(super) fn completes_in_state(&self) -> bool {
        self.published.shown().state() == PartitionState::Allocating || self.cfg.rebalance == Rebalance::Incremental
    }

    /// kazoo's way: everything stops on a change, then everything is taken again.
    pub(super) fn decide_eager(&mut self) {
        if self.published.owed().is_some() {
            // Waiting for release_set(): keep what we hold, contend for nothing.
            return self.want_held();
        }
        if self.published.shown().state() != PartitionState::Allocating {
            return;
        }
        match &self.share.target {
            // The party is settling: start over from nothing.
            None => self.set_want(BTreeSet::new()),
            Some(_) => {
                self.want_target();
                self.acquired_if_complete();
            }
        }
    }

    /// Only what moves stops.
    pub(super) fn decide_incremental(&mut self) {
        let Some(target) = self.share.target.take() else {
            // Settling: keep what we hold, stop contending for the rest.
            return self.want_held();
        };
        self.rebalance_towards(&target);
        self.share.target = Some(target);
    }

    pub(super) fn rebalance_towards(&mut self, target: &BTreeSet<usize>) {
        let moved: BTreeSet<usize> = match self.share.listed_in_target {
            true => BTreeSet::new(),
            false => self.published.shown().listed().difference(target).copied().collect(),
        };
        if !moved.is_empty() {
            let mut revoked = match self.published.take_owed() {
                Some(Owed::Revoked(revoked)) => revoked,
                Some(Owed::All) => {
                    self.published.set_owed(Some(Owed::All));
                    return;
                }
                None => BTreeSet::new(),
            };
            revoked.extend(moved.iter().copied());
            let listed: BTreeSet<usize> = self.published.shown().listed().difference(&moved).copied().collect();
            self.show(PartitionState::Release, listed, revoked.clone(), false, None, Reason::ItemsRevoked);
            self.published.set_owed(Some(Owed::Revoked(revoked)));
            self.stop_allocation_clock();
        }
        // Listed less what moved: within the target until either changes.
        self.share.listed_in_target = true;
        match self.published.owed() {
            Some(Owed::Revoked(revoked)) => {
                // Keep the revoked items until the worker says it stopped them; let go of unlisted items not ours.
                let keep: BTreeSet<usize> = self
                    .locks
                    .held()
                    .iter()
                    .filter(|item| target.contains(item) || revoked.contains(item))
                    .copied()
                    .collect();
                self.set_want(keep);
            }
            Some(Owed::All) => self.want_held(),
            None => {
                if !self.locks.want_is_target() && self.locks.want() != target {
                    self.set_want(target.clone());
                }
                self.locks.set_want_is_target(true);
                if !self.acquired_if_complete() && self.published.shown().state() != PartitionState::Allocating {
                    let listed = self.published.shown().listed().clone();
                    self.show(PartitionState::Allocating, listed, BTreeSet::new(), false, None, Reason::TakingGained);
                }
            }
        }
    }

    /// Publishes `Acquired` once every wanted lock, and nothing else, is held. Returns whether the state is now
    /// `Acquired` with everything listed.
    pub(super) fn acquired_if_complete(&mut self) -> bool {
        // Not while suspended: a reply can overtake the client's news that the connection is back.
        let complete = self.session.connected()
            && self.locks.held().len() == self.locks.want().len()
            && self.released_all_unwanted()
            && self.want_is_held();
        // The load too: an assignment taken again over the same party and items (a departure handed over at once,
        // then the quiet period's) may weigh differently, and the published load must be the one in force.
        let unchanged = self.published.shown().state() == PartitionState::Acquired
            && self.published.shown().listed() == self.locks.held()
            && self.published.shown().members() == self.party.members()
            && self.published.shown().set() == self.set.in_force()
            && self.published.shown().load() == self.share.load().as_ref();
        if complete && !unchanged {
            self.stop_allocation_clock();
            let held = self.locks.held().clone();
            self.show(PartitionState::Acquired, held, BTreeSet::new(), false, None, Reason::AllAcquired);
        }
        complete
    }
}
