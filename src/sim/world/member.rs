//! A simulated member: the production driver's loop around its decision core (the request path's futures, the
//! watches, the handle's commands, a random pick among the ready sources as `select!` makes), and its worker
//! (kazoo's loop: `release_set()` on every `Release`, checkpoints through the handle on every `Acquired`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};
use zookeeper_client::SessionState;

use super::{Actor, PATH, World, poll_with};
use crate::checkpoint::Checkpoints;
use crate::decision::{AckId, Action, Core, Event, ReqId};
use crate::driver::publish::Publisher;
use crate::driver::requests::{self, Context, Done};
use crate::handle::{Command, Handle};
use crate::layout::Paths;
use crate::party::Membership;
use crate::session::SessionRef;
use crate::sim::net::{ActorId, Ev, SimClient, SimWatch, lock};
use crate::startup::Started;
use crate::zookeeper::WatchEvent;
use crate::{Error, Item, PartitionState, Snapshot};

/// A member: the driver's part (the core, the request path's futures, the watches, the commands), and its worker.
pub(super) struct Member {
    pub(super) slot: usize,
    pub(super) zk: SimClient,
    pub(super) core: Core,
    pub(super) publisher: Publisher,
    pub(super) context: Arc<Context>,
    pub(super) membership: Membership,
    pub(super) paths: Paths,
    pub(super) lock_dirs: Arc<Vec<String>>,
    /// Requests in flight, by id (a `Vec` in request order: polled in a reproducible order).
    pub(super) in_flight: Vec<(ReqId, BoxFuture<'static, Done<SimWatch>>)>,
    /// Requests answered, in the order they completed (what `FuturesUnordered` yields).
    pub(super) done: VecDeque<Done<SimWatch>>,
    pub(super) party_watch: Option<SimWatch>,
    pub(super) set_watch: Option<SimWatch>,
    pub(super) party_fired: Option<WatchEvent>,
    pub(super) set_fired: Option<WatchEvent>,
    pub(super) placement_watch: Option<SimWatch>,
    pub(super) placement_fired: Option<WatchEvent>,
    pub(super) commands_rx: mpsc::UnboundedReceiver<Command>,
    pub(super) commands: VecDeque<Command>,
    pub(super) release_acks: HashMap<AckId, oneshot::Sender<Result<(), Error>>>,
    pub(super) finish_acks: HashMap<AckId, oneshot::Sender<()>>,
    pub(super) next_ack: AckId,
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
        let Started { core, context, membership, paths } = started;
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (sender, snapshot) = watch::channel(Snapshot::initial(membership.name.clone()));
        let now = lock(&self.net).instant();
        let publisher = Publisher::new(Arc::new(sender), &paths, now);
        let checkpoints = Arc::new(Checkpoints::new(SessionRef::Owned(zk.clone()), PATH, paths.clone()));
        let handle = Handle::new(commands, snapshot, checkpoints);
        self.note(format!("a{actor} is member {} (node {})", membership.name, membership.node));
        self.actors[actor] = Actor::Member(Box::new(Member {
            slot,
            zk,
            core,
            publisher,
            context: Arc::new(context),
            membership,
            paths,
            lock_dirs: Arc::new(Vec::new()),
            in_flight: Vec::new(),
            done: VecDeque::new(),
            party_watch: None,
            set_watch: None,
            party_fired: None,
            set_fired: None,
            placement_watch: None,
            placement_fired: None,
            commands_rx,
            commands: VecDeque::new(),
            release_acks: HashMap::new(),
            finish_acks: HashMap::new(),
            next_ack: 0,
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
            while let Some(action) = m.core.poll_action() {
                self.perform(actor, m, action);
            }
            if m.core.is_stopped() {
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
            if m.party_fired.is_none()
                && let Some(watch) = &mut m.party_watch
                && let Poll::Ready(event) = poll_with(watch, &waker)
            {
                m.party_watch = None;
                m.party_fired = Some(event);
            }
            if m.set_fired.is_none()
                && let Some(watch) = &mut m.set_watch
                && let Poll::Ready(event) = poll_with(watch, &waker)
            {
                m.set_watch = None;
                m.set_fired = Some(event);
            }
            if m.placement_fired.is_none()
                && let Some(watch) = &mut m.placement_watch
                && let Poll::Ready(event) = poll_with(watch, &waker)
            {
                m.placement_watch = None;
                m.placement_fired = Some(event);
            }
            while let Ok(command) = m.commands_rx.try_recv() {
                m.commands.push_back(command);
            }
            let (instant, states) = {
                let net = lock(&self.net);
                (net.instant(), net.has_states(session))
            };
            let timer = m.core.poll_timeout().is_some_and(|at| at <= instant);
            let sources = [
                states,
                !m.done.is_empty(),
                m.party_fired.is_some(),
                m.set_fired.is_some(),
                !m.commands.is_empty(),
                timer,
                // Last: runs without a placement record draw exactly as before it existed.
                m.placement_fired.is_some(),
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
                        m.publisher.session(state);
                        m.core.handle(session_event(state), instant);
                    }
                }
                1 => {
                    let Some(done) = m.done.pop_front() else { continue };
                    if let Some(watch) = done.party_watch {
                        m.party_watch = Some(watch);
                    }
                    if let Some(watch) = done.set_watch {
                        m.set_watch = Some(watch);
                    }
                    if let Some(watch) = done.placement_watch {
                        m.placement_watch = Some(watch);
                    }
                    if let Some(membership) = done.joined {
                        m.membership = membership;
                    }
                    m.core.handle(Event::Reply(done.id, done.reply), instant);
                }
                2 => {
                    let event = match m.party_fired.take() {
                        Some(WatchEvent::SessionEnded(state)) => session_event(state),
                        _ => Event::PartyChanged,
                    };
                    m.core.handle(event, instant);
                }
                3 => {
                    let event = match m.set_fired.take() {
                        Some(WatchEvent::SessionEnded(state)) => session_event(state),
                        _ => Event::SetChanged,
                    };
                    m.core.handle(event, instant);
                }
                4 => {
                    let Some(command) = m.commands.pop_front() else { continue };
                    m.next_ack += 1;
                    let id = m.next_ack;
                    let event = match command {
                        Command::ReleaseSet(ack) => {
                            m.release_acks.insert(id, ack);
                            Event::ReleaseSet(id)
                        }
                        Command::Finish(ack) => {
                            m.finish_acks.insert(id, ack);
                            Event::Finish(Some(id))
                        }
                    };
                    m.core.handle(event, instant);
                }
                6 => {
                    let event = match m.placement_fired.take() {
                        Some(WatchEvent::SessionEnded(state)) => session_event(state),
                        _ => Event::PlacementChanged,
                    };
                    m.core.handle(event, instant);
                }
                _ => m.core.handle_timeout(instant),
            }
        }
        // Wake up for the core's next deadline.
        if let Some(at) = m.core.poll_timeout() {
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

    /// Performs one of a member's core's actions, as the driver does.
    fn perform(&mut self, actor: ActorId, m: &mut Member, action: Action) {
        match action {
            Action::Request(id, op) => {
                if m.lock_dirs.len() < m.core.item_count() {
                    let dirs = Arc::make_mut(&mut m.lock_dirs);
                    for index in dirs.len()..m.core.item_count() {
                        dirs.push(m.paths.lock_dir(&m.core.item(index).node_name()));
                    }
                }
                if self.trace {
                    self.note(format!("a{actor} asks #{id} {op:?}"));
                }
                let future = requests::perform(
                    m.zk.clone(),
                    m.context.clone(),
                    m.lock_dirs.clone(),
                    m.membership.clone(),
                    id,
                    op,
                );
                m.in_flight.push((id, future.boxed()));
            }
            // A cancelled wait answers nothing (the driver aborts it).
            Action::Cancel(id) => m.in_flight.retain(|(request, _)| *request != id),
            Action::Publish(publication) => {
                let line = format!(
                    "a{actor} {} publishes {} items {:?} revoked {:?}{} ({})",
                    publication.member,
                    publication.state,
                    publication.items.iter().map(|&(i, _)| m.core.item(i).to_string()).collect::<Vec<_>>(),
                    publication.revoked.iter().map(|&i| m.core.item(i).to_string()).collect::<Vec<_>>(),
                    if publication.suspended { " suspended" } else { "" },
                    publication.reason
                );
                self.note(line);
                let now = lock(&self.net).instant();
                let key = |s: &Snapshot| {
                    (s.state, s.items.clone(), s.tokens.clone(), s.revoked.clone(), s.suspended, s.cause.clone())
                };
                let (before, generation, reported) = m.handle.read(|s| (key(s), s.generation, s.disagreements.clone()));
                m.publisher.publish(&m.core, *publication, now);
                let (after, next, disagreements) = m.handle.read(|s| (key(s), s.generation, s.disagreements.clone()));
                for d in disagreements.iter().filter(|d| d.kind.catching_up() && !reported.contains(d)) {
                    self.check_reported_lag(&m.membership.node, d);
                }
                // The same state is never published again as a new episode: a worker that starts its work at every
                // `Acquired` would run its items twice.
                if next != generation && after == before {
                    self.violate(format!(
                        "a{actor} published {} again as a new episode (generation {next}) with the same items, tokens, \
                         revocations and cause",
                        after.0
                    ));
                }
            }
            Action::Ack(id, result) => {
                if let Some(ack) = m.release_acks.remove(&id) {
                    let _ = ack.send(result.map_err(crate::driver::publish::error_of));
                } else if let Some(ack) = m.finish_acks.remove(&id) {
                    let _ = ack.send(());
                }
            }
            Action::Stop => {
                m.party_watch = None;
                m.set_watch = None;
                m.placement_watch = None;
                m.in_flight.clear();
            }
        }
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
                    if m.handle.fencing_token(item) != Some(*token) {
                        self.violate(format!(
                            "{} lists {item} with token {token} but its handle's fencing_token says {:?}",
                            snapshot.member,
                            m.handle.fencing_token(item)
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

/// The core's view of a session state.
fn session_event(state: SessionState) -> Event {
    if let Some(end) = crate::driver::publish::session_end(state) {
        Event::SessionEnded(end)
    } else if state == SessionState::Disconnected {
        Event::Suspended
    } else {
        Event::Connected
    }
}
