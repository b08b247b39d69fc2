//! Retiring finished items: their lineage nodes go (a parent without a node counts as finished), with their
//! checkpoints, once every child has started and the finish is old enough. The items linked to them lose the link in
//! the same `multi`, so that a retired name used again for a new item is nobody's parent or child.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::entry::Entry;
use crate::item_set::layout::{self, State};
use crate::item_set::{MAX_ATTEMPTS, Retry, SharedSet, backoff};
use crate::zookeeper::{Stat, WriteOp, ZkError, ZooKeeper};
use crate::{Error, Item};

impl<Z: ZooKeeper> SharedSet<Z> {
    /// Deletes the lineage nodes of the items finished more than `age` ago (by the ZooKeeper server's clock, against
    /// this machine's) whose children have all started (entered the set), and then their checkpoints; returns them.
    /// One new version of the set, in one `multi` of at most the chunk size (what is left goes at the next call).
    pub async fn retire(&self, age: Duration) -> Result<Vec<Item>, Error> {
        let mut uncertain = false;
        let result = self.retire_as(age, &mut uncertain).await;
        self.unless_uncertain(result, uncertain)
    }

    /// [`SharedSet::retire`]'s attempts; `uncertain` says whether one of them may have landed unseen.
    async fn retire_as(&self, age: Duration, uncertain: &mut bool) -> Result<Vec<Item>, Error> {
        let zk = self.zk()?;
        let token = layout::token(zk.random());
        for attempt in 0..MAX_ATTEMPTS {
            backoff(&zk, attempt).await;
            let Some(current) = self.committed(&zk).await? else { continue };
            if let Some(unfinished) = &current.unfinished {
                self.settle(&zk, unfinished, &[]).await?;
                continue;
            }
            let names: Vec<String> = self.lineage_names(&zk).await?.into_iter().collect();
            let Some(read) = self.entries(&zk, &names).await? else { continue };
            let entries: BTreeMap<String, (Entry, Stat)> =
                read.into_iter().filter_map(|(name, entry)| Some((name, entry?))).collect();
            if *uncertain && current.header.landed(&token) {
                // Our retirement landed unseen: the nodes are gone; their checkpoints may not be.
                return Ok(Vec::new());
            }
            // Started: in the set, finished, or retired (no node).
            let started =
                |name: &String| current.holds(name) || entries.get(name).is_none_or(|(e, _)| e.finished.is_some());
            let cutoff = SystemTime::now().checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
            let old = |stat: &Stat| {
                SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(stat.mtime).unwrap_or(0)) <= cutoff
            };
            let candidates = entries.iter().filter(|(_, (entry, stat))| {
                entry.finished.is_some() && old(stat) && entry.children.iter().all(started)
            });
            let (retired, unlinked) = unlink(candidates, &entries, self.chunk.saturating_sub(1).max(1));
            #[cfg(test)]
            let unlinked = match crate::sabotage::breaks(crate::sabotage::Sabotage::RetireKeepsLinks) {
                true => BTreeMap::new(),
                false => unlinked,
            };
            if retired.is_empty() {
                return Ok(Vec::new());
            }
            #[cfg(test)]
            self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(token.clone());
            let header = current.header.next(current.header.kind, State::Ready, &token).recording(&[], &[]).render();
            let paths: Vec<(String, i32)> =
                retired.iter().map(|(name, version)| (self.paths.lineage_node(name), *version)).collect();
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
            ops.extend(edits.iter().map(|(path, data, version)| match data {
                Some(data) => WriteOp::SetData { path, data: data.as_bytes(), version: Some(*version) },
                // Nothing left to say (a child whose only parent goes): a plain item now.
                None => WriteOp::Delete { path, version: Some(*version) },
            }));
            match self.commit(&zk, &ops).await {
                Ok(()) => {
                    let names: Vec<String> = retired.iter().map(|(name, _)| (*name).clone()).collect();
                    for name in &names {
                        let checkpoint = format!("{}/checkpoints/{name}", self.paths.base);
                        match zk.delete(&checkpoint, None).await {
                            Ok(()) | Err(ZkError::NoNode) => {}
                            Err(err) => tracing::debug!(%err, %checkpoint, "a retired item's checkpoint stays"),
                        }
                    }
                    return Ok(layout::parse_names(current.header.kind, names).0);
                }
                Err(Ok(Retry::Moved)) => {}
                Err(Ok(Retry::Unknown)) => *uncertain = true,
                Err(Err(err)) => return Err(err),
            }
        }
        match *uncertain {
            true => Err(Error::ItemSetOutcomeUnknown { path: self.paths.node.clone() }),
            false => Err(self.too_busy()),
        }
    }
}

/// The lineage nodes a retirement rewrites: each one's entry without the retired links, and the version it was read
/// at.
type Unlinked<'a> = BTreeMap<&'a String, (Entry, i32)>;

/// Of the `candidates` for retirement (in order), as many as fit `budget` operations with the edits they need (at
/// least one), with their versions, and those edits: every item linked to a retired one (a child, a parent) that
/// stays loses the link, so that the retired name, free to be used again by a new item, is nobody's parent or child.
/// An entry left with nothing to say comes back empty (the caller deletes its node).
fn unlink<'a>(
    candidates: impl Iterator<Item = (&'a String, &'a (Entry, Stat))>,
    entries: &'a BTreeMap<String, (Entry, Stat)>,
    budget: usize,
) -> (Vec<(&'a String, i32)>, Unlinked<'a>) {
    let (mut retired, mut retiring, mut linked) = (Vec::new(), BTreeSet::new(), BTreeSet::new());
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
        // (The first goes whatever its links: else an item with more links than the budget would never retire.)
        if !retired.is_empty() && retired.len() + 1 + kept_links + fresh > budget {
            break;
        }
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
    use crate::item_set::lineage::entry::Finished;

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
        let (retired, unlinked) = unlink([(&p, &entries["p"])].into_iter(), &entries, 100);
        assert_eq!(retired, [(&p, 3)]);
        let edited: Vec<(&str, Entry, i32)> = unlinked.iter().map(|(n, (e, v))| (n.as_str(), e.clone(), *v)).collect();
        assert_eq!(
            edited,
            [("a", Entry::default(), 5), ("b", entry(&[], &[], true), 6), ("m", entry(&["q"], &[], false), 7),]
        );
        // Another finished item alongside, within the budget: both go; their links are edited once each.
        let b = "b".to_owned();
        let (retired, unlinked) = unlink([(&p, &entries["p"]), (&b, &entries["b"])].into_iter(), &entries, 100);
        assert_eq!(retired, [(&p, 3), (&b, 6)]);
        assert_eq!(unlinked.keys().map(|n| n.as_str()).collect::<Vec<_>>(), ["a", "m"]);
        // Past the budget (1 + 3 links): the second waits for the next call; the first goes whatever its links.
        let (retired, _) = unlink([(&p, &entries["p"]), (&b, &entries["b"])].into_iter(), &entries, 2);
        assert_eq!(retired, [(&p, 3)]);
    }
}
