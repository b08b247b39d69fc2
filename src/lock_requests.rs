//! Item lock requests on the wire (kazoo's `Lock` recipe): contenders are ephemeral sequential nodes
//! `<path>/locks/<item>/<32 hex>__lock__<10-digit sequence>`; the lowest holds the lock.
//!
//! Stateless helpers taking a session ([`ZooKeeper`]), like zookeeper-client's own lock internals: the decision core
//! says what to do and the request path calls these. Batched forms put up to [`WRITE_BATCH`] writes or
//! [`READ_BATCH`] reads in one `multi`.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;

use crate::Error;
use crate::acl::NodeAcls;
use crate::retry::{is_transient, retry_transient, session_end};
use crate::zookeeper::{Mode, ReadOp, ReadResult, WatchEvent, WriteOp, Written, ZkError, ZooKeeper};
use proto::layout::sequence;

/// Write operations (creates, deletes) per `multi` in releases, and in allocations over a large set ([`LOCK_BATCH`]):
/// one transaction for 100 locks saves 99 round trips. Not more: ZooKeeper keeps its last 500 write transactions in
/// memory (`zookeeper.commitLogCount`, for followers catching up; a standalone server too), whole `multi`s included, so
/// at 500 per `multi` a 100-member rebalance of 100,000 items stayed in its heap entirely (measured with a 256 MB heap,
/// eager phases: 218-234 MB in use after the last collection, against 161-181 MB at 100 per `multi`, and a quarter as
/// many collections; bench/history/scale.md, "What changed, and where the time goes now").
pub(crate) const WRITE_BATCH: usize = 100;

/// Lock operations per `multi` in an allocation: 500 for sets of up to 25,000 items, [`WRITE_BATCH`] above. A lone
/// member's warm allocation then needs a fifth of the requests: 5,000 locks on a warm path took 59-63 ms at 100 per
/// `multi` and 53-55 ms at 500 as a bare client (BENCHMARKS.md, "The floor of the warm allocation"). The server's
/// memory stays below the 100,000-item case's: at 500 per `multi` the last 500 transactions can hold 250,000 operations
/// (about 70 MB, by the 100,000-item measurement above: 500 per `multi` kept about 55 MB more than 100), beside a data
/// tree a quarter of the 100,000-item one, where that case holds 161-181 MB after a collection.
pub(crate) const LOCK_BATCH: proto::decision::Batch =
    proto::decision::Batch { small: 500, small_set: 25_000, large: WRITE_BATCH };

/// Read operations per read `multi`: reads leave nothing behind on the server, and each is small, so 500 stay far
/// below ZooKeeper's 1 MB packet limit (`jute.maxbuffer`).
pub(crate) const READ_BATCH: usize = 500;

/// One of our contender nodes to delete: its directory, its unique prefix, and its name once known.
#[derive(Debug, Clone)]
pub(crate) struct NodeRef {
    pub dir: String,
    pub prefix: String,
    pub node: Option<String>,
}

impl NodeRef {
    fn path(&self) -> Option<String> {
        self.node.as_ref().map(|node| format!("{}/{node}", self.dir))
    }
}

/// Creates one contender per `<dir>/<prefix>` in one `multi` (all or none). Returns each node's name and creation
/// zxid (0 from servers before 3.7.2/3.8.2/3.9.0, which send no stat for a create inside a `multi`, ZOOKEEPER-4026).
/// An error comes with the index of the operation that failed, when the server names one.
pub(crate) async fn create_contenders<Z: ZooKeeper>(
    zk: &Z,
    prefixes: &[String],
    data: &[u8],
    acls: &NodeAcls,
) -> Result<Vec<(String, i64)>, (ZkError, Option<usize>)> {
    let ops: Vec<WriteOp<'_>> =
        prefixes.iter().map(|path| WriteOp::Create { path, data, mode: Mode::EphemeralSequential, acls }).collect();
    let results = zk.multi_write(&ops).await.map_err(|err| (err.error, err.index))?;
    Ok(results
        .into_iter()
        .map(|result| match result {
            Written::Created { path, stat } => {
                let name = path.rsplit('/').next().unwrap_or_default().to_owned();
                (name, if stat.is_invalid() { 0 } else { stat.czxid })
            }
            _ => (String::new(), 0),
        })
        .collect())
}

/// Whether `<path>/locks` has any child: `false` on a fresh path, whose lock directories are then made before the
/// first creates (one `multi` per batch) instead of after a create failed with `NoNode` for each batch.
pub(crate) async fn any_dir<Z: ZooKeeper>(zk: &Z, paths: &crate::paths::Paths) -> Result<bool, Error> {
    let stat = retry_transient(zk, || zk.check_stat(&paths.locks))
        .await
        .map_err(|e| Error::zk("exists", paths.locks.as_str(), e))?;
    Ok(stat.is_some_and(|stat| stat.num_children > 0))
}

/// Makes sure every directory exists: one `multi` when none does (the common case on a fresh path), else one
/// `mkdir` each (which also recreates `<path>/locks` should an operator have removed it).
pub(crate) async fn make_dirs<Z: ZooKeeper>(zk: &Z, dirs: &[String], acls: &NodeAcls) -> Result<(), ZkError> {
    let ops: Vec<WriteOp<'_>> =
        dirs.iter().map(|path| WriteOp::Create { path, data: b"", mode: Mode::Persistent, acls }).collect();
    match zk.multi_write(&ops).await {
        Ok(_) => return Ok(()),
        Err(err) if is_transient(&err.error) || session_end(&err.error).is_some() => return Err(err.error),
        Err(_) => {} // some exist already, or `<path>/locks` is missing: one by one
    }
    let made = futures::future::join_all(dirs.iter().map(|dir| zk.mkdir(dir, acls))).await;
    made.into_iter().find(|result| !matches!(result, Ok(()) | Err(ZkError::NodeExists))).unwrap_or(Ok(()))
}

/// The outcome of listing one lock directory: its children and our node's creation zxid (0 if not read); or, when
/// the item's lineage node was read along and says the item was finished, [`ListError::Finished`].
pub(crate) type Listing = Result<(Vec<String>, i64), ListError>;

/// Why a lock directory's listing says nothing of its children.
#[derive(Debug)]
pub(crate) enum ListError {
    /// ZooKeeper refused the read.
    Zk(ZkError),
    /// The item was finished (its lineage node says so, in the same consistent read as the directory): its lock is
    /// not to be held any more, whoever's contender comes first.
    Finished,
}

/// One lock directory to list: the directory, our node in it (read for its creation zxid, the fencing token), and the
/// item's lineage node (read for whether it was finished).
pub(crate) struct DirRead {
    pub dir: String,
    pub node: Option<String>,
    pub lineage: Option<String>,
}

/// Lists several lock directories in one read-only `multi`: one consistent read, so a contender found first in it
/// was first while the lineage read along said what it says. Each read succeeds or fails on its own.
pub(crate) async fn list_dirs<Z: ZooKeeper>(zk: &Z, dirs: &[DirRead]) -> Result<Vec<Listing>, ZkError> {
    let mut ops = Vec::with_capacity(dirs.len() * 3);
    for DirRead { dir, node, lineage } in dirs {
        ops.push(ReadOp::Children(dir));
        if let Some(node) = node {
            ops.push(ReadOp::Data(node));
        }
        if let Some(lineage) = lineage {
            ops.push(ReadOp::Data(lineage));
        }
    }
    let mut results = zk.multi_read(&ops).await?.into_iter();
    let mut listings = Vec::with_capacity(dirs.len());
    for DirRead { node, lineage, .. } in dirs {
        let children = match results.next() {
            Some(ReadResult::Children(children)) => Ok(children),
            Some(ReadResult::Failed(err)) => Err(err),
            _ => Err(ZkError::UnexpectedError("get_children answered with data".into())),
        };
        let czxid = match node.as_ref().and_then(|_| results.next()) {
            Some(ReadResult::Data(_, stat)) => stat.czxid,
            _ => 0,
        };
        let finished = match lineage.as_ref().and_then(|_| results.next()) {
            Some(ReadResult::Data(data, _)) => crate::shared_set::finished(&data),
            _ => false,
        };
        listings.push(match children {
            _ if finished => Err(ListError::Finished),
            Ok(children) => Ok((children, czxid)),
            Err(err) => Err(ListError::Zk(err)),
        });
    }
    Ok(listings)
}

/// Waits until the contender at `path`, the one just ahead of ours, changes or goes ([`wait_for`]). One of our own
/// session is deleted instead: a create of ours whose reply was lost with the connection, applied by the server
/// after our next requests (after we had given it up and created again under a new prefix). Waiting for it would be
/// waiting for ourselves; the core never asks to wait for a node it tracks.
pub(crate) async fn wait_for_predecessor<Z: ZooKeeper>(zk: &Z, path: &str) -> Result<(), ZkError> {
    #[cfg(test)]
    let sabotaged = proto::sabotage::breaks(proto::sabotage::Sabotage::OwnPredecessorWaited);
    #[cfg(not(test))]
    let sabotaged = false;
    match zk.get_and_watch_data(path).await {
        Ok((_, stat, _)) if stat.ephemeral_owner == zk.session_id() && !sabotaged => {
            tracing::info!(
                node = path,
                "deleting a lock node of our own session ahead of ours (a create that landed late)"
            );
            match crate::retry::retry_transient(zk, || zk.delete(path, None)).await {
                Ok(()) | Err(ZkError::NoNode) => Ok(()),
                Err(err) => Err(err),
            }
        }
        Ok((_, _, watch)) => match watch.await.session_error() {
            Some(err) => Err(err),
            None => Ok(()),
        },
        Err(ZkError::NoNode) => Ok(()),
        Err(err) => Err(err),
    }
}

/// Waits until the contender at `path` changes or goes. A data watch, as kazoo's and zookeeper-client's locks use:
/// an `exists` watch on a node that is already gone would linger until someone recreated that name.
pub(crate) async fn wait_for<Z: ZooKeeper>(zk: &Z, path: &str) -> Result<(), ZkError> {
    match zk.get_and_watch_data(path).await {
        Ok((_, _, watch)) => match watch.await.session_error() {
            Some(err) => Err(err),
            None => Ok(()),
        },
        Err(ZkError::NoNode) => Ok(()),
        Err(err) => Err(err),
    }
}

/// Registers the watch on our held lock node at `path` (one `getData`): the watch, or `None` when the node is
/// already gone. The decision core keeps a few registrations in flight at once: a member that just took 100,000 locks
/// registers their watches in a stream, not in one burst. Once registered, a watch costs nothing until it fires (the
/// client sets it again after a reconnection). A registration lost with the connection is sent again, after a pause,
/// until the session ends.
pub(crate) async fn watch_held<Z: ZooKeeper>(zk: &Z, path: &str) -> Result<Option<Z::Watch>, ZkError> {
    let mut pause = Duration::from_millis(50);
    loop {
        match zk.get_and_watch_data(path).await {
            Ok((_, _, watch)) => return Ok(Some(watch)),
            Err(ZkError::NoNode) => return Ok(None),
            Err(err) if is_transient(&err) => {
                zk.sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(err) => return Err(err),
        }
    }
}

/// Waits for the watch on our held lock node ([`watch_held`]) to fire: `true` when the node was deleted, `false`
/// when its data changed (someone wrote to our lock node: still ours, and the core registers the watch again), or
/// the session's end.
pub(crate) async fn held_gone<W: Future<Output = WatchEvent>>(watch: W) -> Result<bool, ZkError> {
    let event = watch.await;
    match event.session_error() {
        Some(err) => Err(err),
        None => Ok(event == WatchEvent::Deleted),
    }
}

/// Deletes every lock contender node of our session under `locks_dir` that does not start with one of the
/// `<dir>/<prefix>` texts in `kept`: orphans, which the bookkeeping should never leave, but which would block an item
/// forever if it did (kazoo #732/#760). One request to list them (`GetEphemerals`, ZooKeeper 3.6+; skipped on older
/// servers). Returns how many were deleted.
pub(crate) async fn sweep_orphans<Z: ZooKeeper>(
    zk: &Z,
    locks_dir: &str,
    kept: &HashSet<String>,
) -> Result<usize, Error> {
    // The server matches a string prefix (and refuses a trailing '/'): `/p/locks` would also match `/p/locksmith`.
    let ours = match zk.list_ephemerals(locks_dir).await {
        Ok(ours) => ours,
        Err(ZkError::Unimplemented) => return Ok(0),
        Err(err) => match Error::zk_or_transient("get_ephemerals", locks_dir.to_owned(), err) {
            // The next release sweeps again.
            None => return Ok(0),
            Some(err) => return Err(err),
        },
    };
    let orphans: Vec<NodeRef> = ours
        .into_iter()
        .filter(|path| path.strip_prefix(locks_dir).is_some_and(|rest| rest.starts_with('/')))
        .filter(|path| sequence(path).is_some_and(|seq| !kept.contains(&path[..path.len() - seq.len()])))
        .filter_map(|path| {
            let (dir, node) = path.rsplit_once('/')?;
            Some(NodeRef { dir: dir.to_owned(), prefix: String::new(), node: Some(node.to_owned()) })
        })
        .collect();
    let count = orphans.len();
    if count > 0 {
        tracing::warn!(count, "deleting lock nodes of our session that nothing tracked");
        release_all(zk, orphans, WRITE_BATCH).await?;
    }
    Ok(count)
}

/// Whether every node in `nodes` still exists and belongs to our session, as the leader sees it: `sync` on `path`
/// first, so a lagging follower cannot vouch for a node the leader already deleted. Reads go `READ_BATCH` per `multi`.
pub(crate) async fn still_ours<Z: ZooKeeper>(zk: &Z, path: &str, nodes: &[String]) -> Result<bool, Error> {
    retry_transient(zk, || zk.sync(path)).await.map_err(|e| Error::zk("sync", path, e))?;
    let session = zk.session_id();
    for chunk in nodes.chunks(READ_BATCH) {
        let ops: Vec<ReadOp<'_>> = chunk.iter().map(|node| ReadOp::Data(node)).collect();
        let results =
            retry_transient(zk, || zk.multi_read(&ops)).await.map_err(|e| Error::zk("multi get_data", path, e))?;
        let ours = results.len() == chunk.len()
            && results
                .iter()
                .all(|result| matches!(result, ReadResult::Data(_, stat) if stat.ephemeral_owner == session));
        if !ours {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Deletes our node of every contender, concurrently (at most `window` requests in flight). A contender whose create
/// reply never arrived is looked up by its prefix first: requests on one session are applied in order, so the listing
/// sees the create if it happened.
///
/// Lost connections are retried; a node already gone counts as deleted. Fails only when the session ends (every node
/// is gone with it, but the caller must know) or on an error that retrying cannot fix.
pub(crate) async fn release_all<Z: ZooKeeper>(zk: &Z, contenders: Vec<NodeRef>, window: usize) -> Result<(), Error> {
    // Nodes we know are deleted `WRITE_BATCH` per `multi`. A `multi` is all or nothing, so one node already gone
    // fails its whole batch; such a batch, and nodes we must look up first, go one by one.
    let (known, unknown): (Vec<NodeRef>, Vec<NodeRef>) = contenders.into_iter().partition(|c| c.node.is_some());
    let batches: Vec<Vec<NodeRef>> = known.chunks(WRITE_BATCH).map(<[NodeRef]>::to_vec).collect();
    let leftovers: Vec<NodeRef> = futures::stream::iter(batches.into_iter().map(|batch| release_batch(zk, batch)))
        .buffer_unordered((window / WRITE_BATCH).max(1))
        .flat_map(futures::stream::iter)
        .collect()
        .await;
    let mut results = futures::stream::iter(leftovers.into_iter().chain(unknown).map(|c| release_one(zk, c)))
        .buffer_unordered(window.max(1));
    let mut first_error = None;
    while let Some(result) = results.next().await {
        if let Err(err) = result {
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Deletes those of `dirs` (lock directories of items that left the shared set) that have no contender: their
/// children are read `READ_BATCH` per read `multi`, the empty ones deleted `WRITE_BATCH` per `multi`, one by one where
/// a batch fails (a contender arrived meanwhile, or another member deleted one first). Best effort: returns how many
/// were deleted; a directory in use is left to the member that releases its last contender.
pub(crate) async fn remove_empty_dirs<Z: ZooKeeper>(zk: &Z, dirs: &[String]) -> usize {
    let mut empty = Vec::new();
    for chunk in dirs.chunks(READ_BATCH) {
        let ops: Vec<ReadOp<'_>> = chunk.iter().map(|dir| ReadOp::Children(dir)).collect();
        let Ok(results) = zk.multi_read(&ops).await else { continue };
        for (dir, result) in chunk.iter().zip(results) {
            if matches!(result, ReadResult::Children(children) if children.is_empty()) {
                empty.push(dir.clone());
            }
        }
    }
    let mut removed = 0;
    for chunk in empty.chunks(WRITE_BATCH) {
        let ops: Vec<WriteOp<'_>> = chunk.iter().map(|path| WriteOp::Delete { path, version: None }).collect();
        if zk.multi_write(&ops).await.is_ok() {
            removed += chunk.len();
            continue;
        }
        let deleted = futures::future::join_all(chunk.iter().map(|dir| zk.delete(dir, None))).await;
        removed += deleted.iter().filter(|result| result.is_ok()).count();
    }
    removed
}

/// Deletes a batch of known nodes in one `multi`; returns the contenders still to release one by one if it failed.
async fn release_batch<Z: ZooKeeper>(zk: &Z, batch: Vec<NodeRef>) -> Vec<NodeRef> {
    let paths: Vec<String> = batch.iter().filter_map(NodeRef::path).collect();
    let ops: Vec<WriteOp<'_>> = paths.iter().map(|path| WriteOp::Delete { path, version: None }).collect();
    match zk.multi_write(&ops).await {
        Ok(_) => {
            tracing::debug!(count = batch.len(), "locks released in one multi");
            Vec::new()
        }
        Err(err) => {
            tracing::debug!(err = %err.error, count = batch.len(), "batched release failed; releasing one by one");
            batch
        }
    }
}

/// Deletes one contender of ours; one whose name is unknown (its create's reply was lost) is looked up by its
/// prefix, and every node carrying the prefix is deleted (a lost create can land late, beside a retried one).
async fn release_one<Z: ZooKeeper>(zk: &Z, contender: NodeRef) -> Result<(), Error> {
    let mut delay = Duration::from_millis(10);
    let mut known: Vec<String> = contender.path().into_iter().collect();
    let mut looked_up = contender.node.is_some();
    loop {
        let result = match known.last() {
            Some(path) => match zk.delete(path, None).await {
                Ok(()) | Err(ZkError::NoNode) => {
                    tracing::debug!(node = %path, "lock released");
                    known.pop();
                    if known.is_empty() && looked_up {
                        return Ok(());
                    }
                    continue;
                }
                Err(err) => Err(Error::zk_or_transient("delete", path.clone(), err)),
            },
            None if looked_up => return Ok(()),
            None => match zk.list_children(&contender.dir).await {
                Ok(children) => {
                    known = children
                        .into_iter()
                        .filter(|c| c.starts_with(&contender.prefix))
                        .map(|node| format!("{}/{node}", contender.dir))
                        .collect();
                    looked_up = true;
                    continue;
                }
                Err(ZkError::NoNode) => return Ok(()),
                Err(err) => Err(Error::zk_or_transient("get_children", contender.dir.clone(), err)),
            },
        };
        match result {
            Err(Some(err)) => return Err(err),
            Err(None) | Ok(()) => {
                zk.sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
    }
}

impl Error {
    /// `None` for an error worth retrying, the wrapped error otherwise.
    pub(crate) fn zk_or_transient(op: &'static str, path: String, err: ZkError) -> Option<Error> {
        if is_transient(&err) && session_end(&err).is_none() { None } else { Some(Error::zk(op, path, err)) }
    }
}
