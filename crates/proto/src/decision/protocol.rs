//! What the core and the code that performs its requests say to each other: events in, operations and publications
//! out, replies back, and the core's own terms for a failed request, a session's end and a failure's cause. Nothing
//! here is a ZooKeeper client type: the request path ([`crate::driver::requests`]) translates, and the core decides.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Detail;
use crate::placement::record as placement;
use crate::set_layout::{Kind, RawRead, Unfinished};
use crate::{Disagreement, FencingToken, PartitionState};

/// Identifies a request the core asked for; its [`Reply`] comes back with the same id.
pub type ReqId = u64;
/// Identifies a waiting `release_set()` or `finish()` call.
pub type AckId = u64;

/// What happened, as the core is told.
#[derive(Debug)]
pub enum Event {
    /// The session is connected (again, or still: the client may fold a disconnection and a reconnection into one
    /// change, so a "connected" while connected means the connection was suspended meanwhile).
    Connected,
    /// The connection is suspended: the session may or may not survive.
    Suspended,
    /// The session is over.
    SessionEnded(SessionEnd),
    /// The watch armed by the latest party read fired.
    PartyChanged,
    /// The watch armed by the latest read of the shared set fired.
    SetChanged,
    /// The watch armed by the latest read of the placement record fired.
    PlacementChanged,
    /// A request's outcome.
    Reply(ReqId, Reply),
    /// A handle called `release_set()`.
    ReleaseSet(AckId),
    /// A handle called `finish()` (`Some`), or every handle was dropped (`None`).
    Finish(Option<AckId>),
}

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    Expired,
    Closed,
    AuthFailed,
}

/// A request to ZooKeeper, by item index (the request path knows the paths).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// List `<path>/party` and arm a child watch (its firing is [`Event::PartyChanged`]).
    ReadParty,
    /// Read these party nodes' data (the members' announcements), in one read `multi`.
    ReadAnnouncements(Vec<String>),
    /// Write our party node's data again: our announcement changed (the version of the shared set we follow).
    Announce(String),
    /// Join the party again, with this node data (identifier and announcement): our party node is gone.
    Join(String),
    /// Delete these party nodes of ours that are not our member node (a join whose reply was lost landed late,
    /// beside the node of the join that followed): each would be a member nobody is, its share never taken.
    DeleteStrayNodes(Vec<String>),
    /// Make sure these items' lock directories exist.
    MakeDirs(Vec<usize>),
    /// Create one contender per item (`<dir>/<prefix>`, ephemeral sequential, data = `data`), all in one `multi`.
    Create { contenders: Vec<(usize, String)>, data: Arc<str> },
    /// List these items' lock directories in one read `multi`, each with our node's stat where a name is given.
    List(Vec<(usize, Option<String>)>),
    /// Wait until this contender (in the item's directory) changes or goes.
    Watch { item: usize, node: String },
    /// Delete these contenders (found by prefix when the node is unknown), then sweep any node of our session under
    /// `<path>/locks` that no tracked contender (`keep`, by prefix) accounts for; at most `window` deletes in flight.
    Release { nodes: Vec<OurNode>, keep: Vec<(usize, String)>, window: usize },
    /// `sync`, then check that each node still exists and belongs to our session.
    Verify(Vec<(usize, String)>),
    /// Leave the party: delete our party node.
    Leave,
    /// Read the shared set and arm a watch on its header (its firing is [`Event::SetChanged`]).
    ReadSet,
    /// Undo or finish the shared set's update whose writer is gone (the party's first member does it).
    RecoverSet(Unfinished),
    /// Tell when the lease of the writer of this change of the shared set goes.
    WatchLease(String),
    /// Delete these items' lock directories where they are empty (the items left the shared set).
    RemoveDirs(Vec<usize>),
    /// Tell when our held lock node (in the item's directory) is deleted: by us when we release it, or by someone
    /// else while we hold it. Answered twice: [`Reply::HeldWatchSet`] once the watch is registered (the core keeps
    /// a few registrations in flight at once), then [`Reply::HeldGone`] or [`Reply::HeldChanged`]; or only
    /// `HeldGone`, when the node was found gone or the registration failed.
    WatchHeld { item: usize, node: String },
    /// Read these items' lineage nodes (read-only `multi`s): whether each item is closed.
    ReadClosed(Vec<usize>),
    /// Read the placement record (its chunks only if its digest is not `expect`) and arm a watch on it (its firing
    /// is [`Event::PlacementChanged`]).
    ReadPlacement { expect: Option<u64>, kind: Kind },
    /// Write a new placement record over the one read at its version.
    WritePlacement(Box<placement::Write>),
}

/// One of our contender nodes, to delete: found by its prefix when its name is unknown (a create whose reply was
/// lost).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OurNode {
    pub item: usize,
    pub prefix: String,
    pub node: Option<String>,
}

/// ZooKeeper's answer to a failed request (the client's error, one for one): the core decides what each means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    NoNode,
    NodeExists,
    BadVersion,
    NotEmpty,
    NoAuth,
    /// The connection broke with the request in flight.
    ConnectionLoss,
    /// An I/O error or a connection timeout in the client (its `Custom` errors), with the request in flight.
    Io,
    Throttled,
    Timeout,
    NoHosts,
    SessionExpired,
    SessionMoved,
    ClientClosed,
    AuthFailed,
    Unimplemented,
    /// Another party node carries our static identifier (a rejoin's answer).
    IdentifierInUse,
    /// A lock directory's listing found the item finished (its lineage node, in the same consistent read): the lock
    /// is not to be held, whoever comes first. Retried as a lost request is: by then the set change that took the
    /// item out has arrived, and the lock is no longer wanted.
    Finished,
    Other,
}

/// A failed request: ZooKeeper's answer, and the error to report should it become the partitioner's failure cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failed {
    pub code: Code,
    pub error: Detail,
}

/// What a failed request means to the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReqError {
    /// The node (or its parent) does not exist.
    NoNode,
    /// Lost with the connection: it may or may not have been applied.
    Transient,
    /// Anything retrying cannot fix, including the end of the session.
    Fatal(Cause),
}

impl Code {
    /// Whether the request may have been lost with the connection (or is refused only for now), so that sending it
    /// again, after checking what the server did, is the answer: the one list, which the wire's own retry loops
    /// (`zk-partitioner`'s `retry::is_transient`) read too.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Code::ConnectionLoss | Code::Io | Code::Throttled | Code::Timeout | Code::NoHosts | Code::Finished
        )
    }
}

impl Failed {
    /// Which failures the core retries, which end the session, which end the partitioner: the one classification.
    pub fn classify(self) -> ReqError {
        match self.code {
            Code::NoNode => ReqError::NoNode,
            code if code.is_transient() => ReqError::Transient,
            Code::SessionExpired | Code::SessionMoved => ReqError::Fatal(Cause::SessionEnded(SessionEnd::Expired)),
            Code::ClientClosed => ReqError::Fatal(Cause::SessionEnded(SessionEnd::Closed)),
            Code::AuthFailed => ReqError::Fatal(Cause::SessionEnded(SessionEnd::AuthFailed)),
            _ => ReqError::Fatal(Cause::Refused(self.error)),
        }
    }
}

/// Why the partitioner ended (published as the crate's error by the driver).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// `finish()`, or every handle was dropped.
    Finished,
    SessionEnded(SessionEnd),
    /// A request refused for good (the error says which and why).
    Refused(Detail),
    /// The partition function panicked or returned something unusable.
    PartitionFn(String),
    AllocationTimeout(Duration),
    /// A bug: a reply that matches no request of its kind.
    Internal(String),
}

/// The party as read: the children of `<path>/party` (member nodes and anything else).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartyRead {
    pub children: Vec<String>,
}

/// A node's data, and the zxid of its last write (`mzxid`): a node written again, even with the same data, is another
/// write.
pub type NodeData = (Vec<u8>, i64);

/// One lock directory as listed: its children, and our node's creation zxid (0 if not read).
pub type DirListing = Result<(Vec<String>, i64), Failed>;

/// A request's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Party(Result<PartyRead, Failed>),
    /// Each node's data and the zxid of its last write, in request order (`None`: the node is gone).
    Announcements(Result<Vec<Option<NodeData>>, Failed>),
    Announced(Result<(), Failed>),
    StraysDeleted(Result<(), Failed>),
    /// Our new party node's name.
    Joined(Result<String, Failed>),
    DirsMade(Result<(), Failed>),
    /// Each created node's name and creation zxid (0 if the server did not say), in request order.
    Created(Result<Vec<(String, i64)>, Failed>),
    /// Per item, in request order: the children of its directory and our node's creation zxid (0 if not read).
    Listed(Result<Vec<DirListing>, Failed>),
    /// The watched contender changed or went.
    Changed(Result<(), Failed>),
    Released(Result<(), Failed>),
    /// Whether every verified node is still ours.
    Verified(Result<bool, Failed>),
    Left,
    /// The shared set's nodes as read (the core interprets them); a watch is armed either way.
    Set(Result<RawRead, Failed>),
    Recovered(Result<(), Failed>),
    /// The writer's lease is gone.
    LeaseGone(Result<(), Failed>),
    /// Best effort: directories still in use, or already gone, are left alone.
    DirsRemoved,
    /// The held lock node's watch is registered: [`Reply::HeldGone`] follows when it is deleted. Its request stays
    /// in flight (the one request that is answered twice).
    HeldWatchSet,
    /// The watched held lock node's data changed (someone wrote to our lock node: it is still ours), which used its
    /// one-shot watch: the core asks for the watch again, within its limit.
    HeldChanged,
    /// The watched held lock node is gone.
    HeldGone(Result<(), Failed>),
    /// Per item, in request order: whether its lineage node says it is closed (no node: not closed).
    Closed(Result<Vec<bool>, Failed>),
    /// The placement record as read; a watch is armed either way.
    Placement(Result<placement::Read, Failed>),
    /// Whether the record was written (`false`: it moved on since it was read).
    PlacementWritten(Result<bool, Failed>),
}

impl Reply {
    /// Whether a lock request failed the way an overloaded server fails it (the window backs off).
    pub fn failed(&self) -> bool {
        let transient = |failed: &Failed| matches!(failed.clone().classify(), ReqError::Transient);
        match self {
            Reply::DirsMade(Err(failed)) => transient(failed),
            Reply::Created(Err(failed)) => transient(failed),
            Reply::Listed(Err(failed)) => transient(failed),
            _ => false,
        }
    }
}

/// What the core asks for.
#[derive(Debug)]
pub enum Action {
    Request(ReqId, Op),
    /// Stop waiting for this request (a watch): its reply is no longer wanted.
    Cancel(ReqId),
    /// Boxed: a publication is several times the size of the other actions.
    Publish(Box<Publication>),
    Ack(AckId, Result<(), Cause>),
    /// The partitioner is done: nothing more will be asked.
    Stop,
}

/// A snapshot to publish (the driver adds the generation).
#[derive(Clone, Debug, PartialEq)]
pub struct Publication {
    /// A transition: the state, the listed items or their tokens, the revoked items, the suspension or the cause
    /// changed since the last publication (the snapshot's generation counts these). Otherwise only what the
    /// snapshot says beside them changed (the party the assignment follows, the set's version and change, the
    /// disagreements, the load, the closed items): the same state is not published again as a new one.
    pub transition: bool,
    pub state: PartitionState,
    pub member: Arc<str>,
    /// Listed items with their fencing tokens, in item order (not index order: indexes of items added to a shared
    /// set later come after the others whatever their item).
    pub items: Vec<(usize, FencingToken)>,
    /// Our lock node's name for each listed item, in the order of `items` (for fenced checkpoint writes).
    pub nodes: Vec<String>,
    /// In item order, as `items`.
    pub revoked: Vec<usize>,
    pub members: Arc<[String]>,
    pub cause: Option<Cause>,
    pub suspended: bool,
    /// The shared set's version and latest change the assignment follows.
    pub set: SetInForce,
    pub disagreements: Arc<[Disagreement]>,
    /// Our load under the assignment in force.
    pub load: Option<Arc<crate::Load>>,
    /// The listed items known to be closed, in item order (a subsequence of `items`).
    pub closed: Vec<usize>,
    pub reason: Reason,
}

/// The shared set an assignment was computed from: its version, and what its latest change added and removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetInForce {
    /// Which of the core's set changes (see `Catalogue::generation`).
    pub generation: u64,
    pub version: Option<u64>,
    pub added: Arc<[usize]>,
    pub removed: Arc<[usize]>,
}

/// Why a publication was made: for the log, and as the cause of a rebalance in the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    AllAcquired,
    Ended,
    RevokedReleased,
    SessionSurvived,
    ConnectionChanged,
    ConnectionSuspended,
    PartyChanged,
    SharedSetChanged,
    ItemsRevoked,
    TakingGained,
    LockLostInSuspension,
    HeldLockDeleted,
    ReleaseSet,
    Disagreement,
    ItemsClosed,
}

impl Reason {
    /// Every reason, in the order declared: the one list of them (the metrics' test walks it). A test holds it
    /// against an exhaustive match, so a new reason that is not listed here fails it.
    #[cfg(any(test, feature = "sim"))]
    pub const ALL: [Reason; 15] = [
        Reason::AllAcquired,
        Reason::Ended,
        Reason::RevokedReleased,
        Reason::SessionSurvived,
        Reason::ConnectionChanged,
        Reason::ConnectionSuspended,
        Reason::PartyChanged,
        Reason::SharedSetChanged,
        Reason::ItemsRevoked,
        Reason::TakingGained,
        Reason::LockLostInSuspension,
        Reason::HeldLockDeleted,
        Reason::ReleaseSet,
        Reason::Disagreement,
        Reason::ItemsClosed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::AllAcquired => "all assigned locks held",
            Reason::Ended => "ended",
            Reason::RevokedReleased => "revoked items released",
            Reason::SessionSurvived => "session survived the suspension",
            Reason::ConnectionChanged => "connection state changed",
            Reason::ConnectionSuspended => "connection suspended",
            Reason::PartyChanged => "party changed",
            Reason::SharedSetChanged => "shared set changed",
            Reason::ItemsRevoked => "party changed: items revoked",
            Reason::TakingGained => "taking gained items",
            Reason::LockLostInSuspension => "a lock node did not survive the suspension",
            Reason::HeldLockDeleted => "a held lock node was deleted by someone else",
            Reason::ReleaseSet => "release_set",
            Reason::Disagreement => "members disagree on their configuration",
            Reason::ItemsClosed => "items closed",
        }
    }

    /// The `cause` label of a rebalance that left `ACQUIRED` for this reason (`zk_partitioner::metrics::CAUSES`); `None` for
    /// reasons that never leave `ACQUIRED`.
    pub fn rebalance_cause(self) -> Option<&'static str> {
        match self {
            Reason::PartyChanged | Reason::ItemsRevoked | Reason::TakingGained => Some("party_changed"),
            Reason::SharedSetChanged => Some("shared_set_changed"),
            Reason::ConnectionChanged | Reason::ConnectionSuspended => Some("connection"),
            Reason::LockLostInSuspension | Reason::HeldLockDeleted => Some("lock_lost"),
            Reason::ReleaseSet => Some("release_set"),
            Reason::AllAcquired | Reason::Ended | Reason::RevokedReleased | Reason::SessionSurvived => None,
            Reason::Disagreement | Reason::ItemsClosed => None,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    #[test]
    fn every_reason_is_listed_once_in_all() {
        // Exhaustive: a new reason must be given its place here, and then in `Reason::ALL`.
        let place = |reason: Reason| match reason {
            Reason::AllAcquired => 0,
            Reason::Ended => 1,
            Reason::RevokedReleased => 2,
            Reason::SessionSurvived => 3,
            Reason::ConnectionChanged => 4,
            Reason::ConnectionSuspended => 5,
            Reason::PartyChanged => 6,
            Reason::SharedSetChanged => 7,
            Reason::ItemsRevoked => 8,
            Reason::TakingGained => 9,
            Reason::LockLostInSuspension => 10,
            Reason::HeldLockDeleted => 11,
            Reason::ReleaseSet => 12,
            Reason::Disagreement => 13,
            Reason::ItemsClosed => 14,
        };
        let places: Vec<usize> = Reason::ALL.into_iter().map(place).collect();
        assert_eq!(places, (0..Reason::ALL.len()).collect::<Vec<_>>());
    }
}
