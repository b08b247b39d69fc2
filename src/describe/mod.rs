//! Who owns what: a read-only view of a partition path, for operators and dashboards (Event Hubs' `listOwnership`,
//! `kafka-consumer-groups --describe`).
//!
//! [`describe`] reads `<path>/party` and `<path>/locks` (and, for a sticky party's shares, `<path>/placement`) with
//! any client, as an outsider: no membership, no write. It works on parties of this crate's members, kazoo's members,
//! or both, because it reads kazoo's layout (see the crate docs): a member is a party node `<32 hex>-<name>` whose
//! data starts with its identifier; an item's contenders are the `<32 hex>__lock__<sequence>` nodes in
//! `<path>/locks/<item>`, and the lowest sequence holds the lock (kazoo's ordering, the same rule the partitioners
//! use). A contender belongs to the member whose party node has the same session; this crate's members also write
//! their name into their lock nodes, kazoo's write nothing.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use zookeeper_client::{Client, MultiReadResult, Stat};

use crate::lock_requests::READ_BATCH;
use crate::paths::Paths;
use crate::placement::store;
use crate::retry::retry_transient;
use crate::{
    Error, FencingToken, Item, SharedSet,
    partition::PartitionFn,
    shared_set::{Lineage, SharedSetVersion},
    weighted::{Load, Weight},
};
use proto::announcement::Agreement;
use proto::layout;
use proto::layout::{contenders_in_order, sequence};
use proto::names::check_base_path;
use proto::placement::record::Record;
use proto::set_layout::Kind;

mod shares;
use shares::Inputs;

/// Read `multi`s in flight at once by default (each carries up to 500 reads).
const DEFAULT_CONCURRENCY: usize = 8;

/// Options of [`describe_with`]: the expected items (or the shared set's), their weights and the partition function,
/// all optional.
///
/// ```
/// use zk_partitioner::describe::DescribeOptions;
/// use zk_partitioner::{Item, partition::KazooStride};
///
/// let items: Vec<Item> = (0..100).map(Item::from).collect();
/// let options = DescribeOptions::new().items(&items).partition_func(&KazooStride);
/// # let _ = options;
/// ```
#[derive(Clone, Copy)]
#[must_use]
pub struct DescribeOptions<'a> {
    items: Option<&'a [Item]>,
    weights: Option<&'a BTreeMap<Item, Weight>>,
    shared_set: bool,
    partition_fn: Option<&'a dyn PartitionFn>,
    concurrency: usize,
}

impl fmt::Debug for DescribeOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DescribeOptions")
            .field("items", &self.items.map(<[Item]>::len))
            .field("weights", &self.weights.map(BTreeMap::len))
            .field("shared_set", &self.shared_set)
            .field("partition_fn", &self.partition_fn.is_some())
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

impl Default for DescribeOptions<'_> {
    fn default() -> Self {
        DescribeOptions {
            items: None,
            weights: None,
            shared_set: false,
            partition_fn: None,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }
}

impl<'a> DescribeOptions<'a> {
    /// No expected items, no weights, no partition function, the default concurrency.
    pub fn new() -> Self {
        Self::default()
    }

    /// The items the partitioners divide. Items without a lock directory (never contended) are then listed too, as
    /// unowned; without this, only items with a lock directory are known. The [share check](Self::partition_func) uses
    /// this set.
    pub fn items(mut self, items: &'a [Item]) -> Self {
        self.items = Some(items);
        self
    }

    /// The weights of the [expected items](Self::items), as [`SharedSetVersion::weights`] names them (items not named
    /// weigh 1): what [`MemberInfo::load`] and [`MemberInfo::held`] weigh. Without it, every item weighs 1.
    pub fn weights(mut self, weights: &'a BTreeMap<Item, Weight>) -> Self {
        self.weights = Some(weights);
        self
    }

    /// Whether the members follow the path's shared set
    /// ([`Builder::shared_set`](crate::Builder::shared_set)): if so, [`describe_with`] reads it (as
    /// [`SharedSet::read`] does) and uses its items and weights as the [expected items](Self::items) and
    /// [weights](Self::weights), in place of any given here. Default `false`.
    pub fn shared_set(mut self, shared: bool) -> Self {
        self.shared_set = shared;
        self
    }

    /// The partition function the members use: fills [`Description::outside_share`] with the items a member holds
    /// that the function gives to someone else (or to nobody), for the party as read.
    ///
    /// It is given the members' names (sorted) and the [expected items](Self::items), or, when none were given,
    /// the items inferred from the lock directories' names: all integers if every name is a canonical decimal
    /// integer (kazoo's `str()` of an int), else all strings. Lock directories are never deleted, so once every item
    /// has been allocated once they name the whole set.
    ///
    /// It is called as the members call it ([`PartitionFn::partition_weighted`]), with the items' weights and, for
    /// a function with a [load bound](PartitionFn::load_bound), the capacities the members announce; with the
    /// expected items known, it also gives each member's [load](MemberInfo::load). A function that [keeps the
    /// placement](PartitionFn::keeps_placement) (`WeightedRendezvous::sticky`) is given the placement record in force
    /// (`<path>/placement`, read as well) as the members are: the shares are then the ones they compute from it.
    ///
    /// The same name as [`Builder::partition_func`](crate::Builder::partition_func), which sets the function of a
    /// member.
    pub fn partition_func(mut self, partition_fn: &'a dyn PartitionFn) -> Self {
        self.partition_fn = Some(partition_fn);
        self
    }

    /// About this many read `multi`s (of up to 500 reads each) in flight at once; default 8. At least 1.
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }
}

/// Who owns what under a partition path, as [`describe`] read it.
///
/// Every list is sorted: members by name, items in item order (integers numerically, then strings by code point).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Description {
    /// The partition path that was read.
    pub path: String,
    /// The party: one entry per member node under `<path>/party`.
    pub members: Vec<MemberInfo>,
    /// Every item with a lock directory, plus every [expected item](DescribeOptions::items) without one.
    pub items: Vec<ItemInfo>,
    /// The items nobody holds: a lock directory without contenders, or an expected item without a lock directory.
    pub unowned: Vec<String>,
    /// Lock nodes (holding or waiting) whose session owns no party node: left by a crashed or buggy client, or
    /// created by hand. An orphan holding an item blocks it until its session ends.
    pub orphans: Vec<Orphan>,
    /// With a [partition function](DescribeOptions::partition_func): the items a member holds although its share
    /// (computed for the party as read) does not include them. Normal for a moment during a rebalance; lasting, it
    /// means the members disagree about the items, the function or the party. `None` without a function.
    pub outside_share: Option<Vec<OutsideShare>>,
    /// How many items each owner holds, by [member name](Contender::member); orphans' owners included, under
    /// their session id (in decimal) when their lock nodes carry no name.
    pub owner_counts: BTreeMap<String, usize>,
    /// Children of `<path>/party` that are not member nodes (not `<32 hex>-<name>`): ignored by this crate's
    /// members, but counted by kazoo's, which then leave a share unowned.
    pub foreign_party_nodes: Vec<String>,
    /// With [`shared_set`](DescribeOptions::shared_set): the version of the shared set that was read.
    pub shared_set_version: Option<u64>,
    /// With [`shared_set`](DescribeOptions::shared_set): the set's lineage ([`SharedSet::lineage`]), where
    /// each item with parents, children or closed stands: ready, waiting on which parents, or finished. Read just
    /// after the set (its [`version`](Lineage::version) says which one it belongs to).
    pub lineage: Option<Lineage>,
    /// With a [partition function](DescribeOptions::partition_func) that [keeps the
    /// placement](PartitionFn::keeps_placement): the placement record the shares were computed from. `None` when
    /// there is none (the members then place as if they started afresh) or for another function.
    pub placement: Option<PlacementInfo>,
}

/// The placement record in force (`<path>/placement`, kept by a `WeightedRendezvous::sticky` party), as
/// [`describe_with`] read it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlacementInfo {
    /// How many items it places.
    pub items: usize,
    /// Whether it was written for the inputs the members have now (the party as read with its capacities, and the
    /// set): the members then hold what it says, and the shares are the record itself. Else the shares are computed
    /// from it, as the members compute their next assignment (a change since it was written, not recorded yet).
    pub current: bool,
}

/// One member of the party.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MemberInfo {
    /// Its name: the party node's name after the first `-` (`<identifier>-<sequence>`, or the identifier for kazoo
    /// and static members).
    pub name: String,
    /// Its identifier: the first line of the party node's data.
    pub identifier: String,
    /// The party node's name under `<path>/party`.
    pub node: String,
    /// Its ZooKeeper session (the party node's `ephemeralOwner`).
    pub session: i64,
    /// When it joined (the party node's creation time, by the ZooKeeper server's clock).
    pub joined: SystemTime,
    /// How many items its session holds.
    pub items: usize,
    /// How many items its session waits for (has a contender behind another).
    pub waiting: usize,
    /// The capacity it announces in its party node ([`Builder::capacity`](crate::Builder::capacity)): 1 for a
    /// member that announces none (a kazoo member) or one that cannot be read, as the members count it.
    pub capacity: u32,
    /// With a [partition function](DescribeOptions::partition_func) and the [expected items](DescribeOptions::items)
    /// (or the [shared set](DescribeOptions::shared_set)): its load under the function for the party as read:
    /// per dimension of the weights, the weight of its share and its ideal share, the imbalance, and whether the
    /// function's load bound is passed. Once the party has settled, what the member itself reports
    /// ([`Snapshot::load`](crate::Snapshot::load)). The capacities are those the function is given: as announced for
    /// a function with a [load bound](PartitionFn::load_bound), 1 each for one without (which ignores them).
    pub load: Option<Load>,
    /// With the [expected items](DescribeOptions::items) (or the [shared set](DescribeOptions::shared_set)):
    /// the same for the items its session actually holds (their locks), against the same ideal share
    /// ([`DimensionLoad::assigned`](crate::weighted::DimensionLoad::assigned) is then the weight held). Without a partition
    /// function, the announced capacities count, and it is never over capacity.
    pub held: Option<Load>,
}

/// One item's lock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ItemInfo {
    /// The item as its lock directory names it (Python's `str(item)`).
    pub item: String,
    /// The lowest contender, which holds the lock; `None` if nobody does.
    pub owner: Option<Contender>,
    /// The other contenders, in queue order (the next holder first).
    pub waiting: Vec<Contender>,
    /// Whether `<path>/locks/<item>` exists (`false` only for an expected item never contended).
    pub has_lock_dir: bool,
    /// The member that takes the item over if the member whose share it is departs (crashes or leaves), as the
    /// partition function gives it ([`DescribeOptions::partition_func`]): under incremental rebalancing, the
    /// member that takes it at once ([the departure fast path](crate::guide::departures)). `None` without a
    /// function, for a function whose departures move more than the departed member's items
    /// ([`PartitionFn::departures_move_only_theirs`]), in a party of one, or when members² × items exceeds
    /// [`SUCCESSOR_WORK`] (the successors would take seconds to compute).
    pub successor: Option<String>,
}

/// The most members² × items for which [`ItemInfo::successor`] is computed (each member's departure is a call of the
/// partition function per other member; a function that keeps the placement, one per member).
pub const SUCCESSOR_WORK: u64 = 20_000_000;

/// One contender node in an item's lock directory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Contender {
    /// The node's name in the lock directory (`<32 hex>__lock__<sequence>`).
    pub node: String,
    /// The member it belongs to: the name of the party member with the same session; for an orphan, the name the
    /// node carries as data (this crate's members write their name; kazoo's write nothing, which leaves this empty).
    pub member: String,
    /// The node's session (`ephemeralOwner`).
    pub session: i64,
    /// The node's creation zxid: the item's [`FencingToken`] while this node holds the lock.
    pub token: FencingToken,
    /// When the node was created (by the ZooKeeper server's clock): for the owner, since when it holds the item,
    /// or waited for it.
    pub created: SystemTime,
    /// Whether its session owns no party node (see [`Description::orphans`]).
    pub orphan: bool,
}

/// A lock node whose session owns no party node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Orphan {
    /// The item whose lock directory holds it.
    pub item: String,
    /// The node.
    pub contender: Contender,
    /// Whether it holds the item's lock (it is the lowest contender), rather than waiting.
    pub holds: bool,
}

/// An item held by a member whose share does not include it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutsideShare {
    /// The item.
    pub item: String,
    /// The member holding it.
    pub holder: String,
    /// The member whose share includes it, if any member's does.
    pub share_of: Option<String>,
}

impl Description {
    /// The items with at least one contender waiting behind the owner.
    pub fn contended(&self) -> impl Iterator<Item = &ItemInfo> {
        self.items.iter().filter(|item| !item.waiting.is_empty())
    }

    /// The item named `item` (its lock node name), if listed.
    pub fn item(&self, item: &str) -> Option<&ItemInfo> {
        self.items.iter().find(|info| info.item == item)
    }

    /// The member named `name`, if in the party.
    pub fn member(&self, name: &str) -> Option<&MemberInfo> {
        self.members.iter().find(|member| member.name == name)
    }

    /// The load imbalance of the party: the most items a member holds divided by the mean over all members (1.0 is
    /// perfect balance). `None` without members or without held items.
    pub fn imbalance(&self) -> Option<f64> {
        let total: usize = self.members.iter().map(|member| member.items).sum();
        let most = self.members.iter().map(|member| member.items).max()?;
        if total == 0 {
            return None;
        }
        let mean = total as f64 / self.members.len() as f64;
        Some(most as f64 / mean)
    }
}

/// Reads who owns what under the partition `path` (relative to the client's chroot), with default
/// [options](DescribeOptions): see [`describe_with`].
///
/// # Errors
/// As [`describe_with`].
///
/// # Cancel safety
/// Cancel safe: it only reads.
///
/// # Examples
/// ```no_run
/// # async fn dox() -> Result<(), Box<dyn std::error::Error>> {
/// let client = zk_partitioner::zookeeper_client::Client::connect("127.0.0.1:2181").await?;
/// let description = zk_partitioner::describe::describe(&client, "/work_queues").await?;
/// for member in &description.members {
///     println!("{} (session {}) holds {} items", member.name, member.session, member.items);
/// }
/// for item in description.contended() {
///     println!("{}: {} waiting", item.item, item.waiting.len());
/// }
/// println!("unowned: {:?}, orphans: {}", description.unowned, description.orphans.len());
/// # Ok(())
/// # }
/// ```
pub async fn describe(client: &Client, path: &str) -> Result<Description, Error> {
    describe_with(client, path, DescribeOptions::new()).await
}

/// Reads who owns what under the partition `path` (relative to the client's chroot): the members, every item's
/// owner and waiting contenders, the unowned items, orphaned lock nodes, and, with a partition function, the items
/// held outside their holder's share.
///
/// Any client can read, member or not; nothing is written. The read starts with a `sync`, so it is at least as new
/// as anything any client saw before the call. It is then assembled from several reads, pipelined: the party and the
/// list of lock directories, then the lock directories in read `multi`s of 500, each followed by a `multi` reading
/// the contenders it found (their data, session and creation zxid), with about
/// [`concurrency`](DescribeOptions::concurrency) `multi`s in flight. About `4 + 2 × items / 500` requests in all
/// (45 for 10,000 items), and with a function that [keeps the placement](PartitionFn::keeps_placement), the
/// placement record after them (its index and chunks). Each directory and its contenders are read within a few
/// milliseconds of each other, but the whole is not one atomic snapshot: on a busy path, a rebalance in progress may
/// show half done. A contender that vanishes between its directory's listing and its read is left out.
///
/// Requests lost with the connection are sent again; the call ends with the session at the latest.
///
/// # Errors
/// - [`Error::InvalidConfig`] if `path` is not a valid partition path;
/// - [`Error::PathNotFound`] if `path` does not exist (a missing `party` or `locks` under an existing path only
///   means no members or no items);
/// - [`Error::ZooKeeper`] or [`Error::SessionLost`] if a read fails otherwise;
/// - with [`shared_set`](DescribeOptions::shared_set), the errors of [`SharedSet::read`]
///   ([`Error::SharedSetMissing`] if the path has no shared set);
/// - [`Error::PartitionFn`] if the partition function panics or returns items outside the set (or one twice).
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn describe_with(client: &Client, path: &str, options: DescribeOptions<'_>) -> Result<Description, Error> {
    check_base_path(path)?;
    let paths = Paths::new(path);

    // The sync, the existence check and both listings go out together; the session applies them in order, so the
    // listings are at least as new as the sync.
    let first = retry_transient(client, || async {
        let (sync, exists, party, locks) = futures::join!(
            client.sync(path),
            client.check_stat(path),
            client.list_children(&paths.party),
            client.list_children(&paths.locks)
        );
        match sync {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
            Err(err) => return Err(err),
        }
        Ok((exists?, or_empty(party)?, or_empty(locks)?))
    })
    .await
    .map_err(|err| Error::zk("get_children", path, err))?;
    let (exists, party_children, dirs) = first;
    if exists.is_none() {
        return Err(Error::PathNotFound { path: path.to_owned() });
    }

    let (member_names, foreign) = split_party(party_children);
    let shared = async {
        if !options.shared_set {
            return Ok(None);
        }
        let set = SharedSet::new(client.clone(), path)?;
        let items = set.read().await?;
        Ok::<_, Error>(Some((items, set.lineage().await?)))
    };
    let (members, listings, shared) = futures::join!(
        read_members(client, &paths, member_names, options.concurrency),
        async {
            let batches: Vec<Vec<String>> = dirs.chunks(READ_BATCH).map(<[String]>::to_vec).collect();
            futures::stream::iter(batches.into_iter().map(|batch| read_dirs(client, &paths, batch)))
                .buffer_unordered(options.concurrency.div_ceil(2).max(1))
                .collect::<Vec<_>>()
                .await
        },
        shared
    );
    let members = members?;
    let (shared, lineage): (Option<SharedSetVersion>, Option<Lineage>) = shared?.unzip();
    let mut dirs_read: Vec<(String, Vec<RawContender>)> = Vec::with_capacity(dirs.len());
    for batch in listings {
        dirs_read.extend(batch?);
    }
    // A function that keeps the placement computes from the record in force, as the members do.
    let record = match options.partition_fn {
        Some(f) if f.keeps_placement() => {
            let first = (shared.as_ref().map(|set| &set.items[..]).or(options.items))
                .and_then(<[Item]>::first)
                .cloned()
                .or_else(|| dirs_read.first().map(|(name, _)| item_of_name(name)));
            let kind = Kind::of(first.as_slice());
            retry_transient(client, || store::read_now(client, &paths.placement, kind))
                .await
                .map_err(|err| Error::zk("get_data", paths.placement.as_str(), err))?
        }
        _ => None,
    };
    let mut description = assemble(path, members, foreign, dirs_read, &options, shared, record)?;
    description.lineage = lineage;
    Ok(description)
}

/// A listing's children, with a missing node read as no children.
fn or_empty(listing: Result<Vec<String>, zookeeper_client::Error>) -> Result<Vec<String>, zookeeper_client::Error> {
    match listing {
        Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
        other => other,
    }
}

/// The member nodes (node, name) and the foreign children of `<path>/party`.
fn split_party(children: Vec<String>) -> (Vec<(String, String)>, Vec<String>) {
    let mut members = Vec::with_capacity(children.len());
    let mut foreign = Vec::new();
    for child in children {
        match layout::member_name(&child) {
            Some(name) => {
                let name = name.to_owned();
                members.push((child, name));
            }
            None => foreign.push(child),
        }
    }
    (members, foreign)
}

/// A party member as read, before its items are counted.
struct RawMember {
    node: String,
    name: String,
    identifier: String,
    /// Its announced capacity (1 if none).
    capacity: u32,
    stat: Stat,
}

/// Reads every member node (data and stat), `READ_BATCH` per read `multi`. Nodes gone meanwhile are left out.
async fn read_members(
    client: &Client,
    paths: &Paths,
    nodes: Vec<(String, String)>,
    concurrency: usize,
) -> Result<Vec<RawMember>, Error> {
    let batches: Vec<Vec<(String, String)>> = nodes.chunks(READ_BATCH).map(<[(String, String)]>::to_vec).collect();
    let read = |batch: Vec<(String, String)>| async move {
        let node_paths: Vec<String> = batch.iter().map(|(node, _)| format!("{}/{node}", paths.party)).collect();
        let results =
            read_data(client, &node_paths).await.map_err(|err| Error::zk("multi get_data", &paths.party, err))?;
        let mut members = Vec::with_capacity(batch.len());
        for ((node, name), result) in batch.into_iter().zip(results) {
            match result {
                MultiReadResult::Data { data, stat } => {
                    // The identifier is the data's first line (this crate's members announce their configuration,
                    // capacity included, on the next one: read as the members read it).
                    let text = String::from_utf8_lossy(&data);
                    let identifier = text.split('\n').next().unwrap_or_default().to_owned();
                    let capacity = announced_capacity(&data);
                    members.push(RawMember { node, name, identifier, capacity, stat });
                }
                MultiReadResult::Error { err: zookeeper_client::Error::NoNode } => {}
                MultiReadResult::Error { err } => {
                    return Err(Error::zk("get_data", format!("{}/{node}", paths.party), err));
                }
                _ => return Err(unexpected_answer(&paths.party)),
            }
        }
        Ok::<_, Error>(members)
    };
    let batches: Vec<Result<Vec<RawMember>, Error>> =
        futures::stream::iter(batches.into_iter().map(read)).buffer_unordered(concurrency).collect().await;
    let mut members = Vec::with_capacity(nodes.len());
    for batch in batches {
        members.extend(batch?);
    }
    Ok(members)
}

/// The capacity a party node's data announces, read as the members read it: 1 without an announcement (a kazoo
/// member), or with one that cannot be read.
fn announced_capacity(data: &[u8]) -> u32 {
    Agreement::from_node_data(data).map_or(1, |theirs| theirs.capacity)
}

/// A contender as read: node name, data, stat.
struct RawContender {
    node: String,
    data: Vec<u8>,
    stat: Stat,
}

/// Lists a batch of lock directories in one read `multi`, then reads every contender found in them (`READ_BATCH` per
/// `multi`). Directories gone meanwhile are left out, and so are contenders gone meanwhile.
async fn read_dirs(
    client: &Client,
    paths: &Paths,
    batch: Vec<String>,
) -> Result<Vec<(String, Vec<RawContender>)>, Error> {
    let dir_paths: Vec<String> = batch.iter().map(|dir| paths.lock_dir(dir)).collect();
    let listings = retry_transient(client, || {
        let mut reader = client.new_multi_reader();
        let added = dir_paths.iter().try_for_each(|dir| reader.add_get_children(dir));
        async move {
            added?;
            reader.commit().await
        }
    })
    .await
    .map_err(|err| Error::zk("multi get_children", &paths.locks, err))?;
    if listings.len() != batch.len() {
        return Err(unexpected_answer(&paths.locks));
    }
    // (directory, contender node names) for every directory still there.
    let mut found: Vec<(String, Vec<String>)> = Vec::with_capacity(batch.len());
    for ((dir, dir_path), listing) in batch.into_iter().zip(&dir_paths).zip(listings) {
        match listing {
            MultiReadResult::Children { children } => {
                let contenders = contenders_in_order(&children).into_iter().map(str::to_owned).collect();
                found.push((dir, contenders));
            }
            MultiReadResult::Error { err: zookeeper_client::Error::NoNode } => {}
            MultiReadResult::Error { err } => return Err(Error::zk("get_children", dir_path.as_str(), err)),
            _ => return Err(unexpected_answer(dir_path)),
        }
    }
    let node_paths: Vec<String> = found
        .iter()
        .flat_map(|(dir, nodes)| nodes.iter().map(move |node| format!("{}/{node}", paths.lock_dir(dir))))
        .collect();
    let mut reads = Vec::with_capacity(node_paths.len());
    for chunk in node_paths.chunks(READ_BATCH) {
        let results = read_data(client, chunk).await.map_err(|err| Error::zk("multi get_data", &paths.locks, err))?;
        if results.len() != chunk.len() {
            return Err(unexpected_answer(&paths.locks));
        }
        reads.extend(results);
    }
    let mut reads = reads.into_iter().zip(node_paths);
    let mut dirs = Vec::with_capacity(found.len());
    for (dir, nodes) in found {
        let mut contenders = Vec::with_capacity(nodes.len());
        for (node, (read, node_path)) in nodes.into_iter().zip(reads.by_ref()) {
            match read {
                MultiReadResult::Data { data, stat } => contenders.push(RawContender { node, data, stat }),
                MultiReadResult::Error { err: zookeeper_client::Error::NoNode } => {}
                MultiReadResult::Error { err } => return Err(Error::zk("get_data", node_path, err)),
                _ => return Err(unexpected_answer(&node_path)),
            }
        }
        dirs.push((dir, contenders));
    }
    Ok(dirs)
}

/// Reads the data and stat of every node in `nodes` in one read `multi` (each read answers on its own), sent again
/// if lost with the connection.
async fn read_data(client: &Client, nodes: &[String]) -> Result<Vec<MultiReadResult>, zookeeper_client::Error> {
    retry_transient(client, || {
        let mut reader = client.new_multi_reader();
        let added = nodes.iter().try_for_each(|node| reader.add_get_data(node));
        async move {
            added?;
            reader.commit().await
        }
    })
    .await
}

fn unexpected_answer(path: &str) -> Error {
    Error::zk("multi read", path, zookeeper_client::Error::UnexpectedError("a read multi answered out of shape".into()))
}

/// A ZooKeeper timestamp (milliseconds since the epoch) as a `SystemTime`.
fn zk_time(millis: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

/// How items are ordered in a description: as [`Item`]s (integers numerically, then strings by code point), with
/// names that are canonical decimal integers read as integers.
fn item_of_name(name: &str) -> Item {
    match name.parse::<i64>() {
        Ok(value) if value.to_string() == name => Item::Int(value),
        _ => Item::Str(name.to_owned()),
    }
}

/// Puts the pieces together: owners, queues, orphans, counts, the share check and the loads.
fn assemble(
    path: &str,
    raw_members: Vec<RawMember>,
    mut foreign: Vec<String>,
    dirs: Vec<(String, Vec<RawContender>)>,
    options: &DescribeOptions<'_>,
    shared: Option<SharedSetVersion>,
    record: Option<Record>,
) -> Result<Description, Error> {
    let no_weights = BTreeMap::new();
    let (expected, weights) = match &shared {
        Some(set) => (Some(&set.items[..]), &set.weights),
        None => (options.items, options.weights.unwrap_or(&no_weights)),
    };
    // Sessions that own a party node, and the member name of each (the first, should one session own several).
    let mut member_of_session: HashMap<i64, String> = HashMap::with_capacity(raw_members.len());
    for member in &raw_members {
        member_of_session.entry(member.stat.ephemeral_owner).or_insert_with(|| member.name.clone());
    }

    let mut items: Vec<ItemInfo> = Vec::with_capacity(dirs.len());
    let mut orphans = Vec::new();
    for (item, mut raw) in dirs {
        // kazoo's order: by the sequence text (the same comparison the partitioners use to find the holder).
        raw.sort_by(|a, b| sequence(&a.node).cmp(&sequence(&b.node)));
        let mut queue = raw.into_iter().map(|raw| Contender {
            member: match member_of_session.get(&raw.stat.ephemeral_owner) {
                Some(member) => member.clone(),
                None => String::from_utf8_lossy(&raw.data).into_owned(),
            },
            session: raw.stat.ephemeral_owner,
            token: FencingToken::new(raw.stat.czxid),
            created: zk_time(raw.stat.ctime),
            orphan: !member_of_session.contains_key(&raw.stat.ephemeral_owner),
            node: raw.node,
        });
        let owner = queue.next();
        let waiting: Vec<Contender> = queue.collect();
        for (contender, holds) in owner.iter().map(|c| (c, true)).chain(waiting.iter().map(|c| (c, false))) {
            if contender.orphan {
                orphans.push(Orphan { item: item.clone(), contender: contender.clone(), holds });
            }
        }
        items.push(ItemInfo { item, owner, waiting, has_lock_dir: true, successor: None });
    }
    if let Some(expected) = expected {
        let known: std::collections::HashSet<String> = items.iter().map(|info| info.item.clone()).collect();
        let mut missing: Vec<String> =
            expected.iter().map(Item::node_name).filter(|name| !known.contains(name)).collect();
        missing.sort_unstable();
        missing.dedup();
        items.extend(missing.into_iter().map(|item| ItemInfo {
            item,
            owner: None,
            waiting: Vec::new(),
            has_lock_dir: false,
            successor: None,
        }));
    }
    items.sort_by_cached_key(|info| item_of_name(&info.item));
    orphans
        .sort_by_cached_key(|orphan| (item_of_name(&orphan.item), sequence(&orphan.contender.node).map(str::to_owned)));

    let mut owner_counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut held_by_session: HashMap<i64, usize> = HashMap::new();
    let mut waiting_by_session: HashMap<i64, usize> = HashMap::new();
    for info in &items {
        if let Some(owner) = &info.owner {
            let name = if owner.member.is_empty() { owner.session.to_string() } else { owner.member.clone() };
            *owner_counts.entry(name).or_default() += 1;
            *held_by_session.entry(owner.session).or_default() += 1;
        }
        for waiter in &info.waiting {
            *waiting_by_session.entry(waiter.session).or_default() += 1;
        }
    }
    let unowned = items.iter().filter(|info| info.owner.is_none()).map(|info| info.item.clone()).collect();

    let mut members: Vec<MemberInfo> = raw_members
        .into_iter()
        .map(|raw| MemberInfo {
            items: held_by_session.get(&raw.stat.ephemeral_owner).copied().unwrap_or(0),
            waiting: waiting_by_session.get(&raw.stat.ephemeral_owner).copied().unwrap_or(0),
            session: raw.stat.ephemeral_owner,
            joined: zk_time(raw.stat.ctime),
            name: raw.name,
            identifier: raw.identifier,
            node: raw.node,
            capacity: raw.capacity,
            load: None,
            held: None,
        })
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.node.cmp(&b.node)));
    foreign.sort_unstable();

    // The share check works on the set the lock directories make when the expected set is not known; the loads
    // only on the expected set (an inferred one lacks the items never contended, which skews every ideal share).
    let (mut outside_share, mut placement) = (None, None);
    if expected.is_some() || options.partition_fn.is_some() {
        let set = expected.map_or_else(|| Inputs::inferred_set(&items), <[Item]>::to_vec);
        let inputs = Inputs::new(&members, set, weights, options.partition_fn);
        let shares = match options.partition_fn {
            Some(f) if f.keeps_placement() => {
                // The members' inputs: a shared set at its version, else the fixed set as they were given it.
                let fixed = expected.filter(|_| shared.is_none());
                let digest = inputs.digest(f, shared.as_ref().map(|set| set.version), fixed);
                let placed = inputs.placed_shares(f, record.as_ref(), digest)?;
                placement = record.as_ref().map(|record| PlacementInfo {
                    items: record.items.len(),
                    current: placed.as_ref().is_some_and(|&(_, current)| current),
                });
                match placed {
                    Some((shares, _)) => Some(shares),
                    None => Some(inputs.shares(f)?),
                }
            }
            Some(f) => Some(inputs.shares(f)?),
            None => None,
        };
        if let Some(shares) = &shares {
            outside_share = Some(inputs.outside_share(shares, &items, &member_of_session));
        }
        if let (Some(f), Some(shares)) = (options.partition_fn, &shares)
            && let Some(successors) = inputs.successors(f, shares)?
        {
            for info in &mut items {
                info.successor = successors.get(&info.item).cloned();
            }
        }
        if expected.is_some() {
            let held = inputs.held(&items);
            for member in &mut members {
                let share = shares.as_ref().map(|shares| shares.get(&member.name).map_or(&[][..], Vec::as_slice));
                member.load = share.map(|share| inputs.load(&member.name, share));
                let holds = held.get(&member.session).map_or(&[][..], Vec::as_slice);
                member.held = Some(inputs.load(&member.name, holds));
            }
        }
    }
    Ok(Description {
        path: path.to_owned(),
        members,
        items,
        unowned,
        orphans,
        outside_share,
        owner_counts,
        foreign_party_nodes: foreign,
        shared_set_version: shared.map(|set| set.version),
        lineage: None,
        placement,
    })
}

#[cfg(test)]
mod tests;
