//! The [`Builder`]: a partitioner's options, checked all at once by [`validate`](Builder::validate) before anything
//! is written; [`build`](Builder::build) then hands the validated [`Settings`] to [`startup`], which joins the party
//! and starts the member's task.

use std::fmt;
use std::time::Duration;

use zookeeper_client::Client;

use crate::acl::NodeAcls;
use crate::startup::{self, Settings};
use crate::{
    Error, Item, Rebalance, SessionPolicy, SetPartitioner,
    partition::{KazooStride, PartitionFn},
};
use proto::item::validate_items;
use proto::names::{check_base_path, check_identifier};

/// kazoo's default `time_boundary`.
const DEFAULT_TIME_BOUNDARY: Duration = Duration::from_secs(30);
/// kazoo's default `max_reaction_time`.
const DEFAULT_MAX_REACTION_TIME: Duration = Duration::from_secs(1);
/// The longest `time_boundary`, `max_reaction_time` or `max_allocation_time` accepted: longer is surely a unit
/// mistake (milliseconds given as seconds).
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// Lock requests in flight at once: enough to keep one connection busy, few enough not to flood the server.
const DEFAULT_WINDOW: usize = 1000;

/// Configures and starts a [`SetPartitioner`]. Made by [`SetPartitioner::builder`].
///
/// Every option is checked by [`build`](Builder::build) before anything is written to ZooKeeper.
#[must_use = "a builder does nothing until build() is awaited"]
pub struct Builder {
    client: Client,
    path: String,
    items: Vec<Item>,
    partition_fn: Option<Box<dyn PartitionFn>>,
    identifier: Option<String>,
    time_boundary: Duration,
    max_reaction_time: Duration,
    max_allocation_time: Option<Duration>,
    session_policy: SessionPolicy,
    rebalance: Rebalance,
    departure_fast_path: bool,
    static_membership: bool,
    max_identity_wait: Option<Duration>,
    shared_set: bool,
    capacity: u32,
    acls: Option<NodeAcls>,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("path", &self.path)
            .field("items", &self.items.len())
            .field("custom_partition_fn", &self.partition_fn.is_some())
            .field("identifier", &self.identifier)
            .field("time_boundary", &self.time_boundary)
            .field("max_reaction_time", &self.max_reaction_time)
            .field("max_allocation_time", &self.max_allocation_time)
            .field("session_policy", &self.session_policy)
            .field("rebalance", &self.rebalance)
            .field("departure_fast_path", &self.departure_fast_path)
            .field("static_membership", &self.static_membership)
            .field("max_identity_wait", &self.max_identity_wait)
            .field("shared_set", &self.shared_set)
            .field("capacity", &self.capacity)
            .field("acls", &self.acls)
            .finish()
    }
}

impl Builder {
    /// The function deciding which items each member owns; default [`KazooStride`], kazoo's own. Every member of a
    /// party must use the same one.
    ///
    /// The method keeps kazoo's parameter name (`SetPartitioner(..., partition_func=...)`), so that a kazoo user finds
    /// it; everywhere else the crate calls it the partition function, [`PartitionFn`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::{SetPartitioner, partition::Rendezvous};
    ///
    /// // Rendezvous hashing moves few items when a member joins or leaves.
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", 0..100)
    ///     .partition_func(Rendezvous::default())
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn partition_func(mut self, partition_fn: impl PartitionFn) -> Self {
        self.partition_fn = Some(Box::new(partition_fn));
        self
    }

    /// This member's identifier, stored in its party node; default `<hostname>-<pid>`, as kazoo. It need not be
    /// unique: the member's name adds the party node's sequence number. Under
    /// [`static_membership`](Builder::static_membership) it is required, must be unique in the party, must not end in
    /// `-<10 digits>` (a dynamic member's name), and is the member's name.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::SetPartitioner;
    ///
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", ["q1", "q2"])
    ///     .identifier("ingest-eu-1") // shown in the party node, the lock nodes' data and the logs
    ///     .build()
    ///     .await?;
    /// assert!(partitioner.snapshot().member.starts_with("ingest-eu-1-"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn identifier(mut self, identifier: impl Into<String>) -> Self {
        self.identifier = Some(identifier.into());
        self
    }

    /// How long the party must go without a change before the items are divided; default 30 s, as kazoo. Every party
    /// change restarts the wait. A change of the [shared set](Builder::shared_set) starts it only when no
    /// wait is under way, so a stream of set changes (a burst of finishes) waits after its first change, not after its
    /// last: `time_boundary` under [`Rebalance::Eager`](crate::Rebalance::Eager), where every member releases
    /// everything; a quarter of it under [`Rebalance::Incremental`](crate::Rebalance::Incremental), where nobody stops
    /// what they keep and the wait only gathers the stream's versions into one new assignment.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    /// use zk_partitioner::SetPartitioner;
    ///
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", ["q1", "q2"])
    ///     .time_boundary(Duration::from_secs(5)) // members starting within 5 s of each other divide once
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn time_boundary(mut self, time_boundary: Duration) -> Self {
        self.time_boundary = time_boundary;
        self
    }

    /// kazoo's `max_reaction_time`, default 1 s. kazoo polls contended locks at this period to notice party changes;
    /// this crate reacts to changes through watches at once, and uses the value as the pause before retrying a
    /// request that was lost with the connection.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    /// use zk_partitioner::SetPartitioner;
    ///
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", ["q1", "q2"])
    ///     .max_reaction_time(Duration::from_millis(200))
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_reaction_time(mut self, max_reaction_time: Duration) -> Self {
        self.max_reaction_time = max_reaction_time;
        self
    }

    /// Fail (with [`Error::AllocationTimeout`]) if an allocation does not reach
    /// [`PartitionState::Acquired`](crate::PartitionState::Acquired) within this time, counted from entering
    /// [`PartitionState::Allocating`](crate::PartitionState::Allocating). Off by default, as in kazoo; without it, a
    /// party that changes more often than `time_boundary` keeps every member allocating.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    /// use zk_partitioner::{Error, PartitionState, SetPartitioner};
    ///
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", ["q1", "q2"])
    ///     .max_allocation_time(Duration::from_secs(120))
    ///     .build()
    ///     .await?;
    /// if partitioner.wait_for_acquire(Duration::from_secs(180)).await == PartitionState::Failure {
    ///     assert!(matches!(partitioner.snapshot().cause, Some(Error::AllocationTimeout(_))));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_allocation_time(mut self, limit: Duration) -> Self {
        self.max_allocation_time = Some(limit);
        self
    }

    /// How a suspended connection is handled; default [`SessionPolicy::Standard`] (kazoo's: release everything).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::{SessionPolicy, SetPartitioner};
    ///
    /// // A connection stall shorter than the session timeout pauses the worker but moves no item.
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", ["q1", "q2"])
    ///     .session_policy(SessionPolicy::SessionAware)
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn session_policy(mut self, policy: SessionPolicy) -> Self {
        self.session_policy = policy;
        self
    }

    /// What happens when the party changes; default [`Rebalance::Eager`](crate::Rebalance::Eager) (kazoo's: everyone
    /// stops everything).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::{Rebalance, SetPartitioner, partition::Rendezvous};
    ///
    /// // Only the items that move stop (they are in `revoked()` in Release); the others keep being processed.
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", 0..1000)
    ///     .partition_func(Rendezvous::default())
    ///     .rebalance(Rebalance::Incremental)
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rebalance(mut self, rebalance: Rebalance) -> Self {
        self.rebalance = rebalance;
        self
    }

    /// Whether a member's departure is handed over at once; default `true`. It applies under
    /// [`Rebalance::Incremental`](crate::Rebalance::Incremental) with a partition function whose departures move only
    /// the departed member's items ([`Rendezvous`](crate::partition::Rendezvous),
    /// [`WeightedRendezvous`](crate::weighted::WeightedRendezvous): see
    /// [`PartitionFn::departures_move_only_theirs`](crate::partition::PartitionFn::departures_move_only_theirs)).
    /// Then, when the party changes only by departures (sessions that ended, members that finished), the survivors
    /// take the departed members' items as soon as their lock nodes are gone, without waiting `time_boundary`; joins
    /// and everything else still wait the quiet period ([the guide](crate::guide::departures)).
    ///
    /// `false` keeps the quiet period for every change, as before: a member whose session expired during a stall then
    /// has `time_boundary` more before the others start on its items. With the fast path that margin is gone, and
    /// the session timeout alone separates a stalled member from its successors; fenced checkpoints
    /// ([`SetPartitioner::checkpoint_writer`](crate::SetPartitioner::checkpoint_writer)) stay safe either way.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::{Rebalance, SetPartitioner, partition::Rendezvous};
    ///
    /// // Every party change waits time_boundary, departures included.
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", 0..1000)
    ///     .partition_func(Rendezvous::default())
    ///     .rebalance(Rebalance::Incremental)
    ///     .departure_fast_path(false)
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn departure_fast_path(mut self, enabled: bool) -> Self {
        self.departure_fast_path = enabled;
        self
    }

    /// This member's capacity: its size relative to the other members' (default 1; 1 to
    /// [`MAX_CAPACITY`](crate::weighted::MAX_CAPACITY)). A weighted partition function
    /// ([`WeightedRendezvous`](crate::weighted::WeightedRendezvous)) gives a member of capacity 4 four times the weight of a
    /// member of capacity 1; the others ignore it. It is announced in the member's party node, where every member
    /// reads it; a member that announces none (a kazoo member) counts as capacity 1.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::{SetPartitioner, weighted::WeightedRendezvous};
    ///
    /// // An 8-core machine among 2-core ones.
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", Vec::<String>::new())
    ///     .shared_set(true)
    ///     .partition_func(WeightedRendezvous::default())
    ///     .capacity(4)
    ///     .build()
    ///     .await?;
    /// # drop(partitioner);
    /// # Ok(())
    /// # }
    /// ```
    pub fn capacity(mut self, capacity: u32) -> Self {
        self.capacity = capacity;
        self
    }

    /// Static membership (Kafka's `group.instance.id`, KIP-345): the member's name in the party is exactly its
    /// [`identifier`](Builder::identifier), so a process restarted with the same identifier gets the same name back,
    /// and any stable [`PartitionFn`] gives it the same items. Off by default (kazoo's and this crate's default
    /// naming, `<identifier>-<sequence>`, gives each process a new name).
    ///
    /// With it:
    /// - the identifier must be given explicitly (there is no `<hostname>-<pid>` default: a pid changes on restart)
    ///   and must be unique in the party;
    /// - the party node is `<path>/party/<32 hex>-<identifier>`, ephemeral, exactly kazoo's `ShallowParty` node, so
    ///   kazoo members read the name as this crate's members do;
    /// - if another party node already carries the identifier when [`build`](Builder::build) runs (a crashed
    ///   predecessor whose session has not expired yet, or a live duplicate), `build()` logs it (a `tracing` warning
    ///   naming the node and its session), watches it, and joins once it is gone; if it outlives
    ///   [`max_identity_wait`](Builder::max_identity_wait), `build()` fails with [`Error::IdentifierInUse`].
    ///
    /// A restart shorter than [`time_boundary`](Builder::time_boundary) is then no party change for the others: the
    /// party they read once it is quiet again has the same names. Under
    /// [`Rebalance::Incremental`](crate::Rebalance::Incremental) they keep every item throughout and publish nothing;
    /// the restarted member takes back exactly its old items (free since its `finish()`, or since its old session
    /// expired after a crash). Under [`Rebalance::Eager`](crate::Rebalance::Eager) every member still stops everything
    /// on the leave and the join (kazoo's rule), and gets the same items back. Choose `time_boundary` longer than a
    /// restart takes, and, for crashes, expect the restarted process to wait up to the old session's timeout.
    ///
    /// Reattaching to the old ZooKeeper session after a crash (keeping its lock nodes) is not supported: a crash
    /// restart waits for the old session to expire.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    /// use zk_partitioner::{Rebalance, SetPartitioner, partition::Rendezvous};
    ///
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", ["q1", "q2", "q3"])
    ///     .identifier("worker-3") // e.g. a StatefulSet pod name: unique, and the same after a restart
    ///     .static_membership(true)
    ///     .partition_func(Rendezvous::default())
    ///     .rebalance(Rebalance::Incremental)
    ///     .time_boundary(Duration::from_secs(15)) // longer than a restart takes
    ///     .build()
    ///     .await?;
    /// assert_eq!(&*partitioner.snapshot().member, "worker-3");
    /// # Ok(())
    /// # }
    /// ```
    pub fn static_membership(mut self, enabled: bool) -> Self {
        self.static_membership = enabled;
        self
    }

    /// Under [`static_membership`](Builder::static_membership), how long [`build`](Builder::build) waits for another
    /// party node carrying this member's identifier to go before failing with [`Error::IdentifierInUse`].
    ///
    /// Default: twice the client's negotiated session timeout (`Client::session_timeout()`), enough for a crashed
    /// predecessor that used the same session timeout to expire. A predecessor with a longer session timeout needs a
    /// longer wait. Setting it without static membership is a configuration error.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    /// use zk_partitioner::{Error, SetPartitioner};
    ///
    /// // The previous process of this pod may have crashed with a 30 s session: wait for it up to a minute.
    /// let built = SetPartitioner::builder(client, "/work_queues", ["q1", "q2"])
    ///     .identifier("worker-3")
    ///     .static_membership(true)
    ///     .max_identity_wait(Duration::from_secs(60))
    ///     .build()
    ///     .await;
    /// if let Err(Error::IdentifierInUse { node, .. }) = &built {
    ///     eprintln!("another live process is worker-3 (party node {node})");
    /// }
    /// let partitioner = built?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_identity_wait(mut self, limit: Duration) -> Self {
        self.max_identity_wait = Some(limit);
        self
    }

    /// The ACL of every node this partitioner creates: `<path>`, `party`, `locks` and the lock directories if missing,
    /// its party node and lock contenders, the shared set's nodes, checkpoints. Default: kazoo's open ACL
    /// (`world:anyone`, every permission), which lets **any client of the ZooKeeper ensemble** delete a member's
    /// held lock node (another process can then take the item), add fake members to the party (stalling every
    /// allocation), or rewrite the shared set and checkpoints.
    ///
    /// On a shared ZooKeeper, authenticate every member's session with the same identity and create nodes
    /// creator-all: only that identity can then touch them. Nodes that already exist keep their ACL (ZooKeeper sets
    /// an ACL at creation): create the path with this option from the start, or fix the existing nodes with `setAcl`.
    ///
    /// A session that lacks a permission on an existing node fails with [`Error::PermissionDenied`], naming the node
    /// and the permission: at [`build`](Builder::build) (which then leaves no node behind), or as the
    /// [`Failure`](crate::PartitionState::Failure) cause during allocation; it is never retried.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox() -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    /// use zk_partitioner::SetPartitioner;
    /// use zk_partitioner::zookeeper_client::{Acls, Client};
    ///
    /// // Every member authenticates as the same digest user...
    /// let client = Client::connector()
    ///     .with_session_timeout(Duration::from_secs(10))
    ///     .with_auth("digest", b"workers:s3cret")
    ///     .connect("127.0.0.1:2181")
    ///     .await
    ///     .expect("connect");
    /// // ... and creates every node readable and writable by that user only.
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", ["q1", "q2"])
    ///     .acls(Acls::creator_all())
    ///     .build()
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acls(mut self, acls: zookeeper_client::Acls<'_>) -> Self {
        self.acls = Some(NodeAcls::new(&acls));
        self
    }

    /// Take the items from the shared set in ZooKeeper (`<path>/items`, see [`SharedSet`](crate::SharedSet)) and
    /// follow its changes, instead of a set fixed at build time. Off by default (kazoo's fixed set).
    ///
    /// With it, the builder's items only seed the set: if `<path>/items` does not exist yet, `build()` creates it with
    /// them; if it exists, they are ignored (an empty list is then fine). Anyone may change the set at run time, with
    /// [`SetPartitioner::shared_set`] or a standalone [`SharedSet`](crate::SharedSet). Every member watches it, and a change
    /// goes through the same machinery as a party change: debounced by [`time_boundary`](Builder::time_boundary) (a
    /// quarter of it under Incremental); under
    /// [`Rebalance::Eager`](crate::Rebalance::Eager) every member releases everything and allocates again; under
    /// [`Rebalance::Incremental`](crate::Rebalance::Incremental) only the items whose owner changes stop (an added item
    /// is simply taken by its new owner, a removed item is revoked from its owner alone).
    /// [`Snapshot::added`](crate::Snapshot::added) and [`Snapshot::removed`](crate::Snapshot::removed) say what the
    /// change did, and a removed item's lock directory is deleted once its last contender is gone. Items of a shared
    /// set are all integers or all strings. kazoo members cannot follow a shared set: use it in parties of this crate's
    /// members.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox(client: zk_partitioner::zookeeper_client::Client) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::{Item, Rebalance, SetPartitioner};
    ///
    /// let partitioner = SetPartitioner::builder(client, "/shards", ["shard-1", "shard-2"])
    ///     .shared_set(true)
    ///     .rebalance(Rebalance::Incremental)
    ///     .build()
    ///     .await?;
    /// // Any process may change the set; every member follows.
    /// if let Some(set) = partitioner.shared_set() {
    ///     set.add(["shard-3"]).await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn shared_set(mut self, enabled: bool) -> Self {
        self.shared_set = enabled;
        self
    }

    /// Validates the options, creates `<path>`, `<path>/party` and `<path>/locks` if missing, joins the party, and
    /// starts the partitioner's background task on the current Tokio runtime.
    ///
    /// Under [`static_membership`](Builder::static_membership) it first waits, up to
    /// [`max_identity_wait`](Builder::max_identity_wait), until no other party node carries the identifier.
    ///
    /// # Errors
    /// - [`Error::InvalidConfig`] or [`Error::InvalidItem`] for bad options, before any request is sent;
    /// - [`Error::IdentifierInUse`] under static membership, if another party node carries the identifier for longer
    ///   than `max_identity_wait`;
    /// - [`Error::SharedSetMissing`] under [`shared_set`](Builder::shared_set) with no items to seed the set,
    ///   if the path has none: checked before anything is created, so nothing is left behind;
    /// - [`Error::ZooKeeper`] or [`Error::SessionLost`] if creating the paths or joining fails.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped after the party node may have been created, a background task deletes
    /// it (found by its unique prefix), so no phantom member is left holding a share nobody locks. Dropping it while
    /// a static member waits for its identifier leaves nothing behind.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox() -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    /// use zk_partitioner::SetPartitioner;
    ///
    /// let client = zk_partitioner::connect("127.0.0.1:2181", Duration::from_secs(10)).await?;
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", ["q1", "q2"]).build().await?;
    /// # drop(partitioner);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn build(self) -> Result<SetPartitioner, Error> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::config("runtime", "build() must run inside a Tokio runtime"))?;
        let (client, settings) = self.validate()?;
        startup::launch(&runtime, client, settings).await
    }

    /// Checks every option, in the order `build()` documents, and returns the member's settings: the defaults filled
    /// in, the items sorted, the partition function timed for the metrics. Sends nothing.
    fn validate(self) -> Result<(Client, Settings), Error> {
        check_base_path(&self.path)?;
        let identifier = match (self.identifier, self.static_membership) {
            (Some(identifier), _) => identifier,
            (None, false) => default_identifier(),
            (None, true) => {
                return Err(Error::config(
                    "identifier",
                    "static membership needs an explicit identifier, unique in the party and the same across \
                     restarts (the default <hostname>-<pid> changes with every process)",
                ));
            }
        };
        check_identifier(&identifier)?;
        if self.static_membership && proto::layout::is_dynamic_member(&identifier) {
            // The others tell a static member (whose departure may be a restart) from a dynamic one by its name.
            return Err(Error::config(
                "identifier",
                format!(
                    "{identifier:?} ends in -<10 digits>, which reads as a dynamic member's name: a static member's \
                     identifier must not"
                ),
            ));
        }
        let identity_wait = match (self.max_identity_wait, self.static_membership) {
            (Some(limit), true) => {
                check_duration("max_identity_wait", limit)?;
                limit
            }
            (Some(_), false) => {
                return Err(Error::config("max_identity_wait", "applies only with static_membership(true)"));
            }
            (None, _) => default_identity_wait(&self.client),
        };
        check_duration("time_boundary", self.time_boundary)?;
        let capacity = proto::weight::check_capacity(self.capacity)?;
        check_duration("max_reaction_time", self.max_reaction_time)?;
        if let Some(limit) = self.max_allocation_time {
            check_duration("max_allocation_time", limit)?;
        }
        // A shared set is all of one kind (its node records which, so that members parse it alike).
        let items = validate_items(self.items, self.partition_fn.is_none() || self.shared_set)?;
        let partition_fn = self.partition_fn.unwrap_or_else(|| Box::new(KazooStride));
        // A function whose declarations disagree with its answers (a wrapper that forwards half of one) would run
        // without its placement record or without its weights, silently: refused here, before anything is created.
        proto::partition_fn::check_declarations(partition_fn.as_ref())
            .map_err(|reason| Error::config("partition_func", reason))?;
        let settings = Settings {
            path: self.path.clone(),
            items,
            partition_fn: crate::metrics::timed(partition_fn, &self.path),
            identifier,
            time_boundary: self.time_boundary,
            max_reaction_time: self.max_reaction_time,
            max_allocation_time: self.max_allocation_time,
            session_policy: self.session_policy,
            rebalance: self.rebalance,
            departure_fast_path: self.departure_fast_path,
            static_membership: self.static_membership,
            identity_wait,
            shared_set: self.shared_set,
            capacity,
            acls: self.acls.unwrap_or_default(),
            window: DEFAULT_WINDOW,
            batch: crate::lock_requests::LOCK_BATCH,
            jitter_parties: proto::decision::JitterParties::default(),
            set_chunk: crate::shared_set::CHUNK_OPS,
        };
        Ok((self.client, settings))
    }
}

fn check_duration(field: &'static str, value: Duration) -> Result<(), Error> {
    if value.is_zero() {
        return Err(Error::config(field, "must be greater than zero"));
    }
    if value > MAX_DURATION {
        return Err(Error::config(field, format!("{value:?} is longer than the limit of {MAX_DURATION:?}")));
    }
    Ok(())
}

/// Twice the client's negotiated session timeout (60 s if it reports none): long enough for a crashed predecessor
/// with the same session timeout to expire, bounded like every other duration.
fn default_identity_wait(client: &Client) -> Duration {
    let session = client.session_timeout();
    let wait = if session.is_zero() { Duration::from_secs(60) } else { session.saturating_mul(2) };
    wait.min(MAX_DURATION)
}

/// `<hostname>-<pid>`, kazoo's default (it uses the FQDN; the `hostname` crate gives the host name).
fn default_identifier() -> String {
    let host = hostname::get().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "localhost".into());
    format!("{host}-{}", std::process::id())
}

impl SetPartitioner {
    /// Starts configuring a partitioner of `items` under `path`, on `client`'s session (paths are relative to the
    /// client's chroot, if any).
    ///
    /// Give each member its own client: a member's locks are tied to its session.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn dox() -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    /// use zk_partitioner::SetPartitioner;
    ///
    /// let client = zk_partitioner::connect("127.0.0.1:2181/apps", Duration::from_secs(10)).await?;
    /// // Integers and strings are items; the lock nodes are /apps/work_queues/locks/0 .. /apps/work_queues/locks/99.
    /// let partitioner = SetPartitioner::builder(client, "/work_queues", 0..100).build().await?;
    /// # drop(partitioner);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder<I>(client: Client, path: impl Into<String>, items: I) -> Builder
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        Builder {
            client,
            path: path.into(),
            items: items.into_iter().map(Into::into).collect(),
            partition_fn: None,
            identifier: None,
            time_boundary: DEFAULT_TIME_BOUNDARY,
            max_reaction_time: DEFAULT_MAX_REACTION_TIME,
            max_allocation_time: None,
            session_policy: SessionPolicy::Standard,
            rebalance: Rebalance::Eager,
            departure_fast_path: true,
            static_membership: false,
            max_identity_wait: None,
            shared_set: false,
            capacity: 1,
            acls: None,
        }
    }
}
