//! The owner's finish: one `multi` that checks the owner's lock node, writes the header's next version, marks the
//! item finished, takes it out of the set, puts in every child whose parents have all finished now, and writes the
//! final checkpoint if there is one.

use std::collections::BTreeMap;

use super::entry::{Entry, Finished};
use super::parent_finished;
use crate::retry::{is_transient, session_end};
use crate::shared_set::{Attempts, SetStore};
use crate::zookeeper::{MultiError, WriteOp, ZkError, ZooKeeper};
use crate::{Error, Item};
use proto::set_layout::{self as layout, State};

/// Who finishes an item: the lock node that fences the finish, and what the lineage node records.
pub(crate) struct Finisher<'a> {
    pub item: &'a Item,
    /// The owner's lock node's full path.
    pub lock_node: &'a str,
    /// The owner's fencing token for the item.
    pub token: i64,
    pub member: &'a str,
}

impl<Z: ZooKeeper> SetStore<Z> {
    /// Finishes `finisher.item`, fenced by its lock node, with `extra` writes in the same `multi` (the final
    /// checkpoint). The item must be in the set and closed. Returns the children that entered the set. A `multi`
    /// whose reply was lost is resolved by its outcome marker, so the result is the one a received reply gives.
    pub async fn finish_item(&self, finisher: &Finisher<'_>, extra: &[WriteOp<'_>]) -> Result<Vec<Item>, Error> {
        let zk = self.zk()?;
        let name = finisher.item.node_name();
        let token = layout::token(zk.random());
        let mark = Finished { token: finisher.token, member: finisher.member.to_owned() };
        let fenced = |reason: &str| Error::CheckpointFenced {
            item: name.clone(),
            lock_node: finisher.lock_node.to_owned(),
            reason: reason.to_owned(),
        };
        let invalid = |reason: &str| Error::InvalidItem { item: name.clone(), reason: reason.to_owned() };
        let mut attempts = Attempts::default();
        loop {
            let current = self.settled(&zk, &mut attempts, &[]).await?;
            let Some(read) = self.entries(&zk, std::slice::from_ref(&name)).await? else { continue };
            let Some((entry, stat)) = read.get(&name).cloned().flatten() else {
                return Err(invalid("has no lineage: only a closed item can be finished (close it first)"));
            };
            match &entry.finished {
                // Finished under this ownership: an earlier call, or this one's attempt whose reply was lost.
                Some(done) if done.token == mark.token => return Ok(Vec::new()),
                // Under another ownership, which came after ours (a finished item is never taken again): ours ended.
                Some(done) => {
                    let reason = format!("the item was finished since by {} (token {})", done.member, done.token);
                    return Err(fenced(&reason));
                }
                None => {}
            }
            if !entry.closed {
                return Err(invalid("is not closed: its source may still produce for it (close it first)"));
            }
            if current.items.binary_search(finisher.item).is_err() {
                return Err(invalid("is not in the shared set"));
            }
            // The children, and the other parents of each: a child enters the set once all have finished.
            let Some(children) = self.entries(&zk, &entry.children).await? else { continue };
            let mut others: Vec<String> = children
                .values()
                .flatten()
                .flat_map(|(child, _)| child.parents.iter().filter(|p| **p != name).cloned())
                .collect();
            others.sort();
            others.dedup();
            let Some(parents) = self.entries(&zk, &others).await? else { continue };
            let parents: BTreeMap<String, Entry> =
                parents.into_iter().filter_map(|(n, e)| e.map(|(e, _)| (n, e))).collect();
            let ready: Vec<String> = entry
                .children
                .iter()
                .filter(|child| {
                    let Some(Some((child, _))) = children.get(*child) else { return false };
                    child.parents.iter().all(|p| *p == name || parent_finished(&parents, p) || early())
                })
                .filter(|child| !current.holds(child))
                .cloned()
                .collect();
            // A shared set is never empty (members refuse to start on one): the last item stays until it has a successor.
            if current.items.len() == 1 && ready.is_empty() {
                return Err(Error::EmptySharedSet { path: self.paths.node.clone() });
            }
            // (`extra` is the final checkpoint's write: it touches no item of the set.)
            let header = current.header.next(current.header.kind, State::Ready, &token);
            let header = header.recording(&ready, std::slice::from_ref(&name)).render();
            let node = self.paths.lineage_node(&name);
            let finished = Entry { finished: Some(mark.clone()), ..entry }.render();
            let item_path = self.paths.item(&name);
            let ready_paths: Vec<String> = ready.iter().map(|child| self.paths.item(child)).collect();
            let mut ops = vec![
                WriteOp::Check { path: finisher.lock_node, version: None },
                WriteOp::SetData {
                    path: &self.paths.node,
                    data: header.as_bytes(),
                    version: Some(current.header_version),
                },
                WriteOp::SetData { path: &node, data: finished.as_bytes(), version: Some(stat.version) },
                WriteOp::Delete { path: &item_path, version: None },
            ];
            ops.extend(ready_paths.iter().map(|path| self.create_op(path)));
            // `extra` checks the checkpoints in force first: its failure is not another writer's move, but an import.
            let extra_at = ops.len();
            ops.extend(extra.iter().cloned());
            #[cfg(test)]
            self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(token.clone());
            match self.write_marked(&zk, &ops, &token).await? {
                Ok(()) => {
                    tracing::info!(item = %finisher.item, children = ?ready, "item finished");
                    return Ok(layout::parse_names(current.header.kind, ready).0);
                }
                Err(MultiError { error, .. }) if session_end(&error).is_some() => {
                    return Err(fenced("its session has ended"));
                }
                // Lost with the connection, and it did not land: read again.
                Err(MultiError { index: None, error }) if is_transient(&error) => {}
                Err(MultiError { index: Some(0), error: ZkError::NoNode }) => {
                    return Err(fenced("its lock node is gone: the item was released, or its session ended"));
                }
                Err(MultiError { index: Some(at), error: ZkError::BadVersion | ZkError::NoNode }) if at == extra_at => {
                    return Err(fenced(
                        "the party's progress was replaced (an import, or a reset of the checkpoints) since this \
                         member joined: restart it",
                    ));
                }
                // Another writer moved the header, or a node changed under us: read again.
                Err(MultiError {
                    index: Some(_),
                    error: ZkError::BadVersion | ZkError::NoNode | ZkError::NodeExists,
                }) => {}
                Err(MultiError { error, .. }) => return Err(self.zk_error("multi", error)),
            }
        }
    }
}

/// The simulation's sabotage: a child enters the set when any one of its parents finishes.
fn early() -> bool {
    proto::sabotage::breaks(proto::sabotage::Sabotage::ChildrenReadyEarly)
}
