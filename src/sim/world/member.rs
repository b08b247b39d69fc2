//! A simulated member: the production driver's loop body ([`Step`]) around its decision core, waited on the
//! simulation's way (the request path's futures polled in request order, the input watches, the handle's commands, a
//! seeded pick among the ready sources as `select!` makes), and its worker (kazoo's loop: `release_set()` on every
//! `Release`, checkpoints through the handle on every `Acquired`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use super::{Actor, PATH, World, poll_with};
use crate::checkpoint::Checkpoints;
use crate::driver::input_watches::Input;
use crate::driver::publish::Publisher;
use crate::driver::requests::Done;
use crate::driver::step::{Requests, Step};
use crate::handle::{Command, Handle};
use crate::membership::Membership;
use crate::paths::Paths;
use crate::session::SessionRef;
use crate::sim::net::{ActorId, Ev, SimClient, SimWatch, lock};
use crate::startup::Started;
use crate::{Error, Item, PartitionState, Snapshot};
use proto::decision::{Core, Op, Publication, ReqId};

/// A member: the driver's part (the shipped loop body around the core, the request path's futures, the commands),
/// and its worker.
pub(super) struct Member {
    pub(super) slot: usize,
    pub(super) zk: SimClient,
    /// The loop body the driver runs too: the core, the publisher, the party node, the input watches, the acks.
    pub(super) step: Step<SimClient>,
    pub(super) paths: Paths,
    /// Requests in flight, by id (a `Vec` in request order: polled in a reproducible order).
    pub(super) in_flight: Vec<(ReqId, BoxFuture<'static, Done<SimWatch>>)>,
    /// Requests answered, in the order they completed (what `FuturesUnordered` yields).
    pub(super) done: VecDeque<Done<SimWatch>>,
    pub(super) commands_rx: mpsc::UnboundedReceiver<Command>,
    pub(super) commands: VecDeque<Command>,
    pub(super) handle: Handle<SimClient>,
    /// When the core asked to be woken.
    pub(super) wake_at: Option<Duration>,
    pub(super) worker: Worker,
}

/// A call on the handle, in flight.
pub(super) type Call = BoxFuture<'static, Result<(), Error>>;

/// The member's worker: kazoo's loop, and checkpoints through the handle.
#[derive(Default)]
pub(super) struct Worker {
    /// The snapshot generation last looked at.
    pub(super) seen: u64,
    /// The closed items the snapshot showed when last looked at (they change within an episode).
    pub(super) closed_seen: Arc<[Item]>,
    /// A `release_set()` to make at this time.
    pub(super) release_at: Option<Duration>,
    /// A `release_set()` in flight, with the items the `Release` it answers revoked (for the early-ack check).
    pub(super) release: Option<(Call, Vec<Item>)>,
    /// Checkpoint saves in flight: the item and the save.
    pub(super) saves: Vec<(Item, Call)>,
    /// A `finish()` in flight.
    pub(super) finish: Option<BoxFuture<'static, ()>>,
    /// Item finishes in flight (lineage runs).
    pub(super) finishing: Vec<super::lineage::Finishing>,
    /// The ownership (fencing token) under which each item's finish was last tried: once per ownership.
    pub(super) finish_tried: super::lineage::Tried,
}

impl World {
    /// The started process becomes a member: the driver's loop around its core, a publisher, a handle.
    pub(super) fn become_member(&mut self, actor: ActorId, slot: usize, zk: SimClient, started: Started) {
        let Started { core, context, membership, paths, checkpoints } = started;
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (sender, snapshot) = watch::channel(Snapshot::initial(membership.name.clone()));
        let now = lock(&self.net).instant();
        let publisher = Publisher::new(Arc::new(sender), &paths, now);
        let checkpoints = Arc::new(Checkpoints::new(SessionRef::Owned(zk.clone()), PATH, paths.clone(), checkpoints));
        let handle = Handle::new(commands, snapshot, checkpoints);
        self.note(format!("a{actor} is member {} (node {})", membership.name, membership.node));
        self.actors[actor] = Actor::Member(Box::new(Member {
            slot,
            step: Step::new(core, publisher, zk.clone(), Arc::new(context), membership),
            zk,
            paths,
            in_flight: Vec::new(),
            done: VecDeque::new(),
            commands_rx,
            commands: VecDeque::new(),
            handle,
            wake_at: None,
            worker: Worker::default(),
        }));
    }

    /// Runs a member's driver loop until nothing is ready: each pass picks one ready source at random, as the real
    /// driver's `select!` does. Returns whether the core stopped.
    pub(super) fn drive_member(&mut self, actor: ActorId, m: &mut Member) -> bool {
        let session = m.zk.session();
        let waker = self.wakers[actor].clone();
        loop {
            let now = lock(&self.net).instant();
            m.step.act(&mut SimRequests { world: self, actor, in_flight: &mut m.in_flight, handle: &m.handle }, now);
            if m.step.core().is_stopped() {
                return true;
            }
            self.work(actor, m);
            // Poll everything that may have become ready.
            let mut k = 0;
            while k < m.in_flight.len() {
                if let Poll::Ready(done) = poll_with(&mut m.in_flight[k].1, &waker) {
                    drop(m.in_flight.remove(k));
                    m.done.push_back(done);
                } else {
                    k += 1;
                }
            }
            m.step.watches().poll_each(&mut TaskContext::from_waker(&waker));
            while let Ok(command) = m.commands_rx.try_recv() {
                m.commands.push_back(command);
            }
            let (instant, states) = {
                let net = lock(&self.net);
                (net.instant(), net.has_states(session))
            };
            let timer = m.step.core().poll_timeout().is_some_and(|at| at <= instant);
            let watches = m.step.watches();
            let fired = [Input::Party, Input::Set, Input::Placement].map(|input| watches.has_fired(input));
            let sources = [
                states,
                !m.done.is_empty(),
                fired[0],
                fired[1],
                !m.commands.is_empty(),
                timer,
                // Last: runs without a placement record draw exactly as before it existed.
                fired[2],
            ];
            let ready: Vec<usize> = (0..sources.len()).filter(|&s| sources[s]).collect();
            if ready.is_empty() {
                break;
            }
            let pick = ready[self.rng().below(ready.len() as u64) as usize];
            if self.trace {
                self.note(format!("a{actor} handles source {pick} of {ready:?}"));
            }
            match pick {
                0 => {
                    let mut states = lock(&self.net).take_states(session);
                    // The client's state watcher may fold several changes into the latest.
                    if states.len() > 1 && self.rng().below(2) == 0 {
                        states.drain(..states.len() - 1);
                    }
                    for state in states {
                        m.step.session(state, instant);
                    }
                }
                1 => {
                    let Some(done) = m.done.pop_front() else { continue };
                    m.step.reply(done, instant);
                }
                2 | 3 | 6 => {
                    let input = match pick {
                        2 => Input::Party,
                        3 => Input::Set,
                        _ => Input::Placement,
                    };
                    let Some(fired) = m.step.watches().take_fired(input) else { continue };
                    m.step.watch(fired, instant);
                }
                4 => {
                    let Some(command) = m.commands.pop_front() else { continue };
                    m.step.command(Some(command), instant);
                }
                _ => m.step.timeout(instant),
            }
        }
        // Wake up for the core's next deadline.
        if let Some(at) = m.step.core().poll_timeout() {
            let due = at.saturating_duration_since(lock(&self.net).epoch);
            if m.wake_at.is_none_or(|t| due < t || t <= self.now()) {
                m.wake_at = Some(due);
                let mut net = lock(&self.net);
                let delay = due.saturating_sub(net.now);
                net.at(delay, Ev::Wake(actor));
            }
        }
        false
    }

    /// The member's worker: answers `Release` with `release_set()` after a while; on every `Acquired`, takes each
    /// listed item's token and saves its checkpoint through the handle; checks what comes back.
    fn work(&mut self, actor: ActorId, m: &mut Member) {
        let now = self.now();
        let session = m.zk.session();
        let waker = self.wakers[actor].clone();
        let snapshot = m.handle.read(Snapshot::clone);
        // Items closed within an episode: shown without a new generation, and finished all the same.
        if snapshot.generation == m.worker.seen && snapshot.closed != m.worker.closed_seen {
            m.worker.closed_seen = snapshot.closed.clone();
            self.start_finishes(m, &snapshot);
        }
        if snapshot.generation != m.worker.seen {
            m.worker.seen = snapshot.generation;
            m.worker.closed_seen = snapshot.closed.clone();
            if snapshot.state == PartitionState::Release && m.worker.release.is_none() && m.worker.release_at.is_none()
            {
                let at = now + self.rng().millis(0, 80);
                m.worker.release_at = Some(at);
                lock(&self.net).wake_at(actor, at);
            }
            self.start_finishes(m, &snapshot);
            if snapshot.state == PartitionState::Acquired {
                for (item, token) in snapshot.items.iter().zip(snapshot.tokens.iter()) {
                    if m.handle.read(|s| s.token(item)) != Some(*token) {
                        self.violate(format!(
                            "{} lists {item} with token {token} but its handle's snapshot gives the token {:?}",
                            snapshot.member,
                            m.handle.read(|s| s.token(item))
                        ));
                    }
                    match m.handle.checkpoint_writer(item) {
                        Ok(writer) => {
                            let data = format!("{}@{}", snapshot.member, snapshot.generation).into_bytes();
                            let save = async move { writer.save(&data).await }.boxed();
                            m.worker.saves.push((item.clone(), save));
                        }
                        Err(err) => {
                            self.violate(format!("{} lists {item} but cannot checkpoint it: {err}", snapshot.member))
                        }
                    }
                }
            }
        }
        if m.worker.release_at.is_some_and(|at| at <= now) {
            m.worker.release_at = None;
            let snapshot = m.handle.read(Snapshot::clone);
            if snapshot.state == PartitionState::Release {
                // A suspension's Release may be answered by the session surviving, with nothing released.
                let owed = if snapshot.suspended { Vec::new() } else { snapshot.revoked.to_vec() };
                m.worker.release = Some((m.handle.release_set().boxed(), owed));
            }
        }
        if let Some((release, owed)) = &mut m.worker.release
            && let Poll::Ready(result) = poll_with(release, &waker)
        {
            let owed = std::mem::take(owed);
            m.worker.release = None;
            if result.is_ok()
                && let Some(item) = owed.iter().find(|item| self.holds_a_node(session, item))
            {
                self.violate(format!(
                    "a{actor}'s release_set() returned while its lock node of revoked item {item} still exists"
                ));
            }
            // The next Release (if any) is answered too.
            m.worker.seen = 0;
        }
        let mut k = 0;
        while k < m.worker.saves.len() {
            if let Poll::Ready(result) = poll_with(&mut m.worker.saves[k].1, &waker) {
                let (item, _) = m.worker.saves.remove(k);
                match result {
                    Ok(()) => self.saves += 1,
                    Err(Error::CheckpointFenced { .. }) => {}
                    Err(err) => self.violate(format!("a{actor}'s checkpoint save of {item} failed: {err}")),
                }
            } else {
                k += 1;
            }
        }
        self.poll_finishes(actor, m);
        if let Some(finish) = &mut m.worker.finish
            && poll_with(finish, &waker).is_ready()
        {
            m.worker.finish = None;
        }
    }
}

/// How the simulation runs a member's requests: futures it polls itself, in request order; and its checks around
/// every publication.
struct SimRequests<'a> {
    world: &'a mut World,
    actor: ActorId,
    in_flight: &'a mut Vec<(ReqId, BoxFuture<'static, Done<SimWatch>>)>,
    handle: &'a Handle<SimClient>,
}

impl Requests<SimWatch> for SimRequests<'_> {
    fn start(&mut self, id: ReqId, _wait: bool, request: impl Future<Output = Done<SimWatch>> + Send + 'static) {
        self.in_flight.push((id, request.boxed()));
    }

    // A cancelled wait answers nothing (the driver aborts it).
    fn cancel(&mut self, id: ReqId) {
        self.in_flight.retain(|(request, _)| *request != id);
    }

    fn stop(&mut self) {
        self.in_flight.clear();
    }

    fn asked(&mut self, id: ReqId, op: &Op) {
        if self.world.trace {
            self.world.note(format!("a{} asks #{id} {op:?}", self.actor));
        }
    }

    fn publish(&mut self, publisher: &mut Publisher, core: &Core, member: &Membership, p: Publication, now: Instant) {
        let (world, actor) = (&mut *self.world, self.actor);
        let line = format!(
            "a{actor} {} publishes {} items {:?} revoked {:?}{} ({})",
            p.member,
            p.state,
            p.items.iter().map(|&(i, _)| core.item(i).to_string()).collect::<Vec<_>>(),
            p.revoked.iter().map(|&i| core.item(i).to_string()).collect::<Vec<_>>(),
            if p.suspended { " suspended" } else { "" },
            p.reason
        );
        world.note(line);
        let key = |s: &Snapshot| {
            (s.state, s.items.clone(), s.tokens.clone(), s.revoked.clone(), s.suspended, s.cause.clone())
        };
        let (before, generation, reported) = self.handle.read(|s| (key(s), s.generation, s.disagreements.clone()));
        publisher.publish(core, p, now);
        let (after, next, disagreements) = self.handle.read(|s| (key(s), s.generation, s.disagreements.clone()));
        for d in disagreements.iter().filter(|d| d.kind.catching_up() && !reported.contains(d)) {
            world.check_reported_lag(&member.node, d);
        }
        // The same state is never published again as a new episode: a worker that starts its work at every
        // `Acquired` would run its items twice.
        if next != generation && after == before {
            world.violate(format!(
                "a{actor} published {} again as a new episode (generation {next}) with the same items, tokens, \
                 revocations and cause",
                after.0
            ));
        }
    }
}
