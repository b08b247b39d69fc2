//! What [`build()`](crate::Builder::build) does once the options are valid. [`start`], on any session: the base
//! paths, the shared set (created, or read as committed), the member's announcement, the join, and the decision core
//! of the new member; written against [`ZooKeeper`], so the simulation starts its members with the same code.
//! [`launch`], on zookeeper-client's `Client`: [`start`] guarded against cancellation, then the wiring of the member's
//! task (its driver, publisher and supervision) and of the handle.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::Instrument;
use zookeeper_client::Client;

use crate::acl::NodeAcls;
use crate::checkpoint::Checkpoints;
use crate::checkpoint_store::generation::{self, Generation};
use crate::driver::publish::Publisher;
use crate::driver::requests::Context;
use crate::driver::{self, Driver};
use crate::handle::Handle;
use crate::membership::{self, Membership, Naming};
use crate::paths::Paths;
use crate::retry::retry_transient;
use crate::session::SessionRef;
use crate::shared_set::{SetStore, SharedSetVersion};
use crate::zookeeper::ZooKeeper;
use crate::{Error, Item, Rebalance, SessionPolicy, SetPartitioner, SharedSet, Snapshot, partition::PartitionFn};
use proto::announcement::Agreement;
use proto::decision::{Core, CoreConfig};

/// A member's validated configuration.
pub(crate) struct Settings {
    pub path: String,
    /// Sorted and validated; with a shared set, only its seed.
    pub items: Vec<Item>,
    pub partition_fn: Box<dyn PartitionFn>,
    pub identifier: String,
    pub time_boundary: Duration,
    /// [`Builder::max_reaction_time`](crate::Builder::max_reaction_time): the pause before retrying a request lost
    /// with the connection.
    pub max_reaction_time: Duration,
    pub max_allocation_time: Option<Duration>,
    pub session_policy: SessionPolicy,
    pub rebalance: Rebalance,
    /// [`Builder::departure_fast_path`](crate::Builder::departure_fast_path).
    pub departure_fast_path: bool,
    pub static_membership: bool,
    /// Under static membership, how long to wait for another node carrying the identifier to go.
    pub identity_wait: Duration,
    pub shared_set: bool,
    /// This member's capacity, announced in its party node ([`Builder::capacity`](crate::Builder::capacity)).
    pub capacity: u32,
    pub acls: NodeAcls,
    /// Lock operations in flight at most, and per `multi`.
    pub window: usize,
    pub batch: proto::decision::Batch,
    /// The party sizes from which the debounce's jitter starts and is full ([`proto::decision::JitterParties`]).
    pub jitter_parties: proto::decision::JitterParties,
    /// Operations per `multi` of the shared set's updates (see [`SetStore::with_chunk`]).
    pub set_chunk: usize,
}

/// A member that has joined: its core, what its request path needs, its party node.
pub(crate) struct Started {
    pub core: Core,
    pub context: Context,
    pub membership: Membership,
    pub paths: Paths,
    /// The checkpoints in force when the member joined.
    pub checkpoints: Generation,
}

/// Starts a member on `zk`. `join_name` is its party node's name (under static membership) or the start of it (see
/// [`membership::fresh_node_name`]), chosen by the caller so that it can find and delete the node if this is cancelled;
/// `nonce` seeds the member's contender prefixes and jitter.
pub(crate) async fn start<Z: ZooKeeper>(
    zk: &Z,
    settings: Settings,
    join_name: &str,
    nonce: u128,
) -> Result<Started, Error> {
    let mut paths = Paths::new(&settings.path);
    paths.acls = settings.acls.clone();
    let set = settings.shared_set.then(|| {
        SetStore::new(SessionRef::Owned(zk.clone()), &settings.path, paths.acls.clone()).with_chunk(settings.set_chunk)
    });
    // A shared set with nothing to seed it must exist already: read it before creating anything, so that a path
    // without a set is an error that leaves no `<path>`, `party` or `locks` behind. Only a committed set is read.
    let nonempty = |set: &SetStore<Z>, read: SharedSetVersion| {
        if read.items.is_empty() { Err(Error::EmptySharedSet { path: set.paths().node.clone() }) } else { Ok(read) }
    };
    // An import being applied is waited for (or finished): its lineage nodes are moving into place.
    if let Some(set) = &set {
        set.settle_import().await?;
    }
    let followed = match &set {
        Some(set) if settings.items.is_empty() => Some(nonempty(set, set.read().await?)?),
        _ => None,
    };
    membership::ensure_base(zk, &paths).await?;
    let lock_dirs_exist = crate::lock_requests::any_dir(zk, &paths).await?;
    let (items, weights, set, set_version) = if let Some(set) = set {
        let read = match followed {
            Some(read) => read,
            None => nonempty(&set, set.create_if_missing(settings.items).await?.0)?,
        };
        (read.items, read.weights, Some(set.paths().clone()), Some(read.version))
    } else {
        (settings.items, Default::default(), None, None)
    };
    let partition_fn = settings.partition_fn;
    let mut agreement = Agreement::new(set.is_none().then_some(&items[..]), set_version, &*partition_fn, items.first());
    agreement.capacity = settings.capacity;
    let kazoo = Agreement::new(None, None, &crate::partition::KazooStride, items.first());
    let kazoo_compatible = agreement.function.is_none() || agreement.function == kazoo.function;
    let node_data = agreement.node_data(&settings.identifier);
    let naming = if settings.static_membership {
        Naming::Static { wait: Some(settings.identity_wait) }
    } else {
        Naming::Sequential
    };
    let membership = membership::join(zk, &paths, &settings.identifier, &node_data, join_name, naming).await?;
    // Read once in the party: an import of the party's progress needs an empty party and moves this node's version
    // in its commit, so a member that joined before one can never save after it (see `checkpoint_store::generation`).
    let checkpoints = match generation::read(zk, &settings.path, &paths.acls).await {
        Ok(checkpoints) => checkpoints,
        Err(err) => {
            // Not a member after all: its node goes now, not when the session ends.
            let _ = membership::leave(zk, &paths, &membership).await;
            return Err(err);
        }
    };
    let core = Core::new(
        CoreConfig {
            items,
            weights,
            shared_set: set_version,
            agreement,
            kazoo_compatible,
            partition_fn,
            time_boundary: settings.time_boundary,
            max_reaction_time: settings.max_reaction_time,
            max_allocation_time: settings.max_allocation_time,
            session_policy: settings.session_policy,
            rebalance: settings.rebalance,
            window: settings.window,
            batch: settings.batch,
            jitter_parties: settings.jitter_parties,
            lock_dirs_exist,
            departure_fast_path: settings.departure_fast_path,
            identifier: settings.identifier.clone(),
            party_node: membership.node.clone(),
        },
        membership.name.clone(),
        nonce,
        zk.now(),
    );
    let context = Context::new(paths.clone(), settings.identifier, set, settings.static_membership, settings.set_chunk);
    Ok(Started { core, context, membership, paths, checkpoints })
}

/// Starts a member on `client` (see [`start`]) and its background task on `runtime`, and returns its handle.
///
/// Cancel safe: if the future is dropped after the party node may have been created, a background task deletes it
/// (found by its name, ours alone), so no phantom member is left holding a share nobody locks.
pub(crate) async fn launch(
    runtime: &tokio::runtime::Handle,
    client: Client,
    settings: Settings,
) -> Result<SetPartitioner, Error> {
    let path = settings.path.clone();
    let mut paths = Paths::new(&path);
    paths.acls = settings.acls.clone();
    // The start of our party node's name (its whole name under static membership): ours alone, so a guard can find
    // and delete the node if this future is dropped before the member's task owns it.
    let join_name = membership::fresh_node_name(&client, &settings.identifier, settings.static_membership);
    let guard =
        JoinGuard { client: client.clone(), party: paths.party.clone(), prefix: join_name.clone(), armed: true };
    let session = client.state_watcher();
    let started = start(&client, settings, &join_name, uuid::Uuid::new_v4().as_u128()).await?;

    // The handle reaches the member's session only while the background task runs (see `session.rs`).
    let (member_session, release_session) = SessionRef::member(client.clone());
    let checkpoints =
        Arc::new(Checkpoints::new(member_session.clone(), &path, paths.clone(), started.checkpoints.clone()));
    let shared_set = started.context.set.as_ref().map(|_| {
        let on_member = SetStore::new(member_session.clone(), &path, paths.acls.clone());
        Arc::new(SharedSet::from_shared(on_member))
    });
    let span = tracing::info_span!("partitioner", path = %path, member = %started.membership.name);
    let (commands, command_rx) = mpsc::unbounded_channel();
    let (sender, snapshot) = watch::channel(Snapshot::initial(started.membership.name.clone()));
    let publisher = Publisher::new(Arc::new(sender), &started.paths, tokio::time::Instant::now().into_std());
    tracing::info!(parent: &span, "joined the party");
    let Started { core, context, membership, .. } = started;
    let driver = Driver::new(client, Arc::new(context), core, membership, session, command_rx, publisher);
    runtime.spawn(driver::supervise(driver, release_session).instrument(span));
    guard.disarm();
    Ok(SetPartitioner::new(Handle::new(commands, snapshot, checkpoints), shared_set))
}

/// Deletes our party node if `build()` is dropped between sending the join and handing the member to its driver.
struct JoinGuard {
    client: Client,
    party: String,
    prefix: String,
    armed: bool,
}

impl JoinGuard {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for JoinGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (client, party, prefix) = (self.client.clone(), self.party.clone(), std::mem::take(&mut self.prefix));
        runtime.spawn(async move {
            // Requests on one session apply in order: this listing sees the join if it was sent.
            let Ok(children) = retry_transient(&client, || client.list_children(&party)).await else { return };
            for child in children.into_iter().filter(|child| child.starts_with(&prefix)) {
                let membership = Membership::from_node(child);
                if let Err(err) = membership::leave(&client, &Paths::from_party(&party), &membership).await {
                    tracing::warn!(%err, "could not remove the party node of a cancelled build()");
                }
            }
        });
    }
}
