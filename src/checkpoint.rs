//! Fenced checkpoints: per item, a small blob stored next to its lock, which only the item's current holder can write.
//!
//! The blob of item `<item>` lives in the persistent node `<path>/checkpoints/<item>` (`<item>` is the item's lock
//! node name), or, once an import has replaced the party's progress, in the generation it wrote
//! (`<path>/checkpoint-generations/<tag>/<item>`: `checkpoint_store::generation` says which is in force). Its data is a one-line
//! header, `zkp-checkpoint 1 <token> <writer>\n`, then the user's bytes: the writer's [`FencingToken`] (in decimal)
//! and member name travel with the data, so a reader knows who wrote it and under which ownership. kazoo members
//! ignore the `checkpoints` node.
//!
//! [`CheckpointWriter`] says why the fence holds.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use zookeeper_client::Client;

pub use crate::checkpoint_store::MAX_CHECKPOINT_SIZE;
use crate::checkpoint_store::{blob, generation, parse_blob};
use crate::paths::Paths;
use crate::retry::{is_transient, retry_transient, session_end};
use crate::session::SessionRef;
use crate::shared_set::{Finisher, SetStore};
use crate::zookeeper::{Mode, MultiError, WriteOp, ZkError, ZooKeeper};
use crate::{Error, FencingToken, Item};

/// How often a save goes round when the checkpoint node appears or disappears under it (only someone deleting the
/// node by hand, over and over, makes it go round more than twice).
const MAX_ROUNDS: usize = 5;

/// A checkpoint as read by [`SetPartitioner::load_checkpoint`](crate::SetPartitioner::load_checkpoint).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The bytes the writer saved.
    pub data: Vec<u8>,
    /// The writer's fencing token for the item when it saved (its lock node's creation zxid).
    pub token: FencingToken,
    /// The writer's member name.
    pub writer: String,
    /// When it was saved (the checkpoint node's modification time, by the ZooKeeper server's clock).
    pub saved: SystemTime,
    /// How many saves the node has seen since it was created, minus one (its ZooKeeper data version).
    pub version: i32,
}

/// Where a partitioner's checkpoints live, and the session that writes them. Shared by a handle's clones.
#[derive(Clone, Debug)]
pub(crate) struct Checkpoints<Z = Client> {
    /// The member's session, until its background task ends.
    session: SessionRef<Z>,
    /// The partition path.
    path: String,
    paths: Paths,
    /// The generation in force when the member joined the party: where its checkpoints are, and the version of
    /// `<path>/checkpoints` every save checks.
    generation: generation::Generation,
}

impl<Z: ZooKeeper> Checkpoints<Z> {
    /// The checkpoints of the partition whose nodes are `paths` (their ACL included), of `generation` (read after
    /// the member joined the party: see `checkpoint_store::generation`).
    pub(crate) fn new(session: SessionRef<Z>, base: &str, paths: Paths, generation: generation::Generation) -> Self {
        Checkpoints { session, path: base.to_owned(), paths, generation }
    }

    /// The partition path.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// `<path>/checkpoints/<item>`, or the item's node in the generation in force.
    fn node(&self, item: &Item) -> String {
        format!("{}/{}", self.generation.dir, item.node_name())
    }

    /// A writer for `item`, held through the lock node `lock_node` (its name in the item's lock directory).
    pub(crate) fn writer(
        self: &Arc<Self>,
        item: &Item,
        lock_node: &str,
        token: FencingToken,
        member: Arc<str>,
    ) -> Writer<Z> {
        Writer {
            store: self.clone(),
            item: item.clone(),
            node: self.node(item),
            lock_node: format!("{}/{lock_node}", self.paths.lock_dir(&item.node_name())),
            pointer: generation::pointer(&self.path),
            token,
            member,
        }
    }

    /// Reads `item`'s checkpoint, if any.
    pub(crate) async fn load(&self, item: &Item) -> Result<Option<Checkpoint>, Error> {
        let node = self.node(item);
        let zk = self.session.client().ok_or(Error::Stopped)?;
        let (blob, stat) = match retry_transient(&zk, || zk.get_data(&node)).await {
            Ok(read) => read,
            Err(ZkError::NoNode) => return Ok(None),
            Err(err) => return Err(Error::zk("get_data", node, err)),
        };
        let (token, writer, data) = parse_blob(&blob).map_err(|reason| Error::CheckpointCorrupt {
            item: item.node_name(),
            path: node.clone(),
            reason: reason.to_owned(),
        })?;
        Ok(Some(Checkpoint {
            data: data.to_vec(),
            token: FencingToken::new(token),
            writer,
            saved: SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(stat.mtime).unwrap_or(0)),
            version: stat.version,
        }))
    }
}

/// Saves checkpoints of one item for as long as this member holds it, through the lock node it held when the writer
/// was made: made by [`SetPartitioner::checkpoint_writer`](crate::SetPartitioner::checkpoint_writer).
///
/// A worker task that processes one item can keep its writer: once the member lets the item go (a rebalance, a
/// release, the end of its session), every save fails with [`Error::CheckpointFenced`], even if the task does not
/// notice the change, and even if the same member takes the item again later (that is a new lock node, so a new
/// writer). Cheap to clone.
/// # Why one check makes the write safe
///
/// A save is one `multi`: `check` that our lock node for the item exists (any version), `check` that the checkpoints
/// in force are the generation the member joined under (an import of the party's progress moves it:
/// see `checkpoint_store::generation`), and `setData` on the checkpoint node (or `create` it, the first time). ZooKeeper applies a `multi` atomically at one point of its total
/// order, and rejects it whole if any operation fails, so the write happens only if our lock node exists at that
/// point. That our lock node exists means we hold the item:
///
/// 1. The partitioner lists an item (and hands out its lock node) only after a listing of the item's lock directory
///    showed our contender `N` as the lowest: every contender with a smaller sequence number was gone by then.
/// 2. A contender lower than `N` cannot appear later. Sequence numbers in a directory come from the directory's
///    counter, which only increases, so every contender created after `N` sorts after it; and a deleted contender
///    never comes back (a sequential create never reuses a number in a directory, the directory is never deleted
///    while it has children, and each contender's name starts with its creator's random 128-bit prefix).
/// 3. So while `N` exists it stays the lowest contender: it holds the lock. `N` can only disappear: deleted when this
///    member releases the item, or by ZooKeeper when this member's session ends.
/// 4. `N` is ephemeral and its name is ours alone, so "`N` exists" also means "`N` belongs to our live session". A
///    `multi` from a session that has ended is refused before any operation runs.
///
/// A new owner can take the item only after `N` is gone, which comes after every write of ours that succeeded: its
/// reads see our last checkpoint, and our later writes fail the check. That covers a paused old owner whose session
/// expired (its lock node went with the session) and worker code still running after its member released the item
/// (same live session, lock node deleted). Outside the protocol, and not covered: a node created by hand in the lock
/// directory with a name that sorts before `N` (ZooKeeper lets anyone create any name), or writes to the checkpoint
/// node that do not go through this check.
#[derive(Clone, Debug)]
pub struct CheckpointWriter(pub(crate) Writer<Client>);

/// A [`CheckpointWriter`] on any session (the simulation's too).
#[derive(Clone, Debug)]
pub(crate) struct Writer<Z> {
    store: Arc<Checkpoints<Z>>,
    item: Item,
    /// `<path>/checkpoints/<item>`.
    node: String,
    /// Our lock node's full path.
    lock_node: String,
    /// `<path>/checkpoints`, whose data version ([`Checkpoints::generation`]) every save checks.
    pointer: String,
    token: FencingToken,
    member: Arc<str>,
}

impl CheckpointWriter {
    /// The item.
    pub fn item(&self) -> &Item {
        &self.0.item
    }

    /// The fencing token of the ownership this writer belongs to (stored with every save).
    pub fn token(&self) -> FencingToken {
        self.0.token
    }

    /// The lock node whose existence every save checks.
    pub fn lock_node(&self) -> &str {
        &self.0.lock_node
    }

    /// Saves `data` as the item's checkpoint if, and only if, this member still holds the item through the same lock
    /// node: one `multi` request that checks the lock node and sets the checkpoint node's data (see
    /// [`CheckpointWriter`] for why that check suffices).
    ///
    /// The first save of an item creates its checkpoint node (two requests: the failed update, then a `multi` that
    /// checks the lock node and creates the checkpoint node; a few more to create `<path>/checkpoints` the very
    /// first time). Every later save is one request.
    ///
    /// # Errors
    /// - [`Error::CheckpointTooLarge`] if `data` is longer than [`MAX_CHECKPOINT_SIZE`], before any request;
    /// - [`Error::CheckpointFenced`] if the member no longer holds the item through this writer's lock node (released,
    ///   or its session ended, or its partitioner stopped): nothing was written;
    /// - [`Error::ZooKeeper`] if ZooKeeper refuses the write otherwise.
    ///
    /// A request lost with the connection is sent again (the check runs again with it). So after a connection loss, a
    /// save can fail with [`Error::CheckpointFenced`] although its first attempt was applied, while the item was
    /// still held.
    ///
    /// # Cancel safety
    /// Not cancel safe in the sense that a dropped save may or may not have been applied; whatever was applied was
    /// applied while the item was held.
    pub async fn save(&self, data: &[u8]) -> Result<(), Error> {
        self.0.save(data).await
    }
}

impl CheckpointWriter {
    /// Finishes the item, if this member still holds it through this writer's lock node: the item was closed
    /// ([`SharedSet::close`](crate::SharedSet::close), or a split or merge of it) and the worker has drained it. One
    /// `multi` checks the lock node (the same fence as [`save`](CheckpointWriter::save)), marks the item finished in
    /// its lineage node, takes it out of the shared set (its owner then lets it go, as for any removed item), and
    /// puts in every child of it whose parents have all finished now; with `final_checkpoint`, it also writes that
    /// as the item's checkpoint, which the item keeps for its children's first owners to read
    /// ([`SetPartitioner::load_checkpoint`](crate::SetPartitioner::load_checkpoint)). A finished item is never
    /// assigned again. Returns the children that entered the set.
    ///
    /// With a final checkpoint the checkpoint node is first saved alone (to create it if needed), then written again
    /// in the finish's `multi`.
    ///
    /// ```no_run
    /// # async fn dox(partitioner: zk_partitioner::SetPartitioner) -> Result<(), zk_partitioner::Error> {
    /// use zk_partitioner::Item;
    ///
    /// let shard = Item::from("shard-1");
    /// let writer = partitioner.checkpoint_writer(&shard)?;
    /// // ... the source said shard-1 is closed, and every record of it was processed ...
    /// let ready = writer.finish_item(Some(b"offset=9000")).await?;
    /// println!("shard-1 finished; {ready:?} can start");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// - [`Error::CheckpointFenced`] if the member no longer holds the item through this writer's lock node: nothing
    ///   was written;
    /// - [`Error::InvalidItem`] if the item is not closed;
    /// - [`Error::EmptySharedSet`] if it is the set's last item and no child of it would enter the set (a shared set
    ///   is never empty: add its successor first);
    /// - [`Error::SharedSetMissing`] if the partition has no shared set;
    /// - [`Error::CheckpointTooLarge`], and the errors of [`SharedSet::read`](crate::SharedSet::read).
    ///
    /// # Cancel safety
    /// As [`save`](CheckpointWriter::save): a dropped finish may or may not have been applied; if it was, it was
    /// applied while the item was held. Calling it again tells: it returns `Ok` (with no children) if a finish under
    /// the same ownership landed, [`Error::CheckpointFenced`] if another owner's did.
    pub async fn finish_item(&self, final_checkpoint: Option<&[u8]>) -> Result<Vec<Item>, Error> {
        self.0.finish_item(final_checkpoint).await
    }
}

impl<Z: ZooKeeper> Writer<Z> {
    /// See [`CheckpointWriter::finish_item`].
    pub(crate) async fn finish_item(&self, final_checkpoint: Option<&[u8]>) -> Result<Vec<Item>, Error> {
        let blob = match final_checkpoint {
            Some(data) => {
                self.save(data).await?;
                Some(self.blob(data))
            }
            None => None,
        };
        let set = SetStore::new(self.store.session.clone(), &self.store.path, self.store.paths.acls.clone());
        let finisher =
            Finisher { item: &self.item, lock_node: &self.lock_node, token: self.token.get(), member: &self.member };
        let mut extra: Vec<WriteOp<'_>> = Vec::new();
        if let Some(blob) = &blob {
            let epoch = Some(self.store.generation.version);
            extra.push(WriteOp::Check { path: &self.pointer, version: epoch });
            extra.push(WriteOp::SetData { path: &self.node, data: blob, version: None });
        }
        set.finish_item(&finisher, &extra).await
    }

    fn blob(&self, data: &[u8]) -> Vec<u8> {
        blob(self.token.get(), &self.member, data)
    }

    /// See [`CheckpointWriter::save`].
    pub(crate) async fn save(&self, data: &[u8]) -> Result<(), Error> {
        if data.len() > MAX_CHECKPOINT_SIZE {
            return Err(Error::CheckpointTooLarge {
                item: self.item.node_name(),
                size: data.len(),
                limit: MAX_CHECKPOINT_SIZE,
            });
        }
        let blob = self.blob(data);
        let Some(zk) = self.store.session.client() else {
            return Err(self.fenced("the partitioner has stopped, and its session with it"));
        };
        let mut create = false;
        for _ in 0..MAX_ROUNDS {
            let MultiError { index, error } = match self.commit(&zk, &blob, create).await {
                Ok(()) => {
                    tracing::debug!(item = %self.item, bytes = data.len(), "checkpoint saved");
                    return Ok(());
                }
                Err(err) => err,
            };
            match (index, error) {
                (_, error) if session_end(&error).is_some() => return Err(self.fenced("its session has ended")),
                (Some(0), ZkError::NoNode) => {
                    return Err(self.fenced("its lock node is gone: the item was released, or its session ended"));
                }
                (Some(1), ZkError::BadVersion | ZkError::NoNode) => {
                    return Err(self.fenced(
                        "the party's progress was replaced (an import, or a reset of the checkpoints) since this \
                         member joined: restart it",
                    ));
                }
                // The checkpoint node does not exist yet: create it.
                (Some(2), ZkError::NoNode) if !create => create = true,
                // Its directory does not exist yet (the first generation's, `<path>/checkpoints`, is made at
                // start-up; an import makes its own).
                (Some(2), ZkError::NoNode) => {
                    let dir = &self.store.generation.dir;
                    match retry_transient(&zk, || zk.mkdir(dir, &self.store.paths.acls)).await {
                        Ok(()) => {}
                        Err(err) if session_end(&err).is_some() => return Err(self.fenced("its session has ended")),
                        Err(err) => return Err(Error::zk("mkdir", dir.as_str(), err)),
                    }
                }
                // Created meanwhile (by another save of ours): update it.
                (Some(2), ZkError::NodeExists) if create => create = false,
                (_, error) => {
                    let op = if create { "multi check+create" } else { "multi check+set_data" };
                    return Err(Error::zk(op, self.node.as_str(), error));
                }
            }
        }
        Err(Error::zk("multi check+set_data", self.node.as_str(), ZkError::NoNode))
    }

    /// One `multi`: check our lock node and the generation's version, then set (or create) the checkpoint node. Sent again while it is lost with
    /// the connection; the client fails it for good once the session ends.
    async fn commit(&self, zk: &Z, blob: &[u8], create: bool) -> Result<(), MultiError> {
        let mut delay = Duration::from_millis(10);
        let acls = &self.store.paths.acls;
        loop {
            let write = if create {
                WriteOp::Create { path: &self.node, data: blob, mode: Mode::Persistent, acls }
            } else {
                WriteOp::SetData { path: &self.node, data: blob, version: None }
            };
            let epoch = Some(self.store.generation.version);
            let ops = [
                WriteOp::Check { path: &self.lock_node, version: None },
                WriteOp::Check { path: &self.pointer, version: epoch },
                write,
            ];
            match zk.multi_write(&ops).await {
                Err(MultiError { index: None, error }) if is_transient(&error) => {
                    tracing::warn!(%error, item = %self.item, "retrying a checkpoint save lost with the connection");
                    zk.sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                result => return result.map(drop),
            }
        }
    }

    fn fenced(&self, reason: &str) -> Error {
        Error::CheckpointFenced {
            item: self.item.node_name(),
            lock_node: self.lock_node.clone(),
            reason: reason.to_owned(),
        }
    }
}
