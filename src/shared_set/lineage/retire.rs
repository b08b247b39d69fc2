//! Retiring finished items: their lineage nodes go (a parent without a node counts as finished), with their
//! checkpoints and their lock directories, once every child has started, nobody holds or waits for the item's lock,
//! and the finish is old enough, all in one `multi`. The items linked to them lose the link in the same `multi`, so
//! that a retired name used again for a new item is nobody's parent or child, and its first owner finds no checkpoint
//! of the old item's: the checkpoint goes with the name, and the lock directory's deletion (which fails while it has
//! a contender) makes sure no owner of the old item is left to write one afterwards (a checkpoint is written only
//! while its writer's lock node exists).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::entry::Entry;
use crate::retry::retry_transient;
use crate::shared_set::{Attempts, Retry, SetStore};
use crate::zookeeper::{ReadOp, ReadResult, Stat, WriteOp, ZkError, ZooKeeper};
use crate::{Error, Item};
use proto::set_layout::{self as layout, State};

impl<Z: ZooKeeper> SetStore<Z> {
    /// Deletes the lineage nodes of the items finished more than `age` ago (by the ZooKeeper server's clock, against
    /// this machine's) whose children have all started (entered the set) and whose lock nobody holds or waits for,
    /// with their checkpoints and lock directories; returns them. One new version of the set, in one `multi` of at
    /// most the chunk size (what is left goes at the next call). Each checkpoint is deleted at the version read, and
    /// each lock directory must be empty, so a checkpoint written or a contender created meanwhile fails the `multi`,
    /// which reads again. A commit whose reply was lost is resolved by its outcome marker: the same nodes are gone,
    /// and the same items returned, as with the reply.
    pub async fn retire(&self, age: Duration) -> Result<Vec<Item>, Error> {
        let zk = self.zk()?;
        let token = layout::token(zk.random());
        let mut attempts = Attempts::default();
        loop {
            let current = self.settled(&zk, &mut attempts, &[]).await?;
            let names: Vec<String> = self.lineage_names(&zk).await?.into_iter().collect();
            let Some(read) = self.entries(&zk, &names).await? else { continue };
            let entries: BTreeMap<String, (Entry, Stat)> =
                read.into_iter().filter_map(|(name, entry)| Some((name, entry?))).collect();
            // Started: in the set, finished, or retired (no node).
            let started =
                |name: &String| current.holds(name) || entries.get(name).is_none_or(|(e, _)| e.finished.is_some());
            let cutoff = SystemTime::now().checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
            let old = |stat: &Stat| {
                SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(stat.mtime).unwrap_or(0)) <= cutoff
            };
            let finished: Vec<String> = entries
                .iter()
                .filter(|(_, (entry, stat))| {
                    entry.finished.is_some() && old(stat) && entry.children.iter().all(started)
                })
                .map(|(name, _)| name.clone())
                .collect();
            // Their checkpoints, where the checkpoints in force are (an import moves them; and its commit moves the
            // header too, so this retirement's commit would then fail and read again).
            let generation = self.read_generation(&zk).await?;
            let checkpoint = |name: &str| format!("{}/{name}", generation.dir);
            let nodes = self.item_nodes(&zk, &finished, &checkpoint).await?;
            // An item whose lock is still held or waited for (its owner has not let go yet) retires at a later call.
            let candidates = entries.iter().filter(|(name, _)| nodes.get(*name).is_some_and(|n| n.lock_free));
            let (retired, unlinked) = unlink(candidates, &entries, &nodes, self.chunk.saturating_sub(2).max(1));
            #[cfg(test)]
            let unlinked = match proto::sabotage::breaks(proto::sabotage::Sabotage::RetireKeepsLinks) {
                true => BTreeMap::new(),
                false => unlinked,
            };
            if retired.is_empty() {
                // Nothing to retire; the tidying an operator asks for still includes what stopped writers left.
                self.collect_garbage(&zk).await;
                return Ok(Vec::new());
            }
            #[cfg(test)]
            self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(token.clone());
            let header = current.header.next(current.header.kind, State::Ready, &token).recording(&[], &[]).render();
            let paths: Vec<(String, i32)> =
                retired.iter().map(|(name, version)| (self.paths.lineage_node(name), *version)).collect();
            #[cfg(test)]
            let keep_checkpoints = proto::sabotage::breaks(proto::sabotage::Sabotage::RetireKeepsCheckpoints);
            #[cfg(not(test))]
            let keep_checkpoints = false;
            let checkpoint_paths: Vec<(String, i32)> = retired
                .iter()
                .filter(|_| !keep_checkpoints)
                .filter_map(|(name, _)| Some((checkpoint(name), nodes.get(*name)?.checkpoint?)))
                .collect();
            let lock_dirs: Vec<String> = retired
                .iter()
                .filter(|(name, _)| nodes.get(*name).is_some_and(|n| n.lock_dir))
                .map(|(name, _)| self.paths.lock_dir(name))
                .collect();
            let edits: Vec<(String, Option<String>, i32)> = unlinked
                .iter()
                .map(|(name, (entry, version))| {
                    let data = (*entry != Entry::default()).then(|| entry.render());
                    (self.paths.lineage_node(name), data, *version)
                })
                .collect();
            let mut ops = vec![WriteOp::SetData {
                path: &self.paths.node,
                data: header.as_bytes(),
                version: Some(current.header_version),
            }];
            ops.extend(paths.iter().map(|(path, version)| WriteOp::Delete { path, version: Some(*version) }));
            ops.extend(
                checkpoint_paths.iter().map(|(path, version)| WriteOp::Delete { path, version: Some(*version) }),
            );
            // Fails (`NotEmpty`) if someone created a contender since the read: then read again.
            ops.extend(lock_dirs.iter().map(|path| WriteOp::Delete { path, version: None }));
            ops.extend(edits.iter().map(|(path, data, version)| match data {
                Some(data) => WriteOp::SetData { path, data: data.as_bytes(), version: Some(*version) },
                // Nothing left to say (a child whose only parent goes): a plain item now.
                None => WriteOp::Delete { path, version: Some(*version) },
            }));
            match self.commit_marked(&zk, &ops, &token).await {
                Ok(()) => {
                    self.collect_garbage(&zk).await;
                    let names = retired.iter().map(|(name, _)| (*name).clone());
                    return Ok(layout::parse_names(current.header.kind, names).0);
                }
                Err(Ok(Retry::Moved | Retry::Unknown | Retry::Lost)) => {}
                Err(Err(err)) => return Err(err),
            }
        }
    }

    /// What a retirement deletes besides the lineage node of each of `names`: its checkpoint (at the version read,
    /// at the path `checkpoint` gives) and its lock directory (which must be empty), where they exist.
    async fn item_nodes(
        &self,
        zk: &Z,
        names: &[String],
        checkpoint: &impl Fn(&str) -> String,
    ) -> Result<BTreeMap<String, ItemNodes>, Error> {
        let mut found = BTreeMap::new();
        for names in names.chunks(super::ENTRIES_PER_READ / 2) {
            let paths: Vec<(String, String)> =
                names.iter().map(|name| (checkpoint(name), self.paths.lock_dir(name))).collect();
            let ops: Vec<ReadOp<'_>> =
                paths.iter().flat_map(|(checkpoint, dir)| [ReadOp::Data(checkpoint), ReadOp::Children(dir)]).collect();
            let results =
                retry_transient(zk, || zk.multi_read(&ops)).await.map_err(|e| self.zk_error("multi read", e))?;
            let mut results = results.into_iter();
            for name in names {
                let checkpoint = match results.next() {
                    Some(ReadResult::Data(_, stat)) => Some(stat.version),
                    Some(ReadResult::Failed(ZkError::NoNode)) => None,
                    Some(ReadResult::Failed(err)) => return Err(self.zk_error("get_data", err)),
                    _ => None,
                };
                let (lock_dir, lock_free) = match results.next() {
                    Some(ReadResult::Children(children)) => (true, children.is_empty()),
                    Some(ReadResult::Failed(ZkError::NoNode)) => (false, true),
                    Some(ReadResult::Failed(err)) => return Err(self.zk_error("get_children", err)),
                    _ => (false, true),
                };
                found.insert(name.clone(), ItemNodes { checkpoint, lock_dir, lock_free });
            }
        }
        Ok(found)
    }
}

/// A finished item's nodes outside its lineage, as a retirement read them.
#[derive(Clone, Copy, Debug, Default)]
struct ItemNodes {
    /// Its checkpoint's data version, if it has one.
    checkpoint: Option<i32>,
    /// Its lock directory exists ...
    lock_dir: bool,
    /// ... and has no contender (or does not exist).
    lock_free: bool,
}

/// The lineage nodes a retirement rewrites: each one's entry without the retired links, and the version it was read
/// at.
type Unlinked<'a> = BTreeMap<&'a String, (Entry, i32)>;

/// Of the `candidates` for retirement (in order), as many as fit `budget` operations with the edits they need (at
/// least one), with their versions, and those edits: every item linked to a retired one (a child, a parent) that
/// stays loses the link, so that the retired name, free to be used again by a new item, is nobody's parent or child.
/// An entry left with nothing to say comes back empty (the caller deletes its node). A candidate's checkpoint and
/// lock directory (in `nodes`) cost one operation more each: their deletion.
fn unlink<'a>(
    candidates: impl Iterator<Item = (&'a String, &'a (Entry, Stat))>,
    entries: &'a BTreeMap<String, (Entry, Stat)>,
    nodes: &BTreeMap<String, ItemNodes>,
    budget: usize,
) -> (Vec<(&'a String, i32)>, Unlinked<'a>) {
    let (mut retired, mut retiring, mut linked) = (Vec::new(), BTreeSet::new(), BTreeSet::new());
    let mut own_ops = 0;
    for (name, (entry, stat)) in candidates {
        let links: BTreeSet<&String> = entry
            .parents
            .iter()
            .chain(&entry.children)
            .filter(|other| entries.contains_key(*other) && !retiring.contains(other) && *other != name)
            .collect();
        // Operations after adding it: the retired, plus the linked that stay.
        let kept_links = linked.iter().filter(|other| **other != name).count();
        let fresh = links.iter().filter(|other| !linked.contains(**other)).count();
        let own = nodes.get(name).copied().unwrap_or_default();
        let ops = 1 + usize::from(own.checkpoint.is_some()) + usize::from(own.lock_dir);
        // (The first goes whatever its links: else an item with more links than the budget would never retire.)
        if !retired.is_empty() && own_ops + ops + kept_links + fresh > budget {
            break;
        }
        own_ops += ops;
        retired.push((name, stat.version));
        retiring.insert(name);
        linked.remove(name);
        linked.extend(links);
    }
    let mut unlinked = Unlinked::new();
    for other in linked {
        let Some((entry, stat)) = entries.get(other) else { continue };
        let mut entry = entry.clone();
        entry.parents.retain(|parent| !retiring.contains(parent));
        entry.children.retain(|child| !retiring.contains(child));
        unlinked.insert(other, (entry, stat.version));
    }
    (retired, unlinked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared_set::lineage::entry::Finished;

    fn stat(version: i32) -> Stat {
        Stat { version, ..crate::zookeeper::test_stat() }
    }

    fn entry(parents: &[&str], children: &[&str], finished: bool) -> Entry {
        Entry {
            parents: parents.iter().map(|p| (*p).to_owned()).collect(),
            children: children.iter().map(|c| (*c).to_owned()).collect(),
            closed: finished,
            finished: finished.then(|| Finished { token: 1, member: "m".into() }),
        }
    }

    /// A split (p → a, b) and a merge (p, q → m): retiring p unlinks it from every child; a child left with no
    /// lineage comes back empty (its node goes), one with another parent keeps that parent.
    #[test]
    fn a_retired_item_is_nobodys_parent_or_child() {
        let entries: BTreeMap<String, (Entry, Stat)> = [
            ("p", entry(&[], &["a", "b", "m"], true), 3),
            ("q", entry(&[], &["m"], false), 4),
            ("a", entry(&["p"], &[], false), 5),
            ("b", entry(&["p"], &[], true), 6),
            ("m", entry(&["p", "q"], &[], false), 7),
        ]
        .into_iter()
        .map(|(name, e, version)| (name.to_owned(), (e, stat(version))))
        .collect();
        let p = "p".to_owned();
        let none = BTreeMap::new();
        let (retired, unlinked) = unlink([(&p, &entries["p"])].into_iter(), &entries, &none, 100);
        assert_eq!(retired, [(&p, 3)]);
        let edited: Vec<(&str, Entry, i32)> = unlinked.iter().map(|(n, (e, v))| (n.as_str(), e.clone(), *v)).collect();
        assert_eq!(
            edited,
            [("a", Entry::default(), 5), ("b", entry(&[], &[], true), 6), ("m", entry(&["q"], &[], false), 7),]
        );
        // Another finished item alongside, within the budget: both go; their links are edited once each.
        let b = "b".to_owned();
        let (retired, unlinked) = unlink([(&p, &entries["p"]), (&b, &entries["b"])].into_iter(), &entries, &none, 100);
        assert_eq!(retired, [(&p, 3), (&b, 6)]);
        assert_eq!(unlinked.keys().map(|n| n.as_str()).collect::<Vec<_>>(), ["a", "m"]);
        // Past the budget (1 + 3 links): the second waits for the next call; the first goes whatever its links.
        let (retired, _) = unlink([(&p, &entries["p"]), (&b, &entries["b"])].into_iter(), &entries, &none, 2);
        assert_eq!(retired, [(&p, 3)]);
        // A checkpoint costs one operation more: with both checkpointed, a budget that fitted both without (1 + 1 +
        // the links a and m) fits the first alone.
        let checkpointed = ItemNodes { checkpoint: Some(0), lock_dir: false, lock_free: true };
        let both = BTreeMap::from([("p".to_owned(), checkpointed), ("b".to_owned(), checkpointed)]);
        let (retired, _) = unlink([(&p, &entries["p"]), (&b, &entries["b"])].into_iter(), &entries, &none, 4);
        assert_eq!(retired.len(), 2);
        let (retired, _) = unlink([(&p, &entries["p"]), (&b, &entries["b"])].into_iter(), &entries, &both, 4);
        assert_eq!(retired, [(&p, 3)]);
    }
}
