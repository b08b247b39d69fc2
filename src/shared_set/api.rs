//! [`SharedSet`], the public handle on a shared set: its admin operations (read, create, add, remove, replace), each
//! change run on a task of its own over the protocol of [`SetStore`].

use std::fmt;
use std::future::Future;

use zookeeper_client::Client;

use super::lineage::{Lineage, LineageChange};
use super::progress::{ImportMode, Imported, Progress};
use super::{SetStore, SharedSetVersion};
use crate::acl::NodeAcls;
use crate::session::SessionRef;
use crate::{Error, Item};
use proto::names::check_base_path;

/// A handle on the shared set of one partition path, for members and for tools that are not members.
///
/// Cheap to clone. A read is one request (two while a large update is being applied); an update that fits one
/// request is a read and one conditional write; a larger one is staged, committed and applied (see the
/// `shared_set` module's docs in the source for why every reader sees either the set before or the set after).
///
/// **What members read.** Each member of the party watches the set's header, and reads the set again after every
/// version. The header records what each of its latest versions added and removed (the newest few kilobytes of
/// changes), so a member that read the previous versions reads the header alone: a stream of small changes (adds,
/// removes, finishes, closes, weights) costs each member one small read per version, whatever the set's size. After a
/// staged update, a change of more than about a kilobyte of names, or a member that fell behind, the member lists every
/// item again ([`metrics::SHARED_SET_READS`](crate::metrics::SHARED_SET_READS) counts both kinds). A member also keeps the
/// weight table it read, and reads one only when the header names another, and then only the chunks that changed.
///
/// **Lost replies** are resolved by the header's log of the latest 16 updates: if 16 others land while the reply of
/// ours is lost and we reconnect, ours can no longer be recognised (a retried `replace_if` then reports a conflict; a
/// retried `add` or `remove` is simply applied again, which changes nothing).
///
/// # Cancel safety
/// A [`read`](SharedSet::read) only reads. Every change runs on a task of its own, spawned on the caller's runtime when
/// its future is first polled (a future dropped before that has sent nothing). Dropping the future later (a `timeout`,
/// a `select!`) stops the waiting, not the change: the task, which holds a clone of the client, runs on until the
/// change is done or has failed, exactly as if it had been awaited; only a later read tells which.
///
/// Only if that task is itself stopped part-way (the runtime shuts down, the process exits) can an update too large for
/// one request be left under way, under an ephemeral lease of the session it was written on. Readers then keep the set
/// before it (flagged [`updating`](SharedSetVersion::updating)), or see no set for a first version, until the lease goes
/// with that session; then the next writer, or the party's first member, undoes it, or finishes it if it was already
/// committed. An update that fits one request is one `multi`: it landed whole or not at all.
///
/// # Examples
/// ```no_run
/// # async fn dox() -> Result<(), zk_partitioner::Error> {
/// use zk_partitioner::SharedSet;
/// use zk_partitioner::zookeeper_client::Client;
///
/// let client = Client::connect("127.0.0.1:2181").await.expect("connect");
/// let set = SharedSet::new(client, "/work_queues")?;
/// set.create_if_missing(["queue-1", "queue-2"]).await?;
/// let after = set.add(["queue-3"]).await?;
/// assert!(after.items.contains(&"queue-3".into()));
/// set.remove(["queue-1"]).await?;
/// println!("version {}: {:?}", set.read().await?.version, set.read().await?.items);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SharedSet {
    inner: SetStore<Client>,
}

impl fmt::Debug for SharedSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSet").field("node", &self.inner.paths.node).finish_non_exhaustive()
    }
}

impl SharedSet {
    /// A handle on the shared set of the partition path `path` (relative to the client's chroot), on `client`'s
    /// session. Nothing is read or written until a method is called.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `path` is not a valid partition path.
    pub fn new(client: Client, path: impl Into<String>) -> Result<Self, Error> {
        let base = path.into();
        check_base_path(&base)?;
        Ok(SharedSet { inner: SetStore::new(SessionRef::Owned(client), &base, NodeAcls::default()) })
    }

    /// Creates the nodes it makes (the set's node, its items, and `<path>` if missing) with this ACL instead of
    /// kazoo's open one: use the partitioner's ([`Builder::acls`](crate::Builder::acls)). Nodes that exist keep
    /// theirs.
    pub fn acls(mut self, acls: zookeeper_client::Acls<'_>) -> Self {
        self.inner.acls = NodeAcls::new(&acls);
        self
    }

    /// The same set on a member's session, which the member releases when its background task ends.
    pub(crate) fn from_shared(inner: SetStore<Client>) -> Self {
        SharedSet { inner }
    }

    /// The path of the set's node, `<path>/items`.
    pub fn path(&self) -> &str {
        &self.inner.paths.node
    }

    /// Runs a change on a task of its own, so that it is cancel safe: dropping the caller's future does not stop the
    /// change part-way (a staged update would keep its lease, and so stay unfinished, as long as the session lives);
    /// it completes, or fails and is undone, on its own.
    async fn detached<T, F>(&self, change: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
    {
        tokio::spawn(change).await.unwrap_or_else(|err| {
            Err(Error::Internal { reason: format!("the shared set's update task of {} failed: {err}", self.path()) })
        })
    }

    /// Reads the set in force.
    ///
    /// # Errors
    /// [`Error::SharedSetMissing`] if there is none yet (or its first version is still being written),
    /// [`Error::SharedSetCorrupt`] if its node was written by something else, [`Error::ZooKeeper`] or
    /// [`Error::SessionLost`] if ZooKeeper fails.
    ///
    /// # Cancel safety
    /// Cancel safe: it sends only reads, so a dropped call leaves nothing behind.
    pub async fn read(&self) -> Result<SharedSetVersion, Error> {
        self.inner.read().await
    }

    /// Creates the set with `items` if there is none, else leaves it as it is. Returns the set in force and whether
    /// this call created it. A creation left unfinished by a writer that is gone is undone first; one under way is
    /// waited for.
    ///
    /// # Errors
    /// [`Error::InvalidItem`] for an item that is not a valid node name or mixes integers with strings,
    /// [`Error::EmptySharedSet`] for no items, and the errors of [`read`](SharedSet::read).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the creation: from the first poll it runs on a task of its own, which creates
    /// the set, finds one, or fails, exactly as if it had been awaited. Only if that task is stopped part-way can a
    /// first version too large for one request be left `creating` under this session's ephemeral lease: readers see no
    /// set until the lease goes with the session, and the next writer or the party's first member then undoes it
    /// ([more](SharedSet#cancel-safety)).
    pub async fn create_if_missing<I>(&self, items: I) -> Result<(SharedSetVersion, bool), Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let (inner, items): (_, Vec<Item>) = (self.inner.clone(), items.into_iter().map(Into::into).collect());
        self.detached(async move { inner.create_if_missing(items).await }).await
    }

    /// Adds `items` (those already in the set are left as they are) and returns the set after the change.
    ///
    /// # Errors
    /// [`Error::InvalidItem`] naming the first item given that is not a valid node name or is not of the set's kind
    /// (integers or strings), and the errors of [`read`](SharedSet::read). Nothing is changed when it fails.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the change: from the first poll it runs on a task of its own, which adds the
    /// items or fails, exactly as if it had been awaited. Only if that task is stopped part-way can an update too large
    /// for one request be left under way under this session's ephemeral lease: readers keep the set before it until the
    /// lease goes with the session, and the next writer or the party's first member then undoes it, or finishes it if
    /// it was committed ([more](SharedSet#cancel-safety)).
    pub async fn add<I>(&self, items: I) -> Result<SharedSetVersion, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let (inner, items): (_, Vec<Item>) = (self.inner.clone(), items.into_iter().map(Into::into).collect());
        self.detached(async move { inner.add(items).await }).await
    }

    /// Removes `items` and returns the set after the change.
    ///
    /// # Errors
    /// [`Error::InvalidItem`] naming the first item that is not in the set, [`Error::EmptySharedSet`] if nothing would
    /// be left, and the errors of [`read`](SharedSet::read). Nothing is changed when it fails. A removal whose reply was
    /// lost with the connection is sent again; items it finds already gone then count as removed.
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add): a dropped call still removes the items or fails.
    pub async fn remove<I>(&self, items: I) -> Result<SharedSetVersion, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let (inner, items): (_, Vec<Item>) = (self.inner.clone(), items.into_iter().map(Into::into).collect());
        self.detached(async move { inner.remove(items).await }).await
    }

    /// Makes the set exactly `items`, whatever it was, and returns it.
    ///
    /// # Errors
    /// As [`add`](SharedSet::add), plus [`Error::EmptySharedSet`] for no items.
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add): a dropped call still replaces the set or fails.
    pub async fn replace<I>(&self, items: I) -> Result<SharedSetVersion, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let (inner, items): (_, Vec<Item>) = (self.inner.clone(), items.into_iter().map(Into::into).collect());
        self.detached(async move { inner.replace(None, items).await }).await
    }

    /// Makes the set exactly `items` if its version is still `version` (from a [`read`](SharedSet::read)): a
    /// compare-and-set for tools that compute the new set from the old one. A write of ours whose reply was lost is
    /// recognised (by its token in the set's log of its latest updates) and returns `Ok`.
    ///
    /// # Errors
    /// [`Error::SharedSetConflict`] if the set changed since that read (read it again and recompute), and the errors of
    /// [`replace`](SharedSet::replace).
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add): a dropped call still replaces the set, or fails if its version moved on.
    pub async fn replace_if<I>(&self, version: u64, items: I) -> Result<SharedSetVersion, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let (inner, items): (_, Vec<Item>) = (self.inner.clone(), items.into_iter().map(Into::into).collect());
        self.detached(async move { inner.replace(Some(version), items).await }).await
    }

    /// Gives each listed item its weight, all at once: one new version of the set, which every member follows like
    /// any other change ([`Weight`](crate::weighted::Weight); a weighted partition function such as
    /// [`WeightedRendezvous`](crate::weighted::WeightedRendezvous) divides by it). Items not listed keep theirs; an item without
    /// a weight weighs 1. A removed item loses its weight.
    ///
    /// The weights are a table beside the items (`<path>/item-weights/<tag>`: an index naming chunks of about 1,000
    /// weights), written before one conditional write of the set's node puts it in force, so a reader sees every
    /// weight of this call or none. A new table writes only the chunks that changed and shares the others with the
    /// table it replaces, so changing a few weights costs the writer, and each member, a chunk or two and an index.
    ///
    /// ```no_run
    /// # async fn dox(set: zk_partitioner::SharedSet) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::weighted::Weight;
    ///
    /// set.set_weights([("queue-1", Weight::new(40)), ("queue-2", "cpu=2,bytes=100".parse()?)]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidItem`] for an item not in the set, and the errors of [`read`](SharedSet::read). Nothing is
    /// changed when it fails.
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add): a dropped call still sets the weights or fails. A table whose writer stopped before
    /// its commit is deleted by the next weight change.
    pub async fn set_weights<I, T>(&self, weights: I) -> Result<SharedSetVersion, Error>
    where
        I: IntoIterator<Item = (T, crate::weighted::Weight)>,
        T: Into<Item>,
    {
        let changes: Vec<(Item, Option<crate::weighted::Weight>)> =
            weights.into_iter().map(|(item, weight)| (item.into(), Some(weight))).collect();
        let inner = self.inner.clone();
        self.detached(async move { inner.change_weights(changes).await }).await
    }

    /// Gives `items` back the default weight of 1, all at once (as [`set_weights`](SharedSet::set_weights)).
    ///
    /// # Errors
    /// As [`set_weights`](SharedSet::set_weights).
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add).
    pub async fn reset_weights<I>(&self, items: I) -> Result<SharedSetVersion, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let changes: Vec<(Item, Option<crate::weighted::Weight>)> =
            items.into_iter().map(|item| (item.into(), None)).collect();
        let inner = self.inner.clone();
        self.detached(async move { inner.change_weights(changes).await }).await
    }

    /// Splits `parent` into `children`, as a stream splits a shard: `parent` is closed (its source produces nothing
    /// new for it) and the children are new items that enter the set only once `parent` has finished
    /// ([`CheckpointWriter::finish_item`](crate::checkpoint::CheckpointWriter::finish_item)), so that no child is read before its
    /// parent. One new version of the set.
    ///
    /// ```no_run
    /// # async fn dox(set: zk_partitioner::SharedSet) -> Result<(), zk_partitioner::Error> {
    /// set.split("shard-1", ["shard-2", "shard-3"]).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidItem`] if `parent` is neither in the set nor waiting, or has finished; if a child already
    /// exists (in the set, waiting, or finished), is not a valid item of the set's kind, or is named twice; or if
    /// there are no children. And the errors of [`read`](SharedSet::read). Nothing is changed when it fails.
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add).
    pub async fn split<P, I>(&self, parent: P, children: I) -> Result<SharedSetVersion, Error>
    where
        P: Into<Item>,
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let change =
            LineageChange::Split { parent: parent.into(), children: children.into_iter().map(Into::into).collect() };
        self.change_lineage(change).await
    }

    /// Merges `parents` into `child`, as a stream merges shards: every parent is closed, and `child`, a new item,
    /// enters the set once all of them have finished.
    ///
    /// # Errors
    /// As [`split`](SharedSet::split), and [`Error::InvalidItem`] for fewer than two parents.
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add).
    pub async fn merge<I, C>(&self, parents: I, child: C) -> Result<SharedSetVersion, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
        C: Into<Item>,
    {
        let change =
            LineageChange::Merge { parents: parents.into_iter().map(Into::into).collect(), child: child.into() };
        self.change_lineage(change).await
    }

    /// Adds `child`, a new item, after `parents`, which stay open: it enters the set once all of them have finished
    /// (at once if they all have). A parent may be any item of the set, waiting or finished.
    ///
    /// # Errors
    /// As [`split`](SharedSet::split); an unknown parent (not in the set nor in its lineage) is an
    /// [`Error::InvalidItem`].
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add).
    pub async fn add_child<C, I>(&self, child: C, parents: I) -> Result<SharedSetVersion, Error>
    where
        C: Into<Item>,
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let change =
            LineageChange::AddChild { child: child.into(), parents: parents.into_iter().map(Into::into).collect() };
        self.change_lineage(change).await
    }

    /// Closes `items`: their source produces nothing new for them. An owner finishes a closed item once it has
    /// drained it ([`CheckpointWriter::finish_item`](crate::checkpoint::CheckpointWriter::finish_item)); closing twice is not an
    /// error.
    ///
    /// # Errors
    /// [`Error::InvalidItem`] for an item neither in the set nor waiting, or finished; and the errors of
    /// [`read`](SharedSet::read). Nothing is changed when it fails.
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add).
    pub async fn close<I>(&self, items: I) -> Result<SharedSetVersion, Error>
    where
        I: IntoIterator,
        I::Item: Into<Item>,
    {
        let change = LineageChange::Close { items: items.into_iter().map(Into::into).collect() };
        self.change_lineage(change).await
    }

    /// The set's lineage: every item that has a parent, a child or was closed, with where it stands (ready, waiting
    /// on which parents, finished), consistent with one version of the set.
    ///
    /// ```no_run
    /// # async fn dox(set: zk_partitioner::SharedSet) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::{Item, shared_set::LineageStatus};
    ///
    /// let lineage = set.lineage().await?;
    /// if let Some(LineageStatus::Waiting { on }) = lineage.get(&Item::from("shard-2")).map(|l| &l.status) {
    ///     println!("shard-2 waits on {on:?}");
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`read`](SharedSet::read).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn lineage(&self) -> Result<Lineage, Error> {
        self.inner.lineage().await
    }

    /// Retires the items finished more than `age` ago whose children have all started: deletes their lineage nodes
    /// (a child's parent that has none counts as finished) and then their checkpoints, and returns them. Their lock
    /// directories went when they left the set (the party's first member deletes those of removed items). A
    /// finished item is kept until then so that its children's first owners can read its final checkpoint; a
    /// retired item's name may be used again as a new item. So that the new item is nobody's parent, retiring an
    /// item also takes it out of its children's parents (and its parents' children) in the same write; a child left
    /// with no lineage at all becomes a plain item ([`lineage`](SharedSet::lineage) no longer lists it). One call
    /// retires up to about a thousand items.
    ///
    /// ```no_run
    /// # async fn dox(set: zk_partitioner::SharedSet) -> Result<(), zk_partitioner::Error> {
    /// use std::time::Duration;
    ///
    /// let retired = set.retire(Duration::from_secs(24 * 3600)).await?; // a day after their finish
    /// println!("retired {retired:?}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`read`](SharedSet::read).
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add); a dropped call may leave the checkpoints of items it retired.
    pub async fn retire(&self, age: std::time::Duration) -> Result<Vec<Item>, Error> {
        let inner = self.inner.clone();
        self.detached(async move { inner.retire(age).await }).await
    }

    /// The party's progress as one token: the set, its lineage, its weights and every checkpoint, read at one version
    /// of the set (an update under way is waited for, or finished). The checkpoints are read after the set, then the
    /// set's header and the checkpoints in force are read again, and everything is read again if either moved: a
    /// token never mixes two versions of the set, nor the checkpoints before and after an import. Members may run
    /// meanwhile (a backup): each checkpoint is then the one in force at some moment of the read.
    ///
    /// ```no_run
    /// # async fn dox(set: zk_partitioner::SharedSet) -> Result<(), zk_partitioner::Error> {
    /// let progress = set.export().await?;
    /// std::fs::write("orders.progress.json", progress.to_json()).expect("write");
    /// println!("version {}: {} items, {} checkpoints", progress.exported.set_version, progress.items.len(),
    ///     progress.checkpoints.len());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`read`](SharedSet::read); [`Error::CheckpointCorrupt`] for a checkpoint this crate did not write.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads (it may finish an update whose writer is gone, as any reader of the set may).
    pub async fn export(&self) -> Result<Progress, Error> {
        let inner = self.inner.clone();
        self.detached(async move { inner.export().await }).await
    }

    /// Imports a token ([`export`](SharedSet::export)'s) into this path, all or nothing, for a party that is stopped:
    /// it refuses, naming them, while any member is in the party or any item's lock is held or waited for (Kafka's
    /// empty-group rule), and a token that shares no item with the set here (unless there is no set). Into a path
    /// without a set it creates everything; into one with a set it replaces it, with one commit, so a member that
    /// starts later sees the old progress or the new, never a mix. That commit also moves what every checkpoint
    /// save checks, so no member of the old party can save a checkpoint over the imported ones, however late it
    /// wakes; and it fails if a member joined during the import. See [`ImportMode`] for what each mode keeps.
    ///
    /// A cut import (the process killed, the session expired) leaves the old state: its staged nodes go with its
    /// lease, and the next writer or the party's first member undoes its intent.
    ///
    /// ```no_run
    /// # async fn dox(set: zk_partitioner::SharedSet) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::shared_set::{ImportMode, Progress};
    ///
    /// let text = std::fs::read_to_string("orders.progress.json").expect("read");
    /// let progress = Progress::from_json(&text)?;
    /// let imported = set.import(&progress, ImportMode::Restore).await?;
    /// println!("version {}: {} items, {} checkpoints", imported.version, imported.items, imported.checkpoints);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::InvalidProgress`] for a token that cannot be read into a party's progress;
    /// - [`Error::ImportRefused`] for a running party, an unrelated token, or [`ImportMode::Prune`] with no set here;
    /// - the errors of [`read`](SharedSet::read) and [`add`](SharedSet::add).
    ///
    /// Nothing was changed when it fails, but for [`Error::SharedSetOutcomeUnknown`] (the session ended as the
    /// commit's reply was lost: read the set to know).
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add): from the first poll it runs on a task of its own.
    pub async fn import(&self, progress: &Progress, mode: ImportMode) -> Result<Imported, Error> {
        let (inner, progress) = (self.inner.clone(), progress.clone());
        self.detached(async move { inner.import(&progress, mode).await }).await
    }

    /// Resets every checkpoint, all at once: the set, its lineage and weights stay as they are (an update that lands
    /// while it reads them makes it read again); every item starts from nothing.
    /// The same rules as [`import`](SharedSet::import): the party must be stopped, and no member of it can save
    /// afterwards. Returns what it did.
    ///
    /// # Errors
    /// As [`import`](SharedSet::import).
    ///
    /// # Cancel safety
    /// As [`add`](SharedSet::add).
    pub async fn reset_checkpoints(&self) -> Result<Imported, Error> {
        let inner = self.inner.clone();
        self.detached(async move { inner.reset_checkpoints().await }).await
    }

    async fn change_lineage(&self, change: LineageChange) -> Result<SharedSetVersion, Error> {
        let inner = self.inner.clone();
        self.detached(async move { inner.change_lineage(change).await }).await
    }
}
