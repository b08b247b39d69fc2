//! Turns the core's publications into the [`Snapshot`] handles read, with their log lines and metrics: the single
//! place where the published snapshot changes (the driver and the simulation both publish through it).
//! Beside it, the translations between the client's session states and the core's terms (a session's end, a
//! failure's cause).

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;
use zookeeper_client::SessionState;

use crate::metrics::DriverMetrics;
use crate::paths::Paths;
use crate::snapshot::{SetChange, Transition};
use crate::{Error, Snapshot};
use proto::decision::{Cause, Core, Event, Publication, SessionEnd, SetInForce};

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

    /// Publishes `p` and wakes every observer: a transition bumps the generation (and counts in the metrics); an
    /// update of the same state changes what the snapshot says beside it, under the same generation.
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
        if p.transition {
            let before = self.sender.borrow().state;
            let revoked_before = self.sender.borrow().revoked.clone();
            let after = (p.state, p.reason, items.len(), &revoked[..]);
            self.metrics.published((before, &revoked_before), after, core.set_len(), now);
        }
        if let Some(load) = &p.load {
            self.metrics.load(load);
        }
        let set = (p.set != self.published_set).then(|| {
            self.published_set = p.set.clone();
            SetChange {
                version: p.set.version,
                added: core.items_of(&p.set.added),
                removed: core.items_of(&p.set.removed),
            }
        });
        let transition = Transition {
            new_episode: p.transition,
            state: p.state,
            member: p.member,
            items,
            tokens,
            revoked,
            members: p.members,
            cause,
            suspended: p.suspended,
            set,
            disagreements: p.disagreements,
            load: p.load,
            closed: core.items_of(&p.closed),
            lock_nodes: p.nodes.into(),
        };
        self.sender.send_modify(|snapshot| {
            log(snapshot, &transition, p.reason.as_str());
            snapshot.apply(transition);
        });
    }

    /// Publishes `Failure` for a task that panicked (its core and publisher are gone with it).
    pub fn panicked(sender: &watch::Sender<Snapshot>, reason: String) {
        sender.send_modify(|snapshot| snapshot.stop(Error::Internal { reason }));
    }
}

/// The log lines of `transition` from `before`.
fn log(before: &Snapshot, transition: &Transition, reason: &str) {
    if transition.disagreements != before.disagreements {
        for disagreement in transition.disagreements.iter() {
            tracing::warn!(
                other = %disagreement.member,
                ours = %disagreement.ours,
                theirs = %disagreement.theirs,
                "{disagreement}: the members may wait forever for each other's locks until one of them is \
                 reconfigured"
            );
        }
    }
    if let Some(set) = &transition.set
        && (!set.added.is_empty() || !set.removed.is_empty())
    {
        tracing::info!(
            version = set.version,
            added = set.added.len(),
            removed = set.removed.len(),
            "following a new version of the shared set"
        );
    }
    if !transition.new_episode {
        tracing::debug!(state = %transition.state, generation = before.generation, reason, "snapshot updated");
        return;
    }
    tracing::info!(
        from = %before.state,
        to = %transition.state,
        generation = before.generation + 1,
        reason,
        items = transition.items.len(),
        revoked = transition.revoked.len(),
        "state change"
    );
    if let Some(cause) = &transition.cause {
        if matches!(cause, Error::Finished) {
            tracing::info!("partitioner finished: locks released, party left");
        } else {
            tracing::warn!(%cause, "partitioner ended");
        }
    }
}

/// The error a handle reports for the core's cause of a failure.
pub(crate) fn error_of(cause: Cause) -> Error {
    match cause {
        Cause::Finished => Error::Finished,
        Cause::SessionEnded(end) => Error::SessionLost { state: session_state(end) },
        // The request path wraps every refusal as an `Error` (`requests::failed`); anything else would be a bug,
        // reported as one rather than lost.
        Cause::Refused(detail) => {
            detail.downcast_ref::<Error>().cloned().unwrap_or_else(|| Error::Internal { reason: detail.to_string() })
        }
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
