//! The member's ZooKeeper session as the parts of a handle reach it (checkpoints, the shared set), released when
//! the partitioner's background task ends.
//!
//! A member's locks and party node are ephemeral nodes of its session: they go when the session closes, and the
//! session closes when the last clone of its `Client` is dropped. The background task deletes them when it ends, but
//! if it cannot (the connection is gone for good, a permission changed, the task panicked), closing the session is
//! the only clean-up left. So a handle must not keep the session open after its task ended: the handle's parts hold
//! it through a [`SessionRef`], which the task empties when it stops ([`SessionRelease`]). A client the user kept a
//! clone of stays open, as the user's to close.

use std::sync::{Arc, PoisonError, RwLock};

use crate::zookeeper::ZooKeeper;

/// A client, owned or borrowed from a member that may release it.
#[derive(Clone, Debug)]
pub(crate) enum SessionRef<Z> {
    /// A standalone handle's own client (a [`SharedSet`](crate::SharedSet) made by the user).
    Owned(Z),
    /// The member's client, for as long as its background task runs.
    Member(Arc<RwLock<Option<Z>>>),
}

/// Empties a member's [`SessionRef`]s: held by the background task, used once, when it ends.
#[derive(Debug)]
pub(crate) struct SessionRelease<Z>(Arc<RwLock<Option<Z>>>);

impl<Z: ZooKeeper> SessionRef<Z> {
    /// The member's client, and what releases it.
    pub fn member(client: Z) -> (SessionRef<Z>, SessionRelease<Z>) {
        let slot = Arc::new(RwLock::new(Some(client)));
        (SessionRef::Member(slot.clone()), SessionRelease(slot))
    }

    /// The client, unless the member released it (its task ended).
    pub fn client(&self) -> Option<Z> {
        match self {
            SessionRef::Owned(client) => Some(client.clone()),
            // The lock is held only to clone or take the client, never across an await: a poisoned one is still usable.
            SessionRef::Member(slot) => slot.read().unwrap_or_else(PoisonError::into_inner).clone(),
        }
    }
}

impl<Z> SessionRelease<Z> {
    /// Drops the handles' clone of the client: once the task's own clones are gone too, the session closes (unless
    /// the user kept a clone).
    pub fn release(&self) {
        let client = self.0.write().unwrap_or_else(PoisonError::into_inner).take();
        drop(client);
    }
}
