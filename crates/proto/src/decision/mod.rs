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
//! | the party read shows departures only, `T` in force (a function that [declares it](PartitionFn::departures_move_only_theirs)) | as any change | hand over at once: `T` grows by the departed members' items the new party gives us; what else moves waits the quiet period (restarted) |
//! | `T` known, `S` = Allocating | take `T`; all held: `Acquired` | listed items outside `T`: `Release` revoking them; else take `T`; all held: `Acquired` |
//! | `T` known, `S` = Acquired | — | as above (gains published as `Allocating` with `L` kept) |
//! | the shared set changes | as the party changes | `T` stays in force less the items that left the set (listed ones: `Release`); the new `T` once a quiet period of `time_boundary / 4` ends |
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
//! The inputs of the assignment are the party and the set of items. With the shared set in ZooKeeper, a read that shows
//! a different set is a change like a party change (debounced by the same `time_boundary`, and under Eager every
//! "the party changes" row above applies), except that a set change does not restart a quiet period already under
//! way: a stream of versions (a burst of finishes) waits after its first, not after its last. Under Incremental that
//! wait is a quarter of `time_boundary` (a party change within it makes it a full one) and the target in force is
//! kept meanwhile (its row above), so gains under way complete and nobody stops what they keep; a set marked
//! `updating` is not used, the set in force stays. Items keep their index
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
//! The departure fast path (Incremental, a function whose departures move only the departed member's items, not
//! turned off): a party change notification restarts the quiet period but is judged on the read. A read that shows
//! the party in force less some dynamic members (never a static member's name: its departure may be a restart),
//! with the set fresh and the target in force, is handed over: the departed members' shares are computed under the
//! party they left, and the items of theirs our new share holds join the target at once (their locks are free once
//! the server ended the session or the leaver released them). Any other change starts a new episode, as at the
//! notification without the fast path.
//!
//! `max_allocation_time` runs from entering `Allocating` (or, incremental, from the party change) to `Acquired`,
//! paused while `Release` waits for the worker's `release_set()`; when it runs out: `Failure`.
//!
//! Safety rules that hold in every row: an item is listed only while its lock is held and the connection is up; an
//! item leaves the listing before its lock node is deleted (a publication is queued before the delete); a create
//! whose reply is pending is never released before the reply comes (its node may exist); nothing new is contended
//! while a release is in flight. The lock of each item goes through its own small machine ([`locks`]): create, list,
//! watch the predecessor, held, with batching and an in-flight window.
//!
//! # Where each part lives
//!
//! - this file: [`Core`], its inputs ([`Core::handle`], [`Core::handle_timeout`]) and `decide`, which runs the rows
//!   above in order after every event;
//! - [`protocol`]: the types that cross the boundary (events, operations, replies, actions, publications);
//! - [`replies`]: each reply handed to the concern whose request it answers;
//! - [`party`]: party reads, announcements, the quiet period's early work and our share (the target);
//! - [`shared_set`]: following the shared set, and seeing to an update whose writer is gone; [`closed`]: which of
//!   our items a lineage change closed; [`placement`]: the placement record a sticky function computes from;
//! - [`rebalance`]: the only place that tells Eager from Incremental;
//! - [`suspension`]: the session rows;
//! - [`locks`]: the lock table, which reports held, lost and released back to the core;
//! - [`publication`]: what is published ([`Core::show`], the one place the published state changes) and `release_set()`;
//! - [`ending`]: failure and finish; [`timers`]: every timer, in one table;
//! - [`catalogue`], [`window`], [`debounce`]: the item indexes, the in-flight window, the quiet period.
//!
//! Tests break one rule on purpose through a single hook ([`crate::sabotage`]), never by branches of their own.

mod catalogue;
mod closed;
mod debounce;
mod ending;
#[cfg(any(test, feature = "sim"))]
mod inspect;
mod locks;
mod party;
mod placement;
mod protocol;
mod publication;
mod rebalance;
mod replies;
mod shared_set;
mod suspension;
mod timers;
mod window;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use catalogue::Catalogue;
use debounce::Debounce;
pub use debounce::JitterParties;
use ending::Ending;
use locks::{LockTable, Retry, Step};
use publication::{Owed, Shown};
use timers::{Timer, Timers};
pub use window::Batch;
use window::Window;

pub use protocol::{
    AckId, Action, Cause, Code, Event, Failed, Op, OurNode, PartyRead, Publication, Reason, Reply, ReqError, ReqId,
    SessionEnd, SetInForce,
};

use crate::announcement::Agreement;
use crate::{Item, PartitionFn, Rebalance, SessionPolicy, Weight};

/// Everything the core decides from, fixed at build time.
pub struct CoreConfig {
    /// The whole set, sorted and validated (with a shared set: the set as read at build time).
    pub items: Vec<Item>,
    /// The weights the shared set named at build time (the other items weigh 1).
    pub weights: BTreeMap<Item, Weight>,
    /// The shared set's version when `items` was read; `None` for a fixed set.
    pub shared_set: Option<u64>,
    /// What this member announces in its party node (compared with every other member's).
    pub agreement: Agreement,
    /// Whether our partition function answers the probe as kazoo's does: a member that announces nothing (a kazoo
    /// member) is then taken to agree; else it is reported ([`DisagreementKind::Unannounced`]).
    ///
    /// [`DisagreementKind::Unannounced`]: crate::DisagreementKind::Unannounced
    pub kazoo_compatible: bool,
    /// This member's identifier (its party node's data starts with it).
    pub identifier: String,
    /// Our party node's name (under `<path>/party`).
    pub party_node: String,
    pub partition_fn: Box<dyn PartitionFn>,
    pub time_boundary: Duration,
    /// The pause before retrying a request lost with the connection ([`Builder::max_reaction_time`]).
    ///
    /// [`Builder::max_reaction_time`]: https://docs.rs/zk-partitioner/latest/zk_partitioner/struct.Builder.html#method.max_reaction_time
    pub max_reaction_time: Duration,
    pub max_allocation_time: Option<Duration>,
    pub session_policy: SessionPolicy,
    pub rebalance: Rebalance,
    /// At most this many lock operations in flight (waits on a watch do not count); the window adapts to the
    /// server's latency below it ([`window`]).
    pub window: usize,
    /// Operations per `multi` request, by the set's size.
    pub batch: Batch,
    /// The party sizes from which the debounce's jitter starts and is full.
    pub jitter_parties: JitterParties,
    /// Whether the items' lock directories are taken to exist at start: `false` when `<path>/locks` had no child
    /// when the member was built (a fresh path), so that the first creates do not each fail with `NoNode` first.
    pub lock_dirs_exist: bool,
    /// Whether a party change that is only departures may be handed over at once, under Incremental with a function
    /// that declares it ([`PartitionFn::departures_move_only_theirs`]); `false` keeps the quiet period for every
    /// change.
    pub departure_fast_path: bool,
}

impl std::fmt::Debug for CoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The partition function is a trait object; its announcement names it.
        f.debug_struct("CoreConfig")
            .field("items", &self.items.len())
            .field("identifier", &self.identifier)
            .field("party_node", &self.party_node)
            .field("agreement", &self.agreement)
            .field("session_policy", &self.session_policy)
            .field("rebalance", &self.rebalance)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").field("me", &self.party.me()).field("now", &self.now).finish_non_exhaustive()
    }
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
    /// A read of these items' lineage nodes (whether each is closed).
    Closed(Vec<usize>),
    ReadPlacement,
    WritePlacement,
}

/// The decision core. See the module docs for the table. Its state is one part per concern, each defined beside the
/// code that decides it.
pub struct Core {
    cfg: CoreConfig,
    now: Instant,
    /// The party as this member follows it, and our share of it ([`party`]).
    party: party::PartyView,
    /// Our share under the latest stable party ([`rebalance`]).
    share: rebalance::Share,
    /// The items: the set in force and the shared set followed ([`shared_set`]).
    set: shared_set::Following,
    /// The connection, and a suspension until the session's fate is known ([`suspension`]).
    session: suspension::SessionView,
    /// The placement record, for a function that keeps the placement.
    placement: placement::Placement,
    /// The lock table.
    locks: LockTable,
    /// What was published to the worker and what is owed to it ([`publication`]).
    published: publication::Published,
    /// Every stored timer ([`timers`]).
    timers: Timers,
    ending: Option<Ending>,
    /// The requests in flight and the actions not yet taken.
    out: Outbox,
}

/// The requests in flight, and the actions the driver has not taken yet.
#[derive(Debug, Default)]
struct Outbox {
    requests: HashMap<ReqId, Pending>,
    actions: VecDeque<Action>,
    next_id: u64,
    /// Nothing more will be asked.
    stopped: bool,
}

impl Core {
    /// A core for member `me`, starting to allocate at `now`.
    pub fn new(mut cfg: CoreConfig, me: Arc<str>, nonce: u128, now: Instant) -> Self {
        let count = cfg.items.len();
        let shared = cfg.shared_set.is_some();
        let weights = std::mem::take(&mut cfg.weights);
        let catalogue = Catalogue::new(std::mem::take(&mut cfg.items), cfg.shared_set, weights);
        // The jitter's seed: the random bits the contender prefixes are made from.
        let delays = timers::Delays::new(cfg.time_boundary);
        let debounce = Debounce::new(delays, cfg.jitter_parties, now, (nonce >> 64) as u64 ^ nonce as u64);
        let window = Window::new(cfg.batch.small.min(cfg.batch.large), cfg.window);
        let (dirs_exist, keeps_placement) = (cfg.lock_dirs_exist, cfg.partition_fn.keeps_placement());
        let mut core = Core {
            cfg,
            now,
            party: party::PartyView::new(me, debounce, now),
            share: rebalance::Share::new(),
            set: shared_set::Following::new(catalogue, shared),
            session: suspension::SessionView::new(),
            placement: placement::Placement::new(keeps_placement),
            locks: LockTable::new(nonce, count, dirs_exist, window, now),
            published: publication::Published::new(),
            timers: Timers::default(),
            ending: None,
            out: Outbox::default(),
        };
        core.start_allocation_clock();
        core.decide();
        core
    }

    /// The next action to perform, if any. Perform them in order: a publication queued before a delete must be
    /// visible before the delete is sent.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.out.actions.pop_front()
    }

    /// The item with this index (every index in an [`Op`] or a [`Publication`] has one).
    pub fn item(&self, index: usize) -> &Item {
        self.set.catalogue().item(index)
    }

    /// How many items have an index (indexes run from 0 to this, excluded).
    pub fn item_count(&self) -> usize {
        self.set.catalogue().len()
    }

    /// How many items the set in force has (the set the member divides; for the metrics).
    pub fn set_len(&self) -> usize {
        self.set.catalogue().set().len()
    }

    /// Whether the set comes from ZooKeeper (only a shared set has a version).
    fn shared(&self) -> bool {
        self.set.catalogue().version().is_some()
    }

    /// `indexes` as items.
    pub fn items_of(&self, indexes: &[usize]) -> Arc<[Item]> {
        self.set.catalogue().items_of(indexes)
    }

    /// Whether the core has stopped (after its final [`Action::Stop`]).
    pub fn is_stopped(&self) -> bool {
        self.out.stopped
    }

    /// Time passed: fire whatever is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        if self.ending.is_none() && self.timers.is_due(Timer::Allocation, now) {
            let limit = self.cfg.max_allocation_time.unwrap_or_default();
            self.fail(Cause::AllocationTimeout(limit));
        }
        let due = self.locks.take_due_retries(now);
        let (mut lists, mut dirs) = (Vec::new(), Vec::new());
        for item in due {
            match self.locks.get(item).map(|lock| lock.step()) {
                Some(Step::Delayed(_, Retry::List)) => lists.push(item),
                Some(Step::Delayed(_, Retry::MakeDir)) => dirs.push(item),
                _ => {}
            }
        }
        self.send_lists(lists);
        self.send_make_dirs(dirs);
        self.decide();
    }

    /// Something happened at `now`.
    pub fn handle(&mut self, event: Event, now: Instant) {
        self.tick(now);
        if self.out.stopped {
            return;
        }
        match event {
            Event::Connected => self.on_connected(),
            Event::Suspended => self.on_suspended(),
            Event::SessionEnded(end) => {
                self.on_session_ended(Cause::SessionEnded(end));
                self.session.ended();
            }
            Event::PartyChanged => {
                self.party.mark_stale();
                if self.hands_over_departures() {
                    // Judged on the read (a change that is only departures is handed over at once); the quiet
                    // period starts now either way.
                    self.party.restart_quiet_period(self.now);
                } else {
                    self.on_inputs_changed(Reason::PartyChanged);
                }
            }
            // Only a read that shows a different set starts a new episode.
            Event::SetChanged => self.set.mark_stale(),
            Event::PlacementChanged => self.placement.mark_stale(),
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
        if self.timers.is_due(Timer::Backoff, self.now) {
            self.timers.clear(Timer::Backoff);
        }
    }

    fn back_off(&mut self) {
        self.timers.set(Timer::Backoff, Some(self.now + self.cfg.max_reaction_time));
    }

    fn request(&mut self, op: Op, pending: Pending) -> ReqId {
        self.out.next_id += 1;
        let id = self.out.next_id;
        if let Pending::Locks(items) = &pending {
            self.locks.sent(id, items.len(), self.now);
        }
        self.out.requests.insert(id, pending);
        self.out.actions.push_back(Action::Request(id, op));
        id
    }

    /// Looks at everything known and queues what follows. Called after every event.
    fn decide(&mut self) {
        self.fire_stored_timers();
        if !self.out.stopped && self.ending.is_none() {
            self.decide_running();
            self.watch_held();
            if !self.session.suspended() {
                self.read_closed_if_due();
            }
        }
        // Also when the decision just now was to end.
        if !self.out.stopped && self.ending.is_some() {
            self.drive_ending();
        }
    }

    /// The rows of the table, in order: keep the inputs fresh; while suspended, only verify; work ahead in the quiet
    /// period; once it has lasted `time_boundary`, compute the target; then the rows of the rebalance mode.
    fn decide_running(&mut self) {
        self.read_stale_inputs();
        if self.session.suspended() {
            self.verify_held_once_connected();
            // Lock requests carry on (they wait for the reconnection); nothing else is decided meanwhile.
            return self.settle_locks();
        }
        self.prepare_if_due();
        if self.target_due()
            && self.party.fresh()
            && self.set.fresh()
            && self.session.connected()
            && self.party.quiet(self.now)
            && self.capacities_known()
            && self.placement.ready()
        {
            if !self.party.in_party() {
                self.rejoin();
                return self.settle_locks();
            }
            if let Err(cause) = self.take_assignment() {
                return self.fail(cause);
            }
        }
        self.decide_rebalance();
        self.settle_locks();
        self.write_placement_if_due();
    }

    /// The stored timers that only this fires, once due: after an event as after a timeout. (An event handled at the
    /// very instant a timer is due moves the clock past it, and `poll_timeout` no longer reports a passed stored
    /// timer: checked only on timeouts, the announcements' re-read was lost for good that way, and a member kept
    /// reporting another as on an older version of the set.)
    fn fire_stored_timers(&mut self) {
        if self.out.stopped {
            return;
        }
        self.read_announcements_if_due();
        if self.timers.is_due(Timer::Recovery, self.now) {
            self.timers.clear(Timer::Recovery);
            self.set.mark_stale();
        }
    }

    /// Whether a target is to be computed once the quiet period ends: none is in force, the set changed since, or a
    /// departure handed over at once left moves between survivors for then.
    fn target_due(&self) -> bool {
        self.share.target().is_none() || self.share.outdated() || self.share.deferred()
    }

    /// Whether requests that a lost connection would only make fail again may be sent.
    fn may_send(&self) -> bool {
        self.session.connected() && !self.timers.is_armed(Timer::Backoff)
    }

    /// Reads the party and the shared set again after a change notification.
    fn read_stale_inputs(&mut self) {
        self.read_party_if_stale();
        self.read_set_if_stale();
        self.read_placement_if_stale();
        // A weighted function waits for every member's capacity: a failed read of the announcements is sent again.
        if self.may_send() && self.party.fresh() && !self.capacities_known() {
            self.read_announcements(false);
        }
    }
}

#[cfg(test)]
mod tests;
