//! The partitioner's decisions, without I/O: one state machine for every mode.
//!
//! A sans-IO core in quinn-proto's shape. The driver (or the deterministic simulation) feeds it what happened
//! ([`Event`]: the session's state, a party change, a request's [`Reply`], a command from a handle) and the time, then
//! performs the [`Action`]s it asks for (ZooKeeper requests, publications, acknowledgements) and sleeps until
//! [`Core::poll_timeout`]. There is no ZooKeeper client, no Tokio and no clock in here, so every decision can be
//! replayed from a seed.
//!
//! # The decisions, in one table
//!
//! `S` is the published state, `L` the items listed as processable, `H` the items whose lock we hold, `T` our share
//! under the latest stable party (unknown while the party is settling).
//!
//! | when | Eager | Incremental |
//! |---|---|---|
//! | the party changes, `S` = Acquired | `Release`, every item revoked | stay `Acquired`, keep `L`; start the rebalance clock |
//! | the party changes, `S` = Allocating | give up every lock, wait for stability | give up the contenders not yet held |
//! | `T` known, `S` = Allocating | take `T`; all held: `Acquired` | listed items outside `T`: `Release` revoking them; else take `T`; all held: `Acquired` |
//! | `T` known, `S` = Acquired | — | as above (gains published as `Allocating` with `L` kept) |
//! | `release_set()` | `Allocating`, then delete every lock, wait a full `time_boundary` | revoked items only (or everything, if not asked) |
//!
//! | session | Standard | SessionAware |
//! |---|---|---|
//! | suspended (or a reconnect the client folded into one change) while processing | `Release`, every item revoked | `Release` with `suspended`, nothing listed |
//! | suspended while allocating, nothing listed | `Release` (kazoo) | carry on |
//! | connected again after a suspension | — | verify every held node, resume the previous state or release everything |
//! | lost | `Failure` | `Failure` |
//!
//! A quarter of `time_boundary` into a quiet period, the partition function may work ahead on the party as it
//! stands ([`PartitionFn::prepare`]: `Rendezvous` ranks the items then, while every member waits); the assignment
//! is still decided only once the period has lasted `time_boundary`.
//!
//! The inputs of the assignment are the party and the item set. With the shared set in ZooKeeper, a read that shows
//! a different set is a change exactly like a party change (every "the party changes" row above applies, debounced by
//! the same `time_boundary`); a set marked `updating` is not used, the set in force stays. Items keep their index
//! for the life of the core ([`catalogue`]), so a removed item's lock is released under the index it was taken with;
//! once released, its directory is deleted (and the first member of the party deletes those of removed items nobody
//! held).
//!
//! Each held lock node is watched, from `time_boundary` after the lock work last sent or heard anything (so that a
//! rebalance's watches do not queue in front of the party's creates). If it is deleted while still ours (by someone
//! else: we stop listing an item before deleting its lock ourselves), the item leaves the listing once the watch
//! fires or its registration finds no node: under Eager as `Release` revoking everything (as any loss), under
//! Incremental alone; it is then contended for again. During a suspension such a loss makes the verification fail.
//!
//! Every member announces its set (or "shared") and a fingerprint of its partition function in its party node; a
//! party read that shows another announcement is published at once as a disagreement (a stall explained), without
//! changing any decision.
//!
//! `max_allocation_time` runs from entering `Allocating` (or, incremental, from the party change) to `Acquired`,
//! paused while `Release` waits for the worker's `release_set()`; when it runs out: `Failure`.
//!
//! Safety rules that hold in every row: an item is listed only while its lock is held and the connection is up; an
//! item leaves the listing before its lock node is deleted (a publication is queued before the delete); a create
//! whose reply is pending is never released before the reply comes (its node may exist); nothing new is contended
//! while a release is in flight. The lock of each item goes through its own small machine ([`Lock`]): create, list,
//! watch the predecessor, held, with batching and an in-flight window.

mod catalogue;
mod congestion;
mod debounce;
mod protocol;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use catalogue::Catalogue;
pub(crate) use congestion::Batch;
use congestion::Window;
use debounce::Debounce;
pub(crate) use debounce::JitterParties;

pub(crate) use protocol::{
    AckId, Action, Cause, Code, Contender, Event, Failed, Op, PartyRead, Publication, Reason, Reply, ReqError, ReqId,
    SessionEnd, SetInForce,
};

use crate::agreement::Agreement;
use crate::item_set::layout::{self as set_layout, SetView, Unfinished};
use crate::layout::{self, Position, position, sequence};
use crate::partition_fn::guarded;
use crate::sabotage::{Sabotage, breaks};
use crate::{Disagreement, FencingToken, Item, PartitionFn, PartitionState, Rebalance, SessionPolicy};

/// Everything the core decides from, fixed at build time.
pub(crate) struct CoreConfig {
    /// The whole set, sorted and validated (with a shared set: the set as read at build time).
    pub items: Vec<Item>,
    /// The shared set's version when `items` was read; `None` for a fixed set.
    pub shared_set: Option<u64>,
    /// What this member announces in its party node (compared with every other member's).
    pub agreement: Agreement,
    /// This member's identifier (its party node's data starts with it).
    pub identifier: String,
    /// Our party node's name (under `<path>/party`).
    pub party_node: String,
    pub partition_fn: Box<dyn PartitionFn>,
    pub time_boundary: Duration,
    /// The pause before retrying a request lost with the connection.
    pub retry_delay: Duration,
    pub max_allocation_time: Option<Duration>,
    pub session_policy: SessionPolicy,
    pub rebalance: Rebalance,
    /// At most this many lock operations in flight (waits on a watch do not count); the window adapts to the
    /// server's latency below it ([`congestion`]).
    pub window: usize,
    /// Operations per `multi` request, by the set's size.
    pub batch: Batch,
    /// The party sizes from which the debounce's jitter starts and is full.
    pub jitter_parties: JitterParties,
    /// Whether the items' lock directories are taken to exist at start: `false` when `<path>/locks` had no child
    /// when the member was built (a fresh path), so that the first creates do not each fail with `NoNode` first.
    pub lock_dirs_exist: bool,
}

/// One item's lock, as far as we know.
#[derive(Debug, Clone)]
struct Lock {
    /// `<32 hex>__lock__`: ours alone, so it finds our node even when a create's reply was lost.
    prefix: String,
    /// Our node's name once known.
    node: Option<String>,
    /// Whether a create was ever sent (if not, there is nothing to delete).
    created: bool,
    /// The node's creation zxid: the fencing token (0 until known).
    token: i64,
    step: Step,
    /// When the lock was last found held.
    held_at: Instant,
}

/// Where one item's lock is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Wanted, nothing in flight: waits for its directory to be known, or for room in the window.
    Queued,
    /// Its directory is being made.
    MakingDir(ReqId),
    /// A create is in flight: once its reply comes, the node may exist.
    Creating(ReqId),
    /// Its directory is being listed.
    Listing(ReqId),
    /// Watching the contender before ours.
    Waiting(ReqId),
    /// A request lost with the connection is retried at this time.
    Delayed(Instant, Retry),
    Held,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    List,
    MakeDir,
}

/// What a request in flight was for.
#[derive(Debug)]
enum Pending {
    Party,
    Join,
    /// Lock operations on these items (each counts once against the window).
    Locks(Vec<usize>),
    /// A watch (counts nothing against the window).
    Watch(usize),
    /// A release; the items listed left the set (their directories go once free).
    Release(Vec<usize>),
    Verify,
    Leave,
    ReadSet,
    RemoveDirs,
    /// The watch on a held lock node (the item, and the node: a later lock of the same item is another node).
    HeldWatch(usize, String),
    /// A read of these party nodes' announcements.
    Announcements(Vec<String>),
    /// Our announcement, written again.
    Announce,
    RecoverSet,
    WatchLease,
    /// Stray party nodes of ours, being deleted.
    Strays,
}

/// What the worker has been asked to do with `release_set()`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owed {
    /// Stop everything; `release_set()` gives up every lock.
    All,
    /// Stop these items; `release_set()` gives up exactly these.
    Revoked(BTreeSet<usize>),
}

/// What was published last.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shown {
    state: PartitionState,
    listed: BTreeSet<usize>,
    revoked: BTreeSet<usize>,
    suspended: bool,
    /// The party the assignment in force was computed from.
    members: Arc<[String]>,
    set: SetInForce,
    disagreements: Arc<[Disagreement]>,
}

/// A suspension under [`SessionPolicy::SessionAware`]: what to go back to if the session and our locks survive.
#[derive(Debug)]
struct Suspension {
    before: Shown,
    owed_before: Option<Owed>,
    verifying: Option<ReqId>,
    /// A held lock node was deleted meanwhile: the session's survival does not bring it back.
    lost: bool,
}

/// The partitioner is ending (failure or finish).
#[derive(Debug)]
struct Ending {
    cause: Cause,
    acks: Vec<AckId>,
    /// Whether ZooKeeper can still be asked anything (not after the session is lost).
    clean_up: bool,
    leaving: bool,
}

/// The decision core. See the module docs for the table.
pub(crate) struct Core {
    cfg: CoreConfig,
    now: Instant,
    /// This member's name in the party.
    me: Arc<str>,
    /// Random bits from the driver, so contender prefixes are ours alone yet the core stays deterministic.
    nonce: u128,
    prefixes_issued: u128,
    connected: bool,

    // The party.
    party_read: Option<ReqId>,
    /// The latest party read is newer than the last change notification.
    party_fresh: bool,
    latest_party: Vec<String>,
    /// The quiet period (by its start) for which the partition function last worked ahead.
    prepared: Option<Instant>,
    /// Our own party node was in the latest read.
    in_party: bool,
    debounce: Debounce,
    joining: Option<ReqId>,
    /// A party read, join or lock directory listing was lost with the connection: none is sent again before this.
    backoff_until: Option<Instant>,
    /// The members the assignment in force was computed from.
    members: Arc<[String]>,
    /// Our share under the latest stable party; `None` while the party settles.
    target: Option<BTreeSet<usize>>,
    /// Members announcing another set or function (as of the latest party read).
    disagreements: Arc<[Disagreement]>,
    /// The children of `<path>/party` as last read (member nodes and others).
    party_nodes: Vec<String>,
    /// What each party node announces, by node name, once read (`None`: nothing this crate understands, e.g. a
    /// kazoo member). A node's data changes only when its member follows another version of the shared set.
    announcements: BTreeMap<String, Option<Agreement>>,
    /// An announcement read in flight.
    announcements_read: Option<ReqId>,
    /// When every other member's announcement is to be read again: `time_boundary` after we followed a new version
    /// of the shared set (the others should have too by then), and again while one is on another version.
    announcements_due: Option<Instant>,

    // The items.
    catalogue: Catalogue,
    set_read: Option<ReqId>,
    /// The latest read of the shared set is newer than the last change notification.
    set_fresh: bool,
    /// The shared set's abandoned update this member is undoing or finishing, or whose writer's lease it watches
    /// (the party's first member does it), by change tag.
    set_recovery: Option<(String, ReqId)>,
    /// The update under way as of the latest read of the shared set: taken care of by whoever is the first member,
    /// also one that becomes first later.
    unfinished: Option<Unfinished>,
    /// After a recovery that failed (say, a member allowed to read the set but not to write it): when to read the
    /// set and try again (not at once: a failure that persists would have the member spin).
    recovery_retry_at: Option<Instant>,
    /// The set the assignment in force was computed from (indexes), and its change.
    assigned_set: Vec<usize>,
    set_in_force: SetInForce,

    // The locks.
    locks: BTreeMap<usize, Lock>,
    /// The items whose lock we hold (a subset of `locks`).
    held: BTreeSet<usize>,
    /// The items whose lock we want; the rest of `locks` is released.
    want: BTreeSet<usize>,
    /// Unwanted locks were left in place because a create was in flight: release them once the reply comes.
    unwanted_left: bool,
    /// `want` changed since the missing locks were last added (checked only then: `want` can be large).
    want_grew: bool,
    /// `want` is known to equal `target` (neither changed since they were compared).
    want_is_target: bool,
    /// Items waiting for a create (their directory known).
    queued: BTreeSet<usize>,
    /// Whether each item's lock directory is taken to exist. It is assumed, not listed: directories outlive
    /// their locks, so after a party's first allocation they all exist, and listing `<path>/locks` would send
    /// every member 100,000 names. A create that finds its directory missing (`NoNode`) makes it and retries. On a
    /// fresh path (no directory at all when the member was built) none is assumed: they are made first.
    dirs_known: Vec<bool>,
    /// The path had no lock directory when the member was built, and the member has not been `Acquired` since:
    /// directories are made before creates. Once acquired, every directory is assumed again (the other members
    /// made theirs meanwhile; a create's `NoNode` tells of one that is missing): left on, an eager rebalance would
    /// make every relocked item's directory again (measured: 100,000 `mkdir`s in a 100-member join).
    fresh_path: bool,
    /// Items waiting for their directory to be made.
    need_dirs: BTreeSet<usize>,
    delayed: BTreeSet<(Instant, usize)>,
    requests: HashMap<ReqId, Pending>,
    /// Lock operations in flight (each item of a `Pending::Locks` counts one), kept within `window`.
    in_flight: usize,
    /// When a lock request was last sent or answered: held-lock watches wait for `time_boundary` without one.
    lock_work_at: Instant,
    /// Held locks whose watch is not asked for yet (item → our node).
    unwatched: BTreeMap<usize, String>,
    /// When the oldest lock in `unwatched` was taken: its watch is asked for `2 × time_boundary` later at the latest.
    unwatched_since: Option<Instant>,
    window: Window,
    releases: HashMap<ReqId, Vec<AckId>>,

    // The worker.
    shown: Shown,
    owed: Option<Owed>,
    /// `release_set()` calls answered once nothing unwanted is left to release.
    release_acks: Vec<AckId>,
    /// `release_set()` calls made during a suspension, answered when it ends.
    suspended_acks: Vec<AckId>,
    suspension: Option<Suspension>,
    deadline: Option<Instant>,
    ending: Option<Ending>,
    stopped: bool,

    actions: VecDeque<Action>,
    next_id: u64,
}

impl Core {
    /// A core for member `me`, starting to allocate at `now`.
    pub fn new(mut cfg: CoreConfig, me: Arc<str>, nonce: u128, now: Instant) -> Self {
        let count = cfg.items.len();
        let shared = cfg.shared_set.is_some();
        let catalogue = Catalogue::new(std::mem::take(&mut cfg.items), cfg.shared_set);
        let deadline = cfg.max_allocation_time.map(|limit| now + limit);
        // The jitter's seed: the random bits the contender prefixes are made from.
        let debounce = Debounce::new(cfg.time_boundary, cfg.jitter_parties, now, (nonce >> 64) as u64 ^ nonce as u64);
        let window = Window::new(cfg.batch.small.min(cfg.batch.large), cfg.window);
        let dirs_exist = cfg.lock_dirs_exist;
        let mut core = Core {
            cfg,
            now,
            me,
            nonce,
            prefixes_issued: 0,
            connected: true,
            party_read: None,
            party_fresh: false,
            latest_party: Vec::new(),
            prepared: None,
            in_party: true,
            debounce,
            joining: None,
            backoff_until: None,
            members: Arc::from([]),
            target: None,
            disagreements: Arc::from([]),
            party_nodes: Vec::new(),
            announcements: BTreeMap::new(),
            announcements_read: None,
            announcements_due: None,
            set_recovery: None,
            unfinished: None,
            recovery_retry_at: None,
            assigned_set: catalogue.set().to_vec(),
            catalogue,
            set_read: None,
            set_fresh: !shared,
            set_in_force: SetInForce::default(),
            locks: BTreeMap::new(),
            held: BTreeSet::new(),
            want: BTreeSet::new(),
            unwanted_left: false,
            want_grew: false,
            want_is_target: false,
            queued: BTreeSet::new(),
            dirs_known: vec![dirs_exist; count],
            fresh_path: !dirs_exist,
            need_dirs: BTreeSet::new(),
            delayed: BTreeSet::new(),
            requests: HashMap::new(),
            in_flight: 0,
            lock_work_at: now,
            unwatched: BTreeMap::new(),
            unwatched_since: None,
            window,
            releases: HashMap::new(),
            shown: Shown {
                state: PartitionState::Allocating,
                listed: BTreeSet::new(),
                revoked: BTreeSet::new(),
                suspended: false,
                members: Arc::from([]),
                set: SetInForce::default(),
                disagreements: Arc::from([]),
            },
            owed: None,
            release_acks: Vec::new(),
            suspended_acks: Vec::new(),
            suspension: None,
            deadline,
            ending: None,
            stopped: false,
            actions: VecDeque::new(),
            next_id: 0,
        };
        core.decide();
        core
    }

    /// The next action to perform, if any. Perform them in order: a publication queued before a delete must be
    /// visible before the delete is sent.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`handle_timeout`](Core::handle_timeout) must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped || self.ending.is_some() {
            return None;
        }
        // The end of the quiet period, if it is still ahead: once passed, the next event decides (a deadline in the
        // past would have the driver spin).
        let settling = (self.target.is_none() && self.party_fresh && self.set_fresh && self.connected)
            .then(|| self.debounce.ready_at())
            .filter(|&at| at > self.now);
        let retry = self.delayed.first().map(|&(at, _)| at);
        let watches = self.held_watches_due().filter(|&at| at > self.now);
        let prepare = self.prepare_due().filter(|&at| at > self.now);
        let announcements = self.announcements_due.filter(|&at| at > self.now);
        let recovery = self.recovery_retry_at.filter(|&at| at > self.now);
        [settling, prepare, retry, watches, announcements, recovery, self.deadline, self.backoff_until]
            .into_iter()
            .flatten()
            .min()
    }

    /// The item with this index (every index in an [`Op`] or a [`Publication`] has one).
    pub fn item(&self, index: usize) -> &Item {
        self.catalogue.item(index)
    }

    /// How many items have an index (indexes run from 0 to this, excluded).
    pub fn item_count(&self) -> usize {
        self.catalogue.len()
    }

    /// How many items the set in force has (the set the member divides; for the metrics).
    pub fn set_len(&self) -> usize {
        self.catalogue.set().len()
    }

    /// Whether the set comes from ZooKeeper (only a shared set has a version).
    fn shared(&self) -> bool {
        self.catalogue.version().is_some()
    }

    /// `indexes` as items.
    pub fn items_of(&self, indexes: &[usize]) -> Arc<[Item]> {
        self.catalogue.items_of(indexes)
    }

    /// Whether the core has stopped (after its final [`Action::Stop`]).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Time passed: fire whatever is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        if self.ending.is_none() && self.deadline.is_some_and(|deadline| now >= deadline) {
            let limit = self.cfg.max_allocation_time.unwrap_or_default();
            self.fail(Cause::AllocationTimeout(limit));
        }
        let mut due = Vec::new();
        while let Some(&(at, item)) = self.delayed.first() {
            if at > now {
                break;
            }
            self.delayed.pop_first();
            due.push(item);
        }
        let (mut lists, mut dirs) = (Vec::new(), Vec::new());
        for item in due {
            match self.locks.get(&item).map(|lock| lock.step) {
                Some(Step::Delayed(_, Retry::List)) => lists.push(item),
                Some(Step::Delayed(_, Retry::MakeDir)) => dirs.push(item),
                _ => {}
            }
        }
        self.send_lists(lists);
        self.send_make_dirs(dirs);
        self.read_announcements_if_due();
        if self.recovery_retry_at.is_some_and(|at| at <= now) {
            self.recovery_retry_at = None;
            self.set_fresh = false;
        }
        self.decide();
    }

    /// Something happened at `now`.
    pub fn handle(&mut self, event: Event, now: Instant) {
        self.tick(now);
        if self.stopped {
            return;
        }
        match event {
            Event::Connected => self.on_connected(),
            Event::Suspended => self.on_suspended(),
            Event::SessionEnded(end) => {
                if let Some(ending) = &mut self.ending {
                    ending.clean_up = false;
                } else {
                    self.fail(Cause::SessionEnded(end));
                }
                self.connected = false;
            }
            Event::PartyChanged => {
                self.party_fresh = false;
                self.on_inputs_changed(Reason::PartyChanged);
            }
            // Only a read that shows a different set starts a new episode.
            Event::SetChanged => self.set_fresh = false,
            Event::Reply(id, reply) => self.on_reply(id, reply),
            Event::ReleaseSet(ack) => self.on_release_set(ack),
            Event::Finish(ack) => {
                let acks = ack.into_iter().collect();
                self.end(Cause::Finished, acks);
            }
        }
        self.decide();
    }

    fn tick(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if self.backoff_until.is_some_and(|until| self.now >= until) {
            self.backoff_until = None;
        }
    }

    fn back_off(&mut self) {
        self.backoff_until = Some(self.now + self.cfg.retry_delay);
    }

    fn request(&mut self, op: Op, pending: Pending) -> ReqId {
        self.next_id += 1;
        let id = self.next_id;
        if let Pending::Locks(items) = &pending {
            self.in_flight += items.len();
            self.window.sent(id, self.now);
            self.lock_work_at = self.now;
        }
        self.requests.insert(id, pending);
        self.actions.push_back(Action::Request(id, op));
        id
    }

    // ---- Session ----------------------------------------------------------------------------------------------

    fn on_suspended(&mut self) {
        self.window.restart();
        let was_connected = std::mem::replace(&mut self.connected, false);
        if self.ending.is_some() || !was_connected {
            return;
        }
        self.react_to_suspension();
    }

    fn on_connected(&mut self) {
        let was_connected = std::mem::replace(&mut self.connected, true);
        if self.ending.is_some() {
            return;
        }
        if was_connected {
            // The client folded a disconnection and a reconnection into one change: react as to both.
            self.react_to_suspension();
        }
        // Under SessionAware, decide() verifies the held nodes now that the connection is back.
    }

    /// The connection was suspended: nobody may rely on our locks until the session's fate is known.
    fn react_to_suspension(&mut self) {
        if breaks(Sabotage::UnnoticedSuspensionDuringRelease) && !self.releases.is_empty() {
            return;
        }
        let processing = !self.shown.listed.is_empty();
        match self.cfg.session_policy {
            SessionPolicy::Standard => {
                let active = matches!(self.shown.state, PartitionState::Acquired | PartitionState::Allocating);
                // kazoo releases on a suspension while allocating, but not on a reconnection (zookeeper-client keeps
                // its watches, and lock requests lost with the connection are redone).
                let reconnected = self.connected;
                if processing || self.shown.state == PartitionState::Acquired || (active && !reconnected) {
                    self.ask_release_all(Reason::ConnectionChanged);
                }
            }
            SessionPolicy::SessionAware => {
                if !processing && self.suspension.is_none() {
                    // Allocating with nothing listed: carry on; requests wait for the reconnection.
                    return;
                }
                if self.suspension.is_none() {
                    self.suspension = Some(Suspension {
                        before: self.shown.clone(),
                        owed_before: self.owed.take(),
                        verifying: None,
                        lost: false,
                    });
                } else if let Some(suspension) = &mut self.suspension {
                    // Suspended again while verifying: that verification no longer proves anything.
                    if let Some(id) = suspension.verifying.take() {
                        self.requests.remove(&id);
                    }
                }
                let revoked = self.held.clone();
                self.show(PartitionState::Release, BTreeSet::new(), revoked, true, None, Reason::ConnectionSuspended);
            }
        }
    }

    /// Publishes `Release` revoking everything; `release_set()` will give up every lock.
    fn ask_release_all(&mut self, reason: Reason) {
        self.owed = Some(Owed::All);
        // Waiting for the worker is not allocating: the clock starts again at release_set().
        self.deadline = None;
        let revoked = self.held.clone();
        self.show(PartitionState::Release, BTreeSet::new(), revoked, false, None, reason);
    }

    fn on_verified(&mut self, ours: bool) {
        let Some(suspension) = self.suspension.take() else { return };
        let ours = ours && !suspension.lost;
        let mut acks = std::mem::take(&mut self.suspended_acks).into_iter();
        if ours && breaks(Sabotage::ResumeAbandonsRebalance) {
            self.owed = None;
            self.target = Some(self.held.clone());
            self.want_is_target = false;
            let held = self.held.clone();
            self.show(PartitionState::Acquired, held, BTreeSet::new(), false, None, Reason::SessionSurvived);
            for ack in acks {
                self.actions.push_back(Action::Ack(ack, Ok(())));
            }
            return;
        }
        if ours {
            // Same session, same nodes: nobody else can hold our items. Resume where we were.
            self.owed = suspension.owed_before;
            let before = suspension.before;
            let listed: BTreeSet<usize> = before.listed.intersection(&self.held).copied().collect();
            self.show(before.state, listed, before.revoked, false, None, Reason::SessionSurvived);
            if self.owed.is_none() {
                // The worker's release_set() answered the suspension's Release alone: nothing to give up.
                for ack in acks.by_ref() {
                    self.actions.push_back(Action::Ack(ack, Ok(())));
                }
            }
            if self.target.is_none() && self.shown.state == PartitionState::Acquired {
                // The party changed while we were suspended.
                match self.cfg.rebalance {
                    Rebalance::Eager => self.ask_release_all(Reason::PartyChanged),
                    Rebalance::Incremental if self.deadline.is_none() => {
                        self.deadline = self.cfg.max_allocation_time.map(|limit| self.now + limit);
                    }
                    Rebalance::Incremental => {}
                }
            }
        } else {
            self.owed = Some(Owed::All);
            self.ask_release_all(Reason::LockLostInSuspension);
        }
        // The first waiting call does what the worker was asked; the others are answered with it.
        if let Some(first) = acks.next() {
            self.on_release_set(first);
            self.release_acks.extend(acks);
        }
    }

    // ---- The party --------------------------------------------------------------------------------------------

    /// The party or the set changed: the assignment in force is no longer right.
    fn on_inputs_changed(&mut self, reason: Reason) {
        if self.ending.is_some() {
            return;
        }
        self.debounce.changed(self.now, self.latest_party.len());
        self.want_is_target = false;
        if self.target.take().is_none() {
            return;
        }
        // A new episode: the assignment in force is no longer the party's.
        match (self.cfg.rebalance, self.shown.state) {
            // During a suspension, the resumption deals with it.
            (Rebalance::Eager, PartitionState::Acquired) if self.suspension.is_none() => {
                self.ask_release_all(reason);
            }
            (Rebalance::Incremental, PartitionState::Acquired) if self.deadline.is_none() => {
                self.deadline = self.cfg.max_allocation_time.map(|limit| self.now + limit);
            }
            _ => {}
        }
    }

    fn on_party(&mut self, result: Result<PartyRead, ReqError>) {
        match result {
            Ok(PartyRead { children }) => {
                // Our node's name, not our member name: under static membership another process may carry it.
                self.in_party = children.contains(&self.cfg.party_node);
                let members = layout::members(&children).0;
                if members != self.latest_party {
                    self.debounce.changed(self.now, members.len());
                }
                self.latest_party = members;
                self.party_fresh = true;
                self.delete_stray_nodes(&children);
                self.party_nodes = children;
                self.announcements.retain(|node, _| self.party_nodes.contains(node));
                self.note_agreements();
                self.read_announcements(false);
                // We may be the first member now: the set's unfinished update is ours to see to.
                if let Some(unfinished) = self.unfinished.clone() {
                    self.watch_unfinished(&unfinished);
                }
            }
            Err(ReqError::Transient) => self.back_off(),
            Err(ReqError::NoNode) => {
                // `<path>/party` itself was deleted, and our node with it: an empty party, so we join again.
                self.latest_party.clear();
                self.party_nodes.clear();
                self.in_party = false;
                self.party_fresh = true;
                self.debounce.changed(self.now, self.latest_party.len());
            }
            Err(ReqError::Fatal(cause)) => self.fail(cause),
        }
    }

    /// A dynamic member's node is `<32 hex>-<identifier>-<sequence>`, and the hex is this join's alone: another child
    /// with the same beginning is a join of ours that landed late (its reply was lost, and the retry created the node
    /// we track). It would count as a member that takes nothing: deleted. (A static member's name cannot be created
    /// twice.)
    fn delete_stray_nodes(&mut self, children: &[String]) {
        let own = &self.cfg.party_node;
        let Some(prefix) = layout::own_node_prefix(own) else { return };
        let strays: Vec<String> =
            children.iter().filter(|child| *child != own && child.starts_with(prefix)).cloned().collect();
        let strays = if breaks(Sabotage::OwnStraysKept) { Vec::new() } else { strays };
        if !strays.is_empty() && !self.requests.values().any(|p| matches!(p, Pending::Strays)) {
            self.request(Op::DeleteStrayNodes(strays), Pending::Strays);
        }
    }

    /// Reads the announcements of the other members' nodes: those not read yet, or (`all`) every one.
    fn read_announcements(&mut self, all: bool) {
        if self.announcements_read.is_some() || self.ending.is_some() {
            return;
        }
        let nodes: Vec<String> = self
            .party_nodes
            .iter()
            .filter(|node| **node != self.cfg.party_node && layout::member_name(node).is_some())
            .filter(|node| all || !self.announcements.contains_key(*node))
            .cloned()
            .collect();
        if !nodes.is_empty() {
            let op = Op::ReadAnnouncements(nodes.clone());
            self.announcements_read = Some(self.request(op, Pending::Announcements(nodes)));
        }
    }

    /// Reads every other member's announcement again once due (and none is being read: then after that read).
    fn read_announcements_if_due(&mut self) {
        if self.announcements_due.is_some_and(|at| at <= self.now) && self.announcements_read.is_none() {
            self.announcements_due = None;
            self.read_announcements(true);
        }
    }

    fn on_announcements(&mut self, nodes: Vec<String>, result: Result<Vec<Option<Vec<u8>>>, ReqError>) {
        self.announcements_read = None;
        self.read_announcements_if_due();
        match result {
            Ok(data) => {
                for (node, data) in nodes.into_iter().zip(data) {
                    match data {
                        Some(data) if self.party_nodes.contains(&node) => {
                            self.announcements.insert(node, Agreement::from_node_data(&data));
                        }
                        _ => {
                            self.announcements.remove(&node);
                        }
                    }
                }
                self.note_agreements();
            }
            // Read again at the next party change, or when due.
            Err(ReqError::Transient | ReqError::NoNode) => {}
            Err(ReqError::Fatal(cause)) => self.fail(cause),
        }
    }

    /// Compares every member's announcement with ours, and publishes at once when the disagreements change (they
    /// explain an allocation that would otherwise stall silently). While a member announces another version of the
    /// shared set, the announcements are read again every `time_boundary`, so the report ends once it catches up.
    fn note_agreements(&mut self) {
        let ours = self.cfg.agreement;
        let found: Arc<[Disagreement]> = self
            .announcements
            .iter()
            .filter_map(|(node, theirs)| Some((layout::member_name(node)?, (*theirs)?)))
            .filter(|(member, _)| **member != *self.me)
            .filter_map(|(member, theirs)| {
                let kind = ours.compare(&theirs)?;
                Some(Disagreement {
                    member: member.to_owned(),
                    kind,
                    ours: ours.to_string(),
                    theirs: theirs.to_string(),
                })
            })
            .collect();
        let lagging = found.iter().any(|d| d.kind == crate::DisagreementKind::ItemSetVersion);
        if lagging && self.announcements_due.is_none() {
            self.announcements_due = Some(self.now + self.cfg.time_boundary);
        }
        if found != self.disagreements {
            self.disagreements = found;
            self.republish(Reason::Disagreement);
        }
    }

    /// Publishes the current state again (something besides the state changed).
    fn republish(&mut self, reason: Reason) {
        if self.ending.is_some() {
            return;
        }
        let shown = self.shown.clone();
        self.show(shown.state, shown.listed, shown.revoked, shown.suspended, None, reason);
    }

    // ---- The shared set ---------------------------------------------------------------------------------------

    /// A read of the shared set: only a set an admin committed is followed; a set that is missing, unreadable or
    /// empty (by hand) leaves the set in force as it is. An update whose writer is gone is undone or finished by the
    /// party's first member, which watches the writer's lease meanwhile.
    fn on_set(&mut self, result: Result<set_layout::RawRead, ReqError>) {
        let read = match result {
            Ok(read) => read,
            Err(ReqError::Transient) => return self.back_off(),
            // The request path arms a watch for the node's return; meanwhile the set in force stays.
            Err(ReqError::NoNode) => {
                self.set_fresh = true;
                return;
            }
            Err(ReqError::Fatal(cause)) => return self.fail(cause),
        };
        self.set_fresh = true;
        let view = set_layout::interpret(read);
        self.unfinished = match &view {
            SetView::Committed(committed) => committed.unfinished.clone(),
            SetView::Missing { unfinished } => unfinished.clone(),
            SetView::Unreadable(_) | SetView::Torn => None,
        };
        match view {
            SetView::Committed(committed) => {
                if let Some(unfinished) = &committed.unfinished {
                    self.watch_unfinished(unfinished);
                }
                if committed.items.is_empty() {
                    // Only a child deleted by hand can do this (updates refuse to empty the set).
                    return;
                }
                if breaks(Sabotage::IgnoreSetChanges) {
                    return;
                }
                // Compared by items: a child created by hand changes the set, not the version.
                let change = self.catalogue.replace(committed.items, committed.version);
                self.dirs_known.resize(self.catalogue.len(), false);
                if !change.is_empty() {
                    self.debounce.changed(self.now, self.latest_party.len());
                    self.want_is_target = false;
                    self.on_inputs_changed(Reason::ItemSetChanged);
                }
            }
            SetView::Missing { unfinished: Some(unfinished) } => self.watch_unfinished(&unfinished),
            // Deleted or unreadable (by hand): keep the set in force. Torn: an update landed between the reads, and
            // the header watch fires for it.
            SetView::Missing { unfinished: None } | SetView::Unreadable(_) | SetView::Torn => {}
        }
    }

    /// The party's first member takes care of an update under way: it watches the writer's lease, and once the
    /// lease is gone (the writer crashed, or its session expired) undoes or finishes the update, so that no update
    /// stays unfinished for longer than its writer's session outlives the writer.
    fn watch_unfinished(&mut self, unfinished: &Unfinished) {
        if breaks(Sabotage::NoSetRecovery) {
            return;
        }
        let first = self.latest_party.first().is_some_and(|first| **first == *self.me);
        let Some(tag) = unfinished.state.change() else { return };
        if !first
            || self.ending.is_some()
            || self.recovery_retry_at.is_some()
            || self.set_recovery.as_ref().is_some_and(|(t, _)| t == tag)
        {
            return;
        }
        let (op, pending) = if unfinished.abandoned() {
            (Op::RecoverSet(unfinished.clone()), Pending::RecoverSet)
        } else {
            (Op::WatchLease(tag.to_owned()), Pending::WatchLease)
        };
        let id = self.request(op, pending);
        self.set_recovery = Some((tag.to_owned(), id));
    }

    /// The set the new assignment follows, and (with a shared set) what changed since the last assignment; the first
    /// member of the party also clears the lock directories of removed items nobody holds. A new version is
    /// announced in our party node.
    fn note_set_in_force(&mut self) {
        let generation = self.catalogue.generation();
        if !self.shared() || (self.set_in_force.version.is_some() && self.set_in_force.generation == generation) {
            return;
        }
        let change = self.catalogue.change_since(&self.assigned_set);
        self.assigned_set = self.catalogue.set().to_vec();
        let first = self.latest_party.first().is_some_and(|first| **first == *self.me);
        let free: Vec<usize> = change.removed.iter().copied().filter(|item| !self.locks.contains_key(item)).collect();
        if first && !free.is_empty() {
            self.remove_dirs(free);
        }
        let version = self.catalogue.version();
        self.set_in_force =
            SetInForce { generation, version, added: change.added.into(), removed: change.removed.into() };
        if let Some(version) = version
            && self.cfg.agreement.set != crate::agreement::SetSource::Shared(Some(version))
        {
            self.cfg.agreement.set = crate::agreement::SetSource::Shared(Some(version));
            let data = self.cfg.agreement.node_data(&self.cfg.identifier);
            self.request(Op::Announce(data), Pending::Announce);
            // Our disagreements are against our own announcement: compare again, and read the others' once they
            // should have followed too.
            self.note_agreements();
            self.announcements_due = Some(self.now + self.cfg.time_boundary);
        }
    }

    fn remove_dirs(&mut self, items: Vec<usize>) {
        for &item in &items {
            self.dirs_known[item] = false;
        }
        self.request(Op::RemoveDirs(items), Pending::RemoveDirs);
    }

    // ---- Commands ---------------------------------------------------------------------------------------------

    fn on_release_set(&mut self, ack: AckId) {
        if let Some(ending) = &self.ending {
            self.actions.push_back(Action::Ack(ack, Err(ending.cause.clone())));
            return;
        }
        if self.suspension.is_some() {
            // Answered when the session's fate is known.
            self.suspended_acks.push(ack);
            return;
        }
        match self.owed.take() {
            Some(Owed::Revoked(revoked)) => {
                // Incremental: the worker stopped exactly these. Keep the rest listed.
                let listed = self.shown.listed.clone();
                self.show(PartitionState::Allocating, listed, BTreeSet::new(), false, None, Reason::RevokedReleased);
                let want = self.want.iter().filter(|item| !revoked.contains(item)).copied().collect();
                self.set_want(want);
                self.deadline = self.cfg.max_allocation_time.map(|limit| self.now + limit);
            }
            Some(Owed::All) | None => {
                // kazoo: give up everything and allocate from nothing, after a full time_boundary. Publish first:
                // once a lock node is deleted another member may take its item at once.
                self.show(
                    PartitionState::Allocating,
                    BTreeSet::new(),
                    BTreeSet::new(),
                    false,
                    None,
                    Reason::ReleaseSet,
                );
                self.set_want(BTreeSet::new());
                self.target = None;
                self.want_is_target = false;
                self.debounce.changed(self.now, self.latest_party.len());
                self.deadline = self.cfg.max_allocation_time.map(|limit| self.now + limit);
            }
        }
        if breaks(Sabotage::AckBeforeRelease) {
            self.actions.push_back(Action::Ack(ack, Ok(())));
            return;
        }
        self.release_acks.push(ack);
    }

    // ---- Replies ----------------------------------------------------------------------------------------------

    fn on_reply(&mut self, id: ReqId, reply: Reply) {
        // Every lock request's latency is news about the server, even when its reply is no longer wanted.
        let ops = match self.requests.get(&id) {
            Some(Pending::Locks(items)) => items.len(),
            _ => 0,
        };
        self.window.replied(id, ops, reply.failed(), self.now);
        let Some(pending) = self.requests.remove(&id) else {
            return; // abandoned
        };
        if let Pending::Locks(items) = &pending {
            self.in_flight -= items.len();
            self.lock_work_at = self.now;
        }
        let classify = Failed::classify;
        match (pending, reply) {
            (Pending::Party, Reply::Party(result)) => {
                self.party_read = None;
                self.on_party(result.map_err(classify));
            }
            (Pending::Announcements(nodes), Reply::Announcements(result)) => {
                self.on_announcements(nodes, result.map_err(classify));
            }
            (Pending::Strays, Reply::StraysDeleted(result)) => {
                if let Err(ReqError::Fatal(cause)) = result.map_err(classify) {
                    self.fail(cause);
                }
            }
            (Pending::Announce, Reply::Announced(result)) => {
                if let Err(ReqError::Fatal(cause)) = result.map_err(classify) {
                    self.fail(cause);
                }
            }
            (Pending::Join, Reply::Joined(result)) => {
                self.joining = None;
                match result.map_err(classify) {
                    Ok(node) => {
                        self.me = layout::member_name(&node).unwrap_or(&node).into();
                        self.cfg.party_node = node;
                        self.party_fresh = false;
                        self.debounce.changed(self.now, self.latest_party.len());
                    }
                    Err(ReqError::Fatal(cause)) => self.fail(cause),
                    Err(_) => self.back_off(),
                }
            }
            (Pending::Locks(items), Reply::DirsMade(result)) => self.on_dirs_made(id, items, result.map_err(classify)),
            (Pending::Locks(items), Reply::Created(result)) => {
                // Sequential names never collide: a create that finds its node is one whose earlier attempt landed,
                // an unknown outcome, which a listing settles.
                let result = result.map_err(|failed| match failed.code {
                    Code::NodeExists => ReqError::Transient,
                    _ => failed.classify(),
                });
                self.on_created(id, items, result);
            }
            (Pending::Locks(items), Reply::Listed(result)) => {
                let result = result.map(|listings| listings.into_iter().map(|l| l.map_err(classify)).collect());
                self.on_listed(id, items, result.map_err(classify));
            }
            (Pending::Watch(item), Reply::Changed(result)) => self.on_changed(id, item, result.map_err(classify)),
            (Pending::Release(gone), Reply::Released(result)) => {
                let acks = self.releases.remove(&id).unwrap_or_default();
                match result {
                    Ok(()) => {
                        self.release_acks.extend(acks);
                        // Items that left the set: their directories go once the last contender (ours) is gone.
                        let gone: Vec<usize> =
                            gone.into_iter().filter(|&item| !self.catalogue.contains(item)).collect();
                        if !gone.is_empty() && self.ending.is_none() {
                            self.remove_dirs(gone);
                        }
                    }
                    Err(failed) => {
                        // A release retries lost requests itself: what comes back ends the session or the member.
                        let cause = match failed.clone().classify() {
                            ReqError::Fatal(cause) => cause,
                            _ => Cause::Refused(failed.error),
                        };
                        for ack in acks {
                            self.actions.push_back(Action::Ack(ack, Err(cause.clone())));
                        }
                        if let Some(ending) = &mut self.ending {
                            // Best effort while ending. A lost session took our nodes with it; any other error still
                            // lets us leave the party (the ephemerals go with the session in any case).
                            if matches!(cause, Cause::SessionEnded(_)) {
                                ending.clean_up = false;
                            }
                        } else {
                            self.fail(cause);
                        }
                    }
                }
            }
            (Pending::Verify, Reply::Verified(result)) => {
                if let Some(suspension) = &mut self.suspension {
                    suspension.verifying = None;
                }
                match result {
                    Ok(ours) => self.on_verified(ours),
                    Err(failed) => match failed.clone().classify() {
                        ReqError::Fatal(cause) => self.fail(cause),
                        _ => self.fail(Cause::Refused(failed.error)),
                    },
                }
            }
            (Pending::Leave, Reply::Left) => {}
            (Pending::ReadSet, Reply::Set(result)) => {
                self.set_read = None;
                self.on_set(result.map_err(classify));
            }
            (Pending::RecoverSet | Pending::WatchLease, Reply::Recovered(result) | Reply::LeaseGone(result)) => {
                // Done, or the writer's lease is gone: read the set again (a recovery is idempotent, and asked for
                // again if still due). Failed: the same, a time_boundary later.
                self.set_recovery = None;
                match result.map_err(classify) {
                    Ok(()) => self.set_fresh = false,
                    Err(ReqError::Fatal(Cause::SessionEnded(end))) => self.fail(Cause::SessionEnded(end)),
                    Err(_) => self.recovery_retry_at = Some(self.now + self.cfg.time_boundary),
                }
            }
            (Pending::RemoveDirs, Reply::DirsRemoved) => {}
            (Pending::HeldWatch(item, node), Reply::HeldGone(result)) => {
                self.on_held_gone(item, node, result.map_err(classify));
            }
            (pending, reply) => {
                self.fail(Cause::Internal(format!("reply {reply:?} to a {pending:?} request")));
            }
        }
    }

    fn on_dirs_made(&mut self, id: ReqId, items: Vec<usize>, result: Result<(), ReqError>) {
        match result {
            Ok(()) => {
                for item in items {
                    self.dirs_known[item] = true;
                    if self.step_is(item, Step::MakingDir(id)) {
                        self.set_step(item, Step::Queued);
                    }
                }
            }
            Err(ReqError::Fatal(err)) => self.fail(err),
            Err(_) => {
                let at = self.now + self.cfg.retry_delay;
                for item in items {
                    if self.step_is(item, Step::MakingDir(id)) {
                        self.set_step(item, Step::Delayed(at, Retry::MakeDir));
                    }
                }
            }
        }
    }

    fn on_created(&mut self, id: ReqId, items: Vec<usize>, result: Result<Vec<(String, i64)>, ReqError>) {
        match result {
            Ok(created) => {
                let mut listing = Vec::new();
                for (item, (node, czxid)) in items.into_iter().zip(created) {
                    if let Some(lock) = self.locks.get_mut(&item)
                        && lock.step == Step::Creating(id)
                    {
                        lock.node = Some(node);
                        lock.token = czxid;
                        // Listed either way; one no longer wanted is released by the next pump (the listing's reply
                        // is then ignored).
                        listing.push(item);
                        self.unwanted_left |= !self.want.contains(&item);
                    }
                }
                self.send_lists(listing);
            }
            Err(ReqError::NoNode) => {
                // A directory is missing (a `multi` is all or nothing: none was created). Make them, then retry.
                let mut dirs = Vec::new();
                for item in items {
                    if self.step_is(item, Step::Creating(id)) {
                        self.dirs_known[item] = false;
                        dirs.push(item);
                    }
                }
                self.send_make_dirs(dirs);
            }
            Err(ReqError::Transient) => {
                // The create may or may not have happened: a listing tells (our prefix is unique).
                let at = self.now + self.cfg.retry_delay;
                for item in items {
                    if self.step_is(item, Step::Creating(id)) {
                        self.set_step(item, Step::Delayed(at, Retry::List));
                    }
                }
            }
            Err(ReqError::Fatal(err)) => {
                // Refused for good (a `multi` is all or nothing): nothing was created, so there is nothing to delete
                // (a lookup by prefix could itself be refused, e.g. without READ on the directory).
                for item in items {
                    if let Some(lock) = self.locks.get_mut(&item)
                        && lock.step == Step::Creating(id)
                    {
                        lock.created = false;
                        self.set_step(item, Step::Queued);
                    }
                }
                self.fail(err);
            }
        }
    }

    fn on_listed(&mut self, id: ReqId, items: Vec<usize>, result: Result<Vec<Listing>, ReqError>) {
        let results = match result {
            Ok(results) => results,
            Err(ReqError::Fatal(err)) => return self.fail(err),
            Err(_) => {
                let at = self.now + self.cfg.retry_delay;
                for item in items {
                    if self.step_is(item, Step::Listing(id)) {
                        self.set_step(item, Step::Delayed(at, Retry::List));
                    }
                }
                return;
            }
        };
        let (mut relist, mut dirs) = (Vec::new(), Vec::new());
        for (item, listed) in items.into_iter().zip(results) {
            if !self.step_is(item, Step::Listing(id)) {
                continue;
            }
            match listed {
                Ok((children, czxid)) => match self.on_children(item, &children, czxid) {
                    Next::Held | Next::Waiting => {}
                    Next::Queued => self.set_step(item, Step::Queued),
                    Next::List => relist.push(item),
                },
                Err(ReqError::NoNode) => {
                    // The directory went away, and our node with it.
                    if let Some(lock) = self.locks.get_mut(&item) {
                        lock.node = None;
                        lock.token = 0;
                    }
                    self.dirs_known[item] = false;
                    dirs.push(item);
                }
                Err(ReqError::Transient) => {
                    let at = self.now + self.cfg.retry_delay;
                    self.set_step(item, Step::Delayed(at, Retry::List));
                }
                Err(ReqError::Fatal(err)) => return self.fail(err),
            }
        }
        self.send_lists(relist);
        self.send_make_dirs(dirs);
    }

    /// Where our contender stands among `children`.
    fn on_children(&mut self, item: usize, children: &[String], czxid: i64) -> Next {
        let Some(lock) = self.locks.get_mut(&item) else { return Next::Waiting };
        // Every contender carrying this lock's prefix is a node of ours: the prefix is this lock's alone. There can be
        // more than one, or one we do not track: a create whose reply was lost can still land after we listed the
        // directory and created again (a request on the wire when the connection broke may be applied after the
        // ones sent on the next connection). Keep one, the node we track if it is there, else the lowest, and delete
        // the others: left alone, a node of ours that sorts before the one we keep would have us wait for ourselves
        // forever (and the release sweep spares every node with a prefix still in use).
        let mut ours: Vec<&String> =
            children.iter().filter(|c| c.starts_with(&lock.prefix) && sequence(c).is_some()).collect();
        ours.sort_by(|a, b| sequence(a).cmp(&sequence(b)));
        let tracked = lock.node.as_ref().filter(|node| ours.iter().any(|c| c == node)).cloned();
        let adopted = tracked.is_none().then(|| ours.first().map(|c| c.to_string())).flatten();
        let kept = tracked.clone().or_else(|| adopted.clone());
        let strays: Vec<String> =
            ours.iter().filter(|c| Some(c.as_str()) != kept.as_deref()).map(|c| c.to_string()).collect();
        let strays = if breaks(Sabotage::OwnStraysKept) { Vec::new() } else { strays };
        let prefix = lock.prefix.clone();
        let next = match (tracked, adopted) {
            (None, None) => {
                // Not there: a create not seen now has not happened (yet: see above), or someone deleted our node.
                lock.node = None;
                lock.token = 0;
                lock.created = false;
                Next::Queued
            }
            (None, Some(node)) => {
                // After a lost create reply (or our tracked node was deleted and another of ours is there): ours now.
                // Its stat (the fencing token) comes with the next listing.
                lock.node = Some(node);
                lock.token = 0;
                Next::List
            }
            (Some(own), _) => {
                if czxid > 0 {
                    lock.token = czxid;
                }
                match position(children, &own) {
                    Position::Held if lock.token <= 0 => Next::List,
                    Position::Held => {
                        self.set_step(item, Step::Held);
                        // Someone other than us deleting it must not go unnoticed until the next rebalance; the watch
                        // is asked for once our lock work has been quiet for a while (`watch_held`).
                        self.unwatched.insert(item, own);
                        self.unwatched_since.get_or_insert(self.now);
                        if let Some(lock) = self.locks.get_mut(&item) {
                            lock.held_at = self.now;
                        }
                        Next::Held
                    }
                    Position::Behind(predecessor) => {
                        // Possibly a stray of ours, deleted below: its deletion wakes this watch.
                        let node = predecessor.to_owned();
                        let id = self.request(Op::Watch { item, node }, Pending::Watch(item));
                        self.set_step(item, Step::Waiting(id));
                        Next::Waiting
                    }
                    // Not reached: `tracked` is among the children and has a sequence. Contend again, as if gone.
                    Position::Missing => {
                        if let Some(lock) = self.locks.get_mut(&item) {
                            lock.node = None;
                            lock.token = 0;
                            lock.created = false;
                        }
                        Next::Queued
                    }
                }
            }
        };
        if !strays.is_empty() {
            self.delete_strays(item, prefix, strays);
        }
        next
    }

    /// Deletes nodes of ours in an item's directory that its lock does not track (see [`Core::on_children`]). Sent as
    /// a release that keeps every tracked lock, so it waits like any release before anything new is contended.
    fn delete_strays(&mut self, item: usize, prefix: String, strays: Vec<String>) {
        let nodes =
            strays.into_iter().map(|node| Contender { item, prefix: prefix.clone(), node: Some(node) }).collect();
        let keep = self.locks.iter().map(|(&item, lock)| (item, lock.prefix.clone())).collect();
        let window = self.window.size();
        let id = self.request(Op::Release { nodes, keep, window }, Pending::Release(Vec::new()));
        self.releases.insert(id, Vec::new());
    }

    fn on_changed(&mut self, id: ReqId, item: usize, result: Result<(), ReqError>) {
        if !self.step_is(item, Step::Waiting(id)) {
            return;
        }
        match result {
            Ok(()) => self.send_lists(vec![item]),
            Err(ReqError::Fatal(err)) => self.fail(err),
            Err(_) => {
                let at = self.now + self.cfg.retry_delay;
                self.set_step(item, Step::Delayed(at, Retry::List));
            }
        }
    }

    /// A held lock node's watch fired: if the node is the one we still hold, someone else deleted it (an operator, a
    /// buggy tool): another process may be taking the item right now. Stop listing it at once, then take it again
    /// by the normal rules (eager: everything stops, as on any loss; incremental: only this item).
    fn on_held_gone(&mut self, item: usize, node: String, result: Result<(), ReqError>) {
        match result {
            Ok(()) => {}
            // The session ended: its own event says so.
            Err(ReqError::Fatal(_)) => return,
            // Not expected (the driver retries a registration lost with the connection): watch again. The lock stays
            // held: moving it out of `held` here would hide it from a suspension's verification.
            Err(_) => {
                if self.holds(item, &node) && self.ending.is_none() {
                    self.request(Op::WatchHeld { item, node: node.clone() }, Pending::HeldWatch(item, node));
                }
                return;
            }
        }
        if !self.holds(item, &node) || self.ending.is_some() {
            return; // our own release, or a lock long replaced
        }
        if let Some(lock) = self.locks.get_mut(&item) {
            lock.node = None;
            lock.created = false;
            lock.token = 0;
        }
        // Contend again if still wanted (the next pump creates a new contender).
        self.set_step(item, Step::Queued);
        self.want_grew = true;
        if let Some(suspension) = &mut self.suspension {
            suspension.lost = true;
            return;
        }
        if !self.shown.listed.contains(&item) {
            return;
        }
        let reason = Reason::HeldLockDeleted;
        match self.cfg.rebalance {
            Rebalance::Eager => {
                self.owed = Some(Owed::All);
                self.deadline = None;
                let mut revoked = self.held.clone();
                revoked.insert(item);
                self.show(PartitionState::Release, BTreeSet::new(), revoked, false, None, reason);
            }
            Rebalance::Incremental => {
                let mut listed = self.shown.listed.clone();
                listed.remove(&item);
                let state = match self.shown.state {
                    PartitionState::Acquired => PartitionState::Allocating,
                    state => state,
                };
                let revoked = self.shown.revoked.clone();
                self.show(state, listed, revoked, false, None, reason);
                if self.deadline.is_none() && self.owed.is_none() {
                    self.deadline = self.cfg.max_allocation_time.map(|limit| self.now + limit);
                }
            }
        }
    }

    // ---- Lock bookkeeping -------------------------------------------------------------------------------------

    /// Whether `node` is the item's lock node and we hold the lock through it.
    fn holds(&self, item: usize, node: &str) -> bool {
        self.locks.get(&item).is_some_and(|lock| lock.step == Step::Held && lock.node.as_deref() == Some(node))
    }

    fn step_is(&self, item: usize, step: Step) -> bool {
        self.locks.get(&item).is_some_and(|lock| lock.step == step)
    }

    /// Moves an item's lock to `step`, keeping the indexes (`held`, `queued`, `delayed`) in line.
    fn set_step(&mut self, item: usize, step: Step) {
        let Some(lock) = self.locks.get_mut(&item) else { return };
        match lock.step {
            Step::Held => {
                self.held.remove(&item);
            }
            Step::Queued => {
                self.queued.remove(&item);
                self.need_dirs.remove(&item);
            }
            Step::Delayed(at, _) => {
                self.delayed.remove(&(at, item));
            }
            _ => {}
        }
        lock.step = step;
        match step {
            Step::Held => {
                self.held.insert(item);
            }
            Step::Queued if self.dirs_known[item] => {
                self.queued.insert(item);
            }
            Step::Queued => {
                self.need_dirs.insert(item);
            }
            Step::Delayed(at, _) => {
                self.delayed.insert((at, item));
            }
            _ => {}
        }
    }

    /// A lock with a prefix of its own: the random nonce plus a multiple of an odd constant, distinct for every lock
    /// of this member (and, the nonce being random, from every other member's).
    fn new_lock(&mut self) -> Lock {
        let bits =
            self.nonce.wrapping_add(self.prefixes_issued.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
        self.prefixes_issued += 1;
        Lock {
            prefix: layout::contender_prefix(bits),
            node: None,
            created: false,
            token: 0,
            step: Step::Queued,
            held_at: self.now,
        }
    }

    /// Changes what we want, and releases at once what we no longer want.
    fn set_want(&mut self, want: BTreeSet<usize>) {
        self.want_is_target = false;
        if want != self.want {
            self.want = want;
            self.want_grew = true;
            self.release_unwanted();
        }
    }

    /// Operations per `multi` for the set as it is now.
    fn batch(&self) -> usize {
        self.cfg.batch.for_items(self.catalogue.len())
    }

    fn send_lists(&mut self, items: Vec<usize>) {
        for chunk in items.chunks(self.batch()) {
            // Our node is read along only while its fencing token is unknown (servers before 3.8.2 send no stat for
            // a create inside a multi): one read fewer per item and listing otherwise.
            let unknown_token = |lock: &Lock| if lock.token == 0 { lock.node.clone() } else { None };
            let list = chunk.iter().map(|&item| (item, self.locks.get(&item).and_then(unknown_token))).collect();
            let id = self.request(Op::List(list), Pending::Locks(chunk.to_vec()));
            for &item in chunk {
                self.set_step(item, Step::Listing(id));
            }
        }
    }

    fn send_make_dirs(&mut self, items: Vec<usize>) {
        for chunk in items.chunks(self.batch()) {
            let id = self.request(Op::MakeDirs(chunk.to_vec()), Pending::Locks(chunk.to_vec()));
            for &item in chunk {
                self.set_step(item, Step::MakingDir(id));
            }
        }
    }

    /// Brings the locks in line with `want`: releases what is not wanted (once no reply can still reveal a node),
    /// and contends for what is wanted, batched, within the window, never while a release is in flight.
    fn pump_locks(&mut self) {
        if std::mem::take(&mut self.unwanted_left) {
            self.release_unwanted();
        }
        if !self.releases.is_empty() {
            return;
        }
        if std::mem::take(&mut self.want_grew) {
            let missing: Vec<usize> = self.want.iter().filter(|item| !self.locks.contains_key(item)).copied().collect();
            for item in missing {
                let lock = self.new_lock();
                self.locks.insert(item, lock);
                self.set_step(item, Step::Queued);
            }
        }
        self.send_queued();
    }

    /// When the watches of held locks are due: `time_boundary` after the last lock request was sent or answered, with
    /// none in flight or waiting, and at the latest `2 × time_boundary` after the oldest of them was taken. Each watch
    /// costs ZooKeeper a read, and the server serves requests in order: sent as each lock is taken, a rebalance's
    /// watches (one per relocked item, 100,000 in an eager join at 100,000 items) queue in front of the creates of the
    /// members still allocating. Measured at 100 members × 100,000 items, eager join and leave: 4.1-5.6 s beyond
    /// time_boundary sent at once, 1.8-2.9 s held back (2 runs each). The cap keeps the bound below whatever the lock
    /// work does (under endless churn it would never be quiet).
    ///
    /// The bound this gives (RELIABILITY.md; the simulation checks it): a held lock node deleted by someone else is
    /// noticed within one round trip of the later of its deletion and its watch's registration, which is asked for at
    /// most `2 × time_boundary` after the lock was taken; if the server does not answer meanwhile, the client suspends
    /// after its read timeout and the member lists nothing anyway.
    fn held_watches_due(&self) -> Option<Instant> {
        if self.unwatched.is_empty() || !self.connected || self.ending.is_some() {
            return None;
        }
        let idle = self.in_flight == 0 && self.queued.is_empty() && self.need_dirs.is_empty();
        let quiet = idle.then(|| self.lock_work_at + self.cfg.time_boundary);
        let capped = self.unwatched_since.map(|since| since + self.cfg.time_boundary * 2);
        let capped = if breaks(Sabotage::HeldWatchOnlyWhenQuiet) { None } else { capped };
        [quiet, capped].into_iter().flatten().min()
    }

    /// Asks for the watches of held locks once they are due ([`Core::held_watches_due`]).
    fn watch_held(&mut self) {
        if self.held_watches_due().is_none_or(|due| self.now < due) {
            return;
        }
        self.unwatched_since = None;
        for (item, node) in std::mem::take(&mut self.unwatched) {
            // A lock released or lost meanwhile needs no watch.
            if self.holds(item, &node) {
                self.request(Op::WatchHeld { item, node: node.clone() }, Pending::HeldWatch(item, node));
            }
        }
    }

    /// Sends creates for queued items (and makes missing directories first), batched, within the window.
    fn send_queued(&mut self) {
        if !self.need_dirs.is_empty() {
            // As many as the window has room for, taken from the front: this runs after every event, so it must
            // not touch the items it leaves (it once re-inserted them all each time: 11 s of a lone member's
            // 100,000-item allocation on a fresh path).
            let room = self.window.size().saturating_sub(self.in_flight);
            let mut make = Vec::new();
            while make.len() < room
                && let Some(item) = self.need_dirs.pop_first()
            {
                if self.dirs_known[item] {
                    self.queued.insert(item);
                } else {
                    make.push(item);
                }
            }
            self.send_make_dirs(make);
        }
        while !self.queued.is_empty() && self.in_flight < self.window.size() {
            let room = (self.window.size() - self.in_flight).min(self.batch());
            let batch: Vec<usize> = std::iter::from_fn(|| self.queued.pop_first()).take(room).collect();
            let mut contenders = Vec::with_capacity(batch.len());
            for &item in &batch {
                if let Some(lock) = self.locks.get_mut(&item) {
                    lock.created = true;
                    contenders.push((item, lock.prefix.clone()));
                }
            }
            let id = self.request(Op::Create { contenders, data: self.me.clone() }, Pending::Locks(batch.clone()));
            for item in batch {
                if let Some(lock) = self.locks.get_mut(&item) {
                    lock.step = Step::Creating(id);
                }
            }
        }
    }

    /// Takes the locks nobody wants out of the bookkeeping and deletes their nodes. A lock whose create is in flight
    /// stays until its reply says what exists.
    fn release_unwanted(&mut self) {
        let unwanted: Vec<usize> = self.locks.keys().filter(|item| !self.want.contains(item)).copied().collect();
        let mut nodes = Vec::new();
        for item in unwanted {
            let Some(lock) = self.locks.get(&item) else { continue };
            match lock.step {
                Step::Creating(_) => {
                    self.unwanted_left = true;
                    continue;
                }
                Step::Waiting(id) => {
                    self.requests.remove(&id);
                    self.actions.push_back(Action::Cancel(id));
                }
                Step::Listing(_) | Step::MakingDir(_) => {} // their replies find no lock and are ignored
                Step::Queued | Step::Delayed(..) | Step::Held => {}
            }
            debug_assert!(!self.shown.listed.contains(&item), "releasing item {item} while it is listed");
            self.set_step(item, Step::Queued);
            self.queued.remove(&item);
            self.need_dirs.remove(&item);
            if let Some(lock) = self.locks.remove(&item)
                && lock.created
            {
                nodes.push(Contender { item, prefix: lock.prefix, node: lock.node });
            }
        }
        if !nodes.is_empty() {
            let keep = self.locks.iter().map(|(&item, lock)| (item, lock.prefix.clone())).collect();
            let gone = nodes.iter().map(|node| node.item).filter(|&item| !self.catalogue.contains(item)).collect();
            let window = self.window.size();
            let id = self.request(Op::Release { nodes, keep, window }, Pending::Release(gone));
            self.releases.insert(id, Vec::new());
        }
    }

    /// Whether every unwanted lock is released (nothing in flight, nothing left).
    fn released_all_unwanted(&self) -> bool {
        self.releases.is_empty() && self.locks.keys().all(|item| self.want.contains(item))
    }

    // ---- The decision -----------------------------------------------------------------------------------------

    /// Looks at everything known and queues what follows. Called after every event.
    fn decide(&mut self) {
        if !self.stopped && self.ending.is_none() {
            self.decide_running();
            self.watch_held();
        }
        // Also when the decision just now was to end.
        if !self.stopped && self.ending.is_some() {
            self.drive_ending();
        }
    }

    fn decide_running(&mut self) {
        let may_send = self.connected && self.backoff_until.is_none();
        if may_send && self.party_read.is_none() && !self.party_fresh && self.joining.is_none() {
            self.party_read = Some(self.request(Op::ReadParty, Pending::Party));
        }
        if self.shared() && may_send && self.set_read.is_none() && !self.set_fresh {
            self.set_read = Some(self.request(Op::ReadSet, Pending::ReadSet));
        }
        if let Some(suspension) = &self.suspension {
            if self.connected && suspension.verifying.is_none() {
                let nodes: Vec<(usize, String)> =
                    self.held.iter().filter_map(|&item| Some((item, self.locks.get(&item)?.node.clone()?))).collect();
                let id = self.request(Op::Verify(nodes), Pending::Verify);
                if let Some(suspension) = &mut self.suspension {
                    suspension.verifying = Some(id);
                }
            }
            // Lock requests carry on (they wait for the reconnection); nothing else is decided meanwhile.
            return self.settle_locks();
        }
        let inputs_fresh = self.party_fresh && self.set_fresh;
        if self.prepare_due().is_some_and(|at| self.now >= at) && !self.debounce.ready(self.now) {
            self.prepared = Some(self.debounce.last_change());
            self.prepare();
        }
        if self.target.is_none() && inputs_fresh && self.connected && self.debounce.ready(self.now) {
            if !self.in_party {
                if self.joining.is_none() && may_send {
                    // An operator (or a bug elsewhere) removed our party node: join again, which changes the party.
                    let data = self.cfg.agreement.node_data(&self.cfg.identifier);
                    self.joining = Some(self.request(Op::Join(data), Pending::Join));
                }
                return self.settle_locks();
            }
            match self.assignment(&self.latest_party) {
                Ok(target) => {
                    self.members = self.latest_party.clone().into();
                    self.target = Some(target);
                    self.want_is_target = false;
                    self.note_set_in_force();
                }
                Err(err) => return self.fail(err),
            }
        }
        match self.cfg.rebalance {
            Rebalance::Eager => self.decide_eager(),
            Rebalance::Incremental => self.decide_incremental(),
        }
        self.settle_locks();
    }

    /// kazoo's way: everything stops on a change, then everything is taken again.
    fn decide_eager(&mut self) {
        if self.owed.is_some() {
            // Waiting for release_set(): keep what we hold, contend for nothing.
            return self.want_held();
        }
        if self.shown.state != PartitionState::Allocating {
            return;
        }
        match &self.target {
            // The party is settling: start over from nothing.
            None => self.set_want(BTreeSet::new()),
            Some(_) => {
                self.want_target();
                self.acquired_if_complete();
            }
        }
    }

    /// Wants exactly the target, comparing the (possibly 100,000-item) sets only when either changed.
    fn want_target(&mut self) {
        if self.want_is_target {
            return;
        }
        if let Some(target) = &self.target
            && self.want != *target
        {
            self.set_want(target.clone());
        }
        self.want_is_target = self.target.is_some();
    }

    /// Wants exactly what is held (cloned only when that changes something: the sets can hold 100,000 items).
    fn want_held(&mut self) {
        if self.want != self.held {
            self.set_want(self.held.clone());
        }
    }

    /// Only what moves stops.
    fn decide_incremental(&mut self) {
        let Some(target) = self.target.take() else {
            // Settling: keep what we hold, stop contending for the rest.
            return self.want_held();
        };
        self.rebalance_towards(&target);
        self.target = Some(target);
    }

    fn rebalance_towards(&mut self, target: &BTreeSet<usize>) {
        let moved: BTreeSet<usize> = self.shown.listed.difference(target).copied().collect();
        if !moved.is_empty() {
            let mut revoked = match self.owed.take() {
                Some(Owed::Revoked(revoked)) => revoked,
                Some(Owed::All) => {
                    self.owed = Some(Owed::All);
                    return;
                }
                None => BTreeSet::new(),
            };
            revoked.extend(moved.iter().copied());
            let listed: BTreeSet<usize> = self.shown.listed.difference(&moved).copied().collect();
            self.show(PartitionState::Release, listed, revoked.clone(), false, None, Reason::ItemsRevoked);
            self.owed = Some(Owed::Revoked(revoked));
            self.deadline = None;
        }
        match &self.owed {
            Some(Owed::Revoked(revoked)) => {
                // Keep the revoked items until the worker says it stopped them; let go of unlisted items not ours.
                let keep: BTreeSet<usize> =
                    self.held.iter().filter(|item| target.contains(item) || revoked.contains(item)).copied().collect();
                self.set_want(keep);
            }
            Some(Owed::All) => self.want_held(),
            None => {
                if !self.want_is_target && self.want != *target {
                    self.set_want(target.clone());
                }
                self.want_is_target = true;
                if !self.acquired_if_complete() && self.shown.state != PartitionState::Allocating {
                    let listed = self.shown.listed.clone();
                    self.show(PartitionState::Allocating, listed, BTreeSet::new(), false, None, Reason::TakingGained);
                }
            }
        }
    }

    /// Publishes `Acquired` once every wanted lock, and nothing else, is held. Returns whether the state is now
    /// `Acquired` with everything listed.
    fn acquired_if_complete(&mut self) -> bool {
        // Not while suspended: a reply can overtake the client's news that the connection is back.
        let complete =
            self.connected && self.held.len() == self.want.len() && self.released_all_unwanted() && self.want_is_held();
        let unchanged = self.shown.state == PartitionState::Acquired
            && self.shown.listed == self.held
            && self.shown.members == self.members
            && self.shown.set == self.set_in_force;
        if complete && !unchanged {
            self.deadline = None;
            let held = self.held.clone();
            self.show(PartitionState::Acquired, held, BTreeSet::new(), false, None, Reason::AllAcquired);
        }
        complete
    }

    fn want_is_held(&self) -> bool {
        self.want.iter().all(|item| self.held.contains(item))
    }

    /// Runs the lock machinery, then answers `release_set()` calls whose release is complete.
    fn settle_locks(&mut self) {
        self.pump_locks();
        if !self.release_acks.is_empty() && self.released_all_unwanted() {
            for ack in std::mem::take(&mut self.release_acks) {
                self.actions.push_back(Action::Ack(ack, Ok(())));
            }
        }
        // A release finishing can complete an allocation.
        if self.ending.is_none() && self.suspension.is_none() && self.owed.is_none() && self.target.is_some() {
            let before = self.shown.state;
            if before == PartitionState::Allocating || self.cfg.rebalance == Rebalance::Incremental {
                self.acquired_if_complete();
            }
        }
    }

    /// When the partition function may work ahead for this quiet period ([`PartitionFn::prepare`]): a quarter of
    /// `time_boundary` into it, while the assignment is still to be decided, once per period.
    fn prepare_due(&self) -> Option<Instant> {
        let settling = self.target.is_none() && self.party_fresh && self.set_fresh && self.connected && self.in_party;
        (settling && self.prepared != Some(self.debounce.last_change())).then(|| self.debounce.prepare_at())
    }

    /// Lets the partition function work ahead on the party as it stands. Its result is not used: a panic is left for
    /// the deciding call, which reports it as a `Failure` if it panics too.
    fn prepare(&self) {
        let items = self.catalogue.sorted();
        let _ = guarded(|| self.cfg.partition_fn.prepare(&self.me, &self.latest_party, items));
    }

    /// Our share under the partition function, as indexes into the sorted item list.
    fn assignment(&self, members: &[String]) -> Result<BTreeSet<usize>, Cause> {
        let items = self.catalogue.sorted();
        // User code: a panic must become a Failure with its cause, not a dead task behind a stale snapshot.
        let call = || self.cfg.partition_fn.partition(&self.me, members, items);
        let mine = guarded(call).map_err(Cause::PartitionFn)?;
        let mut assigned = BTreeSet::new();
        for item in mine {
            let index = self.catalogue.index_in_set(&item).ok_or_else(|| {
                Cause::PartitionFn(format!(
                    "returned {}, which is not in the set",
                    crate::error::shown(&item.to_string())
                ))
            })?;
            if !assigned.insert(index) {
                return Err(Cause::PartitionFn("returned an item more than once".into()));
            }
        }
        Ok(assigned)
    }

    // ---- Publishing -------------------------------------------------------------------------------------------

    /// The single place where the published state changes.
    fn show(
        &mut self,
        state: PartitionState,
        listed: BTreeSet<usize>,
        revoked: BTreeSet<usize>,
        suspended: bool,
        cause: Option<Cause>,
        reason: Reason,
    ) {
        debug_assert!(listed.is_subset(&self.held), "listing an item whose lock is not held");
        if state == PartitionState::Acquired && std::mem::take(&mut self.fresh_path) {
            // The party's first allocation made the directories of every share: from now on, assume them all.
            self.dirs_known.fill(true);
        }
        let shown = Shown {
            state,
            listed,
            revoked,
            suspended,
            members: self.members.clone(),
            set: self.set_in_force.clone(),
            disagreements: self.disagreements.clone(),
        };
        if shown == self.shown && cause.is_none() {
            return;
        }
        // In item order, not index order: a handle finds an item in the snapshot by binary search.
        let listed = self.catalogue.in_item_order(shown.listed.iter().copied());
        let listed = if breaks(Sabotage::IndexOrder) { shown.listed.iter().copied().collect() } else { listed };
        let items = listed
            .iter()
            .map(|&item| (item, FencingToken::new(self.locks.get(&item).map_or(0, |lock| lock.token))))
            .collect();
        let nodes = listed
            .iter()
            .map(|item| self.locks.get(item).and_then(|lock| lock.node.clone()).unwrap_or_default())
            .collect();
        self.actions.push_back(Action::Publish(Publication {
            state,
            member: self.me.clone(),
            items,
            nodes,
            revoked: self.catalogue.in_item_order(shown.revoked.iter().copied()),
            members: self.members.clone(),
            cause,
            suspended,
            set: self.set_in_force.clone(),
            disagreements: self.disagreements.clone(),
            reason,
        }));
        self.shown = shown;
    }

    // ---- The end ----------------------------------------------------------------------------------------------

    fn fail(&mut self, cause: Cause) {
        self.end(cause, Vec::new());
    }

    /// Publishes `Failure` first (nothing listed), then cleans up: every lock, then the party node, then stops.
    fn end(&mut self, cause: Cause, acks: Vec<AckId>) {
        if let Some(ending) = &mut self.ending {
            ending.acks.extend(acks);
            return;
        }
        let clean_up = !matches!(cause, Cause::SessionEnded(_));
        self.show(PartitionState::Failure, BTreeSet::new(), BTreeSet::new(), false, Some(cause.clone()), Reason::Ended);
        self.suspension = None;
        self.owed = None;
        for ack in std::mem::take(&mut self.release_acks).into_iter().chain(std::mem::take(&mut self.suspended_acks)) {
            self.actions.push_back(Action::Ack(ack, Err(cause.clone())));
        }
        self.ending = Some(Ending { cause, acks, clean_up, leaving: false });
        if clean_up {
            self.set_want(BTreeSet::new());
        } else {
            // The session is gone and every node with it: nothing to delete.
            self.want.clear();
            self.locks.clear();
            self.held.clear();
            self.queued.clear();
            self.need_dirs.clear();
            self.delayed.clear();
        }
    }

    /// Ending: release every lock, then leave the party, then stop (skipping what a lost session makes pointless).
    fn drive_ending(&mut self) {
        let Some(ending) = &self.ending else { return };
        if ending.clean_up {
            if !ending.leaving {
                self.pump_locks();
                if !self.released_all_unwanted() {
                    return;
                }
                self.request(Op::Leave, Pending::Leave);
                if let Some(ending) = &mut self.ending {
                    ending.leaving = true;
                }
                return;
            }
            if self.requests.values().any(|pending| matches!(pending, Pending::Leave)) {
                return;
            }
        }
        let watches: Vec<ReqId> =
            self.requests.iter().filter(|(_, p)| matches!(p, Pending::Watch(_))).map(|(&id, _)| id).collect();
        for id in watches {
            self.actions.push_back(Action::Cancel(id));
        }
        if let Some(ending) = &mut self.ending {
            for ack in std::mem::take(&mut ending.acks) {
                self.actions.push_back(Action::Ack(ack, Ok(())));
            }
        }
        self.actions.push_back(Action::Stop);
        self.stopped = true;
    }

    // ---- Inspection, for the simulation's checker ------------------------------------------------------------

    /// The items published as processable.
    #[cfg(test)]
    pub fn listed(&self) -> &BTreeSet<usize> {
        &self.shown.listed
    }

    /// Our node for an item we hold.
    #[cfg(test)]
    pub fn held_node(&self, item: usize) -> Option<&str> {
        self.held.contains(&item).then(|| self.locks.get(&item)?.node.as_deref()).flatten()
    }

    #[cfg(test)]
    pub fn state(&self) -> PartitionState {
        self.shown.state
    }

    #[cfg(test)]
    pub fn me(&self) -> &str {
        &self.me
    }

    /// When we last found the lock of a listed item held (the checker's bound for a deleted held node).
    #[cfg(test)]
    pub fn held_at(&self, item: usize) -> Option<Instant> {
        self.held.contains(&item).then(|| self.locks.get(&item).map(|lock| lock.held_at)).flatten()
    }

    /// The version and items of the shared set the assignment in force follows.
    #[cfg(test)]
    pub fn followed(&self) -> Option<(u64, Vec<Item>)> {
        let version = self.set_in_force.version?;
        let mut items: Vec<Item> = self.assigned_set.iter().map(|&index| self.catalogue.item(index).clone()).collect();
        items.sort();
        Some((version, items))
    }
}

/// One lock directory as listed, the failure classified.
type Listing = Result<(Vec<String>, i64), ReqError>;

/// What an item's lock does after a listing.
enum Next {
    Held,
    Waiting,
    /// Create a contender (again).
    Queued,
    /// List again (to read our node's stat).
    List,
}

#[cfg(test)]
mod tests;
