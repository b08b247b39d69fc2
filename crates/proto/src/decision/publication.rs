//! What the worker sees and is asked: the one place where the published state changes ([`Core::show`]), and the
//! worker's `release_set()` calls.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{AckId, Action, Cause, Core, Publication, Reason, SetInForce};
use crate::sabotage::{Sabotage, breaks};
use crate::{Disagreement, FencingToken, PartitionState};

/// What was published to the worker, what is owed to it, and the `release_set()` calls waiting for an answer.
pub(super) struct Published {
    shown: Shown,
    owed: Option<Owed>,
    /// `release_set()` calls answered once nothing unwanted is left to release.
    release_acks: Vec<AckId>,
    /// `release_set()` calls made during a suspension, answered when it ends.
    suspended_acks: Vec<AckId>,
}

impl Published {
    /// Nothing published yet: `Allocating`, nothing listed.
    pub(super) fn new() -> Self {
        let shown = Shown {
            state: PartitionState::Allocating,
            listed: BTreeSet::new(),
            tokens: Vec::new(),
            revoked: BTreeSet::new(),
            suspended: false,
            members: Arc::from([]),
            set: SetInForce::default(),
            disagreements: Arc::from([]),
            load: None,
            closed: BTreeSet::new(),
        };
        Self { shown, owed: None, release_acks: Vec::new(), suspended_acks: Vec::new() }
    }

    /// What was published last.
    pub(super) fn shown(&self) -> &Shown {
        &self.shown
    }

    /// What the worker has been asked to give up with `release_set()`, if anything.
    pub(super) fn owed(&self) -> Option<&Owed> {
        self.owed.as_ref()
    }

    pub(super) fn take_owed(&mut self) -> Option<Owed> {
        self.owed.take()
    }

    pub(super) fn set_owed(&mut self, owed: Option<Owed>) {
        self.owed = owed;
    }

    /// `release_set()` calls to answer once nothing unwanted is left to release.
    pub(super) fn answer_after_release(&mut self, acks: impl IntoIterator<Item = AckId>) {
        self.release_acks.extend(acks);
    }

    /// Whether `release_set()` calls wait for the releases.
    pub(super) fn awaiting_release(&self) -> bool {
        !self.release_acks.is_empty()
    }

    pub(super) fn take_release_acks(&mut self) -> Vec<AckId> {
        std::mem::take(&mut self.release_acks)
    }

    /// A `release_set()` call made during a suspension, answered when it ends.
    pub(super) fn answer_after_suspension(&mut self, ack: AckId) {
        self.suspended_acks.push(ack);
    }

    pub(super) fn take_suspended_acks(&mut self) -> Vec<AckId> {
        std::mem::take(&mut self.suspended_acks)
    }
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
    state: PartitionState,
    listed: BTreeSet<usize>,
    /// The fencing token of each listed item, in the order of `listed`.
    tokens: Vec<i64>,
    revoked: BTreeSet<usize>,
    suspended: bool,
    /// The party the assignment in force was computed from.
    members: Arc<[String]>,
    set: SetInForce,
    disagreements: Arc<[Disagreement]>,
    load: Option<Arc<crate::Load>>,
    /// The listed items known closed.
    closed: BTreeSet<usize>,
}

impl Shown {
    pub(super) fn state(&self) -> PartitionState {
        self.state
    }

    /// The items listed as processable.
    pub(super) fn listed(&self) -> &BTreeSet<usize> {
        &self.listed
    }

    /// The items the worker was asked to stop.
    pub(super) fn revoked(&self) -> &BTreeSet<usize> {
        &self.revoked
    }

    /// The party the assignment in force was computed from.
    pub(super) fn members(&self) -> &Arc<[String]> {
        &self.members
    }

    /// The shared set's version the assignment in force follows.
    pub(super) fn set(&self) -> &SetInForce {
        &self.set
    }

    /// Our load under the assignment in force, as published.
    pub(super) fn load(&self) -> Option<&Arc<crate::Load>> {
        self.load.as_ref()
    }
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
            self.out.actions.push_back(Action::Ack(ack, Err(ending.cause().clone())));
            return;
        }
        if self.session.suspended() {
            // Answered when the session's fate is known.
            self.published.answer_after_suspension(ack);
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
                self.share.clear();
                self.locks.set_want_is_target(false);
                self.party.restart_quiet_period(self.now);
                self.start_allocation_clock();
            }
        }
        if breaks(Sabotage::AckBeforeRelease) {
            self.out.actions.push_back(Action::Ack(ack, Ok(())));
            return;
        }
        self.published.answer_after_release([ack]);
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
            members: self.party.members().clone(),
            set: self.set.in_force().clone(),
            disagreements: self.party.disagreements().clone(),
            load: self.share.load(),
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
        let listed = self.set.catalogue().in_item_order(shown.listed.iter().copied());
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
            member: self.party.me().clone(),
            items,
            nodes,
            revoked: self.set.catalogue().in_item_order(shown.revoked.iter().copied()),
            members: self.party.members().clone(),
            cause,
            suspended,
            set: self.set.in_force().clone(),
            disagreements: self.party.disagreements().clone(),
            load: self.share.load(),
            closed: self.set.catalogue().in_item_order(shown.closed.iter().copied()),
            reason,
        })));
        self.published.shown = shown;
        self.share.listed_changed();
    }
}
