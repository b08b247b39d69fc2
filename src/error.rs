//! The crate's error type.

use zookeeper_client::SessionState;

use proto::error::{InputError, shown, shown_path};

use crate::retry::session_end;

/// Everything that can go wrong in this crate.
///
/// Configuration mistakes ([`InvalidConfig`](Error::InvalidConfig), [`InvalidItem`](Error::InvalidItem)) are returned
/// by [`Builder::build`](crate::Builder::build) before anything is written to ZooKeeper. The other variants describe
/// why a partitioner reached [`PartitionState::Failure`](crate::PartitionState::Failure); the cause is kept in the
/// published [`Snapshot`](crate::Snapshot), so the type is `Clone`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option is out of range or malformed.
    #[error("invalid {field}: {reason}")]
    InvalidConfig {
        /// The option, e.g. `path` or `time_boundary`.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// An item cannot be used as a lock node name, or collides with another item.
    #[error("invalid item {}: {reason}", shown(item))]
    InvalidItem {
        /// The item's rendering (its lock node name).
        item: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A weight is malformed or out of range ([`Weight`](crate::weighted::Weight)).
    #[error("invalid weight {weight}: {reason}")]
    InvalidWeight {
        /// The weight as given (quoted, and cut if long).
        weight: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A member capacity is out of range ([`Builder::capacity`](crate::Builder::capacity)).
    #[error("invalid capacity {capacity}: a capacity is 1 to {max}")]
    InvalidCapacity {
        /// The capacity as given.
        capacity: u32,
        /// The largest capacity.
        max: u32,
    },

    /// ZooKeeper refused a request for lack of permission (`NoAuth`): the node's ACL does not grant this session's
    /// authentication the permission the request needs. Never retried: authenticate the session (e.g.
    /// `Connector::with_auth`) as the identity the nodes were created for, or fix the ACL (see
    /// [`Builder::acls`](crate::Builder::acls)).
    #[error(
        "no permission to {op} {}: ZooKeeper answered NoAuth (the session's authentication lacks {permission})",
        shown_path(path)
    )]
    PermissionDenied {
        /// The request, e.g. `create`.
        op: &'static str,
        /// The node the request was about (for a create or a delete, the permission is checked on its parent).
        path: String,
        /// The permission that was missing, e.g. `CREATE on the parent node`.
        permission: &'static str,
    },

    /// A ZooKeeper request failed in a way this crate does not retry.
    #[error("zookeeper {op} {}: {source}", shown_path(path))]
    ZooKeeper {
        /// The request, e.g. `create` or `get_children`.
        op: &'static str,
        /// The node the request was about.
        path: String,
        /// The client's error.
        #[source]
        source: zookeeper_client::Error,
    },

    /// The ZooKeeper session ended (expired, closed or failed authentication): every node it owned is gone.
    #[error("zookeeper session {state}")]
    SessionLost {
        /// The terminal session state that was observed.
        state: SessionState,
    },

    /// The user-supplied partition function returned something unusable.
    #[error("partition function {reason}")]
    PartitionFn {
        /// What it returned.
        reason: String,
    },

    /// Allocation did not reach [`Acquired`](crate::PartitionState::Acquired) within
    /// [`Builder::max_allocation_time`](crate::Builder::max_allocation_time).
    #[error("allocation did not complete within {0:?}")]
    AllocationTimeout(std::time::Duration),

    /// Under [`Builder::static_membership`](crate::Builder::static_membership), another party node carries this
    /// member's identifier and did not go within [`Builder::max_identity_wait`](crate::Builder::max_identity_wait).
    ///
    /// Either another live process uses the same identifier (static identifiers must be unique in the party), or a
    /// crashed predecessor's session outlives the wait (make the wait longer than the session timeout the
    /// predecessor used). Returned by [`Builder::build`](crate::Builder::build), which then leaves nothing behind.
    /// Also the [`Failure`](crate::PartitionState::Failure) cause of a static member whose party node was deleted
    /// (by an operator) and whose identifier another process took meanwhile: it does not join a second time.
    #[error(
        "static identifier {} is in use by party node {} of session {session} (waited {waited:?}): another live \
         member has this identifier, or a crashed predecessor's session has not expired yet",
        shown(identifier),
        shown_path(node)
    )]
    IdentifierInUse {
        /// The identifier.
        identifier: String,
        /// The other party node carrying it (its name under `<path>/party`).
        node: String,
        /// That node's session (`ephemeralOwner`).
        session: i64,
        /// How long this member waited for it to go.
        waited: std::time::Duration,
    },

    /// There is no shared set at this path yet (create one with
    /// [`SharedSet::create_if_missing`](crate::SharedSet::create_if_missing), or give the builder items to seed it).
    #[error("no shared set at {path}: create it first (or give the builder items to seed it)")]
    SharedSetMissing {
        /// The set's node, `<path>/items`.
        path: String,
    },

    /// The shared set's node holds something this crate did not write.
    #[error("the shared set at {path} is unreadable: {reason}")]
    SharedSetCorrupt {
        /// The set's node.
        path: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A conditional update of the shared set found another version than the one it was based on.
    #[error("the shared set at {path} changed meanwhile: {reason}")]
    SharedSetConflict {
        /// The set's node.
        path: String,
        /// Which versions, or how often it was retried.
        reason: String,
    },

    /// The session ended while the commit of an update of the shared set had its reply lost, before the
    /// update's outcome marker could be looked for: the update may be in force or not. Its token says which: the
    /// set's header lists the tokens of its latest updates (read it on a new session, with
    /// [`SharedSet::lineage`](crate::SharedSet) or by hand, before many more updates land).
    #[error(
        "the update {token} of the shared set at {path} may or may not have been applied: the session ended \
         before its outcome could be read"
    )]
    SharedSetOutcomeUnknown {
        /// The set's node.
        path: String,
        /// The update's token (16 hex digits), as the header's `log=` records it if the update landed.
        token: String,
    },

    /// An update would leave the shared set empty. A set of nothing would silently stop every member's work;
    /// to retire a partition path, stop its members instead.
    #[error("refusing to leave the shared set at {path} empty")]
    EmptySharedSet {
        /// The set's node.
        path: String,
    },

    /// [`connect`](crate::connect) opened no session within its connect timeout. The reason says, for each server
    /// of the connect string, what went wrong: the host name does not resolve, the connection was refused (nothing
    /// listens there), the server is unreachable (no answer), or it accepted connections but opened no session.
    #[error("cannot connect to ZooKeeper at {}: {reason}", shown_path(cluster))]
    Connect {
        /// The connect string, as given.
        cluster: String,
        /// What went wrong, per server.
        reason: String,
    },

    /// A PEM file given to [`tls_options`](crate::connection::tls_options) or
    /// [`tls_options_with_identity`](crate::connection::tls_options_with_identity) cannot be read or does not hold what it should.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    #[error("TLS {what} {}: {reason}", shown_path(file))]
    Tls {
        /// Which file: `CA certificate`, `client certificate` or `client private key`.
        what: &'static str,
        /// The file, as given.
        file: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The chroot of the connect string (`host:port/chroot`) does not exist on the server. ZooKeeper does not create
    /// it: create the node first, or leave the chroot out and give the partitioner a longer path.
    #[error(
        "the chroot {} of the connect string does not exist: create that node first (ZooKeeper does not create \
         chroots), or leave it out of the connect string",
        shown_path(chroot)
    )]
    ChrootMissing {
        /// The chroot path.
        chroot: String,
    },

    /// [`SetPartitioner::finish`](crate::SetPartitioner::finish) was called.
    #[error("partitioner finished")]
    Finished,

    /// The partitioner's background task is gone: its Tokio runtime shut down, or it ended (after
    /// [`finish`](crate::SetPartitioner::finish) or a failure) and released the member's session, which the handle's
    /// checkpoint reads and [`shared_set`](crate::SetPartitioner::shared_set) then no longer use.
    #[error("partitioner task stopped")]
    Stopped,

    /// A bug in this crate: its background task panicked or reached a state it should never reach. The partitioner
    /// failed safely (nothing listed, locks released when possible); please report the reason.
    #[error("internal error in the partitioner (please report it): {reason}")]
    Internal {
        /// What went wrong.
        reason: String,
    },

    /// [`describe`](crate::describe()) was given a partition path that does not exist.
    #[error("partition path {path} does not exist")]
    PathNotFound {
        /// The path, relative to the client's chroot.
        path: String,
    },

    /// A checkpoint was to be written for an item this member does not hold: it is not among the items the
    /// partitioner lists now ([`SetPartitioner::items`](crate::SetPartitioner::items)). Nothing was sent.
    #[error("item {item:?} of partition {path} is not held by this member, so its checkpoint cannot be written")]
    NotHeld {
        /// The item's lock node name.
        item: String,
        /// The partition path.
        path: String,
    },

    /// ZooKeeper refused a checkpoint save because the member no longer holds the item through the lock node the
    /// writer was made with: the item was released, or the member's session ended (a paused process, for
    /// instance). Nothing was written: a newer owner's checkpoint is safe.
    #[error("checkpoint of item {item:?} refused: this member no longer holds it ({reason}; lock node {lock_node})")]
    CheckpointFenced {
        /// The item's lock node name.
        item: String,
        /// The lock node the save checked.
        lock_node: String,
        /// Why the member no longer holds it.
        reason: String,
    },

    /// A checkpoint is larger than [`MAX_CHECKPOINT_SIZE`](crate::checkpoint::MAX_CHECKPOINT_SIZE). Nothing was sent.
    #[error("checkpoint of item {item:?} is {size} bytes; at most {limit} are allowed")]
    CheckpointTooLarge {
        /// The item's lock node name.
        item: String,
        /// The checkpoint's size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },

    /// A progress token ([`Progress`](crate::shared_set::Progress)) that cannot be imported: not JSON, cut short, of
    /// a format this version does not read (a newer one), or with contents that are not one party's progress.
    /// Nothing was written.
    #[error("invalid progress token: {reason}")]
    InvalidProgress {
        /// What is wrong with it.
        reason: String,
    },

    /// An import ([`SharedSet::import`](crate::SharedSet::import)) refused, with nothing changed: the party is
    /// running (a member in the party, or a lock held or waited for; or a member joined while the import was being
    /// written, which its commit then fails), or the token does not fit the path.
    #[error("import into {path} refused: {reason}{}", holders_shown(holders))]
    ImportRefused {
        /// The partition path.
        path: String,
        /// Why.
        reason: String,
        /// The members in the party, or the lock holders (`<identifier> (item <item>)`), at most ten.
        holders: Vec<String>,
    },

    /// A checkpoint node holds data this crate did not write (or a newer version's format).
    #[error("checkpoint of item {item:?} at {path} cannot be read: {reason}")]
    CheckpointCorrupt {
        /// The item's lock node name.
        item: String,
        /// The checkpoint node.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    /// Wraps a client error with the request and node it concerns. A terminal session error becomes
    /// [`Error::SessionLost`], so the cause of a Failure reads the same whichever request saw it first.
    pub(crate) fn zk(op: &'static str, path: impl Into<String>, source: zookeeper_client::Error) -> Self {
        if source == zookeeper_client::Error::NoAuth {
            return Error::PermissionDenied { op, path: path.into(), permission: permission_for(op) };
        }
        match session_end(&source) {
            Some(state) => Error::SessionLost { state },
            None => Error::ZooKeeper { op, path: path.into(), source },
        }
    }

    pub(crate) fn config(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidConfig { field, reason: reason.into() }
    }
}

/// `: a, b` for the holders an import refusal names (nothing for none).
fn holders_shown(holders: &[String]) -> String {
    match holders {
        [] => String::new(),
        holders => format!(": {}", holders.iter().map(|h| shown(h)).collect::<Vec<_>>().join(", ")),
    }
}

/// The permission ZooKeeper checks for a request (`ZooDefs.Perms`): creating and deleting a node need CREATE and
/// DELETE on its parent, writing data WRITE on the node, reading READ.
fn permission_for(op: &str) -> &'static str {
    if op.contains("create") || op == "mkdir" {
        "CREATE on the parent node"
    } else if op.contains("delete") {
        "DELETE on the parent node"
    } else if op.contains("set_data") || op.contains("check") || op == "multi" {
        "WRITE (or CREATE/DELETE on a parent) for one of the operations"
    } else {
        "READ"
    }
}

impl From<InputError> for Error {
    fn from(error: InputError) -> Self {
        match error {
            InputError::InvalidConfig { field, reason } => Error::InvalidConfig { field, reason },
            InputError::InvalidItem { item, reason } => Error::InvalidItem { item, reason },
            InputError::InvalidWeight { weight, reason } => Error::InvalidWeight { weight, reason },
            InputError::InvalidCapacity { capacity, max } => Error::InvalidCapacity { capacity, max },
            // `InputError` is non-exhaustive: a variant added to the protocol but not yet here is still reported.
            other => Error::Internal { reason: other.to_string() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_in_messages() {
        let long = "x".repeat(2000);
        let err = Error::InvalidItem { item: long.clone(), reason: "is 2000 bytes long".into() };
        let message = err.to_string();
        assert_eq!(message, format!("invalid item \"{}\"… (2000 bytes): is 2000 bytes long", "x".repeat(64)));
        let path = format!("/p/locks/{long}");
        let err = Error::zk("create", path.as_str(), zookeeper_client::Error::NoNode);
        assert!(err.to_string().ends_with("… (2009 bytes): node not exists"), "{err}");
        assert!(err.to_string().len() < 200, "{err}");
    }
}
