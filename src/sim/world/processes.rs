//! The world's processes: starting one (`build()`'s start-up on a new session), replacing those that are gone, and
//! polling every process something reached.

use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;

use super::{Actor, PATH, SET_CHUNK, Starting, World, WorldEv, poll_with};
use crate::acl::NodeAcls;
use crate::sim::net::{ActorId, SimClient, lock};
use crate::sim::zk::SessionId;
use crate::startup::{self, Settings};
use crate::{
    partition::{KazooStride, Rendezvous},
    weighted::WeightedRendezvous,
};
use proto::decision::JitterParties;
use proto::sabotage::Sabotage;

/// Another sticky rule, for [`Plan::mixed_rules`](crate::sim::Plan::mixed_rules): the same function, but it places
/// afresh, as if there were no previous assignment. It answers the plain probe as the sticky function does; only its
/// use of a previous assignment differs.
pub(super) struct PlacesAfresh(pub WeightedRendezvous);

impl crate::partition::PartitionFn for PlacesAfresh {
    fn partition(&self, me: &str, members: &[String], items: &[crate::Item]) -> Vec<crate::Item> {
        self.0.partition(me, members, items)
    }
    fn load_bound(&self) -> Option<f64> {
        self.0.load_bound()
    }
    fn partition_weighted(&self, input: &crate::weighted::Weighted<'_>) -> Vec<crate::Item> {
        self.0.partition_weighted(input)
    }
    fn keeps_placement(&self) -> bool {
        true
    }
    fn placement(&self, input: &crate::weighted::Weighted<'_>) -> Option<Vec<usize>> {
        self.0.placement(&input.without_previous())
    }
}

/// Whether the member in `slot` runs the other sticky rule of a mixed run.
pub(super) fn other_rule(plan: &crate::sim::Plan, slot: usize) -> bool {
    plan.weighted
        && plan.combo.rendezvous
        && plan.sticky
        && plan.mixed_rules
        && !plan.rotating
        && slot.is_multiple_of(2)
}

/// A sticky rule that is nowhere a fixed point, for [`Plan::rotating`](crate::sim::Plan::rotating): from a previous
/// assignment it gives every item to the next member; afresh, item `i` to member `i mod n`. It ignores weights and
/// capacities.
pub(super) struct Rotating;

impl crate::partition::PartitionFn for Rotating {
    fn partition(&self, me: &str, members: &[String], items: &[crate::Item]) -> Vec<crate::Item> {
        let at = members.iter().position(|m| m == me);
        items.iter().enumerate().filter(|(i, _)| Some(i % members.len()) == at).map(|(_, item)| item.clone()).collect()
    }
    fn keeps_placement(&self) -> bool {
        true
    }
    fn placement(&self, input: &crate::weighted::Weighted<'_>) -> Option<Vec<usize>> {
        let n = input.members.len().max(1);
        Some(match input.previous {
            Some(previous) => previous.iter().enumerate().map(|(i, p)| p.map_or(i % n, |o| (o + 1) % n)).collect(),
            None => (0..input.items.len()).map(|i| i % n).collect(),
        })
    }
}

/// Whether the members of a run divide by capacity (a rotating run's rule ignores capacities).
pub(super) fn by_capacity(plan: &crate::sim::Plan) -> bool {
    plan.weighted && plan.combo.rendezvous && !(plan.sticky && plan.rotating)
}

/// The capacity of the member in `slot` in a weighted run (a replacement keeps its slot's).
pub(super) fn capacity_of(slot: usize) -> u32 {
    1 + (slot % 3) as u32
}

impl World {
    /// A new member, under static membership with a new identifier; none while a maintenance window keeps the party
    /// stopped.
    pub(super) fn join(&mut self) {
        if self.replacements_paused() {
            return;
        }
        let slot = self.next_slot;
        self.next_slot += 1;
        self.start(slot);
    }

    /// A new process in `slot` that runs `build()`'s start-up.
    fn start(&mut self, slot: usize) {
        let actor = self.actors.len();
        let session = lock(&self.net).open_session(actor);
        let zk = SimClient::new(self.net.clone(), session);
        let plan = &self.plan;
        let ident = if plan.static_membership { format!("s{slot}") } else { format!("m{actor}") };
        let partition_fn: Box<dyn crate::partition::PartitionFn> = match (plan.combo.rendezvous, plan.weighted) {
            (true, true) if other_rule(plan, slot) => Box::new(PlacesAfresh(WeightedRendezvous::default().sticky())),
            (true, true) if plan.sticky && plan.rotating => Box::new(Rotating),
            (true, true) if plan.sticky => Box::new(WeightedRendezvous::default().sticky()),
            (true, true) => Box::new(WeightedRendezvous::default()),
            (true, false) => Box::new(Rendezvous::default()),
            (false, _) => Box::new(KazooStride),
        };
        let settings = Settings {
            path: PATH.to_owned(),
            items: self.fixed.clone(),
            // Wrapped as the builder wraps it: the simulation runs the shipped wrapper too.
            partition_fn: crate::metrics::timed(partition_fn, PATH),
            identifier: ident.clone(),
            time_boundary: plan.time_boundary,
            max_reaction_time: Duration::from_millis(100),
            max_allocation_time: plan.max_allocation_time,
            session_policy: plan.combo.policy,
            rebalance: plan.combo.rebalance,
            departure_fast_path: true,
            static_membership: plan.static_membership,
            identity_wait: plan.session * 2,
            shared_set: plan.shared_set,
            capacity: if plan.weighted { capacity_of(slot) } else { 1 },
            acls: NodeAcls::default(),
            // Small, so batching and the window are exercised with few items.
            window: 6,
            batch: proto::decision::Batch::fixed(4),
            // Some runs jitter as a large party does, so that the jitter's schedules are simulated too (the
            // simulation's parties are small, where production waits without one).
            jitter_parties: if plan.large_party_jitter { JitterParties::ALWAYS } else { JitterParties::default() },
            set_chunk: SET_CHUNK,
        };
        let (hex, nonce) = {
            let mut net = lock(&self.net);
            (format!("{:016x}{:016x}", net.rng.next(), net.rng.next()), u128::from(net.rng.next()) << 64)
        };
        let join_name = if plan.static_membership {
            proto::layout::static_node(&hex, &ident)
        } else {
            proto::layout::node_prefix(&hex, &ident)
        };
        let client = zk.clone();
        let future = async move { startup::start(&client, settings, &join_name, nonce).await }.boxed();
        self.note(format!("a{actor} starts as {ident} (session {session})"));
        self.add_actor(Actor::Starting(Box::new(Starting { slot, zk, future })));
    }

    /// The process is gone: its client closes (a member that stopped) or is simply abandoned (a crash).
    pub(super) fn gone(&mut self, actor: ActorId, close: bool) {
        let (session, slot) = match &self.actors[actor] {
            Actor::Starting(s) => (s.zk.session(), Some(s.slot)),
            Actor::Member(m) => (m.zk.session(), Some(m.slot)),
            Actor::Admin(a) => (a.zk.session(), None),
            Actor::Cleaning(c) => (c.zk.session(), None),
            Actor::Gone => return,
        };
        self.actors[actor] = Actor::Gone;
        if close {
            lock(&self.net).close(session);
        } else {
            // A crash: the server expires the session once a session timeout passes without the client.
            let link = {
                let mut net = lock(&self.net);
                net.abandon(session);
                net.link(session)
            };
            let timeout = self.plan.session;
            self.at(timeout, WorldEv::MaybeExpire { session, link });
        }
        if let (true, Some(slot)) = (self.plan.static_membership, slot) {
            self.vacant.insert(slot);
        }
    }

    fn is_member_like(actor: &Actor) -> bool {
        matches!(actor, Actor::Starting(_) | Actor::Member(_))
    }

    pub(super) fn live(&self) -> Vec<ActorId> {
        (0..self.actors.len()).filter(|&a| Self::is_member_like(&self.actors[a])).collect()
    }

    pub(super) fn members(&self) -> Vec<ActorId> {
        (0..self.actors.len()).filter(|&a| matches!(self.actors[a], Actor::Member(_))).collect()
    }

    /// Replaces processes that are gone (a failed member is restarted by its orchestrator).
    pub(super) fn replace_failed(&mut self) {
        if self.replacements_paused() {
            return;
        }
        while self.live().len() < self.plan.members.max(1) {
            if !self.plan.static_membership {
                self.join();
                continue;
            }
            // The restarted process takes its old identifier (its start-up waits for the old node to go).
            let Some(slot) = self.vacant.pop_first() else { return };
            self.start(slot);
        }
    }

    /// The sessions of every process that has one.
    pub(super) fn sessions(&self) -> Vec<SessionId> {
        self.actors
            .iter()
            .filter_map(|actor| match actor {
                Actor::Starting(s) => Some(s.zk.session()),
                Actor::Member(m) => Some(m.zk.session()),
                Actor::Admin(ad) => Some(ad.zk.session()),
                Actor::Cleaning(c) => Some(c.zk.session()),
                Actor::Gone => None,
            })
            .collect()
    }

    /// Polls every process something reached, until none is left.
    pub(super) fn drive(&mut self) {
        loop {
            let (woken, mut dirty) = {
                let mut net = lock(&self.net);
                (std::mem::take(&mut net.woken), std::mem::take(&mut net.dirty))
            };
            for waker in woken {
                waker.wake();
            }
            dirty.extend(std::mem::take(&mut *self.woken.lock().unwrap_or_else(std::sync::PoisonError::into_inner)));
            if dirty.is_empty() {
                return;
            }
            for actor in dirty {
                self.drive_actor(actor);
            }
        }
    }

    fn drive_actor(&mut self, actor: ActorId) {
        if self.trace {
            self.note(format!("drive a{actor}"));
        }
        match std::mem::replace(&mut self.actors[actor], Actor::Gone) {
            Actor::Starting(mut starting) => match poll_with(&mut starting.future, &self.wakers[actor].clone()) {
                Poll::Pending => self.actors[actor] = Actor::Starting(starting),
                Poll::Ready(Ok(started)) => {
                    let Starting { slot, zk, .. } = *starting;
                    self.become_member(actor, slot, zk, started);
                    lock(&self.net).dirty.insert(actor);
                }
                Poll::Ready(Err(err)) => {
                    self.note(format!("a{actor} could not start: {err}"));
                    self.actors[actor] = Actor::Starting(starting);
                    self.gone(actor, true);
                }
            },
            Actor::Member(mut member) => {
                let stopped = self.drive_member(actor, &mut member);
                self.actors[actor] = Actor::Member(member);
                if stopped {
                    self.note(format!("a{actor} stopped; its session closes"));
                    self.gone(actor, true);
                }
            }
            Actor::Admin(mut admin) => {
                self.drive_admin(actor, &mut admin);
                self.actors[actor] = Actor::Admin(admin);
            }
            Actor::Cleaning(mut cleaning) => match poll_with(&mut cleaning.future, &self.wakers[actor].clone()) {
                Poll::Pending => self.actors[actor] = Actor::Cleaning(cleaning),
                Poll::Ready(()) => {
                    self.actors[actor] = Actor::Cleaning(cleaning);
                    if self.plan.sabotage == Sabotage::CleanupOnce {
                        // The old handle kept the session open: whatever the clean-up missed stays.
                        self.actors[actor] = Actor::Gone;
                    } else {
                        // The task's end releases the session: with no clone left, it closes.
                        self.note(format!("a{actor}'s task cleaned up; its session closes"));
                        self.gone(actor, true);
                    }
                }
            },
            Actor::Gone => {}
        }
    }
}
