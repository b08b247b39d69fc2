//! The simulated network between the processes and the one ZooKeeper server, with the clock and the scheduler; and
//! [`SimClient`], the [`ZooKeeper`] implementation on which the simulated processes run the crate's own code.
//!
//! Each session has one connection, modelled as zookeeper-client behaves: a request is queued when it is made and sent
//! in order; the server takes one request at a time per session, after a random latency, and answers it on the model
//! at once; replies and watch events come back in order, after another latency. A cut fails the requests whose
//! replies had not arrived (they were applied) and a random prefix of those on the wire (not applied, or applied
//! late: after up to three of the session's later requests, as a request read from an old connection can be); the
//! rest wait in the client for the reconnection. Watches survive a reconnection, and the events they missed arrive
//! once it is back. Once a session ends, every request and watch of it fails with the session's end.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use zookeeper_client::SessionState;

use super::Rng;
use super::zk::{self as model, Mode as ModelMode, SessionId, WatchEvent as ModelEvent, WatchId, Zk, ZkErr};
use crate::acl::NodeAcls;
use crate::zookeeper::{Mode, MultiError, ReadOp, ReadResult, Stat, WatchEvent, WriteOp, Written, ZkError, ZooKeeper};

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
}

/// One session's connection, from the client's side.
#[derive(Debug)]
struct Conn {
    /// Whose futures wait on it.
    owner: ActorId,
    up: bool,
    /// Bumped at every cut: deliveries sent on an older connection are lost.
    link: u64,
    /// Requests not yet taken by the server.
    outbox: VecDeque<(Ticket, Request)>,
    /// Requests taken by the server whose replies have not arrived.
    taken: BTreeSet<Ticket>,
    /// Requests on the wire at a cut that the server applies late: after this many more of the session's requests.
    late: Vec<(Request, u32)>,
    serving: bool,
    /// Deliveries to this client stay in order (one TCP connection).
    last_delivery: Duration,
    /// Session states for the owner's state watcher, oldest first.
    states: VecDeque<SessionState>,
    /// Model watch → the ticket its event answers.
    watches: BTreeMap<WatchId, Ticket>,
    /// Watch events that fired while disconnected: delivered on reconnection (the client's SetWatches).
    stashed: Vec<(Ticket, WatchEvent)>,
    /// Every watch the client has not yet seen fire (set, fired on the way, or stashed): at the session's end, each
    /// gets the end, as the client's watch registry does.
    unseen: BTreeSet<Ticket>,
    /// The session's end, once known to the client.
    ended: Option<SessionState>,
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

    /// A new session whose client belongs to `owner`.
    pub fn open_session(&mut self, owner: ActorId) -> SessionId {
        let session = self.zk.open_session();
        let conn = Conn {
            owner,
            up: true,
            link: 0,
            outbox: VecDeque::new(),
            taken: BTreeSet::new(),
            late: Vec::new(),
            serving: false,
            last_delivery: self.now,
            states: VecDeque::new(),
            watches: BTreeMap::new(),
            unseen: BTreeSet::new(),
            stashed: Vec::new(),
            ended: None,
        };
        self.conns.insert(session, conn);
        session
    }

    pub fn is_up(&self, session: SessionId) -> bool {
        self.conns.get(&session).is_some_and(|c| c.up && c.ended.is_none())
    }

    pub fn link(&self, session: SessionId) -> u64 {
        self.conns.get(&session).map_or(0, |c| c.link)
    }

    /// Takes the session states the client saw since the last call.
    pub fn take_states(&mut self, session: SessionId) -> Vec<SessionState> {
        self.conns.get_mut(&session).map(|c| c.states.drain(..).collect()).unwrap_or_default()
    }

    pub fn has_states(&self, session: SessionId) -> bool {
        self.conns.get(&session).is_some_and(|c| !c.states.is_empty())
    }

    // ---- Requests ---------------------------------------------------------------------------------------------

    /// Queues a request on the session's connection (the client sends it in order).
    fn submit(&mut self, session: SessionId, request: Request) -> Ticket {
        let ticket = self.ticket();
        let Some(conn) = self.conns.get_mut(&session) else {
            self.answer(ticket, Err((None, ZkError::SessionExpired)));
            return ticket;
        };
        if let Some(state) = conn.ended {
            self.answer(ticket, Err((None, session_error(state))));
            return ticket;
        }
        conn.outbox.push_back((ticket, request));
        self.serve_soon(session);
        ticket
    }

    pub fn serve_soon(&mut self, session: SessionId) {
        let frozen = self.frozen;
        let Some(conn) = self.conns.get_mut(&session) else { return };
        if conn.serving || !conn.up || conn.ended.is_some() || frozen || conn.outbox.is_empty() {
            return;
        }
        conn.serving = true;
        let delay = self.latency();
        self.at(delay, Ev::Serve(session));
    }

    /// The server takes the session's next request and applies it.
    pub fn serve(&mut self, session: SessionId) {
        let frozen = self.frozen;
        let Some(conn) = self.conns.get_mut(&session) else { return };
        conn.serving = false;
        if !conn.up || conn.ended.is_some() || frozen {
            return;
        }
        // Requests from an old connection that the server reads late land before this one.
        let mut late = Vec::new();
        conn.late.retain_mut(|(request, countdown)| {
            *countdown = countdown.saturating_sub(1);
            if *countdown == 0 {
                late.push(request.clone());
                false
            } else {
                true
            }
        });
        let Some((ticket, request)) = conn.outbox.pop_front() else { return };
        conn.taken.insert(ticket);
        for request in late {
            let _ = self.apply(session, &request);
        }
        let answer = self.apply(session, &request);
        self.fire_watches();
        self.deliver(session, Delivery::Reply(ticket, answer));
        self.serve_soon(session);
    }

    /// Applies one request to the model.
    fn apply(&mut self, s: SessionId, request: &Request) -> Answer {
        let err = |e: ZkErr| (None, zk_error(e));
        Ok(match request {
            Request::Create { path, data, mode } => {
                let (path, stat) = self.zk.create(s, path, data, *mode).map_err(err)?;
                Response::Created(path, stat_of(&stat))
            }
            Request::Delete { path, version } => {
                self.zk.delete_versioned(s, path, *version).map_err(err)?;
                Response::Done
            }
            Request::SetData { path, data, version } => {
                Response::Stat(stat_of(&self.zk.set_data(s, path, data, *version).map_err(err)?))
            }
            Request::GetData { path, watch } => {
                let (data, stat, id) = self.zk.get_data(s, path, watch.is_some()).map_err(err)?;
                self.register(s, id, *watch);
                Response::Data(data, stat_of(&stat))
            }
            Request::Exists { path, watch } => {
                let (stat, id) = self.zk.exists_watch(s, path, watch.is_some()).map_err(err)?;
                self.register(s, id, *watch);
                Response::Exists(stat.as_ref().map(stat_of))
            }
            Request::Children { path, watch } => {
                let (children, id) = self.zk.children(s, path, watch.is_some()).map_err(err)?;
                self.register(s, id, *watch);
                let stat = self.zk.exists(path).unwrap_or_default();
                Response::Children(children, stat_of(&stat))
            }
            Request::Ephemerals { prefix } => {
                if !self.zk.is_alive(s) {
                    return Err(err(ZkErr::SessionExpired));
                }
                Response::Paths(self.zk.ephemerals(s, prefix))
            }
            Request::Sync => {
                if !self.zk.is_alive(s) {
                    return Err(err(ZkErr::SessionExpired));
                }
                Response::Done
            }
            Request::MultiWrite(ops) => {
                // A checkpoint's fence, judged at the instant the server applies it.
                let lowest = ops.iter().all(|op| match op {
                    model::WriteOp::Check { path, .. } => self.lowest_contender(path),
                    _ => true,
                });
                let result = self.zk.multi_write(s, ops);
                self.writes.push(Write {
                    session: s,
                    ops: ops.clone(),
                    result: result.as_ref().map(drop).map_err(|&(_, e)| e),
                    checks_lowest: lowest,
                });
                match result {
                    Ok(results) => Response::Written(
                        results
                            .into_iter()
                            .map(|r| match r {
                                model::WriteResult::Created { path, stat } => {
                                    Written::Created { path, stat: stat_of(&stat) }
                                }
                                model::WriteResult::Deleted => Written::Deleted,
                                model::WriteResult::Set(stat) => Written::Set(stat_of(&stat)),
                                model::WriteResult::Checked => Written::Checked,
                            })
                            .collect(),
                    ),
                    // A dead session fails the request as a whole.
                    Err((_, ZkErr::SessionExpired)) => return Err((None, ZkError::SessionExpired)),
                    Err((index, e)) => return Err((Some(index), zk_error(e))),
                }
            }
            Request::MultiRead(ops) => {
                let results = self.zk.multi_read(s, ops).map_err(err)?;
                Response::Read(
                    results
                        .into_iter()
                        .map(|r| match r {
                            model::ReadResult::Children(children) => ReadResult::Children(children),
                            model::ReadResult::Data(data, stat) => ReadResult::Data(data, stat_of(&stat)),
                            model::ReadResult::Error(e) => ReadResult::Failed(zk_error(e)),
                        })
                        .collect(),
                )
            }
        })
    }

    /// Whether `path` is the lowest lock contender (by kazoo's rule) of its directory.
    fn lowest_contender(&self, path: &str) -> bool {
        let Some((dir, node)) = path.rsplit_once('/') else { return false };
        let lowest = self
            .zk
            .children_of(dir)
            .into_iter()
            .filter_map(|c| crate::layout::sequence(&c).map(|seq| (seq.to_owned(), c.clone())))
            .min()
            .map(|(_, c)| c);
        lowest.as_deref() == Some(node)
    }

    fn register(&mut self, s: SessionId, id: Option<WatchId>, ticket: Option<Ticket>) {
        if let (Some(id), Some(ticket), Some(conn)) = (id, ticket, self.conns.get_mut(&s)) {
            conn.watches.insert(id, ticket);
            conn.unseen.insert(ticket);
        }
    }

    /// Routes the watches the model fired to their clients (held back while a client is disconnected).
    pub fn fire_watches(&mut self) {
        for fired in self.zk.take_fired() {
            let Some(conn) = self.conns.get_mut(&fired.session) else { continue };
            let Some(ticket) = conn.watches.remove(&fired.watch) else { continue };
            let event = match fired.event {
                ModelEvent::NodeCreated => WatchEvent::Created,
                ModelEvent::NodeDeleted => WatchEvent::Deleted,
                ModelEvent::NodeDataChanged => WatchEvent::DataChanged,
                ModelEvent::NodeChildrenChanged => WatchEvent::ChildrenChanged,
            };
            if conn.up {
                self.deliver(fired.session, Delivery::Watch(ticket, event));
            } else {
                conn.stashed.push((ticket, event));
            }
        }
    }

    /// Sends something to a session's client over its current connection, after everything already sent to it.
    fn deliver(&mut self, session: SessionId, what: Delivery) {
        let latency = self.latency();
        let now = self.now;
        let Some(conn) = self.conns.get_mut(&session) else { return };
        let when = (now + latency).max(conn.last_delivery);
        conn.last_delivery = when;
        let link = conn.link;
        self.at(when - now, Ev::Deliver { session, link, what });
    }

    /// Something reaches a client (lost if its connection was cut since it was sent: a reply then fails with the
    /// lost connection instead, which the cut already queued).
    pub fn arrive(&mut self, session: SessionId, link: u64, what: Delivery) {
        let Some(conn) = self.conns.get_mut(&session) else { return };
        if conn.link != link {
            // A watch event is not lost with its connection: the client sets its watches again on the next one, and
            // the server fires those whose node changed meanwhile.
            if let (Delivery::Watch(ticket, event), None) = (what, conn.ended) {
                if conn.up {
                    self.deliver(session, Delivery::Watch(ticket, event));
                } else {
                    conn.stashed.push((ticket, event));
                }
            }
            return;
        }
        let owner = conn.owner;
        match what {
            Delivery::Reply(ticket, answer) => {
                conn.taken.remove(&ticket);
                self.answer(ticket, answer);
            }
            Delivery::Watch(ticket, event) => {
                conn.unseen.remove(&ticket);
                self.watch_event(ticket, event);
            }
            Delivery::State(state) => {
                conn.states.push_back(state);
                self.dirty.insert(owner);
            }
        }
    }

    // ---- Faults -----------------------------------------------------------------------------------------------

    /// Cuts a session's connection; the client notices after `detect` (its read timeout, or at once for a reset).
    /// Requests whose replies are out fail with the lost connection (they were applied); a random prefix of those not
    /// yet taken was on the wire and fails too, unapplied, or applied late; the rest wait for the reconnection.
    pub fn cut(&mut self, session: SessionId, detect: Duration) {
        let late_share = self.rng.below(2);
        let Some(conn) = self.conns.get_mut(&session) else { return };
        if !conn.up || conn.ended.is_some() {
            return;
        }
        conn.up = false;
        conn.link += 1;
        conn.serving = false;
        let mut failed: Vec<Ticket> = std::mem::take(&mut conn.taken).into_iter().collect();
        let on_the_wire = self.rng.below(conn.outbox.len() as u64 + 1) as usize;
        for _ in 0..on_the_wire {
            if let Some((ticket, request)) = conn.outbox.pop_front() {
                failed.push(ticket);
                if late_share == 1 && self.rng.below(2) == 0 {
                    let countdown = 1 + self.rng.below(3) as u32;
                    conn.late.push((request, countdown));
                }
            }
        }
        // The client learns of it all at once, after `detect`, in order, over no connection.
        let link = conn.link;
        let at = (self.now + detect).max(conn.last_delivery);
        conn.last_delivery = at + Duration::from_micros(failed.len() as u64 + 1);
        let delay = at - self.now;
        self.at(delay, Ev::Deliver { session, link, what: Delivery::State(SessionState::Disconnected) });
        for (k, ticket) in failed.into_iter().enumerate() {
            let what = Delivery::Reply(ticket, Err((None, ZkError::ConnectionLoss)));
            self.at(delay + Duration::from_micros(k as u64 + 1), Ev::Deliver { session, link, what });
        }
    }

    /// The process is gone (crashed): its connection drops and nothing reaches its client any more.
    pub fn abandon(&mut self, session: SessionId) {
        if let Some(conn) = self.conns.get_mut(&session) {
            conn.up = false;
            conn.link += 1;
            conn.serving = false;
            conn.outbox.clear();
            conn.taken.clear();
            conn.late.clear();
            conn.ended = Some(SessionState::Closed);
        }
    }

    /// The sessions whose client is alive but disconnected.
    pub fn down(&self) -> Vec<(SessionId, u64)> {
        self.conns.iter().filter(|(_, c)| !c.up && c.ended.is_none()).map(|(&s, c)| (s, c.link)).collect()
    }

    /// The client's connection is back, if its session lives: watch events it missed arrive, queued requests go.
    /// Returns `false` if the session has expired (the client then learns so).
    pub fn reconnect(&mut self, session: SessionId) -> bool {
        let alive = self.zk.is_alive(session);
        let Some(conn) = self.conns.get_mut(&session) else { return false };
        if conn.up || conn.ended.is_some() {
            return alive;
        }
        conn.up = true;
        conn.link += 1;
        if !alive {
            self.end(session, SessionState::Expired);
            return false;
        }
        let stashed = std::mem::take(&mut conn.stashed);
        self.deliver(session, Delivery::State(SessionState::SyncConnected));
        for (ticket, event) in stashed {
            self.deliver(session, Delivery::Watch(ticket, event));
        }
        self.serve_soon(session);
        true
    }

    /// The client learns that its session ended: every request and watch of it fails with that end.
    pub fn end(&mut self, session: SessionId, state: SessionState) {
        let Some(conn) = self.conns.get_mut(&session) else { return };
        if conn.ended.is_some() {
            return;
        }
        conn.ended = Some(state);
        conn.up = true;
        conn.link += 1;
        conn.late.clear();
        let owner = conn.owner;
        let mut tickets: Vec<Ticket> = conn.outbox.drain(..).map(|(ticket, _)| ticket).collect();
        tickets.extend(std::mem::take(&mut conn.taken));
        conn.watches.clear();
        conn.stashed.clear();
        let watches = std::mem::take(&mut conn.unseen);
        conn.states.push_back(state);
        for ticket in tickets {
            self.answer(ticket, Err((None, session_error(state))));
        }
        for ticket in watches {
            self.watch_event(ticket, WatchEvent::SessionEnded(state));
        }
        self.dirty.insert(owner);
    }

    /// Closes a session (its process ended): the server deletes its ephemerals.
    pub fn close(&mut self, session: SessionId) {
        self.zk.expire(session);
        self.fire_watches();
        self.end(session, SessionState::Closed);
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

/// The client's error for a session's end.
fn session_error(state: SessionState) -> ZkError {
    match state {
        SessionState::Closed => ZkError::ClientClosed,
        SessionState::AuthFailed => ZkError::AuthFailed,
        _ => ZkError::SessionExpired,
    }
}

fn zk_error(e: ZkErr) -> ZkError {
    match e {
        ZkErr::NoNode => ZkError::NoNode,
        ZkErr::NodeExists => ZkError::NodeExists,
        ZkErr::BadVersion => ZkError::BadVersion,
        ZkErr::NotEmpty => ZkError::NotEmpty,
        ZkErr::SessionExpired => ZkError::SessionExpired,
        ZkErr::NoChildrenForEphemerals => ZkError::NoChildrenForEphemerals,
    }
}

fn stat_of(stat: &model::Stat) -> Stat {
    Stat {
        czxid: stat.czxid,
        mzxid: stat.mzxid,
        pzxid: stat.mzxid,
        ctime: 0,
        mtime: 0,
        version: stat.version,
        cversion: stat.cversion as i32,
        aversion: 0,
        ephemeral_owner: stat.ephemeral_owner as i64,
        data_length: 0,
        num_children: stat.num_children as i32,
    }
}

/// Locks the network (the simulation is single-threaded: the lock is never contended, only poisoned by a panic that
/// already fails the test).
pub(crate) fn lock(net: &Mutex<Net>) -> MutexGuard<'_, Net> {
    net.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A simulated process's client of one session.
#[derive(Clone)]
pub(crate) struct SimClient {
    net: Arc<Mutex<Net>>,
    session: SessionId,
}

impl std::fmt::Debug for SimClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimClient").field("session", &self.session).finish()
    }
}

impl SimClient {
    pub fn new(net: Arc<Mutex<Net>>, session: SessionId) -> Self {
        SimClient { net, session }
    }

    pub fn session(&self) -> SessionId {
        self.session
    }

    /// Sends a request now; the future resolves with its answer.
    fn send(&self, request: Request) -> Reply {
        let ticket = lock(&self.net).submit(self.session, request);
        Reply { net: self.net.clone(), ticket }
    }

    fn watch_ticket(&self) -> Ticket {
        lock(&self.net).ticket()
    }

    fn watch(&self, ticket: Ticket) -> SimWatch {
        SimWatch { net: self.net.clone(), ticket }
    }
}

/// A pending request's answer.
struct Reply {
    net: Arc<Mutex<Net>>,
    ticket: Ticket,
}

impl Future for Reply {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        let mut net = lock(&self.net);
        match net.answers.remove(&self.ticket) {
            Some(answer) => Poll::Ready(answer),
            None => {
                net.wakers.insert(self.ticket, cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A one-shot watch of the simulation.
pub(crate) struct SimWatch {
    net: Arc<Mutex<Net>>,
    ticket: Ticket,
}

impl Future for SimWatch {
    type Output = WatchEvent;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<WatchEvent> {
        let mut net = lock(&self.net);
        match net.watch_events.remove(&self.ticket) {
            Some(event) => Poll::Ready(event),
            None => {
                net.wakers.insert(self.ticket, cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A timer of the simulation.
struct Sleep {
    net: Arc<Mutex<Net>>,
    ticket: Ticket,
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut net = lock(&self.net);
        if net.due(self.ticket) {
            Poll::Ready(())
        } else {
            net.wakers.insert(self.ticket, cx.waker().clone());
            Poll::Pending
        }
    }
}

fn model_mode(mode: Mode) -> ModelMode {
    match mode {
        Mode::Persistent => ModelMode::Persistent,
        Mode::Ephemeral => ModelMode::Ephemeral,
        Mode::EphemeralSequential => ModelMode::EphemeralSequential,
    }
}

/// The answer's error alone (for requests that are not a `multi`).
fn plain<T>(result: Result<T, (Option<usize>, ZkError)>) -> Result<T, ZkError> {
    result.map_err(|(_, e)| e)
}

fn unexpected<T>() -> Result<T, ZkError> {
    Err(ZkError::UnexpectedError("the simulated server answered something else".into()))
}

impl ZooKeeper for SimClient {
    type Watch = SimWatch;

    fn session_id(&self) -> i64 {
        self.session as i64
    }

    fn chroot(&self) -> &str {
        "/"
    }

    fn create<'a>(
        &'a self,
        path: &'a str,
        data: &'a [u8],
        mode: Mode,
        _acls: &'a NodeAcls,
    ) -> impl Future<Output = Result<(Stat, String), ZkError>> + Send + 'a {
        let reply = self.send(Request::Create { path: path.to_owned(), data: data.to_vec(), mode: model_mode(mode) });
        async move {
            match plain(reply.await)? {
                Response::Created(created, stat) => {
                    let sequence = created.strip_prefix(path).unwrap_or_default().to_owned();
                    Ok((stat, if mode == Mode::EphemeralSequential { sequence } else { String::new() }))
                }
                _ => unexpected(),
            }
        }
    }

    fn mkdir(&self, path: &str, acls: &NodeAcls) -> impl Future<Output = Result<(), ZkError>> + Send {
        // As zookeeper-client's: create each missing node from the top, one request each, NodeExists is fine.
        let (client, path, acls) = (self.clone(), path.to_owned(), acls.clone());
        async move {
            let ends: Vec<usize> =
                path.match_indices('/').map(|(i, _)| i).skip(1).chain(std::iter::once(path.len())).collect();
            for end in ends {
                match client.create(&path[..end], b"", Mode::Persistent, &acls).await {
                    Ok(_) | Err(ZkError::NodeExists) => {}
                    Err(err) => return Err(err),
                }
            }
            Ok(())
        }
    }

    fn delete(&self, path: &str, version: Option<i32>) -> impl Future<Output = Result<(), ZkError>> + Send {
        let reply = self.send(Request::Delete { path: path.to_owned(), version });
        async move { plain(reply.await).map(drop) }
    }

    fn get_data(&self, path: &str) -> impl Future<Output = Result<(Vec<u8>, Stat), ZkError>> + Send {
        let reply = self.send(Request::GetData { path: path.to_owned(), watch: None });
        async move {
            match plain(reply.await)? {
                Response::Data(data, stat) => Ok((data, stat)),
                _ => unexpected(),
            }
        }
    }

    fn get_and_watch_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, Stat, SimWatch), ZkError>> + Send {
        let ticket = self.watch_ticket();
        let reply = self.send(Request::GetData { path: path.to_owned(), watch: Some(ticket) });
        let watch = self.watch(ticket);
        async move {
            match plain(reply.await)? {
                Response::Data(data, stat) => Ok((data, stat, watch)),
                _ => unexpected(),
            }
        }
    }

    fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> impl Future<Output = Result<Stat, ZkError>> + Send {
        let reply = self.send(Request::SetData { path: path.to_owned(), data: data.to_vec(), version });
        async move {
            match plain(reply.await)? {
                Response::Stat(stat) => Ok(stat),
                _ => unexpected(),
            }
        }
    }

    fn check_stat(&self, path: &str) -> impl Future<Output = Result<Option<Stat>, ZkError>> + Send {
        let reply = self.send(Request::Exists { path: path.to_owned(), watch: None });
        async move {
            match plain(reply.await)? {
                Response::Exists(stat) => Ok(stat),
                _ => unexpected(),
            }
        }
    }

    fn check_and_watch_stat(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Option<Stat>, SimWatch), ZkError>> + Send {
        let ticket = self.watch_ticket();
        let reply = self.send(Request::Exists { path: path.to_owned(), watch: Some(ticket) });
        let watch = self.watch(ticket);
        async move {
            match plain(reply.await)? {
                Response::Exists(stat) => Ok((stat, watch)),
                _ => unexpected(),
            }
        }
    }

    fn list_children(&self, path: &str) -> impl Future<Output = Result<Vec<String>, ZkError>> + Send {
        let reply = self.send(Request::Children { path: path.to_owned(), watch: None });
        async move {
            match plain(reply.await)? {
                Response::Children(children, _) => Ok(children),
                _ => unexpected(),
            }
        }
    }

    fn get_and_watch_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<String>, Stat, SimWatch), ZkError>> + Send {
        let ticket = self.watch_ticket();
        let reply = self.send(Request::Children { path: path.to_owned(), watch: Some(ticket) });
        let watch = self.watch(ticket);
        async move {
            match plain(reply.await)? {
                Response::Children(children, stat) => Ok((children, stat, watch)),
                _ => unexpected(),
            }
        }
    }

    fn list_ephemerals(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, ZkError>> + Send {
        let reply = self.send(Request::Ephemerals { prefix: prefix.to_owned() });
        async move {
            match plain(reply.await)? {
                Response::Paths(paths) => Ok(paths),
                _ => unexpected(),
            }
        }
    }

    fn sync(&self, _path: &str) -> impl Future<Output = Result<(), ZkError>> + Send {
        let reply = self.send(Request::Sync);
        async move { plain(reply.await).map(drop) }
    }

    fn multi_write(&self, ops: &[WriteOp<'_>]) -> impl Future<Output = Result<Vec<Written>, MultiError>> + Send {
        let ops: Vec<model::WriteOp> = ops
            .iter()
            .map(|op| match *op {
                WriteOp::Create { path, data, mode, .. } => {
                    model::WriteOp::Create { path: path.to_owned(), data: data.to_vec(), mode: model_mode(mode) }
                }
                WriteOp::Delete { path, version } => model::WriteOp::Delete { path: path.to_owned(), version },
                WriteOp::SetData { path, data, version } => {
                    model::WriteOp::SetData { path: path.to_owned(), data: data.to_vec(), version }
                }
                WriteOp::Check { path, version } => model::WriteOp::Check { path: path.to_owned(), version },
            })
            .collect();
        // An empty multi is answered by the client without a request.
        let reply = (!ops.is_empty()).then(|| self.send(Request::MultiWrite(ops)));
        async move {
            let Some(reply) = reply else { return Ok(Vec::new()) };
            match reply.await {
                Ok(Response::Written(results)) => Ok(results),
                Ok(_) => Err(MultiError { index: None, error: ZkError::UnexpectedError("not a multi".into()) }),
                Err((index, error)) => Err(MultiError { index, error }),
            }
        }
    }

    fn multi_read(&self, ops: &[ReadOp<'_>]) -> impl Future<Output = Result<Vec<ReadResult>, ZkError>> + Send {
        let ops: Vec<model::ReadOp> = ops
            .iter()
            .map(|op| match *op {
                ReadOp::Data(path) => model::ReadOp::Data { path: path.to_owned() },
                ReadOp::Children(path) => model::ReadOp::Children { path: path.to_owned() },
            })
            .collect();
        let reply = (!ops.is_empty()).then(|| self.send(Request::MultiRead(ops)));
        async move {
            let Some(reply) = reply else { return Ok(Vec::new()) };
            match plain(reply.await)? {
                Response::Read(results) => Ok(results),
                _ => unexpected(),
            }
        }
    }

    fn now(&self) -> Instant {
        lock(&self.net).instant()
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + Send {
        let ticket = {
            let mut net = lock(&self.net);
            let at = net.now + duration;
            net.timer(at)
        };
        Sleep { net: self.net.clone(), ticket }
    }

    fn random(&self) -> u64 {
        lock(&self.net).rng.next()
    }
}
