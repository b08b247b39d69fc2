//! What the worker sees and is asked: the one place where the published state changes ([`Core::show`]), and the
//! worker's `release_set()` calls.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{AckId, Action, Cause, Core, Publication, Reason, SetInForce};
use crate::sabotage::{Sabotage, breaks};
use crate::{Disagreement, FencingToken, PartitionState};

/// What was published to the worker, what is owed to it, and the `release_set()` calls waiting for an answer.
pub(super) struct Published {
    pub(super) shown: Shown,
    pub(super) owed: Option<Owed>,
    /// `release_set()` calls answered once nothing unwanted is left to release.
    pub(super) release_acks: Vec<AckId>,
    /// `release_set()` calls made during a suspension, answered when it ends.
    pub(super) suspended_acks: Vec<AckId>,
}

/// What the worker has been asked to do with `release_set()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Owed {
    /// Stop everything; `release_set()` gives up every lock.
    All,
    /// Stop these items; `release_set()` gives up exactly these.
    Revoked(BTreeSet<usize>),
}

/// What was published last.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Shown {
    pub(super) state: PartitionState,
    pub(super) listed: BTreeSet<usize>,
    /// The fencing token of each listed item, in the order of `listed`.
    pub(super) tokens: Vec<i64>,
    pub(super) revoked: BTreeSet<usize>,
    pub(super) suspended: bool,
    /// The party the assignment in force was computed from.
    pub(super) members: Arc<[String]>,
    pub(super) set: SetInForce,
    pub(super) disagreements: Arc<[Disagreement]>,
    pub(super) load: Option<Arc<crate::Load>>,
    /// The listed items known closed.
    pub(super) closed: BTreeSet<usize>,
}

impl Core {
    /// Publishes `Release` revoking everything; `release_set()` will give up every lock.
    pub(super) fn ask_release_all(&mut self, reason: Reason) {
        self.published.owed = Some(Owed::All);
        // Waiting for the worker is not allocating: the clock starts again at release_set().
        self.stop_allocation_clock();
        let revoked = self.locks.held().clone();
        self.show(PartitionState::Release, BTreeSet::new(), revoked, false, None, reason);
    }

    pub(super) fn on_release_set(&mut self, ack: AckId) {
        if let Some(ending) = &self.ending {
            self.out.actions.push_back(Action::Ack(ack, Err(ending.cause.clone())));
            return;
        }
        if self.session.suspension.is_some() {
            // Answered when the session's fate is known.
            self.published.suspended_acks.push(ack);
            return;
        }
        match self.published.owed.take() {
            Some(Owed::Revoked(revoked)) => {
                // Incremental: the worker stopped exactly these. Keep the rest listed.
                let listed = self.published.shown.listed.clone();
                self.show(PartitionState::Allocating, listed, BTreeSet::new(), false, None, Reason::RevokedReleased);
                let want = self.locks.want().iter().filter(|item| !revoked.contains(item)).copied().collect();
                self.set_want(want);
                self.start_allocation_clock();
            }
            Some(Owed::All) | None => {
                // kazoo: give up everything and allocate from nothing, after a full time_boundary. Publish first:
                // once a lock node is deleted another member may take its item at once.
                self.show(
                    PartitionState::Allocating,
                    BTreeSet::new(),
                    BTreeSet::new(),
                    false,
                    None,
                    Reason::ReleaseSet,
                );
                self.set_want(BTreeSet::new());
                self.share.target = None;
                self.target_changed();
                self.share.outdated = false;
                self.locks.set_want_is_target(false);
                self.party.debounce.changed(self.now, self.party.latest.len());
                self.start_allocation_clock();
            }
        }
        if breaks(Sabotage::AckBeforeRelease) {
            self.out.actions.push_back(Action::Ack(ack, Ok(())));
            return;
        }
        self.published.release_acks.push(ack);
    }

    /// Publishes the current state again (something besides the state changed).
    pub(super) fn republish(&mut self, reason: Reason) {
        if self.ending.is_some() {
            return;
        }
        let shown = self.published.shown.clone();
        self.show(shown.state, shown.listed, shown.revoked, shown.suspended, None, reason);
    }

    /// The single place where the published state changes. A publication is a transition only when the state, the
    /// listed items or their tokens, the revoked items, the suspension or the cause change; when only what the snapshot
    /// says beside them changed, it is an update of the same state (a worker that starts work at every `Acquired`
    /// must not see the same `Acquired` twice), and when nothing changed, nothing is published.
    pub(super) fn show(
        &mut self,
        state: PartitionState,
        listed: BTreeSet<usize>,
        revoked: BTreeSet<usize>,
        suspended: bool,
        cause: Option<Cause>,
        reason: Reason,
    ) {
        debug_assert!(listed.is_subset(self.locks.held()), "listing an item whose lock is not held");
        if state == PartitionState::Acquired {
            self.locks.acquired();
        }
        if listed.difference(&self.published.shown.listed).next().is_some() {
            self.items_may_have_closed();
        }
        let closed = self.closed_among(&listed);
        let tokens = listed.iter().map(|item| self.locks.get(*item).map_or(0, |lock| lock.token())).collect();
        let shown = Shown {
            state,
            closed,
            listed,
            tokens,
            revoked,
            suspended,
            members: self.party.members.clone(),
            set: self.set.in_force.clone(),
            disagreements: self.party.announcements.disagreements().clone(),
            load: self.share.load.clone(),
        };
        if shown == self.published.shown && cause.is_none() {
            return;
        }
        let transition = cause.is_some()
            || breaks(Sabotage::RepublishUnchanged)
            || (shown.state, &shown.listed, &shown.tokens, &shown.revoked, shown.suspended)
                != (
                    self.published.shown.state,
                    &self.published.shown.listed,
                    &self.published.shown.tokens,
                    &self.published.shown.revoked,
                    self.published.shown.suspended,
                );
        // In item order, not index order: a handle finds an item in the snapshot by binary search.
        let listed = self.set.catalogue.in_item_order(shown.listed.iter().copied());
        let listed = if breaks(Sabotage::IndexOrder) { shown.listed.iter().copied().collect() } else { listed };
        let items = listed
            .iter()
            .map(|&item| (item, FencingToken::new(self.locks.get(item).map_or(0, |lock| lock.token()))))
            .collect();
        let nodes = listed
            .iter()
            .map(|item| self.locks.get(*item).and_then(|lock| lock.node().map(str::to_owned)).unwrap_or_default())
            .collect();
        self.out.actions.push_back(Action::Publish(Box::new(Publication {
            transition,
            state,
            member: self.party.me.clone(),
            items,
            nodes,
            revoked: self.set.catalogue.in_item_order(shown.revoked.iter().copied()),
            members: self.party.members.clone(),
            cause,
            suspended,
            set: self.set.in_force.clone(),
            disagreements: self.party.announcements.disagreements().clone(),
            load: self.share.load.clone(),
            closed: self.set.catalogue.in_item_order(shown.closed.iter().copied()),
            reason,
        })));
        self.published.shown = shown;
        self.share.listed_in_target = false;
    }
}
