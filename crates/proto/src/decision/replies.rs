//! Replies: each request's answer, matched with what the request was for ([`Pending`]) and handed to the concern
//! that asked.

use super::{Action, Cause, Code, Core, Failed, Pending, Reply, ReqError, ReqId};

impl Core {
    pub(super) fn on_reply(&mut self, id: ReqId, reply: Reply) {
        // Every lock request's latency is news about the server, even when its reply is no longer wanted.
        let ops = match self.out.requests.get(&id) {
            Some(Pending::Locks(items)) => items.len(),
            _ => 0,
        };
        if let Reply::HeldWatchSet = reply {
            // The first of a held-lock watch's two answers: the request stays in flight for the second.
            return self.on_held_watch_set(id);
        }
        self.locks.timed(id, ops, reply.failed(), self.now);
        self.locks.watch_answered(id);
        let Some(pending) = self.out.requests.remove(&id) else {
            return; // abandoned
        };
        if let Pending::Locks(items) = &pending {
            self.locks.answered(items.len(), self.now);
        }
        let classify = Failed::classify;
        match (pending, reply) {
            (Pending::Party, Reply::Party(result)) => {
                self.on_party(result.map_err(classify));
            }
            (Pending::Announcements(nodes), Reply::Announcements(result)) => {
                self.on_announcements(nodes, result.map_err(classify));
            }
            (Pending::Strays, Reply::StraysDeleted(result)) => {
                if let Err(ReqError::Fatal(cause)) = result.map_err(classify) {
                    self.fail(cause);
                }
            }
            (Pending::Announce, Reply::Announced(result)) => {
                if let Err(ReqError::Fatal(cause)) = result.map_err(classify) {
                    self.fail(cause);
                }
            }
            (Pending::Join, Reply::Joined(result)) => self.on_joined(result.map_err(classify)),
            (Pending::Locks(items), Reply::DirsMade(result)) => self.on_dirs_made(id, items, result.map_err(classify)),
            (Pending::Locks(items), Reply::Created(result)) => {
                // Sequential names never collide: a create that finds its node is one whose earlier attempt landed,
                // an unknown outcome, which a listing settles.
                let result = result.map_err(|failed| match failed.code {
                    Code::NodeExists => ReqError::Transient,
                    _ => failed.classify(),
                });
                self.on_created(id, items, result);
            }
            (Pending::Locks(items), Reply::Listed(result)) => {
                let result = result.map(|listings| listings.into_iter().map(|l| l.map_err(classify)).collect());
                self.on_listed(id, items, result.map_err(classify));
            }
            (Pending::Watch(item), Reply::Changed(result)) => self.on_changed(id, item, result.map_err(classify)),
            (Pending::Release(gone), Reply::Released(result)) => {
                let acks = self.locks.take_release_acks(id);
                match result {
                    Ok(()) => {
                        self.published.answer_after_release(acks);
                        // Items that left the set: their directories go once the last contender (ours) is gone.
                        let gone: Vec<usize> =
                            gone.into_iter().filter(|&item| !self.set.catalogue().contains(item)).collect();
                        if !gone.is_empty() && self.ending.is_none() {
                            self.remove_dirs(gone);
                        }
                    }
                    Err(failed) => {
                        // A release retries lost requests itself: what comes back ends the session or the member.
                        let cause = match failed.clone().classify() {
                            ReqError::Fatal(cause) => cause,
                            _ => Cause::Refused(failed.error),
                        };
                        for ack in acks {
                            self.out.actions.push_back(Action::Ack(ack, Err(cause.clone())));
                        }
                        // Best effort while ending: only a lost session stops the clean-up (any other error still
                        // lets us leave the party, and the ephemerals go with the session in any case).
                        match cause {
                            Cause::SessionEnded(_) => self.on_session_ended(cause),
                            cause => self.fail(cause),
                        }
                    }
                }
            }
            (Pending::Verify, Reply::Verified(result)) => {
                self.session.verify_answered();
                match result {
                    Ok(ours) => self.on_verified(ours),
                    Err(failed) => match failed.clone().classify() {
                        ReqError::Fatal(cause) => self.fail(cause),
                        _ => self.fail(Cause::Refused(failed.error)),
                    },
                }
            }
            (Pending::Leave, Reply::Left) => {}
            (Pending::ReadSet, Reply::Set(result)) => {
                self.on_set(result.map_err(classify));
            }
            (Pending::RecoverSet | Pending::WatchLease, Reply::Recovered(result) | Reply::LeaseGone(result)) => {
                self.on_recovered(result.map_err(classify));
            }
            (Pending::RemoveDirs, Reply::DirsRemoved) => {}
            (Pending::HeldWatch(item, node), Reply::HeldGone(result)) => {
                self.on_held_gone(item, node, result.map_err(classify));
            }
            (Pending::HeldWatch(item, node), Reply::HeldChanged) => self.watch_held_again(item, node),
            (Pending::Closed(items), Reply::Closed(result)) => self.on_closed(items, result.map_err(classify)),
            (Pending::ReadPlacement, Reply::Placement(result)) => self.on_placement(result.map_err(classify)),
            (Pending::WritePlacement, Reply::PlacementWritten(result)) => {
                self.on_placement_written(result.map_err(classify));
            }
            (pending, reply) => {
                self.fail(Cause::Internal(format!("reply {reply:?} to a {pending:?} request")));
            }
        }
    }
}
