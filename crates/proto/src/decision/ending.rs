//! The end (a failure, or `finish()`): publish `Failure` first, then release every lock, leave the party and stop,
//! skipping what a lost session makes pointless.

use std::collections::BTreeSet;

use super::{AckId, Action, Cause, Core, Op, Pending, Reason, ReqId};
use crate::PartitionState;

/// The partitioner is ending (failure or finish).
#[derive(Debug)]
pub(super) struct Ending {
    cause: Cause,
    acks: Vec<AckId>,
    /// Whether ZooKeeper can still be asked anything (not after the session is lost).
    clean_up: bool,
    leaving: bool,
}

impl Ending {
    /// Why the partitioner ends (what a command acknowledged meanwhile is told).
    pub(super) fn cause(&self) -> &Cause {
        &self.cause
    }
}

impl Core {
    pub(super) fn fail(&mut self, cause: Cause) {
        self.end(cause, Vec::new());
    }

    /// The session ended (its event says so, or a release's reply): fail with it or, already ending, skip what is
    /// left of the clean-up (our nodes went with the session).
    pub(super) fn on_session_ended(&mut self, cause: Cause) {
        match &mut self.ending {
            Some(ending) => ending.clean_up = false,
            None => self.fail(cause),
        }
    }

    /// Publishes `Failure` first (nothing listed), then cleans up: every lock, then the party node, then stops.
    /// Already ending, the first cause stands.
    pub(super) fn end(&mut self, cause: Cause, acks: Vec<AckId>) {
        if let Some(ending) = &mut self.ending {
            ending.acks.extend(acks);
            return;
        }
        let clean_up = !matches!(cause, Cause::SessionEnded(_));
        self.show(PartitionState::Failure, BTreeSet::new(), BTreeSet::new(), false, Some(cause.clone()), Reason::Ended);
        self.session.forget_suspension();
        self.published.set_owed(None);
        for ack in self.published.take_release_acks().into_iter().chain(self.published.take_suspended_acks()) {
            self.out.actions.push_back(Action::Ack(ack, Err(cause.clone())));
        }
        self.ending = Some(Ending { cause, acks, clean_up, leaving: false });
        if clean_up {
            self.set_want(BTreeSet::new());
        } else {
            // The session is gone and every node with it: nothing to delete.
            self.locks.forget_all();
        }
    }

    /// Ending: release every lock, then leave the party, then stop (skipping what a lost session makes pointless).
    pub(super) fn drive_ending(&mut self) {
        let Some(ending) = &self.ending else { return };
        if ending.clean_up {
            if !ending.leaving {
                self.pump_locks();
                if !self.released_all_unwanted() {
                    return;
                }
                self.request(Op::Leave, Pending::Leave);
                if let Some(ending) = &mut self.ending {
                    ending.leaving = true;
                }
                return;
            }
            if self.out.requests.values().any(|pending| matches!(pending, Pending::Leave)) {
                return;
            }
        }
        let watches: Vec<ReqId> =
            self.out.requests.iter().filter(|(_, p)| matches!(p, Pending::Watch(_))).map(|(&id, _)| id).collect();
        for id in watches {
            self.out.actions.push_back(Action::Cancel(id));
        }
        if let Some(ending) = &mut self.ending {
            for ack in std::mem::take(&mut ending.acks) {
                self.out.actions.push_back(Action::Ack(ack, Ok(())));
            }
        }
        self.out.actions.push_back(Action::Stop);
        self.out.stopped = true;
    }
}
