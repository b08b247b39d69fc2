//! The model's watches: one-shot registrations per path and kind, fired in registration order by a committed
//! change, and dropped unfired with their session.

use std::collections::BTreeMap;

use super::{Fired, SessionId, WatchEvent, WatchId, Zk};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WatchKind {
    Children,
    Data,
}

/// Watches of one kind: path → (session, id) in registration order, so they fire in a reproducible order.
pub(super) type WatchTable = BTreeMap<String, Vec<(SessionId, WatchId)>>;

impl Zk {
    pub(super) fn register(&mut self, kind: WatchKind, s: SessionId, path: &str) -> WatchId {
        let id = self.next_watch;
        self.next_watch += 1;
        let table = match kind {
            WatchKind::Data => &mut self.data_watches,
            WatchKind::Children => &mut self.child_watches,
        };
        table.entry(path.to_owned()).or_default().push((s, id));
        id
    }

    /// Fires, and so disarms (watches are one-shot), every watch of `kind` on `path`.
    pub(super) fn trigger(&mut self, kind: WatchKind, path: &str, event: WatchEvent) {
        let table = match kind {
            WatchKind::Data => &mut self.data_watches,
            WatchKind::Children => &mut self.child_watches,
        };
        if let Some(watches) = table.remove(path) {
            let fired =
                watches.into_iter().map(|(session, watch)| Fired { session, watch, path: path.to_owned(), event });
            self.fired.extend(fired);
        }
    }
}

/// Forgets, without firing, every watch `s` registered.
pub(super) fn drop_session_watches(table: &mut WatchTable, s: SessionId) {
    table.retain(|_, watches| {
        watches.retain(|&(owner, _)| owner != s);
        !watches.is_empty()
    });
}
