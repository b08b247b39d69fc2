//! Turns the core's publications into the [`Snapshot`] handles read, with their log lines and metrics: the single
//! place where the published snapshot changes (the driver and the simulation both publish through it).
//! Beside it, the translations between the client's session states and the core's terms (a session's end, a
//! failure's cause).

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;
use zookeeper_client::SessionState;

use crate::decision::{Cause, Core, Event, Publication, SessionEnd, SetInForce};
use crate::layout::Paths;
use crate::metrics::DriverMetrics;
use crate::{Error, Snapshot};

pub(crate) struct Publisher {
    sender: Arc<watch::Sender<Snapshot>>,
    /// The set change the snapshot shows (items are looked up only when it changes).
    published_set: SetInForce,
    metrics: DriverMetrics,
}

impl Publisher {
    pub fn new(sender: Arc<watch::Sender<Snapshot>>, paths: &Paths, now: Instant) -> Self {
        Publisher { sender, published_set: SetInForce::default(), metrics: DriverMetrics::new(paths, now) }
    }

    /// The snapshot sender (what the handles' receivers watch).
    pub fn sender(&self) -> &Arc<watch::Sender<Snapshot>> {
        &self.sender
    }

    /// A session state reported by the client.
    pub fn session(&mut self, state: SessionState) {
        self.metrics.session(state);
    }

    /// A lock contender started waiting behind another.
    pub fn lock_wait(&self) {
        self.metrics.lock_wait();
    }

    /// The driver is built: what the metrics need from the core before its first publication.
    pub fn started(&self, core: &Core) {
        self.metrics.started(core.set_len());
    }

    /// Publishes `p`: bumps the generation and wakes every observer.
    pub fn publish(&mut self, core: &Core, p: Publication, now: Instant) {
        let indexes: Vec<usize> = p.items.iter().map(|&(i, _)| i).collect();
        let items = core.items_of(&indexes);
        let tokens = p.items.iter().map(|&(_, token)| token).collect();
        let revoked = core.items_of(&p.revoked);
        let cause = p.cause.map(error_of);
        // The core may learn of the session's end from any request's reply or watch (a held-lock watch, the set's)
        // before the session watcher says so: count it from the cause, once (`session` ignores a second Expired).
        if let Some(Error::SessionLost { state }) = &cause {
            self.metrics.session(*state);
        }
        let before = self.sender.borrow().state;
        let revoked_before = self.sender.borrow().revoked.clone();
        let after = (p.state, p.reason, items.len(), &revoked[..]);
        self.metrics.published((before, &revoked_before), after, core.set_len(), now);
        let published_set = &mut self.published_set;
        self.sender.send_modify(|snapshot| {
            if p.disagreements != snapshot.disagreements {
                for disagreement in p.disagreements.iter() {
                    tracing::warn!(
                        other = %disagreement.member,
                        ours = %disagreement.ours,
                        theirs = %disagreement.theirs,
                        "{disagreement}: the members may wait forever for each other's locks until one of them is \
                         reconfigured"
                    );
                }
            }
            if p.set != *published_set {
                snapshot.added = core.items_of(&p.set.added);
                snapshot.removed = core.items_of(&p.set.removed);
                snapshot.set_version = p.set.version;
                *published_set = p.set.clone();
                if !snapshot.added.is_empty() || !snapshot.removed.is_empty() {
                    tracing::info!(
                        version = p.set.version,
                        added = snapshot.added.len(),
                        removed = snapshot.removed.len(),
                        "following a new version of the shared item set"
                    );
                }
            }
            snapshot.disagreements = p.disagreements;
            tracing::info!(
                from = %snapshot.state,
                to = %p.state,
                generation = snapshot.generation + 1,
                reason = p.reason.as_str(),
                items = items.len(),
                revoked = revoked.len(),
                "state change"
            );
            if let Some(cause) = &cause {
                if matches!(cause, Error::Finished) {
                    tracing::info!("partitioner finished: locks released, party left");
                } else {
                    tracing::warn!(%cause, "partitioner ended");
                }
            }
            snapshot.state = p.state;
            snapshot.generation += 1;
            snapshot.member = p.member;
            snapshot.items = items;
            snapshot.tokens = tokens;
            snapshot.revoked = revoked;
            snapshot.members = p.members;
            snapshot.cause = cause;
            snapshot.suspended = p.suspended;
            snapshot.lock_nodes = p.nodes.into();
        });
    }

    /// Publishes `Failure` for a task that panicked (its core and publisher are gone with it).
    pub fn panicked(sender: &watch::Sender<Snapshot>, reason: String) {
        sender.send_modify(|snapshot| {
            snapshot.state = crate::PartitionState::Failure;
            snapshot.generation += 1;
            snapshot.items = Arc::from([]);
            snapshot.tokens = Arc::from([]);
            snapshot.revoked = Arc::from([]);
            snapshot.cause = Some(Error::Internal { reason });
            snapshot.suspended = false;
        });
    }
}

/// The error a handle reports for the core's cause of a failure.
pub(crate) fn error_of(cause: Cause) -> Error {
    match cause {
        Cause::Finished => Error::Finished,
        Cause::SessionEnded(end) => Error::SessionLost { state: session_state(end) },
        Cause::Refused(error) => error,
        Cause::PartitionFn(reason) => Error::PartitionFn { reason },
        Cause::AllocationTimeout(limit) => Error::AllocationTimeout(limit),
        Cause::Internal(reason) => Error::Internal { reason },
    }
}

/// The client's terminal session state for the core's.
pub(crate) fn session_state(end: SessionEnd) -> SessionState {
    match end {
        SessionEnd::Expired => SessionState::Expired,
        SessionEnd::Closed => SessionState::Closed,
        SessionEnd::AuthFailed => SessionState::AuthFailed,
    }
}

/// The core's session end for the client's terminal state (`None` for a state that is not terminal).
pub(crate) fn session_end(state: SessionState) -> Option<SessionEnd> {
    match state {
        SessionState::Expired => Some(SessionEnd::Expired),
        SessionState::Closed => Some(SessionEnd::Closed),
        SessionState::AuthFailed => Some(SessionEnd::AuthFailed),
        state if state.is_terminated() => Some(SessionEnd::Expired),
        _ => None,
    }
}

/// The core's view of a session state.
pub(crate) fn session_event(state: SessionState) -> Event {
    if let Some(end) = session_end(state) {
        Event::SessionEnded(end)
    } else if state == SessionState::Disconnected {
        Event::Suspended
    } else {
        Event::Connected
    }
}
