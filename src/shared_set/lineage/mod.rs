//! Lineage: items with parents. A stream closes a shard and opens children, or merges shards into one; the children
//! must be read after their parents. The shared set keeps the trees, and only ever holds the items that are ready.
//!
//! # Layout
//!
//! Every item that has a parent, a child, or was closed has a lineage node, `<path>/item-lineage/<item>`
//! ([`entry`] has its format). `<path>/items` holds the *ready* items only, so members divide exactly those, with no
//! change to how they follow the set: a child waiting on a parent has a lineage node and no child of `<path>/items`.
//!
//! Every change of lineage is a new version of the set, committed with the same conditional write of the header as
//! any update, in the same `multi` as the lineage nodes it writes. So a lineage change and an update never interleave:
//! each reads the header first, everything it checks after, and commits only if the header has not moved.
//!
//! - **split**, **merge**, **add child**, **close** are an admin's ([`SharedSet`](crate::SharedSet)): the children are
//!   new items (so lineage never has a cycle) whose parents exist; a child all of whose parents already finished
//!   enters the set at once.
//! - **finish** is the owner's ([`CheckpointWriter::finish_item`](crate::checkpoint::CheckpointWriter::finish_item)): one `multi`
//!   that checks the owner's lock node (the checkpoint's fence), writes the next header, marks the item finished,
//!   deletes it from the set, creates every child whose parents have now all finished, and optionally writes the
//!   item's final checkpoint. Under `Rebalance::Incremental` that is a set change of one item out and its ready
//!   children in: nothing else moves.
//! - Plain updates (`add`, `remove`, `replace`) may not change whether an item with lineage is in the set: a waiting
//!   child added by hand would be read before its parents, and a parent removed by hand would strand its children.
//!
//! A finished item keeps its lineage node and its checkpoint (a child's first owner reads its parents' final
//! checkpoints), until [`SharedSet::retire`](crate::SharedSet::retire) deletes those of items finished before a given
//! age whose children have all started. A parent whose node was retired counts as finished; the same `multi` takes
//! the retired item out of the lineage nodes that name it, so that its name, used again, is a new item's.

mod change;
pub(crate) mod entry;
mod finish;
mod retire;

use std::collections::{BTreeMap, BTreeSet};

use super::{Attempts, SetStore};
use crate::retry::retry_transient;
use crate::zookeeper::{ReadOp, ReadResult, Stat, ZkError, ZooKeeper};
use crate::{Error, FencingToken, Item};
pub(crate) use change::LineageChange;
use entry::Entry;
pub(crate) use finish::Finisher;
use proto::set_layout as layout;

/// Where an item with lineage stands ([`ItemLineage::status`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LineageStatus {
    /// In the set: the members divide it, and its owner processes it (a closed one until it is drained).
    Ready,
    /// Not in the set yet: waiting for these parents to finish.
    Waiting {
        /// The parents not finished yet.
        on: Vec<Item>,
    },
    /// Finished by its owner: never assigned again.
    Finished {
        /// The member that finished it.
        by: String,
        /// That member's fencing token for the item when it did.
        token: FencingToken,
    },
}

/// One item's place in its tree.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ItemLineage {
    /// Its parents (none for a root), in the order given.
    pub parents: Vec<Item>,
    /// Its children, in the order added.
    pub children: Vec<Item>,
    /// Closed: its source produces nothing new for it (a split or a merge closes the parents).
    pub closed: bool,
    /// Where it stands.
    pub status: LineageStatus,
}

/// The lineage of a shared set ([`SharedSet::lineage`](crate::SharedSet::lineage)): every item that has a parent, a
/// child, or was closed. Items of the set not listed here are plain ready items.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lineage {
    /// The set's version this lineage belongs to.
    pub version: u64,
    /// By item.
    pub items: BTreeMap<Item, ItemLineage>,
}

impl Lineage {
    /// An item's lineage, if it has one.
    pub fn get(&self, item: &Item) -> Option<&ItemLineage> {
        self.items.get(item)
    }

    /// The items with lineage that have no parent (or whose parents were all retired): the trees' roots.
    pub fn roots(&self) -> impl Iterator<Item = &Item> {
        self.items.iter().filter(|(_, l)| l.parents.iter().all(|p| !self.items.contains_key(p))).map(|(i, _)| i)
    }

    /// Whether `item` waits on a parent.
    pub fn is_waiting(&self, item: &Item) -> bool {
        matches!(self.get(item).map(|l| &l.status), Some(LineageStatus::Waiting { .. }))
    }

    /// Whether `item` was finished.
    pub fn is_finished(&self, item: &Item) -> bool {
        matches!(self.get(item).map(|l| &l.status), Some(LineageStatus::Finished { .. }))
    }

    /// Builds the view from the entries read (by node name) and the set in force.
    fn of(version: u64, kind: layout::Kind, set: &[Item], entries: &BTreeMap<String, Entry>) -> Lineage {
        let item = |name: &String| layout::parse_names(kind, [name.clone()]).0.pop();
        let items_of = |names: &[String]| names.iter().filter_map(item).collect::<Vec<Item>>();
        let in_set: BTreeSet<String> = set.iter().map(Item::node_name).collect();
        let mut items = BTreeMap::new();
        for (name, entry) in entries {
            let Some(this) = item(name) else { continue };
            let status = match (&entry.finished, in_set.contains(name)) {
                (Some(finished), _) => {
                    LineageStatus::Finished { by: finished.member.clone(), token: FencingToken::new(finished.token) }
                }
                (None, true) => LineageStatus::Ready,
                (None, false) => {
                    let on = entry.parents.iter().filter(|p| !parent_finished(entries, p)).cloned().collect::<Vec<_>>();
                    LineageStatus::Waiting { on: items_of(&on) }
                }
            };
            let lineage = ItemLineage {
                parents: items_of(&entry.parents),
                children: items_of(&entry.children),
                closed: entry.closed,
                status,
            };
            items.insert(this, lineage);
        }
        Lineage { version, items }
    }
}

/// Whether a lineage node's data says its item was finished (a lock listing reads it along).
pub(crate) fn finished(data: &[u8]) -> bool {
    Entry::parse(data).is_ok_and(|entry| entry.finished.is_some())
}

/// Lineage nodes read per `multi` by [`closed`] (as many as a lock listing reads).
const CLOSED_BATCH: usize = 500;

/// Whether each of these lineage nodes says its item is closed (a missing node: not closed), in read-only `multi`s of
/// [`CLOSED_BATCH`] nodes sent together (a member reads its listed items' nodes after lineage changes).
pub(crate) async fn closed<Z: ZooKeeper>(zk: &Z, nodes: &[String]) -> Result<Vec<bool>, ZkError> {
    let reads = nodes.chunks(CLOSED_BATCH).map(|chunk| async move {
        let ops: Vec<ReadOp<'_>> = chunk.iter().map(|node| ReadOp::Data(node)).collect();
        let results = zk.multi_read(&ops).await?;
        results
            .into_iter()
            .map(|result| match result {
                ReadResult::Data(data, _) => Ok(Entry::parse(&data).is_ok_and(|entry| entry.closed)),
                ReadResult::Failed(ZkError::NoNode) | ReadResult::Children(_) => Ok(false),
                // Any other failure (a read lost with the connection): the caller reads again later.
                ReadResult::Failed(err) => Err(err),
            })
            .collect::<Result<Vec<bool>, ZkError>>()
    });
    let chunks = futures::future::try_join_all(reads).await?;
    Ok(chunks.into_iter().flatten().collect())
}

/// Whether parent `name` counts as finished: its node says so, or it was retired (no node).
pub(crate) fn parent_finished(entries: &BTreeMap<String, Entry>, name: &str) -> bool {
    entries.get(name).is_none_or(|entry| entry.finished.is_some())
}

/// Lineage nodes read per `multi` (each is a few lines).
const ENTRIES_PER_READ: usize = 256;

impl<Z: ZooKeeper> SetStore<Z> {
    /// The set's lineage, consistent with one version of the set: read after the header, and read again if the header
    /// moved meanwhile.
    pub async fn lineage(&self) -> Result<Lineage, Error> {
        let zk = self.zk()?;
        let mut attempts = Attempts::default();
        while attempts.another(&zk).await {
            let Some(current) = self.committed(&zk).await? else { continue };
            // An import being applied moves its lineage nodes into place: wait for it, or finish it.
            if let Some(unfinished) = &current.unfinished
                && self.applying_import(&zk, &current).await?
            {
                self.settle(&zk, unfinished, &[]).await?;
                continue;
            }
            let names = match retry_transient(&zk, || zk.list_children(&self.paths.lineage)).await {
                Ok(names) => names,
                Err(ZkError::NoNode) => Vec::new(),
                Err(err) => return Err(self.zk_error("get_children", err)),
            };
            let Some(entries) = self.entries(&zk, &names).await? else { continue };
            let entries: BTreeMap<String, Entry> =
                entries.into_iter().filter_map(|(name, entry)| entry.map(|(e, _)| (name, e))).collect();
            if entries.len() != names.len() || !self.header_unmoved(&zk, current.header_version).await? {
                continue;
            }
            return Ok(Lineage::of(current.version, current.header.kind, &current.items, &entries));
        }
        Err(Error::SharedSetConflict {
            path: self.paths.node.clone(),
            reason: "the set kept changing while its lineage was read; try again".into(),
        })
    }

    /// The lineage nodes of `names`, with their stats (`None`: no node). `None` when one is unreadable.
    pub(super) async fn entries(
        &self,
        zk: &Z,
        names: &[String],
    ) -> Result<Option<BTreeMap<String, Option<(Entry, Stat)>>>, Error> {
        let paths: Vec<String> = names.iter().map(|name| self.paths.lineage_node(name)).collect();
        let mut found = BTreeMap::new();
        for (names, paths) in names.chunks(ENTRIES_PER_READ).zip(paths.chunks(ENTRIES_PER_READ)) {
            let ops: Vec<ReadOp<'_>> = paths.iter().map(|path| ReadOp::Data(path)).collect();
            let results =
                retry_transient(zk, || zk.multi_read(&ops)).await.map_err(|e| self.zk_error("multi read", e))?;
            for (name, result) in names.iter().zip(results) {
                let entry = match result {
                    ReadResult::Data(data, stat) => match Entry::parse(&data) {
                        Ok(entry) => Some((entry, stat)),
                        Err(reason) => {
                            return Err(Error::SharedSetCorrupt {
                                path: self.paths.lineage_node(name),
                                reason: format!("a lineage node: {reason}"),
                            });
                        }
                    },
                    ReadResult::Failed(ZkError::NoNode) => None,
                    // A read of the multi lost with the connection: the caller reads everything again.
                    ReadResult::Failed(err) if crate::retry::is_transient(&err) => return Ok(None),
                    ReadResult::Failed(err) => return Err(self.zk_error("get_data", err)),
                    _ => return Ok(None),
                };
                found.insert(name.clone(), entry);
            }
        }
        Ok(Some(found))
    }

    /// Whether the header's data version is still `version`.
    async fn header_unmoved(&self, zk: &Z, version: i32) -> Result<bool, Error> {
        match retry_transient(zk, || zk.get_data(&self.paths.node)).await {
            Ok((_, stat)) => Ok(stat.version == version),
            Err(ZkError::NoNode) => Ok(false),
            Err(err) => Err(self.zk_error("get_data", err)),
        }
    }

    /// The names of every lineage node (none when the directory does not exist).
    pub(super) async fn lineage_names(&self, zk: &Z) -> Result<BTreeSet<String>, Error> {
        match retry_transient(zk, || zk.list_children(&self.paths.lineage)).await {
            Ok(names) => Ok(names.into_iter().collect()),
            Err(ZkError::NoNode) => Ok(BTreeSet::new()),
            Err(err) => Err(self.zk_error("get_children", err)),
        }
    }
}
