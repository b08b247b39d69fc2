//! The simulated network between the processes and the one ZooKeeper server, with the clock and the scheduler; and
//! [`SimClient`], the [`ZooKeeper`] implementation on which the simulated processes run the crate's own code.
//!
//! Each session has one connection, modelled as zookeeper-client behaves: a request is queued when it is made and sent
//! in order; the server takes one request at a time per session, after a random latency, and answers it on the model
//! at once; replies and watch events come back in order, after another latency. A cut fails the requests whose
//! replies had not arrived (they were applied) and a random prefix of those on the wire (not applied, or applied
//! late: after up to three of the session's later requests, as a request read from an old connection can be, but
//! never after a `sync` of the session); the rest wait in the client for the reconnection. Watches survive a reconnection, and the events they missed arrive
//! once it is back. Once a session ends, every request and watch of it fails with the session's end.
//!
//! Here: the clock, the scheduler and the tickets that futures wait on; [`connection`] holds each session's
//! connection (delivery, cuts, reconnections, the session's end); [`server`] serves the requests on the model and
//! translates its answers; [`client`] is [`SimClient`].

mod client;
mod client_link;
mod server;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

use zookeeper_client::SessionState;

use super::Rng;
use super::zk::{self as model, Mode as ModelMode, SessionId, Zk, ZkErr};
use crate::zookeeper::{ReadResult, Stat, WatchEvent, Written, ZkError};
pub(crate) use client::{SimClient, SimWatch};
use client_link::Conn;

/// Identifies a request, a watch or a timer.
pub(crate) type Ticket = u64;
/// Identifies a simulated process (whose futures are polled when something reaches it).
pub(crate) type ActorId = usize;

/// A request as the server takes it.
#[derive(Clone, Debug)]
pub(crate) enum Request {
    Create { path: String, data: Vec<u8>, mode: ModelMode },
    Delete { path: String, version: Option<i32> },
    SetData { path: String, data: Vec<u8>, version: Option<i32> },
    GetData { path: String, watch: Option<Ticket> },
    Exists { path: String, watch: Option<Ticket> },
    Children { path: String, watch: Option<Ticket> },
    Ephemerals { prefix: String },
    Sync,
    MultiWrite(Vec<model::WriteOp>),
    MultiRead(Vec<model::ReadOp>),
}

/// What the server answered.
#[derive(Clone, Debug)]
pub(crate) enum Response {
    Created(String, Stat),
    Done,
    Stat(Stat),
    Data(Vec<u8>, Stat),
    Exists(Option<Stat>),
    Children(Vec<String>, Stat),
    Paths(Vec<String>),
    Written(Vec<Written>),
    Read(Vec<ReadResult>),
}

/// A reply: the response, or the error with the index of the failing operation of a `multi`.
pub(crate) type Answer = Result<Response, (Option<usize>, ZkError)>;

/// What the scheduler runs.
#[derive(Debug)]
pub(crate) enum Ev {
    /// The server takes the next request of a session.
    Serve(SessionId),
    /// Something reaches a session's client, if its connection is still the one it was sent on.
    Deliver { session: SessionId, link: u64, what: Delivery },
    /// An actor's core asked to be woken.
    Wake(ActorId),
    /// A timer (a `sleep`) is due.
    Timer(Ticket),
    /// The world's own events (faults, workers, admins), by number.
    World(u64),
}

#[derive(Debug)]
pub(crate) enum Delivery {
    Reply(Ticket, Answer),
    Watch(Ticket, WatchEvent),
    State(SessionState),
    /// A request that was out at a cut: the client fails it with the lost connection when it notices the cut, on
    /// whichever connection it has by then (it is never lost with one).
    Lost(Ticket),
}

/// The network, the server and the clock: shared by every [`SimClient`] and the world.
pub(crate) struct Net {
    pub zk: Zk,
    pub rng: Rng,
    pub epoch: Instant,
    pub now: Duration,
    queue: BinaryHeap<Reverse<(Duration, u64, usize)>>,
    events: Vec<Option<Ev>>,
    seq: u64,
    conns: BTreeMap<SessionId, Conn>,
    answers: HashMap<Ticket, Answer>,
    watch_events: HashMap<Ticket, WatchEvent>,
    timers: HashMap<Ticket, Duration>,
    /// The waker of each future waiting on a ticket.
    wakers: HashMap<Ticket, Waker>,
    /// Wakers due, woken by the world once it has let go of the network.
    pub woken: Vec<Waker>,
    next_ticket: Ticket,
    /// The server is stalled: it takes no request.
    pub frozen: bool,
    /// Actors something reached since the world last looked.
    pub dirty: BTreeSet<ActorId>,
    /// Every write `multi` the server applied or refused, for the checkers.
    pub writes: Vec<Write>,
}

/// A write `multi` as the server judged it.
pub(crate) struct Write {
    pub session: SessionId,
    pub ops: Vec<model::WriteOp>,
    pub result: Result<(), ZkErr>,
    /// Whether each node it checks was then the lowest lock contender of its directory (a checkpoint's fence).
    pub checks_lowest: bool,
}

impl Net {
    pub fn new(seed: u64) -> Net {
        Net {
            zk: Zk::new(),
            rng: Rng::new(seed),
            epoch: Instant::now(),
            now: Duration::ZERO,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            seq: 0,
            conns: BTreeMap::new(),
            answers: HashMap::new(),
            watch_events: HashMap::new(),
            timers: HashMap::new(),
            wakers: HashMap::new(),
            woken: Vec::new(),
            next_ticket: 1,
            frozen: false,
            dirty: BTreeSet::new(),
            writes: Vec::new(),
        }
    }

    pub fn instant(&self) -> Instant {
        self.epoch + self.now
    }

    pub fn at(&mut self, delay: Duration, ev: Ev) {
        self.seq += 1;
        self.events.push(Some(ev));
        self.queue.push(Reverse((self.now + delay, self.seq, self.events.len() - 1)));
    }

    /// The next event, with the clock moved to it.
    pub fn pop(&mut self) -> Option<Ev> {
        while let Some(Reverse((when, _, slot))) = self.queue.pop() {
            if let Some(ev) = self.events[slot].take() {
                self.now = self.now.max(when);
                return Some(ev);
            }
        }
        None
    }

    fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        self.next_ticket
    }

    /// The answer to a request: stored for its future, which is woken.
    fn answer(&mut self, ticket: Ticket, answer: Answer) {
        self.answers.insert(ticket, answer);
        self.wake(ticket);
    }

    /// A watch event: stored for its future, which is woken.
    fn watch_event(&mut self, ticket: Ticket, event: WatchEvent) {
        self.watch_events.insert(ticket, event);
        self.wake(ticket);
    }

    fn wake(&mut self, ticket: Ticket) {
        if let Some(waker) = self.wakers.remove(&ticket) {
            self.woken.push(waker);
        }
    }

    /// A timer is due: its future is woken.
    pub fn timer_due(&mut self, ticket: Ticket) {
        self.wake(ticket);
    }

    fn latency(&mut self) -> Duration {
        self.rng.millis(1, 8)
    }

    // ---- Timers -----------------------------------------------------------------------------------------------

    /// Wakes an actor at `at` (from the epoch).
    pub fn wake_at(&mut self, actor: ActorId, at: Duration) {
        let delay = at.saturating_sub(self.now);
        self.at(delay, Ev::Wake(actor));
    }

    /// A timer at `at` (from the epoch); its ticket says when it is due.
    pub fn timer(&mut self, at: Duration) -> Ticket {
        let ticket = self.ticket();
        self.timers.insert(ticket, at);
        let delay = at.saturating_sub(self.now);
        self.at(delay, Ev::Timer(ticket));
        ticket
    }

    fn due(&mut self, ticket: Ticket) -> bool {
        match self.timers.get(&ticket) {
            Some(&at) if at <= self.now => {
                self.timers.remove(&ticket);
                true
            }
            Some(_) => false,
            None => true,
        }
    }
}

/// Locks the network (the simulation is single-threaded: the lock is never contended, only poisoned by a panic that
/// already fails the test).
pub(crate) fn lock(net: &Mutex<Net>) -> MutexGuard<'_, Net> {
    net.lock().unwrap_or_else(PoisonError::into_inner)
}
