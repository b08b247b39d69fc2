//! What [`build()`](crate::Builder::build) does once the options are valid, on any session: the base paths, the shared
//! set (created, or read as committed), the member's announcement, the join, and the decision core of the new member.
//! Written against [`ZooKeeper`], so the simulation starts its members with the same code.

use std::time::Duration;

use crate::acl::NodeAcls;
use crate::agreement::Agreement;
use crate::decision::{Core, CoreConfig};
use crate::item_set::{SharedItems, SharedSet};
use crate::layout::Paths;
use crate::party::{self, Membership};
use crate::requests::Context;
use crate::session::SessionRef;
use crate::zookeeper::ZooKeeper;
use crate::{Error, Item, PartitionFn, Rebalance, SessionPolicy};

/// A member's validated configuration.
pub(crate) struct Settings {
    pub path: String,
    /// Sorted and validated; with a shared set, only its seed.
    pub items: Vec<Item>,
    pub partition_fn: Box<dyn PartitionFn>,
    pub identifier: String,
    pub time_boundary: Duration,
    pub retry_delay: Duration,
    pub max_allocation_time: Option<Duration>,
    pub session_policy: SessionPolicy,
    pub rebalance: Rebalance,
    pub static_membership: bool,
    /// Under static membership, how long to wait for another node carrying the identifier to go.
    pub identity_wait: Duration,
    pub shared_item_set: bool,
    pub acls: NodeAcls,
    /// Lock operations in flight at most, and per `multi`.
    pub window: usize,
    pub batch: crate::decision::Batch,
    /// The party sizes from which the debounce's jitter starts and is full ([`crate::decision::JitterParties`]).
    pub jitter_parties: crate::decision::JitterParties,
    /// Operations per `multi` of the shared set's updates (see [`SharedSet::with_chunk`]).
    pub set_chunk: usize,
}

/// A member that has joined: its core, what its request path needs, its party node.
pub(crate) struct Started {
    pub core: Core,
    pub context: Context,
    pub membership: Membership,
    pub paths: Paths,
}

/// Starts a member on `zk`. `join_name` is its party node's name (under static membership) or the start of it (see
/// [`layout::node_prefix`]), chosen by the caller so that it can find and delete the node if this is cancelled;
/// `nonce` seeds the member's contender prefixes and jitter.
pub(crate) async fn start<Z: ZooKeeper>(
    zk: &Z,
    settings: Settings,
    join_name: &str,
    nonce: u128,
) -> Result<Started, Error> {
    let mut paths = Paths::new(&settings.path);
    paths.acls = settings.acls.clone();
    let set = settings.shared_item_set.then(|| {
        SharedSet::new(SessionRef::Owned(zk.clone()), &settings.path, paths.acls.clone()).with_chunk(settings.set_chunk)
    });
    // A shared set with nothing to seed it must exist already: read it before creating anything, so that a path
    // without a set is an error that leaves no `<path>`, `party` or `locks` behind. Only a committed set is read.
    let nonempty = |set: &SharedSet<Z>, read: SharedItems| {
        if read.items.is_empty() { Err(Error::EmptyItemSet { path: set.paths().node.clone() }) } else { Ok(read) }
    };
    let followed = match &set {
        Some(set) if settings.items.is_empty() => Some(nonempty(set, set.read().await?)?),
        _ => None,
    };
    party::ensure_base(zk, &paths).await?;
    let lock_dirs_exist = crate::locks::any_dir(zk, &paths).await?;
    let (items, set, set_version) = if let Some(set) = set {
        let read = match followed {
            Some(read) => read,
            None => nonempty(&set, set.create_if_missing(settings.items).await?.0)?,
        };
        (read.items, Some(set.paths().clone()), Some(read.version))
    } else {
        (settings.items, None, None)
    };
    let partition_fn = settings.partition_fn;
    let agreement = Agreement::new(set.is_none().then_some(&items[..]), set_version, &*partition_fn, items.first());
    let node_data = agreement.node_data(&settings.identifier);
    let membership = if settings.static_membership {
        let wait = Some(settings.identity_wait);
        party::join_static(zk, &paths, &settings.identifier, &node_data, join_name, wait).await?
    } else {
        party::join_with_prefix(zk, &paths, &node_data, join_name).await?
    };
    let core = Core::new(
        CoreConfig {
            items,
            shared_set: set_version,
            agreement,
            partition_fn,
            time_boundary: settings.time_boundary,
            retry_delay: settings.retry_delay,
            max_allocation_time: settings.max_allocation_time,
            session_policy: settings.session_policy,
            rebalance: settings.rebalance,
            window: settings.window,
            batch: settings.batch,
            jitter_parties: settings.jitter_parties,
            lock_dirs_exist,
            identifier: settings.identifier.clone(),
            party_node: membership.node.clone(),
        },
        membership.name.clone(),
        nonce,
        zk.now(),
    );
    let context = Context::new(paths.clone(), settings.identifier, set, settings.static_membership, settings.set_chunk);
    Ok(Started { core, context, membership, paths })
}
