//! The lock table: one small machine per item's lock (create, list, watch the predecessor, held), batched and
//! within an in-flight window, and the release of what is no longer wanted. It reports back to the core through
//! `held` (taken), [`Core::on_held_gone`] (lost) and [`Core::released_all_unwanted`] (released).
//!
//! kazoo's lock recipe on the wire ([`crate::layout`]): a contender is an ephemeral sequential node with a prefix of
//! this member's alone, so a create whose reply was lost is found again by listing the directory.

mod machine;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Instant;

use super::window::Window;
use super::{AckId, ReqError, ReqId};

/// Held-lock watch registrations (one `getData` each) in flight at once. They are not on the way to `ACQUIRED` (the
/// core asks for them once its lock work has been quiet for `time_boundary`), yet each is a request of its own: a
/// hundred members registering a thousand each at once would queue 100,000 requests at one server. At 32 per member,
/// a thousand take a few hundred milliseconds; a node deleted before its watch is registered is seen as gone by the
/// registration itself.
pub(in crate::decision) const HELD_WATCH_REGISTRATIONS: usize = 32;

/// One item's lock, as far as we know.
#[derive(Debug, Clone)]
pub(super) struct Lock {
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

/// What the rest of the core reads of a lock; its transitions are this file's.
impl Lock {
    /// The fencing token: our node's creation zxid (0 until known).
    pub(super) fn token(&self) -> i64 {
        self.token
    }

    /// Our node's name once known.
    pub(super) fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    pub(super) fn step(&self) -> Step {
        self.step
    }

    /// When the lock was last found held.
    #[cfg(any(test, feature = "sim"))]
    pub(super) fn held_at(&self) -> Instant {
        self.held_at
    }
}

/// Where one item's lock is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
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
pub(super) enum Retry {
    List,
    MakeDir,
}

/// One lock directory as listed, the failure classified.
pub(super) type Listing = Result<(Vec<String>, i64), ReqError>;

/// What an item's lock does after a listing.
pub(super) enum Next {
    Held,
    Waiting,
    /// Create a contender (again).
    Queued,
    /// List again (to read our node's stat).
    List,
}

/// Every lock this member has or wants, and the indexes kept beside them.
pub(super) struct LockTable {
    entries: BTreeMap<usize, Lock>,
    /// The items whose lock we hold (a subset of `entries`).
    held: BTreeSet<usize>,
    /// The items whose lock we want; the rest of `entries` is released.
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
    /// Items whose lost request is retried at a time (by time).
    delayed: BTreeSet<(Instant, usize)>,
    /// Lock operations in flight (each item of a `Pending::Locks` counts one), kept within `window`.
    in_flight: usize,
    /// When a lock request was last sent or answered: held-lock watches wait for `time_boundary` without one.
    work_at: Instant,
    /// Held locks whose watch is not asked for yet (item → our node).
    unwatched: BTreeMap<usize, String>,
    /// When the oldest lock in `unwatched` was taken: its watch is asked for `2 × time_boundary` later at the latest.
    unwatched_since: Option<Instant>,
    /// Held locks whose watch is due, waiting for one of the [`HELD_WATCH_REGISTRATIONS`] (item → our node).
    to_watch: VecDeque<(usize, String)>,
    /// Held-lock watches being registered (requests not answered yet).
    registering: HashSet<ReqId>,
    /// The in-flight window, adapted to the server's latency ([`window`](super::window)).
    window: Window,
    /// Releases in flight, with the `release_set()` calls each answers.
    releases: HashMap<ReqId, Vec<AckId>>,
    /// Random bits from the driver, so contender prefixes are ours alone yet the core stays deterministic.
    nonce: u128,
    prefixes_issued: u128,
}

impl LockTable {
    pub fn new(nonce: u128, items: usize, dirs_exist: bool, window: Window, now: Instant) -> Self {
        LockTable {
            entries: BTreeMap::new(),
            held: BTreeSet::new(),
            want: BTreeSet::new(),
            unwanted_left: false,
            want_grew: false,
            want_is_target: false,
            queued: BTreeSet::new(),
            dirs_known: vec![dirs_exist; items],
            fresh_path: !dirs_exist,
            need_dirs: BTreeSet::new(),
            delayed: BTreeSet::new(),
            in_flight: 0,
            work_at: now,
            unwatched: BTreeMap::new(),
            unwatched_since: None,
            to_watch: VecDeque::new(),
            registering: HashSet::new(),
            window,
            releases: HashMap::new(),
            nonce,
            prefixes_issued: 0,
        }
    }

    /// Item `item`'s lock, if we have or want it.
    pub fn get(&self, item: usize) -> Option<&Lock> {
        self.entries.get(&item)
    }

    pub fn contains(&self, item: usize) -> bool {
        self.entries.contains_key(&item)
    }

    /// The items whose lock we hold.
    pub fn held(&self) -> &BTreeSet<usize> {
        &self.held
    }

    /// The items whose lock we want.
    pub fn want(&self) -> &BTreeSet<usize> {
        &self.want
    }

    /// Whether `want` is known to equal the target (neither changed since they were compared).
    pub fn want_is_target(&self) -> bool {
        self.want_is_target
    }

    /// Says whether `want` is known to equal the target: `false` whenever either may have changed.
    pub fn set_want_is_target(&mut self, known: bool) {
        self.want_is_target = known;
    }

    /// The catalogue grew to `items` items: their directories are not assumed to exist.
    pub fn grow_dirs(&mut self, items: usize) {
        self.dirs_known.resize(items, false);
    }

    /// Item `item`'s directory may be gone (its item left the set).
    pub fn forget_dir(&mut self, item: usize) {
        if let Some(known) = self.dirs_known.get_mut(item) {
            *known = false;
        }
    }

    /// Whether item `item`'s directory is taken to exist.
    #[cfg(test)]
    pub fn dir_known(&self, item: usize) -> bool {
        self.dirs_known.get(item).copied().unwrap_or(false)
    }

    /// The member reached `Acquired`: on a fresh path, the party's first allocation made the directories of every
    /// share, so from now on every directory is assumed (see `fresh_path`).
    pub fn acquired(&mut self) {
        if std::mem::take(&mut self.fresh_path) {
            self.dirs_known.fill(true);
        }
    }

    /// The session is gone and every node with it: nothing to release or delete, and nothing wanted.
    pub fn forget_all(&mut self) {
        self.to_watch.clear();
        self.want.clear();
        self.entries.clear();
        self.held.clear();
        self.queued.clear();
        self.need_dirs.clear();
        self.delayed.clear();
    }

    /// The earliest retry of a lost request: when, and for which item.
    pub fn next_retry(&self) -> Option<(Instant, usize)> {
        self.delayed.first().copied()
    }

    /// Takes every retry due at `now`, earliest first.
    pub fn take_due_retries(&mut self, now: Instant) -> Vec<usize> {
        let mut due = Vec::new();
        while let Some(&(at, item)) = self.delayed.first() {
            if at > now {
                break;
            }
            self.delayed.pop_first();
            due.push(item);
        }
        due
    }

    /// A lock request `id` for `count` items was sent at `now`.
    pub fn sent(&mut self, id: ReqId, count: usize, now: Instant) {
        self.in_flight += count;
        self.window.sent(id, now);
        self.work_at = now;
    }

    /// Request `id`'s reply came at `now`: news about the server's latency, for `ops` lock operations (0: not a lock
    /// request), `failed` or not, even when the reply is no longer wanted.
    pub fn timed(&mut self, id: ReqId, ops: usize, failed: bool, now: Instant) {
        self.window.replied(id, ops, failed, now);
    }

    /// Request `id` was answered for good: if it was a held-lock watch's registration, its slot is free.
    pub fn watch_answered(&mut self, id: ReqId) {
        self.registering.remove(&id);
    }

    /// A lock request for `count` items was answered at `now`.
    pub fn answered(&mut self, count: usize, now: Instant) {
        self.in_flight -= count;
        self.work_at = now;
    }

    /// The connection was lost: the window starts small again.
    pub fn restart_window(&mut self) {
        self.window.restart();
    }

    /// Whether a release is in flight.
    pub fn releasing(&self) -> bool {
        !self.releases.is_empty()
    }

    /// The `release_set()` calls release `id` answers.
    pub fn take_release_acks(&mut self, id: ReqId) -> Vec<AckId> {
        self.releases.remove(&id).unwrap_or_default()
    }
}
