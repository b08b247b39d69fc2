//! One member's loop body, shared by the tokio task ([`Driver`](super::Driver)) and the simulation: what each input
//! (a session change, a request's reply, an input watch, a handle's command, the core's deadline) does to the
//! [`Core`], and how each of the core's actions is carried out. The two loops differ only in how they wait for the
//! next input (a `select!`, or the simulation's seeded pick among the ready ones) and in how a request runs
//! ([`Requests`]: a spawned-in-place future that can be aborted, or one the simulation polls).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;
use zookeeper_client::SessionState;

use super::input_watches::InputWatches;
use super::publish::{self, Publisher};
use super::requests::{self, Context, Done, Then};
use crate::Error;
use crate::handle::Command;
use crate::membership::Membership;
use crate::zookeeper::ZooKeeper;
use proto::decision::{AckId, Action, Core, Event, Op, Publication, ReqId};

/// How a loop runs the requests the core asks for. Each request's [`Done`] must come back through [`Step::reply`],
/// unless it was cancelled.
pub(crate) trait Requests<W> {
    /// Runs `request`, the core's request `id`; `wait` marks a lock wait, which the core may [`cancel`](Self::cancel).
    fn start(&mut self, id: ReqId, wait: bool, request: impl Future<Output = Done<W>> + Send + 'static);

    /// The core no longer wants request `id`'s reply (a lock wait): it answers nothing.
    fn cancel(&mut self, id: ReqId);

    /// The core stopped: nothing in flight matters any more.
    fn stop(&mut self);

    /// The core asked for `op` as request `id` (before it runs: the simulation's trace).
    fn asked(&mut self, _id: ReqId, _op: &Op) {}

    /// Publishes `publication` to the member's snapshot (the simulation checks around it).
    fn publish(&mut self, publisher: &mut Publisher, core: &Core, _member: &Membership, p: Publication, now: Instant) {
        publisher.publish(core, p, now);
    }
}

/// The member's state beside its core that both loops keep alike: the client and the request context, the party
/// node, each item's lock directory, the input watches, and the handles' acknowledgements in waiting.
pub(crate) struct Step<Z: ZooKeeper> {
    core: Core,
    publisher: Publisher,
    zk: Z,
    context: Arc<Context>,
    membership: Membership,
    /// Each item's lock directory, by the core's item index (grown as the shared set brings new items).
    lock_dirs: Arc<Vec<String>>,
    /// The watches armed by the latest reads of the party, the shared set and the placement record.
    watches: InputWatches<Z::Watch>,
    /// Requests answered once that run on for their second reply ([`Done::then`]), started with the next actions.
    second_halves: Vec<(ReqId, Then<Z::Watch>)>,
    release_acks: HashMap<AckId, oneshot::Sender<Result<(), Error>>>,
    finish_acks: HashMap<AckId, oneshot::Sender<()>>,
    next_ack: AckId,
}

impl<Z: ZooKeeper> Step<Z> {
    pub fn new(core: Core, publisher: Publisher, zk: Z, context: Arc<Context>, membership: Membership) -> Self {
        Step {
            core,
            publisher,
            zk,
            context,
            membership,
            lock_dirs: Arc::new(Vec::new()),
            watches: InputWatches::new(),
            second_halves: Vec::new(),
            release_acks: HashMap::new(),
            finish_acks: HashMap::new(),
            next_ack: 0,
        }
    }

    pub fn core(&self) -> &Core {
        &self.core
    }

    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    pub fn client(&self) -> &Z {
        &self.zk
    }

    /// The member's nodes.
    pub fn paths(&self) -> &crate::paths::Paths {
        &self.context.paths
    }

    #[cfg(test)]
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    pub fn watches(&mut self) -> &mut InputWatches<Z::Watch> {
        &mut self.watches
    }

    /// The session's state changed.
    pub fn session(&mut self, state: SessionState, now: Instant) {
        self.publisher.session(state);
        self.core.handle(publish::session_event(state), now);
    }

    /// A request's reply: the watches its read armed are kept, a rejoin's new party node taken.
    pub fn reply(&mut self, mut done: Done<Z::Watch>, now: Instant) {
        self.watches.keep(&mut done);
        if let Some(membership) = done.joined {
            self.membership = membership;
        }
        if let Some(then) = done.then {
            self.second_halves.push((done.id, then));
        }
        self.core.handle(Event::Reply(done.id, done.reply), now);
    }

    /// An input watch fired ([`InputWatches`]): `ended` is the session's end, if that is what it saw.
    pub fn watch(&mut self, (event, ended): (Event, Option<SessionState>), now: Instant) {
        if let Some(state) = ended {
            self.publisher.session(state);
        }
        self.core.handle(event, now);
    }

    /// A handle's command; `None`: every handle is gone.
    pub fn command(&mut self, command: Option<Command>, now: Instant) {
        self.next_ack += 1;
        let id = self.next_ack;
        let event = match command {
            Some(Command::ReleaseSet(ack)) => {
                self.release_acks.insert(id, ack);
                Event::ReleaseSet(id)
            }
            Some(Command::Finish(ack)) => {
                self.finish_acks.insert(id, ack);
                Event::Finish(Some(id))
            }
            None => Event::Finish(None),
        };
        self.core.handle(event, now);
    }

    /// The core's deadline ([`Core::poll_timeout`]) passed.
    pub fn timeout(&mut self, now: Instant) {
        self.core.handle_timeout(now);
    }

    /// Carries out every action the core has asked for, in order.
    pub fn act(&mut self, requests: &mut impl Requests<Z::Watch>, now: Instant) {
        for (id, then) in self.second_halves.drain(..) {
            requests.start(id, false, then);
        }
        while let Some(action) = self.core.poll_action() {
            match action {
                Action::Request(id, op) => self.send(requests, id, op),
                Action::Cancel(id) => requests.cancel(id),
                Action::Publish(publication) => {
                    requests.publish(&mut self.publisher, &self.core, &self.membership, *publication, now);
                }
                Action::Ack(id, result) => {
                    if let Some(ack) = self.release_acks.remove(&id) {
                        let _ = ack.send(result.map_err(publish::error_of));
                    } else if let Some(ack) = self.finish_acks.remove(&id) {
                        let _ = ack.send(());
                    }
                }
                Action::Stop => {
                    self.watches.clear();
                    requests.stop();
                }
            }
        }
    }

    /// Starts a request on the one request path ([`requests::perform`]).
    fn send(&mut self, requests: &mut impl Requests<Z::Watch>, id: ReqId, op: Op) {
        if self.lock_dirs.len() < self.core.item_count() {
            let dirs = Arc::make_mut(&mut self.lock_dirs);
            for index in dirs.len()..self.core.item_count() {
                dirs.push(self.context.paths.lock_dir(&self.core.item(index).node_name()));
            }
        }
        requests.asked(id, &op);
        let wait = matches!(op, Op::Watch { .. });
        if wait {
            self.publisher.lock_wait();
        }
        let request = requests::perform(
            self.zk.clone(),
            self.context.clone(),
            self.lock_dirs.clone(),
            self.membership.clone(),
            id,
            op,
        );
        requests.start(id, wait, request);
    }

    /// After the loop: answers the commands that raced with the end (the cause the snapshot shows, or
    /// [`Error::Stopped`]).
    pub fn answer_late(&self, commands: impl IntoIterator<Item = Command>) {
        let cause = self.publisher.sender().borrow().cause.clone().unwrap_or(Error::Stopped);
        for command in commands {
            match command {
                Command::ReleaseSet(ack) => drop(ack.send(Err(cause.clone()))),
                Command::Finish(ack) => drop(ack.send(())),
            }
        }
    }
}
