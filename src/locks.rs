//! Item lock requests on the wire (kazoo's `Lock` recipe): contenders are ephemeral sequential nodes
//! `<path>/locks/<item>/<32 hex>__lock__<10-digit sequence>`; the lowest holds the lock.
//!
//! Stateless helpers taking `&Client`, like zookeeper-client's own lock internals: the decision core says what to do
//! and the driver calls these. Batched forms put up to [`WRITE_BATCH`] writes or [`READ_BATCH`] reads in one `multi`.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use zookeeper_client::{Client, MultiReadResult, MultiWriteError, MultiWriteResult};

use crate::Error;
use crate::acl::NodeAcls;
use crate::decision::sequence;
use crate::error::{is_transient, session_end};

/// Write operations (creates, deletes) per `multi`: one transaction for 100 locks saves 99 round trips. Not more:
/// ZooKeeper keeps its last 500 write transactions in memory (`zookeeper.commitLogCount`, for followers catching up;
/// a standalone server too), whole `multi`s included, so at 500 per `multi` a 100-member rebalance of 100,000 items
/// stayed in its heap entirely (measured with a 256 MB heap, eager phases: 218-234 MB in use after the last
/// collection, against 161-181 MB at 100 per `multi`, and a quarter as many collections; BENCHMARKS.md, "The scale
/// benchmark"). A lone member's allocation is as fast either way.
pub(crate) const WRITE_BATCH: usize = 100;

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
pub(crate) async fn create_contenders(
    client: &Client,
    prefixes: &[String],
    data: &[u8],
    acls: &NodeAcls,
) -> Result<Vec<(String, i64)>, (zookeeper_client::Error, Option<usize>)> {
    let mut writer = client.new_multi_writer();
    for prefix in prefixes {
        writer.add_create(prefix, data, &acls.ephemeral_sequential()).map_err(|err| (err, None))?;
    }
    let results = writer.commit().await.map_err(|err| match err {
        MultiWriteError::RequestFailed { source } => (source, None),
        MultiWriteError::OperationFailed { source, index } => (source, Some(index)),
    })?;
    Ok(results
        .into_iter()
        .map(|result| match result {
            MultiWriteResult::Create { path, stat } => {
                let name = path.rsplit('/').next().unwrap_or_default().to_owned();
                (name, if stat.is_invalid() { 0 } else { stat.czxid })
            }
            _ => (String::new(), 0),
        })
        .collect())
}

/// Whether `<path>/locks` has any child: `false` on a fresh path, whose lock directories are then made before the
/// first creates (one `multi` per batch) instead of after a create failed with `NoNode` for each batch.
pub(crate) async fn any_dir(client: &Client, paths: &crate::party::Paths) -> Result<bool, Error> {
    let stat = crate::party::retry_transient(|| client.check_stat(&paths.locks))
        .await
        .map_err(|e| Error::zk("exists", paths.locks.as_str(), e))?;
    Ok(stat.is_some_and(|stat| stat.num_children > 0))
}

/// Makes sure every directory exists: one `multi` when none does (the common case on a fresh path), else one
/// `mkdir` each (which also recreates `<path>/locks` should an operator have removed it).
pub(crate) async fn make_dirs(
    client: &Client,
    dirs: &[String],
    acls: &NodeAcls,
) -> Result<(), zookeeper_client::Error> {
    let mut writer = client.new_multi_writer();
    for dir in dirs {
        writer.add_create(dir, b"", &acls.persistent())?;
    }
    match writer.commit().await {
        Ok(_) => return Ok(()),
        Err(MultiWriteError::RequestFailed { source } | MultiWriteError::OperationFailed { source, .. })
            if is_transient(&source) || session_end(&source).is_some() =>
        {
            return Err(source);
        }
        Err(_) => {} // some exist already, or `<path>/locks` is missing: one by one
    }
    let options = acls.persistent();
    let made = futures::future::join_all(dirs.iter().map(|dir| client.mkdir(dir, &options))).await;
    made.into_iter()
        .find(|result| !matches!(result, Ok(()) | Err(zookeeper_client::Error::NodeExists)))
        .unwrap_or(Ok(()))
}

/// The outcome of listing one lock directory: its children and our node's creation zxid (0 if not read).
pub(crate) type Listing = Result<(Vec<String>, i64), zookeeper_client::Error>;

/// Lists several lock directories in one read-only `multi`, reading our node in each where its path is known (for
/// its creation zxid, the fencing token). Each read succeeds or fails on its own.
pub(crate) async fn list_dirs(
    client: &Client,
    dirs: &[(String, Option<String>)],
) -> Result<Vec<Listing>, zookeeper_client::Error> {
    let mut reader = client.new_multi_reader();
    for (dir, node) in dirs {
        reader.add_get_children(dir)?;
        if let Some(node) = node {
            reader.add_get_data(node)?;
        }
    }
    let mut results = reader.commit().await?.into_iter();
    let mut listings = Vec::with_capacity(dirs.len());
    for (_, node) in dirs {
        let children = match results.next() {
            Some(MultiReadResult::Children { children }) => Ok(children),
            Some(MultiReadResult::Error { err }) => Err(err),
            _ => Err(zookeeper_client::Error::UnexpectedError("get_children answered with data".into())),
        };
        let czxid = match node.as_ref().and_then(|_| results.next()) {
            Some(MultiReadResult::Data { stat, .. }) => stat.czxid,
            _ => 0,
        };
        listings.push(children.map(|children| (children, czxid)));
    }
    Ok(listings)
}

/// Waits for a one-shot watch to fire. zookeeper-client 0.11 panics inside `OneshotWatcher::changed` when it drops
/// the watch's sender without an event (its session task ended, e.g. the client was closed or the runtime is shutting
/// down); that is the end of the session, reported here as `Closed` instead of a panic in the partitioner's task.
pub(crate) async fn changed(watcher: zookeeper_client::OneshotWatcher) -> zookeeper_client::WatchedEvent {
    use futures::FutureExt;
    std::panic::AssertUnwindSafe(watcher.changed())
        .catch_unwind()
        .await
        .unwrap_or_else(|_| zookeeper_client::WatchedEvent::new_session(zookeeper_client::SessionState::Closed))
}

/// Waits until the contender at `path` changes or goes. A data watch, as kazoo's and zookeeper-client's locks use:
/// an `exists` watch on a node that is already gone would linger until someone recreated that name.
pub(crate) async fn wait_for(client: &Client, path: &str) -> Result<(), zookeeper_client::Error> {
    match client.get_and_watch_data(path).await {
        Ok((_, _, watcher)) => match session_end_of(&changed(watcher).await) {
            Some(err) => Err(err),
            None => Ok(()),
        },
        Err(zookeeper_client::Error::NoNode) => Ok(()),
        Err(err) => Err(err),
    }
}

/// Waits until our held lock node at `path` is deleted (or is found missing), keeping the watch through data changes.
/// At most `registrations` watches are being registered at once: a member that just took 100,000 locks registers
/// their watches in a stream, not in one burst. Once registered, a watch costs nothing until it fires (the client
/// sets it again after a reconnection). A registration lost with the connection is sent again, after a pause, until
/// the session ends: the only outcomes are "gone" and the end of the session.
pub(crate) async fn wait_gone(
    client: &Client,
    path: &str,
    registrations: &tokio::sync::Semaphore,
) -> Result<(), zookeeper_client::Error> {
    let mut pause = Duration::from_millis(50);
    loop {
        let watched = {
            // A closed semaphore is never closed here; without a permit, register anyway.
            let _permit = registrations.acquire().await.ok();
            client.get_and_watch_data(path).await
        };
        match watched {
            Ok((_, _, watcher)) => {
                let event = changed(watcher).await;
                if let Some(err) = session_end_of(&event) {
                    return Err(err);
                }
                if event.event_type == zookeeper_client::EventType::NodeDeleted {
                    return Ok(());
                }
                // Its data changed (someone wrote to our lock node): still ours, watch again.
            }
            Err(zookeeper_client::Error::NoNode) => return Ok(()),
            Err(err) if is_transient(&err) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(err) => return Err(err),
        }
    }
}

/// A watch event that reports the end of the session, as the client error that requests would get.
fn session_end_of(event: &zookeeper_client::WatchedEvent) -> Option<zookeeper_client::Error> {
    use zookeeper_client::{EventType, SessionState};
    if event.event_type != EventType::Session {
        return None;
    }
    Some(match event.session_state {
        SessionState::AuthFailed => zookeeper_client::Error::AuthFailed,
        SessionState::Closed => zookeeper_client::Error::ClientClosed,
        _ => zookeeper_client::Error::SessionExpired,
    })
}

/// Deletes every lock contender node of our session under `locks_dir` that does not start with one of the
/// `<dir>/<prefix>` texts in `kept`: orphans, which the bookkeeping should never leave, but which would block an item
/// forever if it did (kazoo #732/#760). One request to list them (`GetEphemerals`, ZooKeeper 3.6+; skipped on older
/// servers). Returns how many were deleted.
pub(crate) async fn sweep_orphans(client: &Client, locks_dir: &str, kept: &HashSet<String>) -> Result<usize, Error> {
    // The server matches a string prefix (and refuses a trailing '/'): `/p/locks` would also match `/p/locksmith`.
    let ours = match client.list_ephemerals(locks_dir).await {
        Ok(ours) => ours,
        Err(zookeeper_client::Error::Unimplemented) => return Ok(0),
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
        release_all(client, orphans, WRITE_BATCH).await?;
    }
    Ok(count)
}

/// Whether every node in `nodes` still exists and belongs to our session, as the leader sees it: `sync` on `path`
/// first, so a lagging follower cannot vouch for a node the leader already deleted. Reads go `READ_BATCH` per `multi`.
pub(crate) async fn still_ours(client: &Client, path: &str, nodes: &[String]) -> Result<bool, Error> {
    crate::party::retry_transient(|| client.sync(path)).await.map_err(|e| Error::zk("sync", path, e))?;
    let session = client.session_id().0;
    for chunk in nodes.chunks(READ_BATCH) {
        let read = || {
            let mut reader = client.new_multi_reader();
            let added = chunk.iter().try_for_each(|node| reader.add_get_data(node));
            async move {
                added?;
                reader.commit().await
            }
        };
        let results = crate::party::retry_transient(read).await.map_err(|e| Error::zk("multi get_data", path, e))?;
        let ours = results.len() == chunk.len()
            && results
                .iter()
                .all(|result| matches!(result, MultiReadResult::Data { stat, .. } if stat.ephemeral_owner == session));
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
pub(crate) async fn release_all(client: &Client, contenders: Vec<NodeRef>, window: usize) -> Result<(), Error> {
    // Nodes we know are deleted `WRITE_BATCH` per `multi`. A `multi` is all or nothing, so one node already gone
    // fails its whole batch; such a batch, and nodes we must look up first, go one by one.
    let (known, unknown): (Vec<NodeRef>, Vec<NodeRef>) = contenders.into_iter().partition(|c| c.node.is_some());
    let batches: Vec<Vec<NodeRef>> = known.chunks(WRITE_BATCH).map(<[NodeRef]>::to_vec).collect();
    let leftovers: Vec<NodeRef> = futures::stream::iter(batches.into_iter().map(|batch| release_batch(client, batch)))
        .buffer_unordered((window / WRITE_BATCH).max(1))
        .flat_map(futures::stream::iter)
        .collect()
        .await;
    let mut results = futures::stream::iter(leftovers.into_iter().chain(unknown).map(|c| release_one(client, c)))
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
pub(crate) async fn remove_empty_dirs(client: &Client, dirs: &[String]) -> usize {
    let mut empty = Vec::new();
    for chunk in dirs.chunks(READ_BATCH) {
        let mut reader = client.new_multi_reader();
        if chunk.iter().any(|dir| reader.add_get_children(dir).is_err()) {
            continue;
        }
        let Ok(results) = reader.commit().await else { continue };
        for (dir, result) in chunk.iter().zip(results) {
            if matches!(result, MultiReadResult::Children { children } if children.is_empty()) {
                empty.push(dir.clone());
            }
        }
    }
    let mut removed = 0;
    for chunk in empty.chunks(WRITE_BATCH) {
        let mut writer = client.new_multi_writer();
        if chunk.iter().all(|dir| writer.add_delete(dir, None).is_ok()) && writer.commit().await.is_ok() {
            removed += chunk.len();
            continue;
        }
        let deleted = futures::future::join_all(chunk.iter().map(|dir| client.delete(dir, None))).await;
        removed += deleted.iter().filter(|result| result.is_ok()).count();
    }
    removed
}

/// Deletes a batch of known nodes in one `multi`; returns the contenders still to release one by one if it failed.
async fn release_batch(client: &Client, batch: Vec<NodeRef>) -> Vec<NodeRef> {
    let mut writer = client.new_multi_writer();
    for contender in &batch {
        if let Some(path) = contender.path()
            && writer.add_delete(&path, None).is_err()
        {
            return batch;
        }
    }
    match writer.commit().await {
        Ok(_) => {
            tracing::debug!(count = batch.len(), "locks released in one multi");
            Vec::new()
        }
        Err(err) => {
            tracing::debug!(%err, count = batch.len(), "batched release failed; releasing one by one");
            batch
        }
    }
}

async fn release_one(client: &Client, mut contender: NodeRef) -> Result<(), Error> {
    let mut delay = Duration::from_millis(10);
    loop {
        let result = match contender.path() {
            Some(path) => match client.delete(&path, None).await {
                Ok(()) | Err(zookeeper_client::Error::NoNode) => {
                    tracing::debug!(node = %path, "lock released");
                    return Ok(());
                }
                Err(err) => Err(Error::zk_or_transient("delete", path, err)),
            },
            None => match client.list_children(&contender.dir).await {
                Ok(children) => match children.into_iter().find(|c| c.starts_with(&contender.prefix)) {
                    Some(node) => {
                        contender.node = Some(node);
                        continue;
                    }
                    None => return Ok(()),
                },
                Err(zookeeper_client::Error::NoNode) => return Ok(()),
                Err(err) => Err(Error::zk_or_transient("get_children", contender.dir.clone(), err)),
            },
        };
        match result {
            Err(Some(err)) => return Err(err),
            Err(None) | Ok(()) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
    }
}

impl Error {
    /// `None` for an error worth retrying, the wrapped error otherwise.
    pub(crate) fn zk_or_transient(op: &'static str, path: String, err: zookeeper_client::Error) -> Option<Error> {
        if is_transient(&err) && session_end(&err).is_none() { None } else { Some(Error::zk(op, path, err)) }
    }
}
