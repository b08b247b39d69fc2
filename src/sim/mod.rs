//! Deterministic simulation: many members, admins and starting processes running the crate's own code against an
//! in-memory ZooKeeper, under seeded faults, with the invariants checked after every step (FoundationDB's and
//! TigerBeetle's discipline: one seed replays one run exactly).
//!
//! What runs is what ships: each member is the decision core fed by the request path ([`crate::requests`]), the
//! publisher and the handle ([`crate::handle`]), started by [`crate::startup`], on a [`SimClient`] (the
//! [`ZooKeeper`](crate::zookeeper::ZooKeeper) implementation of [`net`]); admins change the shared set with the
//! production [`SharedSet`]. Only the driver's `select!` loop is the simulation's own: it picks among the ready sources
//! at random, as `select!` does. The network ([`net`]) queues each session's requests in order, serves them with
//! latency, delivers replies and watch events in order per session, and loses, fails or delays requests at a cut.
//!
//! Faults, from the same random stream: connection cuts (short, or past the session timeout), server stalls past the
//! clients' read timeout (some past the session timeout, expiring sessions), joins, crashes, graceful leaves, a
//! panicking task, admins changing the shared set (concurrently, with changes large enough to be staged, cut and
//! crashed part-way), and operators deleting held lock nodes. A worker per member answers every `Release` with
//! `release_set()` after a random delay, and on every `Acquired` takes each listed item's fencing token and saves its
//! checkpoint through the handle.
//!
//! Checked after every step:
//! - **safety**: no item listed by two members whose sessions are both alive; a member lists an item only while its
//!   session is alive and its lock node is the lowest contender (or, for a node an operator deleted, for at most the
//!   stated bound); `release_set()` returns only once its revoked items' nodes are gone;
//! - **the handle**: every listed item has its fencing token and a checkpoint writer; every save of the listed owner
//!   succeeds or is fenced; no checkpoint write lands unless its lock node is the item's lowest contender;
//! - **the shared set**: every set a member follows is one a writer committed (a version is committed once, with one
//!   set); an admin's reported result matches the set stored at its version; an update reported as failed changed
//!   nothing (its token is in no committed header);
//! - **liveness**: once faults stop, within the liveness bound, every live member is `Acquired` over the real party
//!   and the latest committed set, with nothing left unfinished in the set, their listings a disjoint cover;
//! - **hygiene**: then, no lock node of a live session is anything but its member's held lock (no orphans).
//!
//! `SIM_SEED=<seed>` replays one failing run; `SIM_RUNS`, `SIM_BASE` scale and move the run (see `RELIABILITY.md`).

mod net;
mod zk;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, watch};
use zookeeper_client::SessionState;

use net::{ActorId, Delivery, Ev, Net, SimClient, SimWatch, lock};
use zk::SessionId;

use crate::acl::NodeAcls;
use crate::checkpoint::Checkpoints;
use crate::decision::{AckId, Action, Core, Event, JitterParties, ReqId};
use crate::handle::{Command, Handle};
use crate::item_set::SharedSet;
use crate::item_set::layout::{self, Header, RawRead, SetView, State};
use crate::layout::Paths;
use crate::party::Membership;
use crate::publisher::Publisher;
use crate::requests::{self, Context, Done};
use crate::sabotage::Sabotage;
use crate::session::SessionRef;
use crate::startup::{self, Settings, Started};
use crate::zookeeper::WatchEvent;
use crate::{Error, Item, KazooStride, PartitionState, Rebalance, Rendezvous, SessionPolicy, Snapshot};

/// A run that takes more steps than this is stuck in a loop.
const MAX_STEPS: u64 = 3_000_000;
const PATH: &str = "/p";
const PARTY: &str = "/p/party";
const LOCKS: &str = "/p/locks";
const ITEMS: &str = "/p/items";
const CHECKPOINTS: &str = "/p/checkpoints";
/// Operations per `multi` of the shared set's updates: a few, so that the simulation's small sets are staged.
const SET_CHUNK: usize = 3;

/// SplitMix64: small, seedable, the same everywhere.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A duration between `low` and `high` (in milliseconds).
    pub fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high - low + 1))
    }
}

/// One of the eight mode combinations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Combo {
    pub rendezvous: bool,
    pub rebalance: Rebalance,
    pub policy: SessionPolicy,
}

impl Combo {
    pub fn all() -> Vec<Combo> {
        let mut all = Vec::new();
        for rendezvous in [false, true] {
            for rebalance in [Rebalance::Eager, Rebalance::Incremental] {
                for policy in [SessionPolicy::Standard, SessionPolicy::SessionAware] {
                    all.push(Combo { rendezvous, rebalance, policy });
                }
            }
        }
        all
    }
}

/// The shape of one simulated run.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub combo: Combo,
    pub members: usize,
    pub items: usize,
    pub faults: usize,
    pub session: Duration,
    pub time_boundary: Duration,
    pub max_allocation_time: Option<Duration>,
    /// Static membership: a member's name is its identifier (`s<slot>`), and a member that is gone is replaced by
    /// one with the same identifier (its start-up waits for the old node to go).
    pub static_membership: bool,
    /// The items come from the shared set, which admins change as faults.
    pub shared_set: bool,
    /// An operator deletes members' held lock nodes by hand, now and then.
    pub operator_deletes: bool,
    /// Members jitter their debounce waits as a large party's do.
    pub large_party_jitter: bool,
    pub sabotage: Sabotage,
}

impl Plan {
    /// A plan drawn from the seed: party and set sizes, fault count, timing.
    pub fn draw(combo: Combo, rng: &mut Rng) -> Plan {
        Plan {
            combo,
            members: 2 + rng.below(3) as usize,
            items: 5 + rng.below(30) as usize,
            faults: 6 + rng.below(10) as usize,
            session: Duration::from_secs(3),
            time_boundary: rng.millis(100, 600),
            max_allocation_time: None,
            static_membership: rng.below(2) == 0,
            sabotage: Sabotage::None,
            shared_set: rng.below(3) == 0,
            operator_deletes: rng.below(3) == 0,
            // Drawn last: the fields above stay what they were for every seed.
            large_party_jitter: rng.below(2) == 0,
        }
    }
}

/// What the simulation found.
#[derive(Debug, Default, Clone)]
pub(crate) struct Outcome {
    pub steps: u64,
    pub faults: usize,
    pub static_membership: bool,
    pub shared_set: bool,
    /// Set changes admins made (committed).
    pub set_changes: usize,
    /// Checkpoints saved through the handles.
    pub saves: usize,
    /// Simulated time from the end of the last fault to a converged, clean world.
    pub recovery: Duration,
    pub violation: Option<String>,
}

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

/// A member: the driver's part (the core, the request path's futures, the watches, the commands), and its worker.
struct Member {
    slot: usize,
    zk: SimClient,
    core: Core,
    publisher: Publisher,
    context: Arc<Context>,
    membership: Membership,
    paths: Paths,
    lock_dirs: Arc<Vec<String>>,
    /// Requests in flight, by id (a `Vec` in request order: polled in a reproducible order).
    in_flight: Vec<(ReqId, BoxFuture<'static, Done<SimWatch>>)>,
    /// Requests answered, in the order they completed (what `FuturesUnordered` yields).
    done: VecDeque<Done<SimWatch>>,
    party_watch: Option<SimWatch>,
    set_watch: Option<SimWatch>,
    party_fired: Option<WatchEvent>,
    set_fired: Option<WatchEvent>,
    commands_rx: mpsc::UnboundedReceiver<Command>,
    commands: VecDeque<Command>,
    release_acks: HashMap<AckId, oneshot::Sender<Result<(), Error>>>,
    finish_acks: HashMap<AckId, oneshot::Sender<()>>,
    next_ack: AckId,
    handle: Handle<SimClient>,
    /// When the core asked to be woken.
    wake_at: Option<Duration>,
    worker: Worker,
}

/// A call on the handle, in flight.
type Call = BoxFuture<'static, Result<(), Error>>;

/// The member's worker: kazoo's loop, and checkpoints through the handle.
#[derive(Default)]
struct Worker {
    /// The snapshot generation last looked at.
    seen: u64,
    /// A `release_set()` to make at this time.
    release_at: Option<Duration>,
    /// A `release_set()` in flight, with the items the `Release` it answers revoked (for the early-ack check).
    release: Option<(Call, Vec<Item>)>,
    /// Checkpoint saves in flight: the item and the save.
    saves: Vec<(Item, Call)>,
    /// A `finish()` in flight.
    finish: Option<BoxFuture<'static, ()>>,
}

/// An admin changing the shared set with the production code.
struct Admin {
    zk: SimClient,
    set: SharedSet<SimClient>,
    op: Option<(String, BoxFuture<'static, Result<crate::SharedItems, Error>>)>,
}

/// A panicked member's task: the clean-up, then the session's release.
struct Cleaning {
    zk: SimClient,
    future: BoxFuture<'static, ()>,
}

struct World {
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
    /// Every token in a committed header's log.
    landed: BTreeSet<String>,
    /// The header's data as last seen (to notice a change).
    header_seen: Option<Vec<u8>>,
    /// The next new item value an admin adds.
    next_value: i64,
    saves: usize,
    /// A `Check` is scheduled.
    checking: bool,
}

/// How long after the later of an operator's deletion of a held lock node and the watch registration's due time
/// (2 × time_boundary after the lock was taken) a member may keep listing the item: the requests queued before the
/// watch's, and the notification's trip; if the member's connection was disturbed meanwhile, also the client's read
/// timeout (if the server does not answer, it suspends).
fn operator_window(plan: &Plan, disturbed: bool) -> Duration {
    let delivery = Duration::from_millis(400);
    if disturbed { plan.session * 2 / 5 + delivery } else { delivery }
}

/// Runs one seeded simulation of `plan`.
pub(crate) fn run(seed: u64, plan: Plan) -> Outcome {
    crate::sabotage::set(plan.sabotage);
    let mut world = World::new(seed, plan);
    let outcome = world.run();
    crate::sabotage::set(Sabotage::None);
    outcome
}

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
    fn new(seed: u64, plan: Plan) -> World {
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
            landed: BTreeSet::new(),
            header_seen: None,
            next_value,
            saves: 0,
            checking: false,
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

    // ---- Processes --------------------------------------------------------------------------------------------

    /// A new member, under static membership with a new identifier.
    fn join(&mut self) {
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
        let partition_fn: Box<dyn crate::PartitionFn> =
            if plan.combo.rendezvous { Box::new(Rendezvous::default()) } else { Box::new(KazooStride) };
        let settings = Settings {
            path: PATH.to_owned(),
            items: self.fixed.clone(),
            partition_fn,
            identifier: ident.clone(),
            time_boundary: plan.time_boundary,
            retry_delay: Duration::from_millis(100),
            max_allocation_time: plan.max_allocation_time,
            session_policy: plan.combo.policy,
            rebalance: plan.combo.rebalance,
            static_membership: plan.static_membership,
            identity_wait: plan.session * 2,
            shared_item_set: plan.shared_set,
            acls: NodeAcls::default(),
            // Small, so batching and the window are exercised with few items.
            window: 6,
            batch: crate::decision::Batch::fixed(4),
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
            crate::layout::static_node(&hex, &ident)
        } else {
            crate::layout::node_prefix(&hex, &ident)
        };
        let client = zk.clone();
        let future = async move { startup::start(&client, settings, &join_name, nonce).await }.boxed();
        self.note(format!("a{actor} starts as {ident} (session {session})"));
        self.add_actor(Actor::Starting(Box::new(Starting { slot, zk, future })));
    }

    /// The started process becomes a member: the driver's loop around its core, a publisher, a handle.
    fn become_member(&mut self, actor: ActorId, slot: usize, zk: SimClient, started: Started) {
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

    /// The process is gone: its client closes (a member that stopped) or is simply abandoned (a crash).
    fn gone(&mut self, actor: ActorId, close: bool) {
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

    fn live(&self) -> Vec<ActorId> {
        (0..self.actors.len()).filter(|&a| Self::is_member_like(&self.actors[a])).collect()
    }

    fn members(&self) -> Vec<ActorId> {
        (0..self.actors.len()).filter(|&a| matches!(self.actors[a], Actor::Member(_))).collect()
    }

    /// Replaces processes that are gone (a failed member is restarted by its orchestrator).
    fn replace_failed(&mut self) {
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

    // ---- Driving the processes --------------------------------------------------------------------------------

    /// Polls every process something reached, until none is left.
    fn drive(&mut self) {
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

    /// Runs a member's driver loop until nothing is ready: each pass picks one ready source at random, as the real
    /// driver's `select!` does. Returns whether the core stopped.
    fn drive_member(&mut self, actor: ActorId, m: &mut Member) -> bool {
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
                m.publisher.publish(&m.core, publication, now);
            }
            Action::Ack(id, result) => {
                if let Some(ack) = m.release_acks.remove(&id) {
                    let _ = ack.send(result.map_err(crate::publisher::error_of));
                } else if let Some(ack) = m.finish_acks.remove(&id) {
                    let _ = ack.send(());
                }
            }
            Action::Stop => {
                m.party_watch = None;
                m.set_watch = None;
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
        if snapshot.generation != m.worker.seen {
            m.worker.seen = snapshot.generation;
            if snapshot.state == PartitionState::Release && m.worker.release.is_none() && m.worker.release_at.is_none()
            {
                let at = now + self.rng().millis(0, 80);
                m.worker.release_at = Some(at);
                lock(&self.net).wake_at(actor, at);
            }
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
        if let Some(finish) = &mut m.worker.finish
            && poll_with(finish, &waker).is_ready()
        {
            m.worker.finish = None;
        }
    }

    fn drive_admin(&mut self, actor: ActorId, admin: &mut Admin) {
        let Some((what, future)) = &mut admin.op else { return };
        let Poll::Ready(result) = poll_with(future, &self.wakers[actor].clone()) else { return };
        let what = what.clone();
        admin.op = None;
        let tokens = admin.set.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        match &result {
            Ok(read) => {
                self.note(format!("a{actor} admin {what}: version {} = {:?}", read.version, read.items));
                let names: BTreeSet<String> = read.items.iter().map(Item::node_name).collect();
                match self.committed.get(&read.version) {
                    Some(stored) if *stored != names => self.violate(format!(
                        "admin {what} reports version {} as {names:?}, but that version is {stored:?}",
                        read.version
                    )),
                    None => self
                        .violate(format!("admin {what} reports version {}, which was never committed", read.version)),
                    _ => {}
                }
            }
            // The one failure that may have changed the set, and says so.
            Err(err @ Error::ItemSetOutcomeUnknown { .. }) => self.note(format!("a{actor} admin {what}: {err}")),
            Err(err) => {
                self.note(format!("a{actor} admin {what} failed: {err}"));
                if let Some(token) = tokens.iter().find(|token| self.landed.contains(*token)) {
                    self.violate(format!("admin {what} reported {err}, but its update {token} was committed"));
                }
            }
        }
        admin.set.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    }

    // ---- The run ----------------------------------------------------------------------------------------------

    fn run(&mut self) -> Outcome {
        let bound = self.plan.session + self.plan.time_boundary * 3 + Duration::from_secs(5);
        self.drive();
        loop {
            let Some(ev) = lock(&self.net).pop() else { break };
            // A quiet gap must not hide a world that stopped converging: judged at the bound, not at the next event.
            let now = self.now();
            if self.faults_left == 0
                && now > self.quiet_since + bound
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
            if let Err(violation) = self.check_safety() {
                self.violate(violation);
            }
            if let Some(violation) = self.violation.take() {
                return self.outcome(Some(violation));
            }
            let now = self.now();
            if self.faults_left == 0 && now >= self.quiet_since {
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
            set_changes: self.committed.len().saturating_sub(1),
            saves: self.saves,
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

    // ---- Faults -----------------------------------------------------------------------------------------------

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
    fn cut(&mut self, session: SessionId, detect: Duration, outage: Duration) {
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

    fn reconnect(&mut self, session: SessionId, link: u64) {
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

    fn maybe_expire(&mut self, session: SessionId, link: u64) {
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

    fn fault(&mut self) {
        let session_timeout = self.plan.session;
        let kind = self.rng().below(11);
        let mut lasts = Duration::ZERO;
        match kind {
            // A short cut: the client notices at once (the connection resets) and comes back on the same session.
            0 | 1 => {
                if let Some((_, session)) = self.pick_session(true) {
                    let outage = self.rng().millis(50, 1500);
                    let detect = self.rng().millis(0, 20);
                    self.cut(session, detect, outage);
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
                    self.cut(session, detect, outage);
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
            // An admin changes the shared set (without one: a join).
            _ if self.plan.shared_set => self.admin_changes(),
            _ => self.join(),
        }
        if self.plan.shared_set && self.rng().below(2) == 0 {
            self.admin_changes();
        }
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
    fn stall(&mut self) -> Duration {
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

    fn thaw(&mut self) {
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
        Publisher::panicked(m.publisher.sender(), "simulated".into());
        let outage = self.rng().millis(50, 1500);
        let detect = self.rng().millis(0, 20);
        let (zk, paths) = (m.zk.clone(), m.paths.clone());
        let future = async move { crate::driver::delete_our_nodes(&zk, &paths).await }.boxed();
        self.actors[actor] = Actor::Cleaning(Box::new(Cleaning { zk: m.zk.clone(), future }));
        lock(&self.net).dirty.insert(actor);
        self.cut(session, detect, outage);
        if self.plan.static_membership {
            self.vacant.insert(m.slot);
        }
    }

    /// An admin changes the shared set with the production code: adds, removes, replaces or compare-and-sets, often
    /// enough items to be staged. A third of the time, another admin's change is still under way.
    fn admin_changes(&mut self) {
        if !self.plan.shared_set {
            return;
        }
        let idle = (0..self.actors.len()).find(|&a| matches!(&self.actors[a], Actor::Admin(ad) if ad.op.is_none()));
        let actor = match idle {
            Some(actor) => actor,
            None => {
                let actor = self.actors.len();
                let session = lock(&self.net).open_session(actor);
                let zk = SimClient::new(self.net.clone(), session);
                let set =
                    SharedSet::new(SessionRef::Owned(zk.clone()), PATH, NodeAcls::default()).with_chunk(SET_CHUNK);
                self.add_actor(Actor::Admin(Box::new(Admin { zk, set, op: None })))
            }
        };
        let current: Vec<i64> = self
            .committed
            .last_key_value()
            .map(|(_, names)| names.iter().filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default();
        let count = 1 + self.rng().below(5) as usize;
        let kind = self.rng().below(4);
        let Actor::Admin(admin) = &mut self.actors[actor] else { return };
        let set = admin.set.clone();
        let (what, future): (String, BoxFuture<'static, Result<crate::SharedItems, Error>>) = match kind {
            0 if current.len() > count + 1 => {
                let mut removed = Vec::new();
                let mut rng = lock(&self.net);
                for _ in 0..count {
                    let pick = current[rng.rng.below(current.len() as u64) as usize];
                    if !removed.contains(&pick) {
                        removed.push(pick);
                    }
                }
                drop(rng);
                let items: Vec<Item> = removed.iter().copied().map(Item::from).collect();
                (format!("remove {removed:?}"), async move { set.remove(items).await }.boxed())
            }
            1 if !current.is_empty() => {
                // A compare-and-set from the version read: keep most, add some.
                let version = self.committed.last_key_value().map_or(0, |(v, _)| *v);
                let mut items: Vec<Item> = current.iter().skip(count / 2).copied().map(Item::from).collect();
                for _ in 0..count {
                    items.push(Item::from(self.next_value));
                    self.next_value += 1;
                }
                let what = format!("replace_if {version} with {} items", items.len());
                (what, async move { set.replace(Some(version), items).await }.boxed())
            }
            _ => {
                let mut added = Vec::new();
                for _ in 0..count {
                    // A new value, or one removed earlier (it comes back under its old index in older members).
                    let value = if self.next_value > 0 && lock(&self.net).rng.below(3) == 0 {
                        lock(&self.net).rng.below(self.next_value as u64) as i64
                    } else {
                        self.next_value += 1;
                        self.next_value - 1
                    };
                    added.push(value);
                }
                let items: Vec<Item> = added.iter().copied().map(Item::from).collect();
                (format!("add {added:?}"), async move { set.add(items).await }.boxed())
            }
        };
        self.note(format!("a{actor} admin starts: {what}"));
        if let Actor::Admin(admin) = &mut self.actors[actor] {
            admin.op = Some((what, future));
        }
        lock(&self.net).dirty.insert(actor);
        // Sometimes the admin crashes part-way, once its first requests went out: its session lingers, then expires
        // with its lease.
        if self.rng().below(6) == 0 {
            self.drive();
            if let Actor::Admin(admin) = &self.actors[actor]
                && admin.op.is_some()
            {
                self.note(format!("crash admin a{actor}"));
                self.gone(actor, false);
            }
        }
    }

    /// An operator deletes a listed item's lock node by hand (`tests/faults.rs` does the same on a real server): any
    /// one, or (`fresh`) the one taken last.
    /// The sessions of every process that has one.
    fn sessions(&self) -> Vec<SessionId> {
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

    fn operator_deletes_a_held_node(&mut self, fresh: bool) {
        let mut held = Vec::new();
        for actor in self.members() {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            for &item in m.core.listed() {
                if let (Some(node), Some(at)) = (m.core.held_node(item), m.core.held_at(item)) {
                    held.push((at, format!("{LOCKS}/{}/{node}", m.core.item(item))));
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

    // ---- Invariants -------------------------------------------------------------------------------------------

    /// Whether a session has a lock node (held or waiting) for `item`.
    fn holds_a_node(&self, session: SessionId, item: &Item) -> bool {
        let net = lock(&self.net);
        let dir = format!("{LOCKS}/{item}");
        net.zk
            .children_of(&dir)
            .iter()
            .any(|child| net.zk.exists(&format!("{dir}/{child}")).is_some_and(|stat| stat.ephemeral_owner == session))
    }

    /// Records every newly committed version of the shared set (the set in force by the protocol's own reading of
    /// the model), and checks that no version is committed twice with different sets, and that no checkpoint write
    /// landed unless its lock node was the lowest contender.
    fn record_set(&mut self) {
        let writes = std::mem::take(&mut lock(&self.net).writes);
        for net::Write { session, ops, result, checks_lowest: lowest } in writes {
            if result.is_err() {
                continue;
            }
            let checkpoint = ops.iter().any(|op| {
                matches!(op, zk::WriteOp::SetData { path, .. } | zk::WriteOp::Create { path, .. } if path.starts_with(CHECKPOINTS))
            });
            let Some(lock_node) = ops.iter().find_map(|op| match op {
                zk::WriteOp::Check { path, .. } if path.starts_with(LOCKS) => Some(path.clone()),
                _ => None,
            }) else {
                continue;
            };
            if checkpoint && !lowest {
                self.violate(format!("session {session} wrote a checkpoint checked by {lock_node}, which is not the item's lowest contender"));
            }
        }
        if !self.plan.shared_set {
            return;
        }
        let net = lock(&self.net);
        let data = net.zk.data_of(ITEMS);
        if data == self.header_seen {
            return;
        }
        let Some(data) = data else {
            drop(net);
            self.header_seen = None;
            return;
        };
        let version = net.zk.exists(ITEMS).map_or(0, |stat| stat.version);
        let header = Header::parse(&data).ok();
        let change = match header.as_ref().map(|h| &h.state) {
            Some(State::Applying(tag)) => Some((
                net.zk.children_of(&format!("{PATH}/item-changes/{tag}/add")),
                net.zk.children_of(&format!("{PATH}/item-changes/{tag}/remove")),
            )),
            _ => None,
        };
        let lease = header
            .as_ref()
            .and_then(|h| h.state.change())
            .map(|tag| net.zk.exists(&format!("{PATH}/item-writers/{tag}")).is_some());
        let read =
            RawRead { header: Some((data.clone(), version)), children: net.zk.children_of(ITEMS), change, lease };
        drop(net);
        self.header_seen = Some(data);
        if let Some(header) = &header {
            self.landed.extend(header.log.iter().cloned());
        }
        if let SetView::Committed(committed) = layout::interpret(read) {
            let names: BTreeSet<String> = committed.items.iter().map(Item::node_name).collect();
            match self.committed.get(&committed.version) {
                Some(stored) if *stored != names => {
                    let stored = stored.clone();
                    self.violate(format!(
                        "version {} of the shared set was {stored:?} and is now {names:?}",
                        committed.version
                    ));
                }
                Some(_) => {}
                None => {
                    self.note(format!("set version {} = {names:?}", committed.version));
                    self.committed.insert(committed.version, names);
                }
            }
        }
    }

    /// Whether `path` (a lock node) is the lowest contender of its directory.
    fn lowest_contender(&self, path: &str) -> bool {
        let Some((dir, node)) = path.rsplit_once('/') else { return false };
        let net = lock(&self.net);
        let children = net.zk.children_of(dir);
        let lowest = children
            .iter()
            .filter_map(|c| crate::layout::sequence(c).map(|seq| (seq.to_owned(), c.clone())))
            .min()
            .map(|(_, c)| c);
        lowest.as_deref() == Some(node)
    }

    /// No item listed by two live sessions; every listed item backed by the member's lowest contender node (or one an
    /// operator deleted, for the stated bound); every shared set followed was committed.
    fn check_safety(&mut self) -> Result<(), String> {
        let now = self.now();
        let mut owner: BTreeMap<String, ActorId> = BTreeMap::new();
        for actor in self.members() {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            let core = &m.core;
            if let Some((version, items)) = core.followed() {
                let names: BTreeSet<String> = items.iter().map(Item::node_name).collect();
                match self.committed.get(&version) {
                    Some(stored) if *stored == names => {}
                    stored => {
                        return Err(format!(
                            "{} follows version {version} of the shared set as {names:?}, but the committed version \
                             {version} is {stored:?}",
                            core.me()
                        ));
                    }
                }
            }
            let listed = core.listed();
            if listed.is_empty() {
                continue;
            }
            let session = m.zk.session();
            let name = core.me().to_owned();
            if !lock(&self.net).zk.is_alive(session) {
                return Err(format!("{name} lists {} items but its session {session} has ended", listed.len()));
            }
            for &index in listed {
                let item = core.item(index).to_string();
                let dir = format!("{LOCKS}/{item}");
                let Some(node) = core.held_node(index) else {
                    return Err(format!("{name} lists item {item} without a held node"));
                };
                if let Some(&deleted) = self.operator_deleted.get(&format!("{dir}/{node}")) {
                    // The node is gone: the member may not know yet, for a bounded time only.
                    let held =
                        core.held_at(index).map_or(now, |at| at.saturating_duration_since(lock(&self.net).epoch));
                    let watched_by = held + self.plan.time_boundary * 2;
                    let last_disturbed = self.disturbed.get(&session).copied().unwrap_or_default().max(self.stalled);
                    let disturbed = last_disturbed >= held || !lock(&self.net).is_up(session);
                    let limit = deleted.max(watched_by) + operator_window(&self.plan, disturbed);
                    if now > limit {
                        return Err(format!(
                            "{name} still lists item {item} {:?} after an operator deleted its lock node (taken at \
                             {held:?}, deleted at {deleted:?}; the bound is {limit:?})",
                            now - deleted
                        ));
                    }
                    continue;
                }
                if let Some(other) = owner.insert(item.clone(), actor) {
                    return Err(format!("item {item} listed by a{other} and a{actor}, both sessions alive"));
                }
                if !self.lowest_contender(&format!("{dir}/{node}")) {
                    let children = lock(&self.net).zk.children_of(&dir);
                    return Err(format!(
                        "{name} lists item {item} but its node {node} is not the lowest contender ({children:?})"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every live member `Acquired` over the real party and the latest committed set, nothing unfinished in the set,
    /// listings a disjoint cover, no stray lock node.
    fn converged(&self) -> Result<(), String> {
        let net = lock(&self.net);
        let party: Vec<String> = crate::layout::members(&net.zk.children_of(PARTY)).0;
        drop(net);
        let mut covered = BTreeSet::new();
        let members = self.members();
        if members.len() != self.live().len() {
            return Err("a process is still starting".into());
        }
        for &actor in &members {
            let Actor::Member(m) = &self.actors[actor] else { continue };
            let core = &m.core;
            if core.state() != PartitionState::Acquired {
                return Err(format!("{} is {}", core.me(), core.state()));
            }
            let snapshot = m.handle.read(Snapshot::clone);
            if *snapshot.members != party {
                return Err(format!("{} allocated for {:?}, the party is {party:?}", core.me(), snapshot.members));
            }
            for &index in core.listed() {
                let item = core.item(index).node_name();
                if !covered.insert(item.clone()) {
                    return Err(format!("item {item} listed twice"));
                }
            }
            // Hygiene: every lock node of this session is the held node of a listed item.
            let held: BTreeSet<String> = core
                .listed()
                .iter()
                .filter_map(|&index| Some(format!("{LOCKS}/{}/{}", core.item(index), core.held_node(index)?)))
                .collect();
            for path in lock(&self.net).zk.ephemerals(m.zk.session(), &format!("{LOCKS}/")) {
                if !held.contains(&path) {
                    return Err(format!("{} has a stray lock node {path}", core.me()));
                }
            }
            if !m.worker.saves.is_empty() || m.worker.release.is_some() {
                return Err(format!("{}'s worker is still busy", core.me()));
            }
        }
        let expected: BTreeSet<String> = if self.plan.shared_set {
            let net = lock(&self.net);
            let header = net.zk.data_of(ITEMS).and_then(|data| Header::parse(&data).ok());
            drop(net);
            match header {
                Some(header) if header.state != State::Ready => {
                    return Err(format!("the shared set is still {:?}", header.state));
                }
                Some(header) => self.committed.get(&header.version).cloned().unwrap_or_default(),
                None => return Err("the shared set is missing".into()),
            }
        } else {
            self.fixed.iter().map(Item::node_name).collect()
        };
        if covered != expected {
            let missing: Vec<&String> = expected.difference(&covered).collect();
            let extra: Vec<&String> = covered.difference(&expected).collect();
            return Err(format!(
                "listings cover {} of {} items: missing {missing:?}, not in the set {extra:?}",
                covered.len(),
                expected.len()
            ));
        }
        if (0..self.actors.len()).any(|a| matches!(&self.actors[a], Actor::Admin(ad) if ad.op.is_some())) {
            return Err("an admin's change is under way".into());
        }
        Ok(())
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

/// The core's view of a session state.
fn session_event(state: SessionState) -> Event {
    if let Some(end) = crate::publisher::session_end(state) {
        Event::SessionEnded(end)
    } else if state == SessionState::Disconnected {
        Event::Suspended
    } else {
        Event::Connected
    }
}

#[cfg(test)]
mod tests;
