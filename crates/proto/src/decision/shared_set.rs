//! The shared set in ZooKeeper: following the version an admin committed, seeing to an update whose writer is gone
//! (the party's first member does), and the set each assignment follows, announced in our party node.

use super::catalogue::Catalogue;
use super::closed::Closed;
use super::timers::Timer;
use super::{Cause, Core, Op, Pending, Reason, ReqError, SetInForce};
use crate::sabotage::{Sabotage, breaks};
use crate::set_layout::{self as set_layout, SetView, Unfinished};

/// The items: the catalogue, the shared set as followed, and the set the assignment in force was computed from.
pub(super) struct Following {
    catalogue: super::catalogue::Catalogue,
    read: Option<super::ReqId>,
    /// The latest read of the shared set is newer than the last change notification.
    fresh: bool,
    /// The shared set's abandoned update this member is undoing or finishing, or whose writer's lease it watches
    /// (the party's first member does it), by change tag.
    recovery: Option<(String, super::ReqId)>,
    /// The update under way as of the latest read of the shared set: taken care of by whoever is the first member,
    /// also one that becomes first later.
    unfinished: Option<Unfinished>,
    /// The shared set followed uses lineage: a member that announces nothing (kazoo) cannot take part.
    lineage: bool,
    /// Which of our items are closed.
    closed: super::closed::Closed,
    /// The set the assignment in force was computed from (indexes), and its change.
    assigned: Vec<usize>,
    in_force: SetInForce,
}

impl Following {
    /// Following `catalogue`: a fixed set is known at once (`shared` is false), a shared one is read first.
    pub(super) fn new(catalogue: Catalogue, shared: bool) -> Self {
        Following {
            recovery: None,
            unfinished: None,
            lineage: false,
            closed: Closed::default(),
            assigned: catalogue.set().to_vec(),
            catalogue,
            read: None,
            fresh: !shared,
            in_force: SetInForce::default(),
        }
    }

    /// Every item known, by stable index, and which of them form the set followed.
    pub(super) fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }

    /// The set the assignment in force was computed from.
    pub(super) fn in_force(&self) -> &SetInForce {
        &self.in_force
    }

    /// The items the assignment in force was computed from (indexes).
    #[cfg(any(test, feature = "sim"))]
    pub(super) fn assigned(&self) -> &[usize] {
        &self.assigned
    }

    /// Whether the set followed uses lineage.
    pub(super) fn lineage(&self) -> bool {
        self.lineage
    }

    /// The update under way as of the latest read, if any.
    pub(super) fn unfinished(&self) -> Option<&Unfinished> {
        self.unfinished.as_ref()
    }

    /// Whether the latest read is newer than the last change notification.
    pub(super) fn fresh(&self) -> bool {
        self.fresh
    }

    /// The set changed (or a recovery is due again): read it again.
    pub(super) fn mark_stale(&mut self) {
        self.fresh = false;
    }

    /// Which of our items are closed ([`closed`](super::closed)).
    pub(super) fn closed(&self) -> &Closed {
        &self.closed
    }

    pub(super) fn closed_mut(&mut self) -> &mut Closed {
        &mut self.closed
    }

    /// The items, and which of ours are closed: what is known closed is kept only for items still in the set.
    pub(super) fn catalogue_and_closed(&mut self) -> (&Catalogue, &mut Closed) {
        (&self.catalogue, &mut self.closed)
    }
}

impl Core {
    /// A read of the shared set: only a set an admin committed is followed; a set that is missing, unreadable or
    /// empty (by hand) leaves the set in force as it is. An update whose writer is gone is undone or finished by the
    /// party's first member, which watches the writer's lease meanwhile.
    pub(super) fn on_set(&mut self, result: Result<set_layout::RawRead, ReqError>) {
        self.set.read = None;
        let read = match result {
            Ok(read) => read,
            Err(ReqError::Transient) => return self.back_off(),
            // The request path arms a watch for the node's return; meanwhile the set in force stays.
            Err(ReqError::NoNode) => {
                self.set.fresh = true;
                return;
            }
            Err(ReqError::Fatal(cause)) => return self.fail(cause),
        };
        self.set.fresh = true;
        let view = set_layout::interpret(read);
        self.set.unfinished = match &view {
            SetView::Committed(committed) => committed.unfinished.clone(),
            SetView::Missing { unfinished } => unfinished.clone(),
            SetView::Unreadable(_) | SetView::Torn => None,
        };
        match view {
            SetView::Committed(committed) => {
                if let Some(unfinished) = &committed.unfinished {
                    self.watch_unfinished(unfinished);
                }
                if committed.header.lineage != self.set.lineage {
                    self.set.lineage = committed.header.lineage;
                    self.note_agreements();
                }
                // A lineage change may have closed one of our items (it changes no item).
                self.items_may_have_closed();
                if committed.items.is_empty() {
                    // Only a child deleted by hand can do this (updates refuse to empty the set).
                    return;
                }
                if breaks(Sabotage::IgnoreSetChanges) {
                    return;
                }
                // Compared by items: a child created by hand changes the set, not the version.
                let (change, reweighed) =
                    self.set.catalogue.replace(committed.items, committed.version, committed.weights);
                self.locks.grow_dirs(self.set.catalogue.len());
                if !change.is_empty() || reweighed {
                    self.locks.set_want_is_target(false);
                    self.on_inputs_changed(Reason::SharedSetChanged);
                } else if self.set.in_force.generation == self.set.catalogue.generation()
                    && self.set.in_force.version.is_some()
                    && self.set.in_force.version != self.set.catalogue.version()
                {
                    // The same items and weights at a newer version (a lineage change that made no item ready): the
                    // assignment in force is the new version's as it is. Follow it and say so, so that a member that
                    // starts at that version agrees with us.
                    self.set.in_force.version = self.set.catalogue.version();
                    self.announce();
                    // Shown ACQUIRED: shown again, at the new version. In any other state the next publication
                    // carries it.
                    if self.published.shown().state() == crate::PartitionState::Acquired {
                        self.acquired_if_complete();
                    }
                }
            }
            SetView::Missing { unfinished: Some(unfinished) } => self.watch_unfinished(&unfinished),
            // Deleted or unreadable (by hand): keep the set in force. Torn: an update landed between the reads, and
            // the header watch fires for it.
            SetView::Missing { unfinished: None } | SetView::Unreadable(_) | SetView::Torn => {}
        }
    }

    /// Reads the shared set again after a change notification (unless a read is in flight).
    pub(super) fn read_set_if_stale(&mut self) {
        if self.shared() && self.may_send() && self.set.read.is_none() && !self.set.fresh {
            self.set.read = Some(self.request(Op::ReadSet, Pending::ReadSet));
        }
    }

    /// A recovery is done, or the writer's lease is gone: read the set again (a recovery is idempotent, and asked for
    /// again if still due). Failed: the same, a time_boundary later.
    pub(super) fn on_recovered(&mut self, result: Result<(), ReqError>) {
        self.set.recovery = None;
        match result {
            Ok(()) => self.set.fresh = false,
            Err(ReqError::Fatal(Cause::SessionEnded(end))) => self.fail(Cause::SessionEnded(end)),
            Err(_) => self.timers.set(Timer::Recovery, Some(self.now + self.delays().recovery_retry())),
        }
    }

    /// The party's first member takes care of an update under way: it watches the writer's lease, and once the
    /// lease is gone (the writer crashed, or its session expired) undoes or finishes the update, so that no update
    /// stays unfinished for longer than its writer's session outlives the writer.
    pub(super) fn watch_unfinished(&mut self, unfinished: &Unfinished) {
        if breaks(Sabotage::NoSetRecovery) {
            return;
        }
        let first = self.party.first();
        let Some(tag) = unfinished.state.change() else { return };
        if !first
            || self.ending.is_some()
            || self.timers.is_armed(Timer::Recovery)
            || self.set.recovery.as_ref().is_some_and(|(t, _)| t == tag)
        {
            return;
        }
        let (op, pending) = if unfinished.abandoned() {
            (Op::RecoverSet(unfinished.clone()), Pending::RecoverSet)
        } else {
            (Op::WatchLease(tag.to_owned()), Pending::WatchLease)
        };
        let id = self.request(op, pending);
        self.set.recovery = Some((tag.to_owned(), id));
    }

    /// The set the new assignment follows, and (with a shared set) what changed since the last assignment; the first
    /// member of the party also clears the lock directories of removed items nobody holds. A new version is
    /// announced in our party node.
    pub(super) fn note_set_in_force(&mut self) {
        let generation = self.set.catalogue.generation();
        if !self.shared() || (self.set.in_force.version.is_some() && self.set.in_force.generation == generation) {
            return;
        }
        let change = self.set.catalogue.change_since(&self.set.assigned);
        self.set.assigned = self.set.catalogue.set().to_vec();
        let first = self.party.first();
        let free: Vec<usize> = change.removed().iter().copied().filter(|item| !self.locks.contains(*item)).collect();
        if first && !free.is_empty() {
            self.remove_dirs(free);
        }
        let version = self.set.catalogue.version();
        let (added, removed) = change.into_parts();
        self.set.in_force = SetInForce { generation, version, added: added.into(), removed: removed.into() };
    }

    /// Announces what the assignment in force follows, if it changed: the version of the shared set, and (a function
    /// that keeps the placement) the assignment's digest. Members compare announcements; ours changes whenever we
    /// follow a change, and theirs when they do.
    pub(super) fn announce(&mut self) {
        let mut next = self.cfg.agreement;
        if let Some(version) = self.set.in_force.version {
            next.set = crate::announcement::SetSource::Shared(Some(version));
        }
        next.placement = self.placement_digest();
        if next != self.cfg.agreement {
            self.cfg.agreement = next;
            self.party.announcement_changed(self.now);
            let data = self.cfg.agreement.node_data(&self.cfg.identifier);
            self.request(Op::Announce(data), Pending::Announce);
            // Our disagreements are against our own announcement: compare again (the others follow in their time).
            self.note_agreements();
        }
    }

    pub(super) fn remove_dirs(&mut self, items: Vec<usize>) {
        for &item in &items {
            self.locks.forget_dir(item);
        }
        self.request(Op::RemoveDirs(items), Pending::RemoveDirs);
    }
}
