//! Suspension: the connection is lost for a while and nobody may rely on our locks until the session's fate is
//! known. Under [`SessionPolicy::Standard`] every item is revoked (kazoo); under [`SessionPolicy::SessionAware`]
//! the member lists nothing, then verifies its held nodes once connected again and resumes where it was, or
//! releases everything if a lock was lost meanwhile.

use std::collections::BTreeSet;

use super::{Action, Core, Op, Owed, Pending, Reason, ReqId, Shown};
use crate::sabotage::{Sabotage, breaks};
use crate::{PartitionState, SessionPolicy};

/// The connection as the core knows it, and a suspension until the session's fate is known.
pub(super) struct SessionView {
    connected: bool,
    suspension: Option<Suspension>,
}

impl SessionView {
    /// Connected, with no suspension: a core is built on a live session.
    pub(super) fn new() -> Self {
        Self { connected: true, suspension: None }
    }

    pub(super) fn connected(&self) -> bool {
        self.connected
    }

    /// Whether a suspension is waiting for the session's fate (SessionAware).
    pub(super) fn suspended(&self) -> bool {
        self.suspension.is_some()
    }

    /// The session ended: not connected, and never again.
    pub(super) fn ended(&mut self) {
        self.connected = false;
    }

    /// The suspension no longer matters (the partitioner is ending).
    pub(super) fn forget_suspension(&mut self) {
        self.suspension = None;
    }

    /// The reply to the check of our held nodes came: a check may be asked again.
    pub(super) fn verify_answered(&mut self) {
        if let Some(suspension) = &mut self.suspension {
            suspension.verifying = None;
        }
    }

    /// A held lock's node went: during a suspension, the session's survival cannot bring it back (`true`); else the
    /// caller deals with it (`false`).
    pub(super) fn lock_lost_while_suspended(&mut self) -> bool {
        let Some(suspension) = &mut self.suspension else { return false };
        suspension.lost = true;
        true
    }
}

/// A suspension under [`SessionPolicy::SessionAware`]: what to go back to if the session and our locks survive.
#[derive(Debug)]
struct Suspension {
    before: Shown,
    owed_before: Option<Owed>,
    verifying: Option<ReqId>,
    /// A held lock node was deleted meanwhile: the session's survival does not bring it back.
    lost: bool,
}

impl Core {
    /// Connected again after a suspension (SessionAware): asks whether every held node is still ours, once.
    pub(super) fn verify_held_once_connected(&mut self) {
        let Some(suspension) = &self.session.suspension else { return };
        if !self.session.connected || suspension.verifying.is_some() {
            return;
        }
        let nodes: Vec<(usize, String)> = self
            .locks
            .held()
            .iter()
            .filter_map(|&item| Some((item, self.locks.get(item)?.node()?.to_owned())))
            .collect();
        let id = self.request(Op::Verify(nodes), Pending::Verify);
        if let Some(suspension) = &mut self.session.suspension {
            suspension.verifying = Some(id);
        }
    }

    pub(super) fn on_suspended(&mut self) {
        self.locks.restart_window();
        let was_connected = std::mem::replace(&mut self.session.connected, false);
        if self.ending.is_some() || !was_connected {
            return;
        }
        self.react_to_suspension();
    }

    pub(super) fn on_connected(&mut self) {
        let was_connected = std::mem::replace(&mut self.session.connected, true);
        if self.ending.is_some() {
            return;
        }
        if was_connected {
            // The client folded a disconnection and a reconnection into one change: react as to both.
            self.react_to_suspension();
        }
        // Under SessionAware, decide() verifies the held nodes now that the connection is back.
    }

    /// The connection was suspended: nobody may rely on our locks until the session's fate is known.
    pub(super) fn react_to_suspension(&mut self) {
        if breaks(Sabotage::UnnoticedSuspensionDuringRelease) && self.locks.releasing() {
            return;
        }
        let processing = !self.published.shown().listed().is_empty();
        match self.cfg.session_policy {
            SessionPolicy::Standard => {
                let active =
                    matches!(self.published.shown().state(), PartitionState::Acquired | PartitionState::Allocating);
                // kazoo releases on a suspension while allocating, but not on a reconnection (zookeeper-client keeps
                // its watches, and lock requests lost with the connection are redone).
                let reconnected = self.session.connected;
                if processing || self.published.shown().state() == PartitionState::Acquired || (active && !reconnected)
                {
                    self.ask_release_all(Reason::ConnectionChanged);
                }
            }
            SessionPolicy::SessionAware => {
                if !processing && self.session.suspension.is_none() {
                    // Allocating with nothing listed: carry on; requests wait for the reconnection.
                    return;
                }
                if self.session.suspension.is_none() {
                    self.session.suspension = Some(Suspension {
                        before: self.published.shown().clone(),
                        owed_before: self.published.take_owed(),
                        verifying: None,
                        lost: false,
                    });
                } else if let Some(suspension) = &mut self.session.suspension {
                    // Suspended again while verifying: that verification no longer proves anything.
                    if let Some(id) = suspension.verifying.take() {
                        self.out.requests.remove(&id);
                    }
                }
                let revoked = self.locks.held().clone();
                self.show(PartitionState::Release, BTreeSet::new(), revoked, true, None, Reason::ConnectionSuspended);
            }
        }
    }

    pub(super) fn on_verified(&mut self, ours: bool) {
        let Some(suspension) = self.session.suspension.take() else { return };
        let ours = ours && !suspension.lost;
        let mut acks = self.published.take_suspended_acks().into_iter();
        if ours && breaks(Sabotage::ResumeAbandonsRebalance) {
            self.published.set_owed(None);
            self.share.set(self.locks.held().clone());
            self.locks.set_want_is_target(false);
            let held = self.locks.held().clone();
            self.show(PartitionState::Acquired, held, BTreeSet::new(), false, None, Reason::SessionSurvived);
            for ack in acks {
                self.out.actions.push_back(Action::Ack(ack, Ok(())));
            }
            return;
        }
        if ours {
            // Same session, same nodes: nobody else can hold our items. Resume where we were.
            self.published.set_owed(suspension.owed_before);
            let before = suspension.before;
            let listed: BTreeSet<usize> = before.listed().intersection(self.locks.held()).copied().collect();
            self.show(before.state(), listed, before.revoked().clone(), false, None, Reason::SessionSurvived);
            if self.published.owed().is_none() {
                // The worker's release_set() answered the suspension's Release alone: nothing to give up.
                for ack in acks.by_ref() {
                    self.out.actions.push_back(Action::Ack(ack, Ok(())));
                }
            }
            if self.share.target().is_none() {
                // The party changed while we were suspended.
                self.on_new_episode(Reason::PartyChanged);
            }
        } else {
            self.published.set_owed(Some(Owed::All));
            self.ask_release_all(Reason::LockLostInSuspension);
        }
        // The first waiting call does what the worker was asked; the others are answered with it.
        if let Some(first) = acks.next() {
            self.on_release_set(first);
            self.published.answer_after_release(acks);
        }
    }
}
