//! Reading the set: [`SharedSetVersion`], the set in force as read, and one consistent read of the set's nodes
//! ([`read_raw`]; members following the set use [`read_raw_cached`], with the header their watch read as a hint and
//! their [`SetCache`]).

use super::{MAX_ATTEMPTS, SetStore};
use crate::retry::retry_transient;
use crate::zookeeper::{ReadOp, ReadResult, Stat, ZkError, ZooKeeper};
use proto::set_layout::cache::{self, SetCache};
use proto::set_layout::{self as layout, Chunk, Committed, Header, RawRead, SetPaths, SetView, State, Table};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::{Error, Item, weighted::Weight};

/// The shared set as read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedSetVersion {
    /// The items, sorted: the set in force (committed), whatever update is under way.
    pub items: Vec<Item>,
    /// The set's version: it increases by one with every update.
    pub version: u64,
    /// A large update is being staged or applied (or its writer stopped part-way and it is about to be undone or
    /// finished); `items` is the set in force all the same.
    pub updating: bool,
    /// Children of `<path>/items` that are not items of the set's kind (written by hand): ignored by members, deleted
    /// by the next update.
    pub skipped: Vec<String>,
    /// The weights of the items that have one ([`SharedSet::set_weights`](crate::SharedSet::set_weights)); every other
    /// item weighs 1.
    pub weights: BTreeMap<Item, Weight>,
}

impl SharedSetVersion {
    pub(super) fn of(committed: Committed) -> Self {
        SharedSetVersion {
            items: committed.items,
            version: committed.version,
            updating: committed.unfinished.is_some(),
            skipped: committed.skipped,
            weights: committed.weights,
        }
    }
}

impl<Z: ZooKeeper> SetStore<Z> {
    pub async fn read(&self) -> Result<SharedSetVersion, Error> {
        let zk = self.zk()?;
        match self.view(&zk).await? {
            SetView::Committed(committed) => Ok(SharedSetVersion::of(*committed)),
            SetView::Missing { .. } => Err(Error::SharedSetMissing { path: self.paths.node.clone() }),
            SetView::Unreadable(reason) => Err(Error::SharedSetCorrupt { path: self.paths.node.clone(), reason }),
            // `view` reads again until the read is whole.
            SetView::Torn => Err(Error::SharedSetConflict {
                path: self.paths.node.clone(),
                reason: "the set kept changing while it was read; try again".into(),
            }),
        }
    }

    /// The set in force, for one attempt of a change: `None` when the read was torn (the attempt reads again); no set,
    /// or one that cannot be read, is an error.
    pub(super) async fn committed(&self, zk: &Z) -> Result<Option<Committed>, Error> {
        match self.view(zk).await? {
            SetView::Committed(committed) => Ok(Some(*committed)),
            SetView::Missing { .. } => Err(Error::SharedSetMissing { path: self.paths.node.clone() }),
            SetView::Unreadable(reason) => Err(Error::SharedSetCorrupt { path: self.paths.node.clone(), reason }),
            SetView::Torn => Ok(None),
        }
    }

    /// Reads the set until a read is whole (a torn read means an update landed between two reads).
    pub(super) async fn view(&self, zk: &Z) -> Result<SetView, Error> {
        for _ in 0..MAX_ATTEMPTS {
            // A read lost with the connection is sent again (until the session ends): an update whose outcome is
            // unknown must not be reported as failed for a read that failed.
            let read = retry_transient(zk, || read_raw_cached(zk, &self.paths, None, Some(&self.tables))).await;
            let view = layout::interpret(read.map_err(|e| self.zk_error("read", e))?);
            if view != SetView::Torn {
                return Ok(view);
            }
        }
        Ok(SetView::Torn)
    }
}

/// One consistent read of the set's nodes: the header and the base set in one read `multi`, and when the header asks
/// for more (a change's lists, a writer's lease) a second `multi` with everything again; then the weight table the
/// header names, if any (a table is never changed, only replaced: one that is gone reads as torn). `header_hint` (the header as
/// just read with a watch) saves the first `multi` when it already says what to read.
pub(crate) async fn read_raw<Z: ZooKeeper>(
    zk: &Z,
    paths: &SetPaths,
    header_hint: Option<&Header>,
) -> Result<RawRead, ZkError> {
    read_raw_cached(zk, paths, header_hint, None).await
}

/// [`read_raw`], remembering in `cache` the listing of a `ready` set (for [`SetCache::bridge`]) and the weight table
/// read, and reusing a table it remembers.
pub(crate) async fn read_raw_cached<Z: ZooKeeper>(
    zk: &Z,
    paths: &SetPaths,
    header_hint: Option<&Header>,
    cache: Option<&Mutex<SetCache>>,
) -> Result<RawRead, ZkError> {
    let mut wanted: (Option<String>, Option<String>) = match header_hint {
        Some(header) => {
            let (lists, lease) = layout::wants(header);
            (lists.map(str::to_owned), lease.map(str::to_owned))
        }
        None => (None, None),
    };
    // Three passes at most: a header that changes at every pass is read as torn (below).
    let mut pass = 0;
    loop {
        let (lists, lease) = (wanted.0.clone(), wanted.1.clone());
        let (additions, removals, lease_path) = (
            lists.as_deref().map(|tag| paths.additions(tag)),
            lists.as_deref().map(|tag| paths.removals(tag)),
            lease.as_deref().map(|tag| paths.lease(tag)),
        );
        let mut ops = vec![ReadOp::Data(&paths.node), ReadOp::Children(&paths.node)];
        if let (Some(additions), Some(removals)) = (&additions, &removals) {
            ops.push(ReadOp::Children(additions));
            ops.push(ReadOp::Children(removals));
        }
        if let Some(lease) = &lease_path {
            ops.push(ReadOp::Data(lease));
        }
        let mut results = zk.multi_read(&ops).await?.into_iter();
        let (header, stat) = match results.next() {
            Some(ReadResult::Data(data, stat)) => (Some((data, stat.version)), Some(stat)),
            Some(ReadResult::Failed(ZkError::NoNode)) => (None, None),
            Some(ReadResult::Failed(err)) => return Err(err),
            _ => return Err(ZkError::UnexpectedError("the set's header read answered something else".into())),
        };
        let children = match results.next() {
            Some(ReadResult::Children(children)) => children,
            _ => Vec::new(),
        };
        let change = if additions.is_some() {
            match (results.next(), results.next()) {
                (Some(ReadResult::Children(adds)), Some(ReadResult::Children(removes))) => Some((adds, removes)),
                _ => None,
            }
        } else {
            None
        };
        let lease_alive = lease_path.is_some().then(|| matches!(results.next(), Some(ReadResult::Data(..))));
        let mut read = RawRead { header, children, listed: None, change, lease: lease_alive, weights: None };
        // Enough for what this header asks?
        let needs = read.header.as_ref().and_then(|(data, _)| Header::parse(data).ok()).map(|header| {
            let (lists, lease) = layout::wants(&header);
            (lists.map(str::to_owned), lease.map(str::to_owned))
        });
        match needs {
            Some(needs) if needs != (lists, lease) && pass < 2 => {
                wanted = needs;
                pass += 1;
            }
            // Whole, or (the header changed at every pass) the last read: short of what its header asks, it reads
            // as torn, and the reader reads again.
            _ => {
                if let (Some(cache), Some(stat), Some(Ok(header))) =
                    (cache, stat, read.header.as_ref().map(|(data, _)| Header::parse(data)))
                {
                    read.listed = SetCache::locked(cache).remember(&header, &children_of(&stat), &read.children);
                }
                read.weights = read_table(zk, paths, read.header.as_ref(), cache).await?;
                return Ok(read);
            }
        }
    }
}

/// A member's read of a `ready` set from `header` (just read, with its node's `stat`) and the listing its `cache`
/// remembers, when the header records every change since ([`SetCache::bridge`]): no item is listed, and the weight
/// table is read only if it is not the one remembered. `None`: list the items ([`read_raw_cached`]).
pub(crate) async fn read_bridged<Z: ZooKeeper>(
    zk: &Z,
    paths: &SetPaths,
    (data, header, stat): (&[u8], &Header, &crate::zookeeper::Stat),
    cache: &Mutex<SetCache>,
) -> Option<Result<RawRead, ZkError>> {
    if header.state != State::Ready {
        return None;
    }
    let listed = SetCache::locked(cache).bridge(header, &children_of(stat))?;
    let mut read = RawRead {
        header: Some((data.to_vec(), stat.version)),
        children: Vec::new(),
        listed: Some(listed),
        change: None,
        lease: None,
        weights: None,
    };
    Some(match read_table(zk, paths, read.header.as_ref(), Some(cache)).await {
        Ok(weights) => {
            read.weights = weights;
            Ok(read)
        }
        Err(err) => Err(err),
    })
}

/// The weight table `header` names: its index, then the chunks `cache` does not remember (a table replacing the one
/// it remembers shares most of them), in read `multi`s of at most [`TABLE_READ`] chunks. `None` when the header names
/// none, or when the index or a chunk is gone (the header has moved on since: the read is torn); `Some(Err)` when the
/// index is not one.
async fn read_table<Z: ZooKeeper>(
    zk: &Z,
    paths: &SetPaths,
    header: Option<&(Vec<u8>, i32)>,
    cache: Option<&Mutex<SetCache>>,
) -> Result<Option<Result<Table, String>>, ZkError> {
    let Some(wanted) = header.and_then(|(data, _)| Header::parse(data).ok()).and_then(|h| h.weights) else {
        return Ok(None);
    };
    let remembered = cache.and_then(|cache| SetCache::locked(cache).table());
    if let Some((tag, table)) = &remembered
        && *tag == wanted
    {
        return Ok(Some(Ok(table.clone())));
    }
    let names = match zk.get_data(&paths.table(&wanted.tag)).await {
        Ok((data, _)) => match layout::parse_index(&data) {
            Ok(names) => names,
            Err(reason) => return Ok(Some(Err(reason))),
        },
        Err(ZkError::NoNode) => return Ok(None),
        Err(err) => return Err(err),
    };
    // The chunks remembered, with what was parsed of them.
    let mut known: HashMap<String, Chunk> =
        remembered.into_iter().flat_map(|(_, table)| table.chunks).map(|chunk| (chunk.name.clone(), chunk)).collect();
    let missing: Vec<String> = names.iter().filter(|name| !known.contains_key(*name)).cloned().collect();
    let chunk_paths: Vec<String> = missing.iter().map(|name| paths.table_chunk(name)).collect();
    let mut read: Vec<Arc<[u8]>> = Vec::with_capacity(missing.len());
    for group in chunk_paths.chunks(TABLE_READ) {
        let ops: Vec<ReadOp<'_>> = group.iter().map(|path| ReadOp::Data(path)).collect();
        for result in zk.multi_read(&ops).await? {
            match result {
                ReadResult::Data(data, _) => read.push(Arc::from(data)),
                ReadResult::Failed(ZkError::NoNode) => return Ok(None),
                ReadResult::Failed(err) => return Err(err),
                _ => return Err(ZkError::UnexpectedError("a weight chunk read answered something else".into())),
            }
        }
    }
    let read_count = read.len();
    known.extend(missing.into_iter().zip(read).map(|(name, data)| (name.clone(), Chunk::new(name, data))));
    let chunks = names.into_iter().filter_map(|name| known.get(&name).cloned());
    let table = Table { chunks: chunks.collect() };
    if let Some(cache) = cache {
        SetCache::locked(cache).remember_table(wanted, table.clone(), read_count);
    }
    Ok(Some(Ok(table)))
}

/// Chunks per read `multi` of a weight table: with chunks of at most
/// [`CHUNK_BYTES`](proto::chunked::CHUNK_BYTES), a reply stays far below ZooKeeper's 1 MB packet limit.
const TABLE_READ: usize = 8;

/// What the cache reads of a node's stat.
fn children_of(stat: &Stat) -> cache::Stat {
    cache::Stat { cversion: stat.cversion, num_children: stat.num_children }
}
