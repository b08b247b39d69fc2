//! Deterministic simulation: many members' decision cores against an in-memory ZooKeeper, under seeded faults, with
//! the safety invariants checked after every step (FoundationDB's and TigerBeetle's discipline: one seed replays one
//! run exactly).
//!
//! The world plays the driver's part for every member: it performs each core's actions against the model
//! ([`zk::Zk`]) with network latency, delivers replies and watch events in order per session, and injects faults from
//! the same random stream: connections cut (the outcome of requests in flight unknown), server stalls longer than the
//! client's read timeout, session expiry, crashes, graceful leaves, joins, server restarts, and (in runs with the
//! shared item set) admins adding and removing items, in one step or in two with the set marked `updating` between.
//! A worker per member answers every `Release` with `release_set()` after a random delay, as kazoo's loop does.
//!
//! Checked after every step that changes ZooKeeper or a publication:
//! - **safety**: no item is listed by two members whose sessions are both alive; a member lists an item only while its
//!   session is alive and its lock node is the lowest contender of the item's directory;
//! - **liveness**: once faults stop, within the liveness bound (session timeout + time_boundary + margin), every live
//!   member is `Acquired` over the real party and the latest version of the set, and their listings are a disjoint
//!   cover of that set;
//! - **hygiene**: then, no lock node of a live session is anything but its member's held lock (no orphans).
//!
//! `SIM_SEED=<seed>` replays one failing run; `SIM_RUNS` and `SIM_STEPS` scale the run (see `RELIABILITY.md`).

mod zk;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zk::{Mode, ReadOp, ReadResult, SessionId, WatchId, WriteOp, WriteResult, Zk, ZkErr};

use crate::agreement::Agreement;
use crate::decision::{
    Action, Core, CoreConfig, Event, Op, PartyRead, Publication, Reply, ReqError, ReqId, Sabotage, SetRead,
};
use crate::{Error, Item, KazooStride, PartitionState, Rebalance, Rendezvous, SessionPolicy};

/// A run that takes more steps than this is stuck in a loop.
const MAX_STEPS: u64 = 2_000_000;
const PARTY: &str = "/p/party";
const LOCKS: &str = "/p/locks";
const ITEMS: &str = "/p/items";

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
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A duration between `low` and `high` (in milliseconds).
    fn millis(&mut self, low: u64, high: u64) -> Duration {
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
    /// one with the same identifier once its party node has gone (after a crash: once its session has expired).
    pub static_membership: bool,
    /// The items come from the shared set, which admins change as faults.
    pub shared_set: bool,
    /// An operator deletes members' held lock nodes by hand, now and then.
    pub operator_deletes: bool,
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
            // Drawn last: the earlier draws, and so the runs of seeds pinned before shared sets, stay the same.
            shared_set: rng.below(3) == 0,
            operator_deletes: rng.below(3) == 0,
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
    /// Set changes made by admins.
    pub set_changes: usize,
    /// Simulated time from the end of the last fault to a converged, clean world.
    pub recovery: Duration,
    pub violation: Option<String>,
}

#[derive(Debug)]
enum Ev {
    /// The server takes the next request from a member's queue.
    Serve(usize),
    /// Something reaches a member's core (if the connection generation still matches).
    Deliver { member: usize, link: u64, event: Box<SimEvent> },
    /// A member's core asked to be woken at this time.
    Timer(usize),
    /// The worker answers a `Release`.
    Worker(usize),
    /// The server expires a session if its connection is still down (same generation).
    MaybeExpire { member: usize, link: u64 },
    /// A member's connection comes back.
    Reconnect { member: usize, link: u64 },
    /// The server resumes after a stall or restart.
    Thaw,
    /// The server stalls.
    Stall,
    /// The next fault.
    Fault,
    /// The second step of a two-step update of the shared set.
    FinishUpdate { adds: Vec<i64>, removes: Vec<i64> },
}

#[derive(Debug)]
enum SimEvent {
    Core(Event),
}

/// What a request's registered watch is for.
#[derive(Debug, Clone, Copy)]
enum WatchFor {
    Party,
    Lock(ReqId),
    Set,
    /// A watch on our own held lock node (its firing answers the request).
    Held(ReqId),
}

struct Member {
    ident: String,
    /// Under static membership, the identifier's number: a replacement takes the slot of the member it replaces.
    slot: usize,
    core: Option<Core>,
    session: SessionId,
    party_node: String,
    /// Connection generation: bumped on every cut, so deliveries from an older connection are dropped.
    link: u64,
    up: bool,
    /// Requests the server has not taken yet (a real client queues them while disconnected).
    queue: VecDeque<(ReqId, Op)>,
    /// Requests taken by the server whose replies have not arrived: lost with the connection if it drops.
    unanswered: BTreeMap<ReqId, Op>,
    watches: HashMap<WatchId, WatchFor>,
    /// Watch events that fired while disconnected: delivered on reconnection (the client's SetWatches).
    stashed: Vec<Event>,
    /// Lock watches that fired: their event survives a lost connection.
    watch_fired: BTreeSet<ReqId>,
    serving: bool,
    /// Deliveries to this member stay in order (one TCP connection).
    last_delivery: Duration,
    timer: Option<Duration>,
    worker_pending: bool,
    shown: Option<Publication>,
    /// For each `release_set()` call in flight, the items the (unsuspended) `Release` it answered revoked: gone
    /// once that call returns.
    owed: HashMap<u64, Vec<usize>>,
    next_ack: u64,
    /// The process is gone (crashed), or its core stopped and the session closed.
    gone: bool,
}

struct World {
    plan: Plan,
    rng: Rng,
    zk: Zk,
    epoch: Instant,
    now: Duration,
    queue: BinaryHeap<Reverse<(Duration, u64, usize)>>,
    events: Vec<Option<Ev>>,
    seq: u64,
    members: Vec<Member>,
    frozen: bool,
    /// Overlapping stalls: the server resumes at the end of the last one.
    frozen_until: Duration,
    items: Vec<Item>,
    steps: u64,
    faults_left: usize,
    /// When the last fault ended (for the liveness bound).
    quiet_since: Duration,
    log: VecDeque<String>,
    checked_zxid: i64,
    /// A `release_set()` acknowledged too early (found while performing actions, reported after the step).
    ack_violation: Option<String>,
    /// Static membership: identifiers of members that are gone, to be taken again by their replacements.
    vacant: BTreeSet<usize>,
    next_slot: usize,
    /// The shared set's version (the model has no set_data: the world keeps it, changed with the children).
    set_version: u64,
    /// A two-step update is between its steps: members reading the set now keep theirs.
    set_updating: bool,
    next_value: i64,
    set_changes: usize,
    /// Held lock nodes an operator deleted, and when: their member may list the item until ZooKeeper tells it.
    operator_deleted: BTreeMap<String, Duration>,
}

/// How long a member may keep listing an item after an operator deleted its held lock node: the watch event's trip
/// (a few ms here), or the watch's registration if it was still to come (`time_boundary`, at most 0.6 s here, after
/// the member's lock work), or a cut's detection (up to 2/5 of the 3 s session) before the member suspends.
const OPERATOR_WINDOW: Duration = Duration::from_millis(1500);

/// Each of a core's item indexes as the item's value (the sim's items are integers).
fn values_of(core: &Core) -> Vec<i64> {
    (0..core.item_count()).map(|index| if let Item::Int(v) = core.item(index) { *v } else { i64::MIN }).collect()
}

/// The first value no item has.
fn plan_items(items: &[Item]) -> i64 {
    items.iter().filter_map(|item| if let Item::Int(v) = item { Some(*v + 1) } else { None }).max().unwrap_or(0)
}

/// Runs one seeded simulation of `plan`.
pub(crate) fn run(seed: u64, plan: Plan) -> Outcome {
    let mut world = World::new(seed, plan);
    world.run()
}

impl World {
    fn new(seed: u64, plan: Plan) -> World {
        let mut zk = Zk::new();
        let admin = zk.open_session();
        for path in [PARTY, LOCKS] {
            let _ = zk.mkdir(admin, path);
        }
        let items: Vec<Item> = (0..plan.items as i64).map(Item::from).collect();
        if plan.shared_set {
            let _ = zk.mkdir(admin, ITEMS);
            for item in &items {
                let _ = zk.mkdir(admin, &format!("{ITEMS}/{item}"));
            }
        }
        let next_value = plan_items(&items);
        let mut world = World {
            faults_left: plan.faults,
            plan,
            rng: Rng::new(seed),
            zk,
            epoch: Instant::now(),
            now: Duration::ZERO,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            seq: 0,
            members: Vec::new(),
            frozen: false,
            frozen_until: Duration::ZERO,
            items,
            steps: 0,
            quiet_since: Duration::ZERO,
            log: VecDeque::new(),
            checked_zxid: -1,
            ack_violation: None,
            vacant: BTreeSet::new(),
            next_slot: 0,
            set_version: 0,
            set_updating: false,
            next_value,
            set_changes: 0,
            operator_deleted: BTreeMap::new(),
        };
        for _ in 0..world.plan.members {
            world.join();
        }
        let first = world.rng.millis(500, 3000);
        world.at(first, Ev::Fault);
        world
    }

    fn at(&mut self, delay: Duration, ev: Ev) {
        self.seq += 1;
        self.events.push(Some(ev));
        self.queue.push(Reverse((self.now + delay, self.seq, self.events.len() - 1)));
    }

    fn note(&mut self, line: String) {
        if self.log.len() == 200 {
            self.log.pop_front();
        }
        self.log.push_back(format!("{:>9.3?} {line}", self.now));
    }

    fn instant(&self) -> Instant {
        self.epoch + self.now
    }

    fn latency(&mut self) -> Duration {
        self.rng.millis(1, 8)
    }

    // ---- Members ----------------------------------------------------------------------------------------------

    /// A new member: under static membership with a new identifier.
    fn join(&mut self) -> usize {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.join_as(slot)
    }

    /// A new member in `slot` (its identifier, under static membership: the caller made sure no party node carries
    /// it any more, as `build()` waits for).
    fn join_as(&mut self, slot: usize) -> usize {
        let index = self.members.len();
        let static_membership = self.plan.static_membership;
        let ident = if static_membership { format!("s{slot}") } else { format!("m{index}") };
        let session = self.zk.open_session();
        let hex = format!("{:032x}", self.rng.next() as u128 | ((self.rng.next() as u128) << 64));
        let (node, mode) = if static_membership {
            (format!("{PARTY}/{hex}-{ident}"), Mode::Ephemeral)
        } else {
            (format!("{PARTY}/{hex}-{ident}-"), Mode::EphemeralSequential)
        };
        let (path, _) = self
            .zk
            .create(session, &node, ident.as_bytes(), mode)
            .unwrap_or_else(|err| panic!("the party node must be creatable: {err:?}"));
        let node = path.rsplit('/').next().unwrap_or_default().to_owned();
        let name: Arc<str> = Arc::from(node.split_once('-').map_or(node.as_str(), |(_, name)| name));
        let mut core = Core::new(self.core_config(), name.clone(), self.rng.next() as u128, self.instant());
        core.sabotage(self.plan.sabotage);
        self.members.push(Member {
            ident,
            slot,
            core: Some(core),
            session,
            party_node: node,
            link: 0,
            up: true,
            queue: VecDeque::new(),
            unanswered: BTreeMap::new(),
            watches: HashMap::new(),
            stashed: Vec::new(),
            watch_fired: BTreeSet::new(),
            serving: false,
            last_delivery: self.now,
            timer: None,
            worker_pending: false,
            shown: None,
            owed: HashMap::new(),
            next_ack: 0,
            gone: false,
        });
        self.note(format!("join {name} (session {session})"));
        self.fire_watches();
        self.pump(index);
        index
    }

    fn core_config(&self) -> CoreConfig {
        let combo = self.plan.combo;
        let partition_fn: Box<dyn crate::PartitionFn> =
            if combo.rendezvous { Box::new(Rendezvous::default()) } else { Box::new(KazooStride) };
        let shared = self.plan.shared_set;
        CoreConfig {
            // A shared set as `build()` reads it: its children, even in the middle of an update.
            items: if shared { self.set_children() } else { self.items.clone() },
            shared_set: shared.then_some(self.set_version),
            agreement: Agreement::new((!shared).then_some(&self.items[..]), &*partition_fn, None),
            partition_fn,
            time_boundary: self.plan.time_boundary,
            retry_delay: Duration::from_millis(100),
            max_allocation_time: self.plan.max_allocation_time,
            session_policy: combo.policy,
            rebalance: combo.rebalance,
            // Small, so batching and the window are exercised with few items.
            window: 6,
            batch: 4,
            // As `build()` finds it: a member built before any lock directory exists makes them first.
            lock_dirs_exist: !self.zk.children_of(LOCKS).is_empty(),
        }
    }

    /// Feeds an event to a member's core, then performs what it asks.
    fn feed(&mut self, index: usize, event: Event) {
        let now = self.instant();
        let Some(core) = self.members[index].core.as_mut() else { return };
        core.handle(event, now);
        self.pump(index);
    }

    /// Performs a member's pending actions and re-arms its timer.
    fn pump(&mut self, index: usize) {
        loop {
            let Some(action) = self.members[index].core.as_mut().and_then(Core::poll_action) else { break };
            match action {
                Action::Request(id, op) => {
                    if std::env::var_os("SIM_TRACE").is_some() {
                        self.note(format!("m{index} asks #{id} {op:?}"));
                    }
                    self.members[index].queue.push_back((id, op));
                    self.serve_soon(index);
                }
                Action::Cancel(id) => {
                    self.members[index].watches.retain(|_, w| !matches!(w, WatchFor::Lock(r) if *r == id))
                }
                Action::Publish(publication) => {
                    let m = &mut self.members[index];
                    let line = format!(
                        "{} publishes {} items {:?} revoked {:?}{} ({})",
                        publication.member,
                        publication.state,
                        publication.items.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
                        publication.revoked,
                        if publication.suspended { " suspended" } else { "" },
                        publication.reason
                    );
                    if publication.state == PartitionState::Release && !m.worker_pending {
                        m.worker_pending = true;
                        let delay = self.rng.millis(0, 80);
                        self.at(delay, Ev::Worker(index));
                    }
                    self.members[index].shown = Some(publication);
                    self.note(line);
                    self.checked_zxid = -1;
                }
                Action::Ack(ack, Ok(())) => {
                    // release_set() returned: what the Release it answered revoked is no longer locked by us.
                    if let Some(revoked) = self.members[index].owed.remove(&ack)
                        && let Some(item) = revoked.iter().copied().find(|&item| self.holds_a_node(index, item))
                    {
                        self.ack_violation.get_or_insert(format!(
                            "m{index}'s release_set() returned while its lock node of revoked item {item} still exists"
                        ));
                    }
                }
                Action::Ack(_, Err(_)) => {}
                Action::Stop => {
                    // The process closes its client: the session ends, and its ephemerals with it.
                    let m = &mut self.members[index];
                    m.core = None;
                    m.gone = true;
                    let session = m.session;
                    self.note(format!("m{index} stopped; session {session} closed"));
                    self.zk.expire(session);
                    self.fire_watches();
                    self.vacate(index);
                    return;
                }
            }
        }
        let Some(core) = self.members[index].core.as_ref() else { return };
        if let Some(deadline) = core.poll_timeout() {
            let due = deadline.saturating_duration_since(self.epoch);
            let m = &mut self.members[index];
            if m.timer.is_none_or(|t| due < t) {
                m.timer = Some(due);
                let delay = due.saturating_sub(self.now);
                self.at(delay, Ev::Timer(index));
            }
        }
    }

    fn serve_soon(&mut self, index: usize) {
        let m = &self.members[index];
        if m.serving || !m.up || m.gone || self.frozen || m.queue.is_empty() {
            return;
        }
        self.members[index].serving = true;
        let delay = self.latency();
        self.at(delay, Ev::Serve(index));
    }

    /// Schedules a delivery to a member over its current connection, after everything already sent to it.
    fn deliver(&mut self, index: usize, event: Event) {
        let latency = self.latency();
        let m = &mut self.members[index];
        let when = (self.now + latency).max(m.last_delivery);
        m.last_delivery = when;
        let link = m.link;
        let delay = when - self.now;
        self.at(delay, Ev::Deliver { member: index, link, event: Box::new(SimEvent::Core(event)) });
    }

    // ---- The server -------------------------------------------------------------------------------------------

    fn serve(&mut self, index: usize) {
        self.members[index].serving = false;
        let m = &self.members[index];
        if !m.up || m.gone || self.frozen {
            return;
        }
        let Some((id, op)) = self.members[index].queue.pop_front() else { return };
        let session = self.members[index].session;
        if let Some(reply) = self.apply(index, session, id, &op) {
            self.members[index].unanswered.insert(id, op);
            self.deliver(index, Event::Reply(id, reply));
        } else {
            // A watch registered: its reply is the event.
            self.members[index].unanswered.insert(id, op);
        }
        self.fire_watches();
        self.serve_soon(index);
    }

    /// Applies one request to the model; `None` for a watch that is now registered.
    fn apply(&mut self, index: usize, s: SessionId, id: ReqId, op: &Op) -> Option<Reply> {
        let lost = || ReqError::Fatal(Error::SessionLost { state: zookeeper_client::SessionState::Expired });
        let err = |e: ZkErr| match e {
            ZkErr::NoNode => ReqError::NoNode,
            ZkErr::SessionExpired => lost(),
            other => ReqError::Fatal(Error::Internal { reason: format!("model: {other:?}") }),
        };
        // The core names items by index; ZooKeeper by value.
        let values: Vec<i64> = self.members[index].core.as_ref().map(values_of).unwrap_or_default();
        let dir = |item: usize| format!("{LOCKS}/{}", values[item]);
        Some(match op {
            Op::ReadParty => match self.zk.children(s, PARTY, true) {
                Ok((children, watch)) => {
                    if let Some(watch) = watch {
                        self.members[index].watches.insert(watch, WatchFor::Party);
                    }
                    let ours = children.contains(&self.members[index].party_node);
                    // Every member announces the same configuration (the real agreement check has its own tests).
                    let members = crate::party::members(&children).0;
                    Reply::Party(Ok(PartyRead { members, ours, agreements: Vec::new() }))
                }
                Err(e) => Reply::Party(Err(err(e))),
            },
            Op::Join => {
                let ident = self.members[index].ident.clone();
                let _ = self.zk.mkdir(s, PARTY);
                let (node, mode) = if self.plan.static_membership {
                    // As party::join_static: a name another node carries by now is not taken twice.
                    if let Some(other) = self.namesake(&ident) {
                        let (session, waited) = (self.zk.exists(&format!("{PARTY}/{other}")), Duration::ZERO);
                        let session = session.map_or(0, |stat| stat.ephemeral_owner as i64);
                        let in_use = Error::IdentifierInUse { identifier: ident, node: other, session, waited };
                        return Some(Reply::Joined(Err(ReqError::Fatal(in_use))));
                    }
                    (format!("{PARTY}/{:032x}-{ident}", self.rng.next()), Mode::Ephemeral)
                } else {
                    (format!("{PARTY}/{:032x}-{ident}-", self.rng.next()), Mode::EphemeralSequential)
                };
                match self.zk.create(s, &node, ident.as_bytes(), mode) {
                    Ok((path, _)) => {
                        let node = path.rsplit('/').next().unwrap_or_default().to_owned();
                        let name: Arc<str> = Arc::from(node.split_once('-').map_or(node.as_str(), |(_, n)| n));
                        self.members[index].party_node = node;
                        Reply::Joined(Ok(name))
                    }
                    Err(e) => Reply::Joined(Err(err(e))),
                }
            }
            Op::MakeDirs(items) => {
                let mut result = Ok(());
                for &item in items {
                    if let Err(e) = self.zk.mkdir(s, &dir(item)) {
                        result = Err(err(e));
                    }
                }
                Reply::DirsMade(result)
            }
            Op::Create { contenders, data } => {
                let ops: Vec<WriteOp> = contenders
                    .iter()
                    .map(|(item, prefix)| WriteOp::Create {
                        path: format!("{}/{prefix}", dir(*item)),
                        data: data.as_bytes().to_vec(),
                        mode: Mode::EphemeralSequential,
                    })
                    .collect();
                Reply::Created(match self.zk.multi_write(s, &ops) {
                    Ok(results) => Ok(results
                        .into_iter()
                        .map(|r| match r {
                            WriteResult::Created { path, stat } => {
                                (path.rsplit('/').next().unwrap_or_default().to_owned(), stat.czxid)
                            }
                            WriteResult::Deleted => (String::new(), 0),
                        })
                        .collect()),
                    Err((_, e)) => Err(err(e)),
                })
            }
            Op::List(items) => {
                let mut ops = Vec::new();
                for (item, node) in items {
                    ops.push(ReadOp::Children { path: dir(*item) });
                    if let Some(node) = node {
                        ops.push(ReadOp::Data { path: format!("{}/{node}", dir(*item)) });
                    }
                }
                match self.zk.multi_read(s, &ops) {
                    Ok(results) => {
                        let mut results = results.into_iter();
                        let mut listings = Vec::new();
                        for (_, node) in items {
                            let children = match results.next() {
                                Some(ReadResult::Children(children)) => Ok(children),
                                Some(ReadResult::Error(e)) => Err(err(e)),
                                _ => Err(ReqError::Transient),
                            };
                            let czxid = match node.as_ref().and_then(|_| results.next()) {
                                Some(ReadResult::Data(_, stat)) => stat.czxid,
                                _ => 0,
                            };
                            listings.push(children.map(|c| (c, czxid)));
                        }
                        Reply::Listed(Ok(listings))
                    }
                    Err(e) => Reply::Listed(Err(err(e))),
                }
            }
            Op::Watch { item, node } => match self.zk.get_data(s, &format!("{}/{node}", dir(*item)), true) {
                Ok((_, _, Some(watch))) => {
                    self.members[index].watches.insert(watch, WatchFor::Lock(id));
                    return None;
                }
                Ok(_) | Err(ZkErr::NoNode) => Reply::Changed(Ok(())),
                Err(e) => Reply::Changed(Err(err(e))),
            },
            Op::Release { nodes, keep, .. } => {
                if !self.zk.is_alive(s) {
                    return Some(Reply::Released(Err(Error::SessionLost {
                        state: zookeeper_client::SessionState::Expired,
                    })));
                }
                for contender in nodes {
                    let dir = dir(contender.item);
                    let node = contender
                        .node
                        .clone()
                        .or_else(|| self.zk.children_of(&dir).into_iter().find(|c| c.starts_with(&contender.prefix)));
                    if let Some(node) = node {
                        let _ = self.zk.delete(s, &format!("{dir}/{node}"));
                    }
                }
                let kept: BTreeSet<String> =
                    keep.iter().map(|(item, prefix)| format!("{}/{prefix}", dir(*item))).collect();
                for path in self.zk.ephemerals(s, LOCKS) {
                    if let Some(seq) = crate::decision::sequence(&path)
                        && path.starts_with(&format!("{LOCKS}/"))
                        && !kept.contains(&path[..path.len() - seq.len()])
                    {
                        let _ = self.zk.delete(s, &path);
                    }
                }
                Reply::Released(Ok(()))
            }
            Op::Verify(nodes) => {
                let mut ours = true;
                for (item, node) in nodes {
                    match self.zk.get_data(s, &format!("{}/{node}", dir(*item)), false) {
                        Ok((_, stat, _)) if stat.ephemeral_owner == s => {}
                        Err(ZkErr::SessionExpired) => {
                            return Some(Reply::Verified(Err(Error::SessionLost {
                                state: zookeeper_client::SessionState::Expired,
                            })));
                        }
                        _ => ours = false,
                    }
                }
                Reply::Verified(Ok(ours))
            }
            Op::Leave => {
                let node = format!("{PARTY}/{}", self.members[index].party_node);
                let _ = self.zk.delete(s, &node);
                Reply::Left
            }
            Op::ReadSet => match self.zk.children(s, ITEMS, true) {
                Ok((_, watch)) => {
                    if let Some(watch) = watch {
                        self.members[index].watches.insert(watch, WatchFor::Set);
                    }
                    let read =
                        (!self.set_updating).then(|| SetRead { items: self.set_children(), version: self.set_version });
                    Reply::Set(Ok(read))
                }
                Err(e) => Reply::Set(Err(err(e))),
            },
            Op::WatchHeld { item, node } => match self.zk.get_data(s, &format!("{}/{node}", dir(*item)), true) {
                Ok((_, _, Some(watch))) => {
                    self.members[index].watches.insert(watch, WatchFor::Held(id));
                    return None;
                }
                Ok(_) | Err(ZkErr::NoNode) => Reply::HeldGone(Ok(())),
                Err(e) => Reply::HeldGone(Err(err(e))),
            },
            Op::RemoveDirs(items) => {
                for &item in items {
                    // Best effort, as the driver: a directory in use stays.
                    let _ = self.zk.delete(s, &dir(item));
                }
                Reply::DirsRemoved
            }
        })
    }

    /// Routes fired watches to their members (held back while a member is disconnected).
    fn fire_watches(&mut self) {
        for fired in self.zk.take_fired() {
            let Some(index) = self.members.iter().position(|m| m.session == fired.session && !m.gone) else {
                continue;
            };
            let Some(target) = self.members[index].watches.remove(&fired.watch) else { continue };
            let event = match target {
                WatchFor::Party => Event::PartyChanged,
                WatchFor::Set => Event::SetChanged,
                WatchFor::Held(id) => {
                    // Lock nodes' data never changes here: a held node's watch fires when it is deleted.
                    self.members[index].unanswered.remove(&id);
                    self.members[index].watch_fired.insert(id);
                    Event::Reply(id, Reply::HeldGone(Ok(())))
                }
                WatchFor::Lock(id) => {
                    self.members[index].unanswered.remove(&id);
                    self.members[index].watch_fired.insert(id);
                    Event::Reply(id, Reply::Changed(Ok(())))
                }
            };
            if self.members[index].up {
                self.deliver(index, event);
            } else {
                self.members[index].stashed.push(event);
            }
        }
    }

    // ---- Faults -----------------------------------------------------------------------------------------------

    /// Cuts a member's connection: requests the server took whose replies are still out fail with a lost
    /// connection (they may or may not have been applied), and the member notices after `detect`.
    fn cut(&mut self, index: usize, detect: Duration) {
        let m = &mut self.members[index];
        if m.gone || !m.up {
            return;
        }
        m.up = false;
        m.link += 1;
        m.serving = false;
        let lost: Vec<(ReqId, Op)> = std::mem::take(&mut m.unanswered).into_iter().collect();
        let link = m.link;
        let session = m.session;
        self.note(format!("cut m{index} (session {session})"));
        // Requests the server has not taken yet: a prefix of them was already on the wire and fails with the lost
        // connection without having been applied; the rest wait in the client for the reconnection.
        let queued = std::mem::take(&mut self.members[index].queue);
        let on_the_wire = self.rng.below(queued.len() as u64 + 1) as usize;
        let mut lost = lost;
        for (k, (id, op)) in queued.into_iter().enumerate() {
            let retried = matches!(op, Op::Release { .. } | Op::Verify(_) | Op::Join | Op::Leave);
            if k < on_the_wire && !retried {
                lost.push((id, op));
            } else {
                self.members[index].queue.push_back((id, op));
            }
        }
        let mut failed = vec![Event::Suspended];
        for (id, op) in lost {
            let failure = match op {
                Op::ReadParty => Some(Reply::Party(Err(ReqError::Transient))),
                Op::MakeDirs(_) => Some(Reply::DirsMade(Err(ReqError::Transient))),
                Op::Create { .. } => Some(Reply::Created(Err(ReqError::Transient))),
                Op::List(_) => Some(Reply::Listed(Err(ReqError::Transient))),
                Op::ReadSet => Some(Reply::Set(Err(ReqError::Transient))),
                // Best effort: a lost removal is simply not done.
                Op::RemoveDirs(_) => Some(Reply::DirsRemoved),
                Op::Watch { .. } | Op::WatchHeld { .. } => {
                    // Registered watches survive (the client sets them again on reconnection); a registration whose
                    // reply was lost is answered with the lost connection.
                    let registered = self.members[index]
                        .watches
                        .values()
                        .any(|w| matches!(w, WatchFor::Lock(r) | WatchFor::Held(r) if *r == id));
                    if registered {
                        self.members[index].unanswered.insert(id, op);
                        None
                    } else if matches!(op, Op::Watch { .. }) {
                        Some(Reply::Changed(Err(ReqError::Transient)))
                    } else {
                        Some(Reply::HeldGone(Err(ReqError::Transient)))
                    }
                }
                // The driver retries these inside the request until the session ends: run them again.
                op @ (Op::Release { .. } | Op::Verify(_) | Op::Join | Op::Leave) => {
                    self.members[index].queue.push_front((id, op));
                    None
                }
            };
            if let Some(reply) = failure {
                failed.push(Event::Reply(id, reply));
            }
        }
        // The notifications travel over no connection: deliver them directly after `detect`, in order.
        let m = &mut self.members[index];
        m.last_delivery = self.now + detect;
        for (k, event) in failed.into_iter().enumerate() {
            let delay = detect + Duration::from_micros(k as u64);
            self.seq += 1;
            self.events.push(Some(Ev::Deliver { member: index, link, event: Box::new(SimEvent::Core(event)) }));
            self.queue.push(Reverse((self.now + delay, self.seq, self.events.len() - 1)));
        }
        let session_timeout = self.plan.session;
        self.at(session_timeout, Ev::MaybeExpire { member: index, link });
    }

    fn reconnect(&mut self, index: usize, link: u64) {
        let m = &self.members[index];
        if m.gone || m.up || m.link != link || self.frozen {
            return;
        }
        if self.now <= m.last_delivery {
            // The client has not yet noticed the cut (its notifications are still on the way): reconnect after.
            let delay = m.last_delivery - self.now + Duration::from_millis(1);
            self.at(delay, Ev::Reconnect { member: index, link });
            return;
        }
        let session = m.session;
        if !self.zk.is_alive(session) {
            self.note(format!("m{index} reconnects: session {session} expired"));
            let lost = Error::SessionLost { state: zookeeper_client::SessionState::Expired };
            self.members[index].up = true;
            self.members[index].link += 1;
            self.deliver(index, Event::SessionLost(lost));
            return;
        }
        self.note(format!("m{index} reconnects"));
        let m = &mut self.members[index];
        m.up = true;
        m.link += 1;
        let stashed = std::mem::take(&mut m.stashed);
        self.deliver(index, Event::Connected);
        for event in stashed {
            self.deliver(index, event);
        }
        self.serve_soon(index);
    }

    fn live(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|&i| !self.members[i].gone).collect()
    }

    fn fault(&mut self) {
        let live = self.live();
        let session = self.plan.session;
        // zookeeper-client gives up on a silent connection after 2/5 of the session timeout (the Java client: 2/3).
        let read_timeout = session * 2 / 5;
        let pick = |rng: &mut Rng| live.get(rng.below(live.len() as u64) as usize).copied();
        let kind = self.rng.below(9);
        let mut fault_lasts = Duration::ZERO;
        match kind {
            // A short cut: the client notices at once (the connection resets) and comes back on the same session.
            0 | 1 => {
                if let Some(i) = pick(&mut self.rng) {
                    let outage = self.rng.millis(50, 1500);
                    let link = self.members[i].link + 1;
                    let detect = self.rng.millis(0, 20);
                    self.cut(i, detect);
                    self.at(outage, Ev::Reconnect { member: i, link });
                    fault_lasts = outage;
                }
            }
            // A server stall longer than the read timeout: every client suspends, the sessions survive.
            2 | 3 => fault_lasts = self.stall(read_timeout),
            // A join, then a stall in the middle of the rebalance it started.
            4 => {
                self.join();
                let gap = self.rng.millis(300, 800);
                self.at(gap, Ev::Stall);
                fault_lasts = gap + session;
            }
            // A crash: the process dies; its session expires a session timeout later.
            5 => {
                if let Some(i) = pick(&mut self.rng) {
                    let m = &mut self.members[i];
                    m.gone = true;
                    m.core = None;
                    m.up = false;
                    m.link += 1;
                    let link = m.link;
                    self.note(format!("crash m{i}"));
                    self.vacate(i);
                    self.at(session, Ev::MaybeExpire { member: i, link });
                    fault_lasts = session;
                }
            }
            // A graceful leave.
            6 => {
                if live.len() > 1
                    && let Some(i) = pick(&mut self.rng)
                {
                    self.note(format!("m{i} finishes"));
                    self.members[i].next_ack += 1;
                    let ack = self.members[i].next_ack;
                    self.feed(i, Event::Finish(Some(ack)));
                }
            }
            // A cut longer than the session: the session expires and the member fails (and is replaced).
            7 => {
                if let Some(i) = pick(&mut self.rng) {
                    let link = self.members[i].link + 1;
                    let detect = self.rng.millis(0, 20);
                    self.cut(i, detect);
                    let outage = session + self.rng.millis(200, 1000);
                    self.at(outage, Ev::Reconnect { member: i, link });
                    fault_lasts = outage;
                }
            }
            // An admin changes the shared set (without one: a join).
            _ if self.plan.shared_set => self.change_set(),
            // A join.
            _ => {
                self.join();
            }
        }
        if self.plan.shared_set && self.rng.below(2) == 0 {
            self.change_set();
        }
        if self.plan.operator_deletes && self.rng.below(3) == 0 {
            self.operator_deletes_a_held_node();
        }
        self.faults_left -= 1;
        self.quiet_since = self.quiet_since.max(self.now + fault_lasts);
        if self.faults_left > 0 {
            let gap = self.rng.millis(100, 2500);
            self.at(gap, Ev::Fault);
        }
    }

    /// Stops the server for 0.7-0.9 of the session timeout: past the clients' read timeout, so they suspend.
    fn stall(&mut self, read_timeout: Duration) -> Duration {
        let session = self.plan.session;
        let length = session.mul_f64(0.7 + self.rng.below(200) as f64 / 1000.0);
        self.note(format!("server stalls for {length:?}"));
        self.frozen = true;
        self.frozen_until = self.frozen_until.max(self.now + length);
        for i in self.live() {
            if self.members[i].up {
                let detect = read_timeout + self.rng.millis(0, 50);
                // The cut is decided now; the member notices after the read timeout.
                self.cut(i, detect.min(length));
            }
        }
        self.at(length, Ev::Thaw);
        length
    }

    fn thaw(&mut self) {
        if self.now < self.frozen_until {
            return;
        }
        self.frozen = false;
        self.note("server resumes".into());
        for i in self.live() {
            if !self.members[i].up {
                let link = self.members[i].link;
                let delay = self.rng.millis(10, 300);
                self.at(delay, Ev::Reconnect { member: i, link });
            }
            self.serve_soon(i);
        }
    }

    fn maybe_expire(&mut self, index: usize, link: u64) {
        let m = &self.members[index];
        if m.link != link || m.up && !m.gone {
            return;
        }
        if self.frozen {
            // A stalled server expires nothing; look again after it resumes.
            let session = self.plan.session;
            self.at(session / 4, Ev::MaybeExpire { member: index, link });
            return;
        }
        let session = m.session;
        if self.zk.is_alive(session) {
            self.note(format!("session {session} of m{index} expires"));
            self.zk.expire(session);
            self.fire_watches();
        }
    }

    /// Replaces members whose core ended (a failed member is restarted by its orchestrator).
    fn replace_failed(&mut self) {
        while self.live().len() < self.plan.members.max(1) {
            if !self.plan.static_membership {
                self.join();
                continue;
            }
            // The restarted process takes its old identifier once nothing carries it (build() waits for that).
            let Some(slot) = self.vacant.iter().copied().find(|&slot| self.namesake(&format!("s{slot}")).is_none())
            else {
                return;
            };
            self.vacant.remove(&slot);
            self.join_as(slot);
        }
    }

    // ---- The shared set ---------------------------------------------------------------------------------------

    /// The children of the set's node, as items.
    fn set_children(&self) -> Vec<Item> {
        let mut items: Vec<Item> =
            self.zk.children_of(ITEMS).iter().filter_map(|name| name.parse::<i64>().ok()).map(Item::from).collect();
        items.sort();
        items
    }

    /// An admin adds new items, re-adds removed ones, or removes some (never all), in one step or two.
    fn change_set(&mut self) {
        if self.set_updating {
            return;
        }
        let current: Vec<i64> =
            self.items.iter().filter_map(|item| if let Item::Int(v) = item { Some(*v) } else { None }).collect();
        let count = 1 + self.rng.below(3) as usize;
        let (mut adds, mut removes) = (Vec::new(), Vec::new());
        match self.rng.below(3) {
            0 | 1 if current.len() > count => {
                for _ in 0..count {
                    let pick = current[self.rng.below(current.len() as u64) as usize];
                    if !removes.contains(&pick) {
                        removes.push(pick);
                    }
                }
            }
            _ => {
                for _ in 0..count {
                    // A new value, or one removed earlier (it comes back under its old index in older members).
                    let value = if self.rng.below(3) == 0 {
                        self.rng.below(self.next_value as u64) as i64
                    } else {
                        self.next_value
                    };
                    if value == self.next_value {
                        self.next_value += 1;
                    }
                    if !current.contains(&value) && !adds.contains(&value) {
                        adds.push(value);
                    }
                }
            }
        }
        let mut after: BTreeSet<i64> = current.iter().copied().collect();
        after.extend(adds.iter().copied());
        for value in &removes {
            after.remove(value);
        }
        self.items = after.into_iter().map(Item::from).collect();
        self.set_changes += 1;
        self.note(format!("admin: set version {} adds {adds:?} removes {removes:?}", self.set_version + 1));
        if self.rng.below(3) == 0 && adds.len() + removes.len() > 1 {
            // Two steps: the first marks the set updating (members keep theirs), the second completes it.
            let split = adds.len() / 2;
            self.set_updating = true;
            self.write_set(&adds[..split], &[]);
            let (adds, removes) = (adds[split..].to_vec(), removes);
            let gap = self.rng.millis(5, 300);
            self.at(gap, Ev::FinishUpdate { adds, removes });
        } else {
            self.write_set(&adds, &removes);
        }
    }

    /// One atomic step of an update: the children and the version change together.
    fn write_set(&mut self, adds: &[i64], removes: &[i64]) {
        let admin = self.zk.open_session();
        let mut ops: Vec<WriteOp> = removes.iter().map(|v| WriteOp::Delete { path: format!("{ITEMS}/{v}") }).collect();
        ops.extend(adds.iter().map(|v| WriteOp::Create {
            path: format!("{ITEMS}/{v}"),
            data: Vec::new(),
            mode: Mode::Persistent,
        }));
        if let Err(e) = self.zk.multi_write(admin, &ops) {
            panic!("the admin's update must apply: {e:?}");
        }
        self.zk.expire(admin);
        self.set_version += 1;
        self.fire_watches();
    }

    /// An operator deletes one listed item's lock node by hand (`tests/faults.rs` does the same on a real server).
    fn operator_deletes_a_held_node(&mut self) {
        let mut held = Vec::new();
        for index in self.live() {
            let Some(core) = self.members[index].core.as_ref() else { continue };
            let values = values_of(core);
            for &item in core.listed() {
                if let Some(node) = core.held_node(item) {
                    held.push(format!("{LOCKS}/{}/{node}", values[item]));
                }
            }
        }
        if held.is_empty() {
            return;
        }
        let path = held.swap_remove(self.rng.below(held.len() as u64) as usize);
        let operator = self.zk.open_session();
        if self.zk.delete(operator, &path).is_ok() {
            self.note(format!("operator deletes {path}"));
            self.operator_deleted.insert(path, self.now);
        }
        self.zk.expire(operator);
        self.fire_watches();
    }

    /// The party node whose member name is `name`, if any.
    fn namesake(&self, name: &str) -> Option<String> {
        self.zk.children_of(PARTY).into_iter().find(|child| crate::party::member_name(child) == Some(name))
    }

    /// A member is gone (crashed, or its core stopped): under static membership its identifier is free for a
    /// replacement.
    fn vacate(&mut self, index: usize) {
        if self.plan.static_membership {
            self.vacant.insert(self.members[index].slot);
        }
    }

    // ---- The run ----------------------------------------------------------------------------------------------

    fn run(&mut self) -> Outcome {
        let bound = self.plan.session + self.plan.time_boundary * 3 + Duration::from_secs(5);
        while let Some(Reverse((when, _, slot))) = self.queue.pop() {
            let Some(ev) = self.events[slot].take() else { continue };
            self.now = self.now.max(when);
            self.steps += 1;
            if self.steps > MAX_STEPS {
                let why = self.converged().err().unwrap_or_default();
                return self.outcome(Some(format!("more than {MAX_STEPS} steps (a livelock?); last: {why}")));
            }
            self.step(ev);
            if let Err(violation) = self.check_safety() {
                return self.outcome(Some(violation));
            }
            if self.faults_left == 0 && self.now >= self.quiet_since {
                match self.converged() {
                    Ok(()) => {
                        let recovery = self.now - self.quiet_since;
                        return self.outcome(None).with_recovery(recovery);
                    }
                    Err(why) if self.now > self.quiet_since + bound => {
                        return self.outcome(Some(format!("no recovery within {bound:?} after the last fault: {why}")));
                    }
                    Err(_) => {}
                }
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
            set_changes: self.set_changes,
            recovery: Duration::ZERO,
            violation,
        }
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Serve(i) => self.serve(i),
            Ev::Deliver { member, link, event } => {
                if self.members[member].gone {
                    return;
                }
                if self.members[member].link != link {
                    // Lost with its connection. A watch event is not lost for good: the client sets its watches
                    // again on reconnection and the server fires those whose node changed meanwhile.
                    let SimEvent::Core(event) = *event;
                    let is_watch_event = match &event {
                        Event::PartyChanged | Event::SetChanged => true,
                        Event::Reply(id, Reply::Changed(Ok(())) | Reply::HeldGone(Ok(()))) => {
                            self.members[member].watch_fired.contains(id)
                        }
                        _ => false,
                    };
                    if is_watch_event {
                        if self.members[member].up {
                            self.deliver(member, event);
                        } else {
                            self.members[member].stashed.push(event);
                        }
                    }
                    return;
                }
                let SimEvent::Core(event) = *event;
                match &event {
                    Event::Reply(id, reply) => {
                        if std::env::var_os("SIM_TRACE").is_some() {
                            self.note(format!("m{member} <- #{id} {reply:?}"));
                        }
                        self.members[member].unanswered.remove(id);
                    }
                    other => self.note(format!("m{member} <- {other:?}")),
                }
                self.feed(member, event);
            }
            Ev::Timer(i) => {
                let m = &mut self.members[i];
                if m.timer.is_some_and(|t| t <= self.now) {
                    m.timer = None;
                }
                let now = self.instant();
                if let Some(core) = self.members[i].core.as_mut()
                    && core.poll_timeout().is_some_and(|t| t <= now)
                {
                    core.handle_timeout(now);
                }
                self.pump(i);
            }
            Ev::Worker(i) => {
                self.members[i].worker_pending = false;
                let in_release = self.members[i].shown.as_ref().is_some_and(|p| p.state == PartitionState::Release);
                if in_release && !self.members[i].gone {
                    self.members[i].next_ack += 1;
                    let ack = self.members[i].next_ack;
                    // A suspension's Release may be answered by the session surviving, with nothing released.
                    if let Some(shown) = self.members[i].shown.as_ref().filter(|p| !p.suspended) {
                        let revoked = shown.revoked.clone();
                        self.members[i].owed.insert(ack, revoked);
                    }
                    self.feed(i, Event::ReleaseSet(ack));
                }
            }
            Ev::MaybeExpire { member, link } => self.maybe_expire(member, link),
            Ev::Reconnect { member, link } => self.reconnect(member, link),
            Ev::Thaw => self.thaw(),
            Ev::Stall => {
                let read_timeout = self.plan.session * 2 / 5;
                let lasts = self.stall(read_timeout);
                self.quiet_since = self.quiet_since.max(self.now + lasts);
            }
            Ev::Fault => self.fault(),
            Ev::FinishUpdate { adds, removes } => {
                self.set_updating = false;
                self.write_set(&adds, &removes);
            }
        }
        self.replace_failed();
    }

    // ---- Invariants -------------------------------------------------------------------------------------------

    /// Whether a member's session has a lock node (held or waiting) for `item` (the member's index).
    fn holds_a_node(&self, index: usize, item: usize) -> bool {
        let value = self.members[index].core.as_ref().map_or(i64::MIN, |core| values_of(core)[item]);
        let dir = format!("{LOCKS}/{value}");
        let session = self.members[index].session;
        self.zk
            .children_of(&dir)
            .iter()
            .any(|child| self.zk.exists(&format!("{dir}/{child}")).is_some_and(|stat| stat.ephemeral_owner == session))
    }

    /// The values of the items a member lists.
    fn listed(&self, index: usize) -> BTreeSet<i64> {
        let Some(core) = self.members[index].core.as_ref() else { return BTreeSet::new() };
        let values = values_of(core);
        core.listed().iter().map(|&item| values[item]).collect()
    }

    /// No item listed by two live sessions; every listed item backed by the member's lowest contender node.
    fn check_safety(&mut self) -> Result<(), String> {
        if let Some(violation) = self.ack_violation.take() {
            return Err(violation);
        }
        let zxid = self.zk.zxid();
        if zxid == self.checked_zxid {
            return Ok(());
        }
        self.checked_zxid = zxid;
        let mut owner: BTreeMap<i64, usize> = BTreeMap::new();
        for index in 0..self.members.len() {
            let Some(core) = self.members[index].core.as_ref() else { continue };
            let listed = core.listed();
            if listed.is_empty() {
                continue;
            }
            let session = self.members[index].session;
            let name = core.me().to_owned();
            if !self.zk.is_alive(session) {
                return Err(format!("{name} lists {listed:?} but its session {session} has expired"));
            }
            let values = values_of(core);
            for &index_of_item in listed {
                let item = values[index_of_item];
                if let Some(other) = owner.insert(item, index) {
                    return Err(format!("item {item} listed by m{other} and m{index}, both sessions alive"));
                }
                let dir = format!("{LOCKS}/{item}");
                if let Some(node) = core.held_node(index_of_item)
                    && let Some(&at) = self.operator_deleted.get(&format!("{dir}/{node}"))
                {
                    // The node is gone: the member may not know yet, for a bounded time only.
                    if self.now > at + OPERATOR_WINDOW {
                        return Err(format!(
                            "{name} still lists item {item} {:?} after an operator deleted its lock node",
                            self.now - at
                        ));
                    }
                    owner.remove(&item);
                    continue;
                }
                let Some(node) = core.held_node(index_of_item) else {
                    return Err(format!("{name} lists item {item} without a held node"));
                };
                let children = self.zk.children_of(&dir);
                let lowest = children
                    .iter()
                    .filter_map(|c| crate::decision::sequence(c).map(|seq| (seq.to_owned(), c.clone())))
                    .min()
                    .map(|(_, c)| c);
                if lowest.as_deref() != Some(node) {
                    return Err(format!(
                        "{name} lists item {item} but its node {node} is not the lowest contender ({children:?})"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every live member `Acquired` over the real party, listings a disjoint cover, no stray lock node.
    fn converged(&self) -> Result<(), String> {
        let party: Vec<String> = crate::party::members(&self.zk.children_of(PARTY)).0;
        let mut covered = BTreeSet::new();
        for index in self.live() {
            let m = &self.members[index];
            let Some(core) = m.core.as_ref() else { continue };
            if core.state() != PartitionState::Acquired {
                return Err(format!("{} is {}", core.me(), core.state()));
            }
            let members = m.shown.as_ref().map(|p| p.members.to_vec()).unwrap_or_default();
            if members != party {
                return Err(format!("{} allocated for {members:?}, the party is {party:?}", core.me()));
            }
            for item in self.listed(index) {
                if !covered.insert(item) {
                    return Err(format!("item {item} listed twice"));
                }
            }
            // Hygiene: every lock node of this session is the held node of a listed item.
            let values = values_of(core);
            let held: BTreeSet<String> = core
                .listed()
                .iter()
                .filter_map(|&item| Some(format!("{LOCKS}/{}/{}", values[item], core.held_node(item)?)))
                .collect();
            for path in self.zk.ephemerals(m.session, LOCKS) {
                if !held.contains(&path) {
                    return Err(format!("{} has a stray lock node {path}", core.me()));
                }
            }
        }
        let set: BTreeSet<i64> =
            self.items.iter().filter_map(|item| if let Item::Int(v) = item { Some(*v) } else { None }).collect();
        if covered != set {
            let missing: Vec<&i64> = set.difference(&covered).collect();
            let extra: Vec<&i64> = covered.difference(&set).collect();
            return Err(format!(
                "listings cover {} of {} items: missing {missing:?}, not in the set {extra:?}",
                covered.len(),
                set.len()
            ));
        }
        if self.set_updating {
            return Err("an update of the set is under way".into());
        }
        // No lock node of a dead session may linger (the model deletes them on expiry; this checks the model too).
        Ok(())
    }
}

impl Outcome {
    fn with_recovery(mut self, recovery: Duration) -> Self {
        self.recovery = recovery;
        self
    }
}

#[cfg(test)]
mod tests;
