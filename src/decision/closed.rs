//! Which of our listed items are closed (their source produces nothing new: drain them, then finish them). Closing
//! an item, or splitting or merging it, is a version of the shared set that changes no item, so the set read does not
//! tell: a member of a set with lineage reads its listed items' lineage nodes, after each version it reads and after
//! it lists new items, at most once per `time_boundary` (a burst of versions is one read, not one per version). A
//! closed item stays closed while it is in the set, so only items not yet known closed are read again.

use std::collections::BTreeSet;
use std::time::Instant;

use super::{Core, Op, Pending, Reason, ReqError, ReqId};

/// What we know of our items' closing, and the read that keeps it current.
#[derive(Debug, Default)]
pub(super) struct Closed {
    /// Items we hold that are known closed.
    pub items: BTreeSet<usize>,
    /// Something may have closed one of our items since the last read.
    due: bool,
    read: Option<ReqId>,
    /// When the last read was sent: the next waits `time_boundary` after it.
    sent_at: Option<Instant>,
}

impl Core {
    /// A version of a set with lineage was read, or new items were listed: one of our items may have closed.
    pub(super) fn items_may_have_closed(&mut self) {
        if self.lineage {
            self.closed.due = true;
        }
    }

    /// When the next read of our items' lineage is due, if one is.
    pub(super) fn closed_read_due(&self) -> Option<Instant> {
        let due = self.lineage && self.closed.due && self.closed.read.is_none() && !self.shown.listed.is_empty();
        due.then(|| self.closed.sent_at.map_or(self.now, |at| at + self.cfg.time_boundary))
    }

    /// Reads the lineage of the listed items not known closed, once due.
    pub(super) fn read_closed_if_due(&mut self) {
        if self.closed_read_due().is_none_or(|at| at > self.now) || !self.may_send() {
            return;
        }
        self.closed.due = false;
        let items: Vec<usize> = self.shown.listed.difference(&self.closed.items).copied().collect();
        if !items.is_empty() {
            self.closed.sent_at = Some(self.now);
            self.closed.read = Some(self.request(Op::ReadClosed(items.clone()), Pending::Closed(items)));
        }
    }

    pub(super) fn on_closed(&mut self, items: Vec<usize>, result: Result<Vec<bool>, ReqError>) {
        self.closed.read = None;
        match result {
            Ok(closed) => {
                let held = &self.locks.held;
                let newly: Vec<usize> = items
                    .into_iter()
                    .zip(closed)
                    .filter(|&(item, closed)| closed && held.contains(&item))
                    .map(|(item, _)| item)
                    .collect();
                if !newly.is_empty() {
                    self.closed.items.extend(newly);
                    self.republish(Reason::ItemsClosed);
                }
            }
            // Tried again a `time_boundary` after this one was sent.
            Err(ReqError::Transient | ReqError::NoNode) => self.closed.due = true,
            Err(ReqError::Fatal(cause)) => self.fail(cause),
        }
    }

    /// The listed items known closed, as a publication shows them; forgets items no longer held or no longer in the
    /// set (an item added again later is another item).
    pub(super) fn closed_among(&mut self, listed: &BTreeSet<usize>) -> BTreeSet<usize> {
        let (held, catalogue) = (&self.locks.held, &self.catalogue);
        self.closed.items.retain(|&item| held.contains(&item) && catalogue.contains(item));
        self.closed.items.intersection(listed).copied().collect()
    }
}
