//! The simulated world: its processes, the network they share, the world's own events (faults, checks), and the run
//! loop that takes the next event, drives every process it reached, and checks the invariants after every step.
//!
//! The world's work is spread over its child modules, each an `impl World` of one concern: [`processes`] starts,
//! replaces and polls the processes; [`member`] is the driver's loop around a member's core, with its worker;
//! [`admin`] changes the shared set; [`faults`] draws and applies the faults; [`checker`] holds the invariants.

mod admin;
mod checker;
mod departures;
mod faults;
mod lineage;
mod member;
mod processes;
mod progress;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use futures::future::BoxFuture;

use admin::Admin;
use member::Member;

use super::net::{ActorId, Delivery, Ev, Net, SimClient, lock};
use super::zk::SessionId;
use super::{Outcome, Plan};
use crate::startup::Started;
use crate::{Error, Item};

/// A run that takes more steps than this is stuck in a loop.
const MAX_STEPS: u64 = 3_000_000;
const PATH: &str = "/p";
const PARTY: &str = "/p/party";
const LOCKS: &str = "/p/locks";
const ITEMS: &str = "/p/items";
const CHECKPOINTS: &str = "/p/checkpoints";
/// Operations per `multi` of the shared set's updates: a few, so that the simulation's small sets are staged.
const SET_CHUNK: usize = 3;

/// The world's own events.
#[derive(Debug, PartialEq, Eq)]
enum WorldEv {
    Fault,
    /// The server resumes after a stall.
    Thaw,
    /// A stall in the middle of a join's rebalance.
    Stall,
    /// The server expires a session if its client is still away (same connection generation).
    MaybeExpire {
        session: SessionId,
        link: u64,
    },
    /// A client's connection comes back.
    Reconnect {
        session: SessionId,
        link: u64,
    },
    /// An operator deletes the lock node a member took last (the window right after an acquisition).
    OperatorDeletesFresh,
    /// An operator deletes any held lock node.
    OperatorDeletes,
    /// Nothing: once the faults are over, the world looks at itself at least this often (convergence is judged
    /// after every step, and a quiet world takes none).
    Check,
}

/// A simulated process.
enum Actor {
    Starting(Box<Starting>),
    Member(Box<Member>),
    Admin(Box<Admin>),
    /// A panicked member's task cleaning up after itself.
    Cleaning(Box<Cleaning>),
    Gone,
}

/// A process running `build()`'s start-up.
struct Starting {
    slot: usize,
    zk: SimClient,
    future: BoxFuture<'static, Result<Started, Error>>,
}

/// A panicked member's task: the clean-up, then the session's release.
struct Cleaning {
    zk: SimClient,
    future: BoxFuture<'static, ()>,
}

/// Everything simulated: the processes, the network, the world's own events, and what the checkers keep.
pub(super) struct World {
    plan: Plan,
    net: Arc<Mutex<Net>>,
    actors: Vec<Actor>,
    /// Each actor's waker, and the actors they woke.
    wakers: Vec<Waker>,
    woken: Arc<Mutex<BTreeSet<ActorId>>>,
    world_events: HashMap<u64, WorldEv>,
    next_world_event: u64,
    steps: u64,
    faults_left: usize,
    /// When the last fault ended (for the liveness bound).
    quiet_since: Duration,
    frozen_until: Duration,
    /// When the current stall began.
    frozen_since: Duration,
    log: VecDeque<String>,
    /// How many events the log keeps (`SIM_LOG`), and whether it also records every drive, request and delivery
    /// (`SIM_TRACE`).
    keep: usize,
    trace: bool,
    violation: Option<String>,
    /// Static membership: identifiers of members that are gone, to be taken again by their replacements.
    vacant: BTreeSet<usize>,
    next_slot: usize,
    /// Held lock nodes an operator deleted, and when.
    operator_deleted: BTreeMap<String, Duration>,
    /// When each session's connection was last disturbed (cut, reconnected, or the server stalled or resumed).
    disturbed: BTreeMap<SessionId, Duration>,
    /// When the server last stalled or resumed.
    stalled: Duration,
    /// The fixed set (without a shared set).
    fixed: Vec<Item>,
    /// Every committed version of the shared set, with its items' names.
    committed: BTreeMap<u64, BTreeSet<String>>,
    /// Every committed version's weights (of the items that have one).
    committed_weights: BTreeMap<u64, BTreeMap<Item, crate::weighted::Weight>>,
    /// The token of every update applied, from the writes that applied them (each must be applied once).
    landed: BTreeSet<String>,
    /// The header's version as of the last write applied to it (to tell an update from a change of state).
    header_version: u64,
    /// The session of the admin whose commit's reply is to be lost (cut as soon as the server applies it).
    lost_reply: Option<SessionId>,
    /// How many commits had their reply lost so (each followed by a burst of updates).
    lost_replies: usize,
    /// Each item name's incarnation: how many times it entered the set anew after being finished (and retired).
    incarnations: BTreeMap<String, u32>,
    /// The incarnation of the item whose checkpoint each checkpoint node holds, by item name.
    checkpoint_incarnation: BTreeMap<String, u32>,
    /// What each party node announced, and since when, oldest first (for the disagreement checks).
    announced: BTreeMap<String, Vec<(Duration, Option<proto::announcement::Agreement>)>>,
    /// The header's data as last seen (to notice a change).
    header_seen: Option<Vec<u8>>,
    /// The next new item value an admin adds.
    next_value: i64,
    saves: usize,
    /// Items finished by their owners, and when each finish landed (lineage runs).
    finished_at: BTreeMap<String, Duration>,
    /// Every item name ever finished (a retired one included): a finish reported `Ok` must be among them.
    ever_finished: BTreeSet<String>,
    /// What each member of the party holds, by the server, as last seen before it began to end, by member name.
    holding: BTreeMap<String, BTreeSet<String>>,
    /// How each member took its party in force in.
    taken_in: BTreeMap<ActorId, departures::TakenIn>,
    /// What each member gone from the party last held: to be in a target once the party has it in force.
    orphans: BTreeMap<String, BTreeSet<String>>,
    /// The names finished since they last entered the set: the next entry of one is a new item (a new incarnation).
    /// A name that merely left the set (a plain remove) and comes back is the same item, with its checkpoint.
    finished_since_entry: BTreeSet<String>,
    /// A `Check` is scheduled.
    checking: bool,
    /// When the checker first saw each member name in the party.
    party_seen: BTreeMap<String, Duration>,
    /// Each member's assignment in force as last checked: its party, its share, and how many departures it had
    /// handed over at once.
    assignments: BTreeMap<ActorId, Assignment>,
    /// Departures handed over at once, summed over the members.
    hand_overs: u64,
    /// The exports, the backups they made, and the maintenance windows that import them (progress runs).
    progress: progress::State,
}

/// A member's assignment in force, as the checker last saw it: its party, its share (`None` while settling), and how
/// many departures it had handed over at once.
type Assignment = (Vec<String>, Option<BTreeSet<usize>>, u64);

/// Wakes an actor: marks it for the world to poll (futures inside, such as `buffer_unordered`'s, keep their own
/// wakers, which the network wakes when their answer comes).
struct ActorWaker {
    actor: ActorId,
    woken: Arc<Mutex<BTreeSet<ActorId>>>,
}

impl std::task::Wake for ActorWaker {
    fn wake(self: Arc<Self>) {
        self.woken.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(self.actor);
    }
}

/// Polls a future once with the actor's waker.
fn poll_with<F: Future + Unpin + ?Sized>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    let mut cx = TaskContext::from_waker(waker);
    std::pin::Pin::new(future).poll(&mut cx)
}

impl World {
    pub(super) fn new(seed: u64, plan: Plan) -> World {
        let mut net = Net::new(seed);
        let admin = net.zk.open_session();
        for path in [PARTY, LOCKS] {
            let _ = net.zk.mkdir(admin, path);
        }
        net.zk.expire(admin);
        let fixed: Vec<Item> = (0..plan.items as i64).map(Item::from).collect();
        let next_value = plan.items as i64;
        let mut world = World {
            faults_left: plan.faults,
            plan,
            net: Arc::new(Mutex::new(net)),
            actors: Vec::new(),
            wakers: Vec::new(),
            woken: Arc::new(Mutex::new(BTreeSet::new())),
            world_events: HashMap::new(),
            next_world_event: 0,
            steps: 0,
            quiet_since: Duration::ZERO,
            frozen_until: Duration::ZERO,
            frozen_since: Duration::ZERO,
            log: VecDeque::new(),
            keep: std::env::var("SIM_LOG").ok().and_then(|v| v.parse().ok()).unwrap_or(300),
            trace: std::env::var_os("SIM_TRACE").is_some(),
            violation: None,
            vacant: BTreeSet::new(),
            next_slot: 0,
            operator_deleted: BTreeMap::new(),
            disturbed: BTreeMap::new(),
            stalled: Duration::ZERO,
            fixed,
            committed: BTreeMap::new(),
            committed_weights: BTreeMap::new(),
            landed: BTreeSet::new(),
            header_version: 0,
            lost_reply: None,
            lost_replies: 0,
            incarnations: BTreeMap::new(),
            checkpoint_incarnation: BTreeMap::new(),
            announced: BTreeMap::new(),
            header_seen: None,
            next_value,
            saves: 0,
            finished_at: BTreeMap::new(),
            ever_finished: BTreeSet::new(),
            finished_since_entry: BTreeSet::new(),
            holding: BTreeMap::new(),
            taken_in: BTreeMap::new(),
            progress: progress::State::default(),
            orphans: BTreeMap::new(),
            checking: false,
            party_seen: BTreeMap::new(),
            assignments: BTreeMap::new(),
            hand_overs: 0,
        };
        for _ in 0..world.plan.members {
            world.join();
        }
        let first = world.rng().millis(500, 3000);
        world.at(first, WorldEv::Fault);
        world
    }

    fn rng(&self) -> RngGuard<'_> {
        RngGuard(lock(&self.net))
    }

    fn now(&self) -> Duration {
        lock(&self.net).now
    }

    fn at(&mut self, delay: Duration, ev: WorldEv) {
        self.next_world_event += 1;
        let id = self.next_world_event;
        self.world_events.insert(id, ev);
        lock(&self.net).at(delay, Ev::World(id));
    }

    fn note(&mut self, line: String) {
        if self.log.len() >= self.keep {
            self.log.pop_front();
        }
        let now = self.now();
        self.log.push_back(format!("{now:>9.3?} {line}"));
    }

    /// Adds a process, with its waker.
    fn add_actor(&mut self, actor: Actor) -> ActorId {
        let id = self.actors.len();
        self.actors.push(actor);
        self.wakers.push(Waker::from(Arc::new(ActorWaker { actor: id, woken: self.woken.clone() })));
        lock(&self.net).dirty.insert(id);
        id
    }

    fn violate(&mut self, violation: String) {
        self.violation.get_or_insert(violation);
    }

    pub(super) fn run(&mut self) -> Outcome {
        // The liveness bound RELIABILITY.md promises: every item held, every member ACQUIRED, within the session
        // timeout + `time_boundary` + 2 s of the last fault's end.
        let bound = self.plan.session + self.plan.time_boundary + Duration::from_secs(2);
        self.drive();
        loop {
            let Some(ev) = lock(&self.net).pop() else { break };
            // A quiet gap must not hide a world that stopped converging: judged at the bound, not at the next event.
            let now = self.now();
            if self.faults_left == 0
                && now > self.quiet_since + bound
                && !self.in_window()
                && let Err(why) = self.converged()
            {
                return self.outcome(Some(format!("no recovery within {bound:?} after the last fault: {why}")));
            }
            self.steps += 1;
            if self.steps > MAX_STEPS {
                let why = self.converged().err().unwrap_or_default();
                return self.outcome(Some(format!("more than {MAX_STEPS} steps (a livelock?); last: {why}")));
            }
            self.step(ev);
            self.drive();
            self.replace_failed();
            self.drive();
            self.record_set();
            self.drive_window();
            self.record_announcements();
            let checked =
                self.check_safety().and_then(|()| self.check_listings()).and_then(|()| self.check_assignments());
            let checked = checked.and_then(|()| self.check_orphans_taken());
            if let Err(violation) = checked {
                self.violate(violation);
            }
            if let Some(violation) = self.violation.take() {
                return self.outcome(Some(violation));
            }
            let now = self.now();
            if self.faults_left == 0 && now >= self.quiet_since && !self.in_window() {
                match self.converged() {
                    Ok(()) => {
                        let recovery = now - self.quiet_since;
                        let mut outcome = self.outcome(None);
                        outcome.recovery = recovery;
                        return outcome;
                    }
                    Err(why) if now > self.quiet_since + bound => {
                        return self.outcome(Some(format!("no recovery within {bound:?} after the last fault: {why}")));
                    }
                    Err(_) => {}
                }
            }
            if self.faults_left == 0 && !self.checking {
                self.checking = true;
                let at = self.quiet_since.max(now) + Duration::from_millis(100);
                self.at(at - now, WorldEv::Check);
            }
        }
        match self.converged() {
            Ok(()) if self.faults_left == 0 => self.outcome(None),
            Ok(()) => self.outcome(Some(format!("the world went idle with {} faults to go", self.faults_left))),
            Err(why) => self.outcome(Some(format!("the world went idle without converging: {why}"))),
        }
    }

    fn outcome(&self, violation: Option<String>) -> Outcome {
        let violation = violation.map(|v| {
            let mut text = format!("{v}\n--- the last {} events ---\n", self.log.len());
            for line in &self.log {
                let _ = writeln!(text, "{line}");
            }
            text
        });
        Outcome {
            steps: self.steps,
            faults: self.plan.faults,
            static_membership: self.plan.static_membership,
            shared_set: self.plan.shared_set,
            weighted: self.plan.weighted,
            lineage: self.plan.shared_set && self.plan.lineage,
            sticky: self.plan.weighted && self.plan.combo.rendezvous && self.plan.sticky,
            finishes: self.ever_finished.len(),
            set_changes: self.committed.len().saturating_sub(1),
            saves: self.saves,
            lost_replies: self.lost_replies,
            mixed_rules: self.plan.weighted && self.plan.combo.rendezvous && self.plan.sticky && self.plan.mixed_rules,
            rotating: self.plan.weighted && self.plan.combo.rendezvous && self.plan.sticky && self.plan.rotating,
            hand_overs: self.hand_overs,
            exports: self.progress.exports,
            imports: self.progress.imports,
            imports_refused: self.progress.refused,
            recovery: Duration::ZERO,
            violation,
        }
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Serve(session) => lock(&self.net).serve(session),
            Ev::Deliver { session, link, what } => {
                if self.trace {
                    self.note(format!("session {session} <- {what:?}"));
                } else if let Delivery::State(state) = &what {
                    self.note(format!("session {session} <- {state:?}"));
                }
                lock(&self.net).arrive(session, link, what);
            }
            Ev::Wake(actor) => {
                lock(&self.net).dirty.insert(actor);
            }
            Ev::Timer(ticket) => lock(&self.net).timer_due(ticket),
            Ev::World(id) => {
                if let Some(ev) = self.world_events.remove(&id) {
                    self.world_event(ev);
                }
            }
        }
    }

    fn world_event(&mut self, ev: WorldEv) {
        match ev {
            WorldEv::Fault => self.fault(),
            WorldEv::Thaw => self.thaw(),
            WorldEv::Stall => {
                let lasts = self.stall();
                self.quiet_since = self.quiet_since.max(self.now() + lasts);
            }
            WorldEv::MaybeExpire { session, link } => self.maybe_expire(session, link),
            WorldEv::Reconnect { session, link } => self.reconnect(session, link),
            WorldEv::OperatorDeletesFresh | WorldEv::OperatorDeletes => {
                self.operator_deletes_a_held_node(ev == WorldEv::OperatorDeletesFresh);
                self.quiet_since = self.quiet_since.max(self.now());
            }
            WorldEv::Check => self.checking = false,
        }
    }
}

/// Access to the network's random stream, for a world method.
struct RngGuard<'a>(std::sync::MutexGuard<'a, Net>);

impl RngGuard<'_> {
    fn below(&mut self, n: u64) -> u64 {
        self.0.rng.below(n)
    }
    fn millis(&mut self, low: u64, high: u64) -> Duration {
        self.0.rng.millis(low, high)
    }
}
