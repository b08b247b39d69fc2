//! The fault schedule: every fault drawn from the seed's random stream (cuts, server stalls, joins, crashes, leaves,
//! a panicking task, admins' changes, operators deleting held lock nodes), and how each plays out on the network.

use std::time::Duration;

use futures::FutureExt;

use super::{Actor, Cleaning, LOCKS, World, WorldEv};
use crate::driver::publish::Publisher;
use crate::sim::net::{ActorId, lock};
use crate::sim::zk::SessionId;

impl World {
    /// A session of a process, picked at random (members and starting processes; with `admins`, admins too).
    fn pick_session(&mut self, admins: bool) -> Option<(ActorId, SessionId)> {
        let candidates: Vec<(ActorId, SessionId)> = (0..self.actors.len())
            .filter_map(|a| match &self.actors[a] {
                Actor::Starting(s) => Some((a, s.zk.session())),
                Actor::Member(m) => Some((a, m.zk.session())),
                Actor::Admin(ad) if admins && ad.op.is_some() => Some((a, ad.zk.session())),
                _ => None,
            })
            .collect();
        let pick = self.rng().below(candidates.len() as u64) as usize;
        candidates.get(pick).copied()
    }

    /// Cuts a session's connection for `outage`; the client notices after `detect`.
    pub(super) fn cut_session(&mut self, session: SessionId, detect: Duration, outage: Duration) {
        let link = {
            let mut net = lock(&self.net);
            if !net.is_up(session) {
                return;
            }
            net.cut(session, detect);
            net.link(session)
        };
        self.note(format!("cut session {session} for {outage:?}"));
        let now = self.now();
        self.disturbed.insert(session, now);
        self.at(outage.max(detect + Duration::from_millis(1)), WorldEv::Reconnect { session, link });
        let timeout = self.plan.session;
        self.at(timeout, WorldEv::MaybeExpire { session, link });
    }

    pub(super) fn reconnect(&mut self, session: SessionId, link: u64) {
        let now = self.now();
        self.disturbed.insert(session, now);
        let mut net = lock(&self.net);
        // While the server is stalled, nobody connects: its resumption reconnects everyone.
        if net.link(session) != link || net.frozen {
            let why = format!(
                "session {session} does not reconnect (link {} vs {link}, frozen {})",
                net.link(session),
                net.frozen
            );
            drop(net);
            self.note(why);
            return;
        }
        let alive = net.reconnect(session);
        drop(net);
        self.note(format!("session {session} reconnects{}", if alive { "" } else { ": expired" }));
    }

    pub(super) fn maybe_expire(&mut self, session: SessionId, link: u64) {
        let mut net = lock(&self.net);
        if net.link(session) != link || net.is_up(session) || !net.zk.is_alive(session) {
            return;
        }
        // (An abandoned client is not up and keeps its link: it expires here.)
        if net.frozen {
            // A stalled server expires nothing; look again after it resumes (the faults last that much longer).
            drop(net);
            let timeout = self.plan.session;
            self.at(timeout / 4, WorldEv::MaybeExpire { session, link });
            let now = self.now();
            self.quiet_since = self.quiet_since.max(now + timeout / 4);
            return;
        }
        net.zk.expire(session);
        net.fire_watches();
        drop(net);
        self.note(format!("session {session} expires"));
    }

    pub(super) fn fault(&mut self) {
        let session_timeout = self.plan.session;
        let kind = self.rng().below(11);
        let mut lasts = Duration::ZERO;
        match kind {
            // A short cut: the client notices at once (the connection resets) and comes back on the same session.
            0 | 1 => {
                if let Some((_, session)) = self.pick_session(true) {
                    let outage = self.rng().millis(50, 1500);
                    let detect = self.rng().millis(0, 20);
                    self.cut_session(session, detect, outage);
                    lasts = outage;
                }
            }
            // A server stall longer than the read timeout: every client suspends; some stalls expire sessions.
            2 | 3 => lasts = self.stall(),
            // A join, then a stall in the middle of the rebalance it started.
            4 => {
                self.join();
                let gap = self.rng().millis(300, 800);
                self.at(gap, WorldEv::Stall);
                lasts = gap + session_timeout * 2;
            }
            // A crash: the process dies; its session expires a session timeout later.
            5 => {
                let live = self.live();
                if !live.is_empty() {
                    let actor = live[self.rng().below(live.len() as u64) as usize];
                    self.note(format!("crash a{actor}"));
                    self.gone(actor, false);
                    lasts = session_timeout;
                    // As the crashed session expires, the others take its locks and are ACQUIRED at last, listing
                    // locks they took a session timeout before: an operator deletes one of those then (their
                    // watches must not have waited for the lock work to go quiet).
                    if self.plan.operator_deletes && self.rng().below(2) == 0 {
                        let after = session_timeout + self.rng().millis(0, 400);
                        self.at(after, WorldEv::OperatorDeletes);
                    }
                }
            }
            // A graceful leave, through the handle's finish().
            6 => {
                let members = self.members();
                if members.len() > 1 {
                    let actor = members[self.rng().below(members.len() as u64) as usize];
                    if let Actor::Member(m) = &mut self.actors[actor] {
                        m.worker.finish = Some(m.handle.finish().boxed());
                    }
                    self.note(format!("a{actor} finishes"));
                    lock(&self.net).dirty.insert(actor);
                }
            }
            // A cut longer than the session: the session expires and the member fails (and is replaced).
            7 => {
                if let Some((_, session)) = self.pick_session(true) {
                    let detect = self.rng().millis(0, 20);
                    let outage = session_timeout + self.rng().millis(200, 1000);
                    self.cut_session(session, detect, outage);
                    lasts = outage;
                }
            }
            // A member's task panics while its connection drops: its clean-up must still free everything.
            8 => {
                let members = self.members();
                if !members.is_empty() {
                    let actor = members[self.rng().below(members.len() as u64) as usize];
                    self.panic(actor);
                    lasts = session_timeout;
                }
            }
            // An admin changes the shared set (without one: a join); now and then, its commit's reply is lost while
            // another admin makes 16 or more updates.
            _ if self.plan.shared_set => {
                let lost = self.rng().below(4) == 0;
                match lost {
                    true => self.admin_loses_a_reply(),
                    false => self.admin_changes(),
                }
            }
            _ => self.join(),
        }
        if self.plan.shared_set && self.rng().below(2) == 0 {
            self.admin_changes();
        }
        self.progress_fault();
        if self.plan.operator_deletes && self.rng().below(3) == 0 {
            self.operator_deletes_a_held_node(false);
        }
        if self.plan.operator_deletes && self.rng().below(3) == 0 {
            let delay = self.rng().millis(0, 1500);
            self.at(delay, WorldEv::OperatorDeletesFresh);
        }
        self.faults_left -= 1;
        let now = self.now();
        self.quiet_since = self.quiet_since.max(now + lasts);
        if self.faults_left > 0 {
            let gap = self.rng().millis(100, 2500);
            self.at(gap, WorldEv::Fault);
        }
    }

    /// Stops the server for 0.7 to 1.6 session timeouts: past the clients' read timeout, so they suspend; past the
    /// session timeout, sessions expire (the server's tracker on resuming, or the client itself after 7/5 of it).
    pub(super) fn stall(&mut self) -> Duration {
        let session_timeout = self.plan.session;
        // zookeeper-client gives up on a silent connection after 2/5 of the session timeout (the Java client: 2/3).
        let read_timeout = session_timeout * 2 / 5;
        let length = session_timeout.mul_f64(0.7 + self.rng().below(900) as f64 / 1000.0);
        self.note(format!("server stalls for {length:?}"));
        let now = self.now();
        if !lock(&self.net).frozen {
            self.frozen_since = now;
        }
        self.frozen_until = self.frozen_until.max(now + length);
        let sessions = self.sessions();
        lock(&self.net).frozen = true;
        self.stalled = now;
        for session in sessions {
            let detect = (read_timeout + self.rng().millis(0, 50)).min(length);
            let link = {
                let mut net = lock(&self.net);
                if !net.is_up(session) {
                    continue;
                }
                net.cut(session, detect);
                net.link(session)
            };
            // Past 7/5 of the session timeout without the server, the client declares the session expired itself.
            if length > session_timeout * 7 / 5 {
                self.at(length, WorldEv::MaybeExpire { session, link });
            }
        }
        self.at(length, WorldEv::Thaw);
        length
    }

    pub(super) fn thaw(&mut self) {
        let now = self.now();
        if now < self.frozen_until {
            return;
        }
        lock(&self.net).frozen = false;
        self.stalled = now;
        self.note("server resumes".into());
        // Clients reconnect; after a stall past the session timeout, the server's session tracker expires some of
        // them first (the race between it and the reconnections).
        let long = now - self.frozen_since > self.plan.session;
        let down = lock(&self.net).down();
        for (session, link) in down {
            if long && self.rng().below(2) == 0 {
                let mut net = lock(&self.net);
                if net.zk.is_alive(session) {
                    net.zk.expire(session);
                    net.fire_watches();
                    drop(net);
                    self.note(format!("session {session} expires at the server's resumption"));
                }
            }
            let delay = self.rng().millis(10, 300);
            self.at(delay, WorldEv::Reconnect { session, link });
        }
        let sessions = self.sessions();
        for session in sessions {
            lock(&self.net).serve_soon(session);
        }
    }

    /// A member's task panics at a connection cut: it publishes `Failure`, and its clean-up (the production one)
    /// deletes its nodes, retrying what the cut loses; then its session is released.
    fn panic(&mut self, actor: ActorId) {
        let Actor::Member(m) = std::mem::replace(&mut self.actors[actor], Actor::Gone) else { return };
        let session = m.zk.session();
        self.note(format!("a{actor}'s task panics"));
        Publisher::panicked(m.step.publisher().sender(), "simulated".into());
        let outage = self.rng().millis(50, 1500);
        let detect = self.rng().millis(0, 20);
        let (zk, paths) = (m.zk.clone(), m.paths.clone());
        let future = async move { crate::driver::delete_our_nodes(&zk, &paths).await }.boxed();
        self.actors[actor] = Actor::Cleaning(Box::new(Cleaning { zk: m.zk.clone(), future }));
        lock(&self.net).dirty.insert(actor);
        self.cut_session(session, detect, outage);
        if self.plan.static_membership {
            self.vacant.insert(m.slot);
        }
    }

    /// An operator deletes a listed item's lock node by hand (`tests/faults.rs` does the same on a real server): any
    /// one, or (`fresh`) the one taken last.
    pub(super) fn operator_deletes_a_held_node(&mut self, fresh: bool) {
        let mut held = Vec::new();
        for actor in self.members() {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            for &item in m.step.core().listed() {
                if let (Some(node), Some(at)) = (m.step.core().held_node(item), m.step.core().held_at(item)) {
                    held.push((at, format!("{LOCKS}/{}/{node}", m.step.core().item(item))));
                }
            }
        }
        if held.is_empty() {
            return;
        }
        let path = if fresh {
            held.into_iter().max().map(|(_, path)| path).unwrap_or_default()
        } else {
            let pick = self.rng().below(held.len() as u64) as usize;
            held.swap_remove(pick).1
        };
        let now = self.now();
        let mut net = lock(&self.net);
        let operator = net.zk.open_session();
        let deleted = net.zk.delete(operator, &path).is_ok();
        net.zk.expire(operator);
        net.fire_watches();
        drop(net);
        if deleted {
            self.note(format!("operator deletes {path}"));
            self.operator_deleted.insert(path, now);
        }
    }
}
