//! Which of our listed items are closed (their source produces nothing new: drain them, then finish them). Closing
//! an item, or splitting or merging it, is a version of the shared set that changes no item, so the set read does not
//! tell: a member of a set with lineage reads its listed items' lineage nodes, after each version it reads and after
//! it lists new items, at most once per `time_boundary` (a burst of versions is one read, not one per version).
//!
//! What is known closed belongs to one ownership of one item: it is kept with the lock's fencing token, and every
//! listed item is read again, the known-closed ones too. An item stays closed while it is in the set, but a member may
//! not see every version: between two that it reads, the item may have been finished, retired, and added again under
//! its name, a new item that is not closed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use super::{Core, Op, Pending, Reason, ReqError, ReqId};
use crate::sabotage::{Sabotage, breaks};

/// What we know of our items' closing, and the read that keeps it current.
#[derive(Debug, Default)]
pub(super) struct Closed {
    /// Items we hold that are known closed, each with the fencing token of the lock it was found closed under.
    items: BTreeMap<usize, i64>,
    /// Something may have closed one of our items since the last read.
    due: bool,
    read: Option<ReqId>,
    /// When the last read was sent: the next waits `time_boundary` after it.
    sent_at: Option<Instant>,
}

impl Core {
    /// A version of a set with lineage was read, or new items were listed: one of our items may have closed.
    pub(super) fn items_may_have_closed(&mut self) {
        if self.set.lineage() {
            self.set.closed_mut().due = true;
        }
    }

    /// When the next read of our items' lineage is due, if one is.
    pub(super) fn closed_read_due(&self) -> Option<Instant> {
        let closed = self.set.closed();
        let due =
            self.set.lineage() && closed.due && closed.read.is_none() && !self.published.shown().listed().is_empty();
        due.then(|| closed.sent_at.map_or(self.now, |at| at + self.delays().closed_reread()))
    }

    /// Reads the lineage of the listed items, once due.
    pub(super) fn read_closed_if_due(&mut self) {
        if self.closed_read_due().is_none_or(|at| at > self.now) || !self.may_send() {
            return;
        }
        self.set.closed_mut().due = false;
        let items: Vec<usize> = if breaks(Sabotage::ClosedOutlivesOwnership) {
            self.published
                .shown()
                .listed()
                .iter()
                .filter(|item| !self.set.closed().items.contains_key(item))
                .copied()
                .collect()
        } else {
            self.published.shown().listed().iter().copied().collect()
        };
        if !items.is_empty() {
            self.set.closed_mut().sent_at = Some(self.now);
            self.set.closed_mut().read = Some(self.request(Op::ReadClosed(items.clone()), Pending::Closed(items)));
        }
    }

    pub(super) fn on_closed(&mut self, items: Vec<usize>, result: Result<Vec<bool>, ReqError>) {
        self.set.closed_mut().read = None;
        match result {
            Ok(closed) => {
                let mut changed = false;
                for (item, closed) in items.into_iter().zip(closed) {
                    let token = self.locks.get(item).map(|lock| lock.token());
                    match token.filter(|_| closed && self.locks.held().contains(&item)) {
                        Some(token) => changed |= self.set.closed_mut().items.insert(item, token) != Some(token),
                        // Not closed: if it was known closed, the name is another item's now.
                        None if !closed => changed |= self.set.closed_mut().items.remove(&item).is_some(),
                        None => {}
                    }
                }
                if changed {
                    self.republish(Reason::ItemsClosed);
                }
            }
            // Tried again a `time_boundary` after this one was sent.
            Err(ReqError::Transient | ReqError::NoNode) => self.set.closed_mut().due = true,
            Err(ReqError::Fatal(cause)) => self.fail(cause),
        }
    }

    /// The listed items known closed, as a publication shows them; forgets items no longer held under the lock they
    /// were found closed under, or no longer in the set (an item added again later is another item).
    pub(super) fn closed_among(&mut self, listed: &BTreeSet<usize>) -> BTreeSet<usize> {
        let locks = &self.locks;
        let (catalogue, closed) = self.set.catalogue_and_closed();
        let same_ownership = |item: &usize, token: &i64| {
            breaks(Sabotage::ClosedOutlivesOwnership) || locks.get(*item).is_some_and(|lock| lock.token() == *token)
        };
        closed.items.retain(|item, token| {
            locks.held().contains(item) && catalogue.contains(*item) && same_ownership(item, token)
        });
        closed.items.keys().filter(|item| listed.contains(item)).copied().collect()
    }
}
