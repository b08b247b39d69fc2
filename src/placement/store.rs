//! The record in ZooKeeper: reading it (with the chunks a member already has kept) and a watch for its next change,
//! and writing a new one (chunks first, then the index, by a conditional write).
//!
//! The index node is never deleted by this crate, so its data version only grows, and the writer of a record based on
//! version `v` names its chunks `<v + 1 as 8 hex><8 random hex>-<k>`, creating them in `multi`s that `check` the
//! index is still at `v`. So a chunk named for a version the index has reached, that the index does not name, is
//! garbage: its writer lost the race or stopped before writing the index, and will never write it. A writer
//! deletes such chunks once its own index is written; chunks of writers still working (named for a later version)
//! are left alone.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::acl::NodeAcls;
use crate::zookeeper::{Mode, ReadOp, ReadResult, WriteOp, ZkError, ZooKeeper};
use proto::placement::plan::{self, InForce};
use proto::placement::record::{Found, Index, Read, Record, Write};
use proto::set_layout::Kind;

/// Chunks per read or write `multi`: at most 8 × 64 KiB, far below ZooKeeper's 1 MB packet limit.
const CHUNKS_PER_MULTI: usize = 8;

/// The chunks a member has read, by name: only those the latest index named are kept (a chunk never changes).
pub(crate) type ChunkCache = Mutex<HashMap<String, Arc<[u8]>>>;

/// Reads the record at `node` (items of `kind`), its chunks only if its digest is not `expect`, with the one watch
/// that tells of its next change: a data watch on the index, or an existence watch while there is none. One watch,
/// never dropped before it fires (dropping an unfired watch makes the client ask the server to remove the path's
/// watches, racing with the next read's), so a torn read (a chunk gone: the record moved on under it) is not read
/// again here: it says [`Found::Torn`], and the reader reads again.
pub(crate) async fn read<Z: ZooKeeper>(
    zk: &Z,
    node: &str,
    expect: Option<u64>,
    kind: Kind,
    cache: &ChunkCache,
) -> (Result<Read, ZkError>, Option<Z::Watch>) {
    let (data, stat, watch) = match zk.get_and_watch_data(node).await {
        Ok(read) => read,
        Err(ZkError::NoNode) => {
            // If it was created meanwhile, the watch fires and the next read finds it.
            return match zk.check_and_watch_stat(node).await {
                Ok((_, watch)) => (Ok(Read { version: None, found: Found::Nothing }), Some(watch)),
                Err(err) => (Err(err), None),
            };
        }
        Err(err) => return (Err(err), None),
    };
    let version = Some(stat.version);
    let found = if data.is_empty() {
        Found::Nothing
    } else {
        match Index::parse(&data) {
            Err(reason) => Found::Unreadable(reason),
            Ok(index) if expect == Some(index.digest) => Found::Expected { inputs: index.inputs },
            Ok(index) => match fetch(zk, node, &index, cache).await {
                Ok(Some(chunks)) => match Record::assemble(&index, |name| chunks.get(name).map(|d| &**d), kind) {
                    Ok(record) => Found::Record(Arc::new(record)),
                    Err(reason) => Found::Unreadable(reason),
                },
                // Moved on, or a chunk deleted by hand: the index's version tells.
                Ok(None) => match zk.check_stat(node).await {
                    Ok(Some(now)) if now.version != stat.version => Found::Torn,
                    Ok(_) => Found::Unreadable("a chunk its index names is missing (deleted by hand?)".into()),
                    Err(err) => return (Err(err), Some(watch)),
                },
                Err(err) => return (Err(err), Some(watch)),
            },
        }
    };
    (Ok(Read { version, found }), Some(watch))
}

/// How many times [`read_now`] reads a record again that moved on while it was read.
const TORN_READS: usize = 5;

/// The record at `node` (items of `kind`) as it is now, without a watch: an outsider's read (`describe`). `None` when
/// there is none or it cannot be used (members then place as if there were none). A read torn by a newer record is
/// read again, a few times.
pub(crate) async fn read_now<Z: ZooKeeper>(zk: &Z, node: &str, kind: Kind) -> Result<Option<Record>, ZkError> {
    for _ in 0..TORN_READS {
        let (data, stat) = match zk.get_data(node).await {
            Ok(read) => read,
            Err(ZkError::NoNode) => return Ok(None),
            Err(err) => return Err(err),
        };
        let Some(index) = (!data.is_empty()).then(|| Index::parse(&data).ok()).flatten() else { return Ok(None) };
        match fetch(zk, node, &index, &ChunkCache::default()).await? {
            Some(chunks) => return Ok(Record::assemble(&index, |name| chunks.get(name).map(|d| &**d), kind).ok()),
            // A chunk went: the record moved on (read it again), or one was deleted by hand (no record to use).
            None => match zk.check_stat(node).await? {
                Some(now) if now.version != stat.version => continue,
                _ => return Ok(None),
            },
        }
    }
    Ok(None)
}

/// The data of every chunk `index` names, from the cache or read (the cache then keeps exactly these); `None` when
/// one is missing.
async fn fetch<Z: ZooKeeper>(
    zk: &Z,
    node: &str,
    index: &Index,
    cache: &ChunkCache,
) -> Result<Option<HashMap<String, Arc<[u8]>>>, ZkError> {
    let mut chunks: HashMap<String, Arc<[u8]>> = HashMap::new();
    let mut missing = Vec::new();
    {
        let cached = lock(cache);
        for name in index.chunks() {
            match cached.get(name) {
                Some(data) => drop(chunks.insert(name.clone(), data.clone())),
                None => missing.push(name.clone()),
            }
        }
    }
    for group in missing.chunks(CHUNKS_PER_MULTI) {
        let paths: Vec<String> = group.iter().map(|name| format!("{node}/{name}")).collect();
        let ops: Vec<ReadOp<'_>> = paths.iter().map(|path| ReadOp::Data(path)).collect();
        for (name, result) in group.iter().zip(zk.multi_read(&ops).await?) {
            match result {
                ReadResult::Data(data, _) => drop(chunks.insert(name.clone(), Arc::from(data))),
                ReadResult::Failed(ZkError::NoNode) => return Ok(None),
                ReadResult::Failed(err) => return Err(err),
                ReadResult::Children(_) => {
                    return Err(ZkError::UnexpectedError("a data read answered with children".into()));
                }
            }
        }
    }
    *lock(cache) = chunks.clone();
    Ok(Some(chunks))
}

/// Writes `write` at `node`: `Ok(false)` when the record moved on since `write.version` was read (someone else
/// wrote it; read it again).
pub(crate) async fn write<Z: ZooKeeper>(
    zk: &Z,
    node: &str,
    acls: &NodeAcls,
    write: &Write,
    cache: &ChunkCache,
) -> Result<bool, ZkError> {
    let version = match write.version {
        Some(version) => version,
        None => match zk.create(node, b"", Mode::Persistent, acls).await {
            Ok((stat, _)) => stat.version,
            Err(ZkError::NodeExists) => return Ok(false),
            Err(err) => return Err(err),
        },
    };
    let (data, stat) = match zk.get_data(node).await {
        Ok(read) => read,
        Err(ZkError::NoNode) => return Ok(false),
        Err(err) => return Err(err),
    };
    if stat.version != version {
        return Ok(false);
    }
    // The record in force: appended to if it reads, else replaced by a new base. Its chunks as they exist now, not
    // as cached: one deleted by hand would otherwise stay named by every index written after it.
    let index = (!data.is_empty()).then(|| Index::parse(&data).ok()).flatten();
    let index = match index {
        Some(index) => {
            let children: HashSet<String> = zk.list_children(node).await?.into_iter().collect();
            let whole = index.chunks().all(|name| children.contains(name));
            if !whole {
                lock(cache).retain(|name, _| children.contains(name));
            }
            whole.then_some(index)
        }
        None => None,
    };
    let chunks = match &index {
        Some(index) => fetch(zk, node, index, cache).await?,
        None => None,
    };
    let record = match (&index, &chunks) {
        (Some(index), Some(chunks)) => Record::assemble(index, |name| chunks.get(name).map(|d| &**d), write.kind).ok(),
        _ => None,
    };
    let in_force = match (&index, &record, &chunks) {
        (Some(index), Some(record), Some(chunks)) => Some(InForce { index, record, chunks }),
        _ => None,
    };
    let next = u32::try_from(version).unwrap_or(0).wrapping_add(1);
    let tag = format!("{next:08x}{:08x}", zk.random() as u32);
    let next_record = &write.assignment;
    let owners: Vec<usize> = next_record.owners.iter().map(|&owner| owner as usize).collect();
    let plan = match plan::plan(&tag, in_force, next_record.inputs, &next_record.names, &next_record.items, &owners) {
        Ok(plan) => plan,
        Err(reason) => {
            tracing::warn!(reason, "the placement cannot be recorded");
            return Ok(true);
        }
    };
    let paths: Vec<String> = plan.creates.iter().map(|(name, _)| format!("{node}/{name}")).collect();
    for (group, data) in paths.chunks(CHUNKS_PER_MULTI).zip(plan.creates.chunks(CHUNKS_PER_MULTI)) {
        let mut ops = vec![WriteOp::Check { path: node, version: Some(version) }];
        ops.extend(group.iter().zip(data).map(|(path, (_, data))| WriteOp::Create {
            path,
            data,
            mode: Mode::Persistent,
            acls,
        }));
        match zk.multi_write(&ops).await {
            Ok(_) => {}
            Err(err) if err.index == Some(0) => return Ok(false),
            Err(err) => return Err(err.error),
        }
    }
    match zk.set_data(node, &plan.index.render(), Some(version)).await {
        Ok(_) => {}
        Err(ZkError::BadVersion | ZkError::NoNode) => return Ok(false),
        Err(err) => return Err(err),
    }
    collect_garbage(zk, node, &plan.index, next).await;
    Ok(true)
}

/// Deletes the chunks `index` (written as version `written`) does not name whose writers can no longer use them:
/// named for a version up to `written`. Best effort: what is left is deleted after the next write.
async fn collect_garbage<Z: ZooKeeper>(zk: &Z, node: &str, index: &Index, written: u32) {
    let Ok(children) = zk.list_children(node).await else { return };
    let named: HashSet<&String> = index.chunks().collect();
    let garbage: Vec<String> = children
        .into_iter()
        .filter(|child| !named.contains(child))
        .filter(|child| child.get(..8).and_then(|v| u32::from_str_radix(v, 16).ok()).is_some_and(|v| v <= written))
        .map(|child| format!("{node}/{child}"))
        .collect();
    for group in garbage.chunks(CHUNKS_PER_MULTI * 8) {
        let ops: Vec<WriteOp<'_>> = group.iter().map(|path| WriteOp::Delete { path, version: None }).collect();
        if let Err(err) = zk.multi_write(&ops).await {
            tracing::debug!(error = %err.error, "placement chunks left for the next write to delete");
            return;
        }
    }
}

fn lock(cache: &ChunkCache) -> std::sync::MutexGuard<'_, HashMap<String, Arc<[u8]>>> {
    // Only a panic while the map is being replaced poisons it; the map is then still a valid cache.
    cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
