//! The shared item set: the items of a partition path kept in ZooKeeper, which any process may change and every
//! member follows ([`Builder::shared_item_set`](crate::Builder::shared_item_set)).
//!
//! # Layout
//!
//! ```text
//! <path>/items                persistent, data = "zk-partitioner item set v1 kind=<int|str> state=<ready|updating>"
//! <path>/items/<item>         persistent, empty                        (one per item: its lock node name)
//! ```
//!
//! One child per item scales to 100,000 items (a single node of JSON would hit ZooKeeper's 1 MB limit), and a member
//! learns of every change from one child watch. The set's version is the data version of `<path>/items`: every update
//! is a `multi` that sets that data conditionally on the version read (so two admins never lose each other's
//! changes) together with the creates and deletes of the items it changes. An update too large for one request
//! (over 1,000 items, or 512 KiB of paths) is split into several `multi`s chained by version: the first marks the set
//! `updating` and the last `ready`, and members keep the set they have while it says `updating`, so a member only
//! ever sees the set before or after an update. An admin interrupted mid-way leaves the set `updating` (members carry
//! on with the previous set, and say so in their log); running any update again completes it.
//!
//! Items of a shared set are all integers or all strings (`kind`): a child's name must parse back into the item it
//! renders. Children that do not (written by hand) are skipped with a warning and reported by [`ItemSet::read`]; the
//! next update deletes them.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use zookeeper_client::{Client, MultiWriteError, OneshotWatcher};

use crate::acl::NodeAcls;
use crate::decision::SetRead;
use crate::error::is_transient;
use crate::error::shown;
use crate::item::validate_items;
use crate::names::check_base_path;
use crate::session::SessionRef;
use crate::{Error, Item};

/// The first words of the set node's data.
const MAGIC: &str = "zk-partitioner item set v1";
/// Operations per `multi` (each a create or a delete of one item) ...
const CHUNK_OPS: usize = 1000;
/// ... and bytes of paths per `multi`, far below ZooKeeper's 1 MB packet limit (`jute.maxbuffer`).
const CHUNK_BYTES: usize = 512 * 1024;
/// A child created and deleted in one `multi` to fire members' child watches; never visible.
const TOUCH: &str = "zk-partitioner-touch";
/// Attempts of one update against concurrent writers before giving up (with the backoff below, about 10 s of
/// contention).
const MAX_ATTEMPTS: u32 = 100;
/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(200);

/// A handle on the shared item set of one partition path, for members and for tools that are not members.
///
/// Cheap to clone; every method is one read and, for updates, as few conditional writes as the change needs.
///
/// ```no_run
/// # async fn dox() -> Result<(), zk_partitioner::Error> {
/// use zk_partitioner::ItemSet;
/// use zk_partitioner::zookeeper_client::Client;
///
/// let client = Client::connect("127.0.0.1:2181").await.expect("connect");
/// let set = ItemSet::new(client, "/work_queues")?;
/// set.create_if_missing(["queue-1", "queue-2"]).await?;
/// let after = set.add(["queue-3"]).await?;
/// assert!(after.items.contains(&"queue-3".into()));
/// set.remove(["queue-1"]).await?;
/// println!("version {}: {:?}", set.read().await?.version, set.read().await?.items);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ItemSet {
    /// The client: the user's own, or a member's until its background task ends.
    session: SessionRef,
    base: String,
    node: String,
    acls: NodeAcls,
}

impl fmt::Debug for ItemSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemSet").field("node", &self.node).finish_non_exhaustive()
    }
}

/// The shared set as read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedItems {
    /// The items, sorted.
    pub items: Vec<Item>,
    /// The set's version: it increases with every update.
    pub version: u64,
    /// An update is under way (or was interrupted): members keep the set they had until it completes.
    pub updating: bool,
    /// Children of `<path>/items` that are not items of the set's kind (written by hand): ignored by members, deleted
    /// by the next update.
    pub skipped: Vec<String>,
}

/// The kind of every item of a shared set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Int,
    Str,
}

/// The set node's data, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    kind: Kind,
    ready: bool,
}

impl Header {
    fn parse(data: &[u8]) -> Result<Header, String> {
        let text = std::str::from_utf8(data).map_err(|_| "its data is not UTF-8".to_owned())?;
        let rest = text.trim().strip_prefix(MAGIC).ok_or_else(|| {
            format!("its data {} does not start with {MAGIC:?} (not written by this crate?)", shown(text))
        })?;
        let (mut kind, mut ready) = (None, None);
        for word in rest.split_whitespace() {
            match word.split_once('=') {
                Some(("kind", "int")) => kind = Some(Kind::Int),
                Some(("kind", "str")) => kind = Some(Kind::Str),
                Some(("state", "ready")) => ready = Some(true),
                Some(("state", "updating")) => ready = Some(false),
                _ => return Err(format!("its data has an unknown field {}", shown(word))),
            }
        }
        match (kind, ready) {
            (Some(kind), Some(ready)) => Ok(Header { kind, ready }),
            _ => Err(format!("its data {} lacks kind= or state=", shown(text))),
        }
    }

    fn render(self) -> String {
        let kind = match self.kind {
            Kind::Int => "int",
            Kind::Str => "str",
        };
        format!("{MAGIC} kind={kind} state={}", if self.ready { "ready" } else { "updating" })
    }
}

/// The children's names as items of `kind`, sorted; names that are not such items come back apart.
fn parse_children(kind: Kind, children: Vec<String>) -> (Vec<Item>, Vec<String>) {
    let (mut items, mut skipped) = (Vec::with_capacity(children.len()), Vec::new());
    for child in children {
        match kind {
            Kind::Str => items.push(Item::Str(child)),
            Kind::Int => match child.parse::<i64>() {
                // Only the canonical rendering ("7", not "07" or "+7") names the item.
                Ok(value) if value.to_string() == child => items.push(Item::Int(value)),
                _ => skipped.push(child),
            },
        }
    }
    items.sort();
    (items, skipped)
}

fn kind_of(items: &[Item]) -> Kind {
    match items.first() {
        Some(Item::Int(_)) => Kind::Int,
        _ => Kind::Str,
    }
}

impl ItemSet {
    /// A handle on the shared set of the partition path `path` (relative to the client's chroot), on `client`'s
    /// session. Nothing is read or written until a method is called.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `path` is not a valid partition path.
    pub fn new(client: Client, path: impl Into<String>) -> Result<Self, Error> {
        let base = path.into();
        check_base_path(&base)?;
        let node = format!("{base}/items");
        Ok(ItemSet { session: SessionRef::Owned(client), base, node, acls: NodeAcls::default() })
    }

    /// Creates the nodes it makes (the set's node, its items, and `<path>` if missing) with this ACL instead of
    /// kazoo's open one: use the partitioner's ([`Builder::acls`](crate::Builder::acls)). Nodes that exist keep
    /// theirs.
    pub fn with_acls(mut self, acls: zookeeper_client::Acls<'_>) -> Self {
        self.acls = NodeAcls::new(&acls);
        self
    }

    pub(crate) fn with_node_acls(mut self, acls: NodeAcls) -> Self {
        self.acls = acls;
        self
    }

    /// The same set on a member's session, which the member releases when its background task ends.
    pub(crate) fn on_member_session(mut self, session: SessionRef) -> Self {
        self.session = session;
        self
    }

    /// The client, unless this is a member's set and the member's task has ended.
    fn client(&self) -> Result<Client, Error> {
        self.session.client().ok_or(Error::Stopped)
    }

    /// The path of the set's node, `<path>/items`.
    pub fn path(&self) -> &str {
        &self.node
    }

    /// Reads the set.
    ///
    /// # Errors
    /// [`Error::ItemSetMissing`] if there is none yet, [`Error::ItemSetCorrupt`] if its node was written by something
    /// else, [`Error::ZooKeeper`] or [`Error::SessionLost`] if ZooKeeper fails.
    pub async fn read(&self) -> Result<SharedItems, Error> {
        // One read `multi` is a consistent snapshot: the data (with its version) and the children agree.
        let client = self.client()?;
        let mut reader = client.new_multi_reader();
        let zk = |err| Error::zk("multi read", self.node.as_str(), err);
        reader.add_get_data(&self.node).map_err(zk)?;
        reader.add_get_children(&self.node).map_err(zk)?;
        let mut results = reader.commit().await.map_err(zk)?.into_iter();
        let (data, stat) = match results.next() {
            Some(zookeeper_client::MultiReadResult::Data { data, stat }) => (data, stat),
            Some(zookeeper_client::MultiReadResult::Error { err: zookeeper_client::Error::NoNode }) => {
                return Err(Error::ItemSetMissing { path: self.node.clone() });
            }
            Some(zookeeper_client::MultiReadResult::Error { err }) => return Err(zk(err)),
            _ => return Err(self.unexpected("the set's data")),
        };
        let children = match results.next() {
            Some(zookeeper_client::MultiReadResult::Children { children }) => children,
            Some(zookeeper_client::MultiReadResult::Error { err }) => return Err(zk(err)),
            _ => return Err(self.unexpected("the set's children")),
        };
        let header =
            Header::parse(&data).map_err(|reason| Error::ItemSetCorrupt { path: self.node.clone(), reason })?;
        let (items, skipped) = parse_children(header.kind, children);
        Ok(SharedItems { items, version: version(stat.version), updating: !header.ready, skipped })
    }

    fn unexpected(&self, what: &str) -> Error {
        Error::ItemSetCorrupt {
            path: self.node.clone(),
            reason: format!("ZooKeeper answered something else for {what}"),
        }
    }

    /// Creates the set with `items` if there is none, else leaves it as it is. Returns the set and whether this call
    /// created it.
    ///
    /// # Errors
    /// [`Error::InvalidItem`] for an item that is not a valid node name or mixes integers with strings,
    /// [`Error::EmptyItemSet`] for no items, and the errors of [`read`](ItemSet::read).
    pub async fn create_if_missing<I>(&self, items: I) -> Result<(SharedItems, bool), Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let items = self.check(items.into_iter().map(Into::into).collect())?;
        if items.is_empty() {
            return Err(Error::EmptyItemSet { path: self.node.clone() });
        }
        for attempt in 0..MAX_ATTEMPTS {
            backoff(attempt).await;
            match self.read().await {
                Ok(set) => return Ok((set, false)),
                Err(Error::ItemSetMissing { .. }) => {}
                Err(err) => return Err(err),
            }
            if let Err(err) = self.client()?.mkdir(&self.base, &self.acls.persistent()).await
                && err != zookeeper_client::Error::NodeExists
            {
                return Err(Error::zk("mkdir", self.base.as_str(), err));
            }
            let kind = kind_of(&items);
            let adds: Vec<&Item> = items.iter().collect();
            match self.write(None, kind, &adds, &[]).await {
                Ok(_) => return Ok((self.read().await?, true)),
                // Someone else created it meanwhile (or our create landed and its reply was lost): read it.
                Err(Attempt::Conflict | Attempt::Retry) => {}
                Err(Attempt::Failed(err)) => return Err(err),
            }
        }
        Err(self.too_busy())
    }

    /// Adds `items` (those already in the set are left as they are) and returns the set after the change.
    ///
    /// # Errors
    /// [`Error::InvalidItem`] for an item that is not a valid node name or is not of the set's kind (integers or
    /// strings), and the errors of [`read`](ItemSet::read). Nothing is changed when it fails.
    pub async fn add<I>(&self, items: I) -> Result<SharedItems, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let added = self.check(items.into_iter().map(Into::into).collect())?;
        self.update(None, |current| Ok(current.iter().chain(&added).cloned().collect())).await
    }

    /// Removes `items` and returns the set after the change.
    ///
    /// # Errors
    /// [`Error::InvalidItem`] naming the first item that is not in the set, [`Error::EmptyItemSet`] if nothing would
    /// be left, and the errors of [`read`](ItemSet::read). Nothing is changed when it fails.
    pub async fn remove<I>(&self, items: I) -> Result<SharedItems, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let removed: BTreeSet<Item> = items.into_iter().map(Into::into).collect();
        self.update(None, |current| {
            if let Some(missing) = removed.iter().find(|item| !current.contains(*item)) {
                return Err(Error::InvalidItem {
                    item: missing.to_string(),
                    reason: "is not in the shared item set, so it cannot be removed".into(),
                });
            }
            Ok(current.difference(&removed).cloned().collect())
        })
        .await
    }

    /// Makes the set exactly `items`, whatever it was, and returns it.
    ///
    /// # Errors
    /// As [`add`](ItemSet::add), plus [`Error::EmptyItemSet`] for no items.
    pub async fn replace<I>(&self, items: I) -> Result<SharedItems, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let items: BTreeSet<Item> = self.check(items.into_iter().map(Into::into).collect())?.into_iter().collect();
        self.update(None, |_| Ok(items.clone())).await
    }

    /// Makes the set exactly `items` if its version is still `version` (from a [`read`](ItemSet::read)): a
    /// compare-and-set for tools that compute the new set from the old one.
    ///
    /// # Errors
    /// [`Error::ItemSetConflict`] if the set changed since that read (read it again and recompute), and the errors of
    /// [`replace`](ItemSet::replace).
    pub async fn replace_if<I>(&self, version: u64, items: I) -> Result<SharedItems, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let items: BTreeSet<Item> = self.check(items.into_iter().map(Into::into).collect())?.into_iter().collect();
        self.update(Some(version), |_| Ok(items.clone())).await
    }

    /// Validates items for this set (sorted, deduplicated, all of one kind).
    fn check(&self, items: Vec<Item>) -> Result<Vec<Item>, Error> {
        validate_items(items, true)
    }

    fn too_busy(&self) -> Error {
        Error::ItemSetConflict {
            path: self.node.clone(),
            reason: format!("other writers changed the set {MAX_ATTEMPTS} times during this update; try again"),
        }
    }

    /// Reads the set, computes the new one and writes the difference, conditionally on the version read; starts over
    /// when another writer got there first (unless the caller asked for a precise `expected` version).
    async fn update(
        &self,
        expected: Option<u64>,
        change: impl Fn(&BTreeSet<Item>) -> Result<BTreeSet<Item>, Error>,
    ) -> Result<SharedItems, Error> {
        for attempt in 0..MAX_ATTEMPTS {
            backoff(attempt).await;
            let current = self.read().await?;
            if let Some(expected) = expected
                && expected != current.version
            {
                return Err(Error::ItemSetConflict {
                    path: self.node.clone(),
                    reason: format!("expected version {expected}, found version {}", current.version),
                });
            }
            let before: BTreeSet<Item> = current.items.iter().cloned().collect();
            let after = change(&before)?;
            if after.is_empty() {
                return Err(Error::EmptyItemSet { path: self.node.clone() });
            }
            // All of one kind (a replace may change the kind; an add may not mix kinds).
            let after = self.check(after.into_iter().collect())?;
            let after_set: BTreeSet<&Item> = after.iter().collect();
            let adds: Vec<&Item> = after.iter().filter(|item| !before.contains(*item)).collect();
            let mut removes: Vec<String> =
                current.items.iter().filter(|item| !after_set.contains(item)).map(Item::node_name).collect();
            removes.extend(current.skipped.iter().cloned());
            if adds.is_empty() && removes.is_empty() && !current.updating {
                return Ok(current);
            }
            match self.write(Some(current.version), kind_of(&after), &adds, &removes).await {
                // Our multis applied in order, each conditional on the version before it: the set is now `after`.
                Ok(steps) => {
                    let version = current.version + steps;
                    return Ok(SharedItems { items: after, version, updating: false, skipped: Vec::new() });
                }
                Err(Attempt::Conflict) if expected.is_some() => {
                    return Err(Error::ItemSetConflict {
                        path: self.node.clone(),
                        reason: format!("the set changed after version {}", current.version),
                    });
                }
                Err(Attempt::Conflict | Attempt::Retry) => {}
                Err(Attempt::Failed(err)) => return Err(err),
            }
        }
        Err(self.too_busy())
    }

    /// Writes one change: `multi`s chained by version from `version` (`None`: create the set node in the first).
    /// Returns how many `multi`s it took (the version grew by as many, from an existing node).
    async fn write(
        &self,
        version: Option<u64>,
        kind: Kind,
        adds: &[&Item],
        removes: &[String],
    ) -> Result<u64, Attempt> {
        let mut ops: Vec<(String, bool)> =
            removes.iter().map(|name| (format!("{}/{name}", self.node), false)).collect();
        ops.extend(adds.iter().map(|item| (format!("{}/{}", self.node, item.node_name()), true)));
        let chunks = chunk(&ops);
        let last = chunks.len().saturating_sub(1);
        let client = self.client().map_err(Attempt::Failed)?;
        let mut version = version;
        for (index, ops) in chunks.iter().enumerate() {
            let header = Header { kind, ready: index == last }.render();
            let mut writer = client.new_multi_writer();
            let built = (|| {
                match version {
                    Some(version) => writer.add_set_data(&self.node, header.as_bytes(), Some(to_i32(version)))?,
                    None => writer.add_create(&self.node, header.as_bytes(), &self.acls.persistent())?,
                }
                if ops.is_empty() {
                    // Members watch children only: an update that changes the state alone (completing an
                    // interrupted one) creates and deletes a marker child, in the same multi, to wake them.
                    let touch = format!("{}/{TOUCH}", self.node);
                    writer.add_create(&touch, b"", &self.acls.persistent())?;
                    writer.add_delete(&touch, None)?;
                }
                for (path, create) in ops.iter() {
                    if *create {
                        writer.add_create(path, b"", &self.acls.persistent())?;
                    } else {
                        writer.add_delete(path, None)?;
                    }
                }
                Ok::<(), zookeeper_client::Error>(())
            })();
            built.map_err(|err| Attempt::Failed(Error::zk("multi", self.node.as_str(), err)))?;
            match writer.commit().await {
                Ok(_) => version = Some(version.map_or(0, |v| v + 1)),
                Err(MultiWriteError::OperationFailed {
                    index: 0,
                    source: zookeeper_client::Error::BadVersion | zookeeper_client::Error::NodeExists,
                }) => return Err(Attempt::Conflict),
                // An item created or deleted by hand since the read (the version did not change): read again.
                Err(MultiWriteError::OperationFailed {
                    source: zookeeper_client::Error::NodeExists | zookeeper_client::Error::NoNode,
                    ..
                }) => return Err(Attempt::Retry),
                Err(MultiWriteError::RequestFailed { source } | MultiWriteError::OperationFailed { source, .. })
                    if is_transient(&source) =>
                {
                    // Applied or not: the next read tells, and the update is recomputed from it.
                    return Err(Attempt::Retry);
                }
                Err(MultiWriteError::RequestFailed { source } | MultiWriteError::OperationFailed { source, .. }) => {
                    return Err(Attempt::Failed(Error::zk("multi", self.node.as_str(), source)));
                }
            }
        }
        Ok(chunks.len() as u64)
    }
}

/// Before attempt `attempt` (0: none): a random pause up to 2^attempt ms, at most [`MAX_BACKOFF`], so writers that
/// collided do not collide again in lockstep.
async fn backoff(attempt: u32) {
    if attempt == 0 {
        return;
    }
    let ceiling = Duration::from_millis(1 << attempt.min(16)).min(MAX_BACKOFF);
    // Random bits without another dependency: a v4 UUID is 122 random bits.
    let fraction = (uuid::Uuid::new_v4().as_u128() & 0xffff) as u32;
    tokio::time::sleep(ceiling.mul_f64(f64::from(fraction) / 65536.0)).await;
}

/// Why one write attempt did not complete.
enum Attempt {
    /// The version moved: another writer got there first.
    Conflict,
    /// Read again and recompute.
    Retry,
    Failed(Error),
}

/// ZooKeeper versions are `i32`s that wrap; ours are their unsigned reading.
fn version(version: i32) -> u64 {
    u64::from(version as u32)
}

fn to_i32(version: u64) -> i32 {
    version as u32 as i32
}

/// Splits operations into `multi`s small enough for one request; at least one (possibly empty) chunk.
fn chunk(ops: &[(String, bool)]) -> Vec<&[(String, bool)]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (index, (path, _)) in ops.iter().enumerate() {
        if index > start && (index - start >= CHUNK_OPS || bytes + path.len() > CHUNK_BYTES) {
            chunks.push(&ops[start..index]);
            (start, bytes) = (index, 0);
        }
        bytes += path.len() + 16;
    }
    chunks.push(&ops[start..]);
    chunks
}

/// A member's read of the set, with the one watch that tells of its next change: a child watch (every update creates
/// or deletes children, see `ItemSet::write`), or an existence watch while the node is missing. One watch, never
/// dropped before it fires: dropping an unfired watch makes the client ask the server to remove the path's watches,
/// which races with the next read's new watch on the same path.
pub(crate) async fn read_watched(
    client: &Client,
    node: &str,
) -> (Result<Option<SetRead>, zookeeper_client::Error>, Option<OneshotWatcher>) {
    // Requests on one session apply in order: both go out at once, the data right after the listing.
    let (children, data) = futures::join!(client.get_and_watch_children(node), client.get_data(node));
    let (children, stat, children_watch) = match children {
        Ok(read) => read,
        Err(zookeeper_client::Error::NoNode) => {
            tracing::warn!(node, "the shared item set is missing: keeping the set in force until it is back");
            return match client.check_and_watch_stat(node).await {
                Ok((_, watcher)) => (Ok(None), Some(watcher)),
                Err(err) => (Err(err), None),
            };
        }
        Err(err) => return (Err(err), None),
    };
    let watched = |result| (result, Some(children_watch));
    let (data, data_stat) = match data {
        Ok(read) => read,
        // Deleted between the two reads: the child watch fires.
        Err(zookeeper_client::Error::NoNode) => return watched(Ok(None)),
        Err(err) => return watched(Err(err)),
    };
    if data_stat.version != stat.version {
        // An update landed between the two reads: it changed children, so the watch fires and we read again.
        return watched(Ok(None));
    }
    let header = match Header::parse(&data) {
        Ok(header) => header,
        Err(reason) => {
            tracing::warn!(node, %reason, "the shared item set's node is unreadable: keeping the set in force");
            return watched(Ok(None));
        }
    };
    if !header.ready {
        tracing::info!(node, version = stat.version, "the shared item set is being updated: keeping the set in force");
        return watched(Ok(None));
    }
    let (items, skipped) = parse_children(header.kind, children);
    if !skipped.is_empty() {
        tracing::warn!(
            node,
            skipped = skipped.len(),
            first = %shown(&skipped[0]),
            "children of the shared item set that are not items of its kind are ignored"
        );
    }
    if items.is_empty() {
        tracing::warn!(node, "the shared item set is empty: keeping the set in force");
        return watched(Ok(None));
    }
    watched(Ok(Some(SetRead { items, version: version(stat.version) })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_garbage() {
        for header in [Header { kind: Kind::Int, ready: true }, Header { kind: Kind::Str, ready: false }] {
            assert_eq!(Header::parse(header.render().as_bytes()), Ok(header));
        }
        for garbage in
            [&b""[..], b"{}", b"zk-partitioner item set v1", b"zk-partitioner item set v1 kind=x state=ready", b"\xff"]
        {
            assert!(Header::parse(garbage).is_err(), "{garbage:?}");
        }
    }

    #[test]
    fn children_parse_by_kind() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (items, skipped) = parse_children(Kind::Int, names(&["10", "9", "07", "x", "-3"]));
        assert_eq!(items, [-3, 9, 10].map(Item::from));
        assert_eq!(skipped, ["07", "x"]);
        let (items, skipped) = parse_children(Kind::Str, names(&["b", "a"]));
        assert_eq!(items, ["a", "b"].map(Item::from));
        assert!(skipped.is_empty());
    }

    #[test]
    fn chunks_respect_both_limits() {
        let ops: Vec<(String, bool)> = (0..2500).map(|i| (format!("/p/items/{i}"), true)).collect();
        let chunks = chunk(&ops);
        assert_eq!(chunks.iter().map(|c| c.len()).collect::<Vec<_>>(), [1000, 1000, 500]);
        let long: Vec<(String, bool)> = (0..3).map(|_| ("x".repeat(300 * 1024), false)).collect();
        assert_eq!(chunk(&long).len(), 3);
        assert_eq!(chunk(&[]).len(), 1);
        assert_eq!(version(-1), u64::from(u32::MAX));
        assert_eq!(to_i32(version(-5)), -5);
    }
}
