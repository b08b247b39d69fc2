//! Applying a committed (`applying`) change to the base set, then saying `ready`: the last step of a staged update,
//! which its writer runs, or anyone who finds the writer gone.

use std::collections::{BTreeMap, BTreeSet};

use super::chunks::{chunks, paths_of};
use super::progress::staged_lineage;
use super::read::read_raw;
use super::{MAX_ATTEMPTS, SetStore};
use crate::Error;
use crate::retry::{is_transient, retry_transient};
use crate::zookeeper::{MultiError, ReadOp, ReadResult, WriteOp, ZkError, ZooKeeper};
use proto::set_layout::{Header, State};

impl<Z: ZooKeeper> SetStore<Z> {
    /// Applies the change the header says is `applying` to the base set, then says `ready`. Idempotent, and safe to
    /// run by several processes at once: each request checks that the header still says `applying` this change.
    pub async fn finish_applying(&self, zk: &Z, tag: &str) -> Result<(), Error> {
        for _ in 0..MAX_ATTEMPTS {
            let read =
                retry_transient(zk, || read_raw(zk, &self.paths, None)).await.map_err(|e| self.zk_error("read", e))?;
            let Some((data, version)) = &read.header else { return Ok(()) };
            let header = match Header::parse(data) {
                Ok(header) if header.state == State::Applying(tag.to_owned()) => header,
                // Finished (or moved on) by someone else.
                _ => return Ok(()),
            };
            let Some((adds, removes)) = &read.change else { continue };
            let base: BTreeSet<&String> = read.children.iter().collect();
            let mut todo: Vec<(String, bool)> =
                removes.iter().filter(|name| base.contains(name)).map(|name| (self.paths.item(name), false)).collect();
            todo.extend(adds.iter().filter(|name| !base.contains(name)).map(|name| (self.paths.item(name), true)));
            if todo.is_empty() {
                // An import's lineage nodes, then `ready`.
                if !self.apply_lineage(zk, tag, *version).await? {
                    continue;
                }
                let ready = header.with_state(State::Ready).render();
                let ops =
                    [WriteOp::SetData { path: &self.paths.node, data: ready.as_bytes(), version: Some(*version) }];
                match self.commit(zk, &ops).await {
                    Ok(()) => {
                        self.delete_tree(zk, &self.paths.change(tag)).await;
                        return Ok(());
                    }
                    Err(Err(err)) => return Err(err),
                    Err(Ok(_)) => continue,
                }
            }
            let paths: Vec<String> = todo.iter().map(|(path, _)| path.clone()).collect();
            // The chunks are consecutive slices of `paths`, which is `todo` in order: `done` is where one starts.
            let mut done = 0;
            for chunk in chunks(&paths, self.chunk) {
                let mut ops = vec![WriteOp::Check { path: &self.paths.node, version: Some(*version) }];
                for (path, (_, create)) in chunk.iter().zip(&todo[done..]) {
                    ops.push(if *create { self.create_op(path) } else { WriteOp::Delete { path, version: None } });
                }
                done += chunk.len();
                match zk.multi_write(&ops).await {
                    Ok(_) => {}
                    // The header moved on (someone finished it), or another applier raced us, or the reply was lost:
                    // read again.
                    Err(MultiError { error, .. })
                        if is_transient(&error)
                            || matches!(error, ZkError::NodeExists | ZkError::NoNode | ZkError::BadVersion) =>
                    {
                        break;
                    }
                    Err(MultiError { error, .. }) => return Err(self.zk_error("multi", error)),
                }
            }
        }
        Err(self.too_busy())
    }

    /// An import's lineage: the nodes it staged (`item-changes/<tag>/lineage`) become the lineage nodes, and those it
    /// did not stage go, each `multi` checking that the header is still `applying` it (at data version `version`).
    /// `true` once they are in place (and for a change that staged none: not an import); `false` when something
    /// moved meanwhile (read again).
    async fn apply_lineage(&self, zk: &Z, tag: &str, version: i32) -> Result<bool, Error> {
        let staged_dir = staged_lineage(&self.paths.change(tag));
        let staged_names = match retry_transient(zk, || zk.list_children(&staged_dir)).await {
            Ok(names) => names,
            Err(ZkError::NoNode) => return Ok(true),
            Err(err) => return Err(self.zk_error("get_children", err)),
        };
        let Some(staged) = read_all(zk, &paths_of(&staged_dir, &staged_names)).await else { return Ok(false) };
        let staged: BTreeMap<&String, Vec<u8>> =
            staged_names.iter().zip(staged).filter_map(|(name, data)| Some((name, data?))).collect();
        if staged.len() != staged_names.len() {
            return Ok(false);
        }
        let names: Vec<String> = self.lineage_names(zk).await?.into_iter().collect();
        let Some(now) = read_all(zk, &names.iter().map(|name| self.paths.lineage_node(name)).collect::<Vec<_>>()).await
        else {
            return Ok(false);
        };
        let now: BTreeMap<&String, Option<Vec<u8>>> = names.iter().zip(now).collect();
        // Each write: the node, its data, and whether it is created.
        let mut writes: Vec<(String, &[u8], bool)> = Vec::new();
        let mut deletes: Vec<String> = Vec::new();
        for (name, data) in &now {
            if data.is_some() && !staged.contains_key(*name) {
                deletes.push(self.paths.lineage_node(name));
            }
        }
        for (name, data) in &staged {
            match now.get(*name) {
                Some(Some(existing)) if existing == data => {}
                Some(Some(_)) => writes.push((self.paths.lineage_node(name), data, false)),
                _ => writes.push((self.paths.lineage_node(name), data, true)),
            }
        }
        if writes.is_empty() && deletes.is_empty() {
            return Ok(true);
        }
        if writes.iter().any(|(_, _, create)| *create) {
            retry_transient(zk, || zk.mkdir(&self.paths.lineage, &self.acls))
                .await
                .map_err(|e| self.zk_error("mkdir", e))?;
        }
        let mut ops: Vec<WriteOp<'_>> = deletes.iter().map(|path| WriteOp::Delete { path, version: None }).collect();
        ops.extend(writes.iter().map(|(path, data, create)| match create {
            true => self.create_data_op(path, data),
            false => WriteOp::SetData { path, data, version: None },
        }));
        for group in ops.chunks(self.chunk.saturating_sub(1).max(1)) {
            let mut checked = vec![WriteOp::Check { path: &self.paths.node, version: Some(version) }];
            checked.extend(group.iter().cloned());
            if zk.multi_write(&checked).await.is_err() {
                // Moved on, raced by another applier, or lost: the next pass reads again.
                return Ok(false);
            }
        }
        Ok(false)
    }
}

/// The data of each of `paths` (`None`: no node), in read `multi`s; `None` when a read failed (read again).
async fn read_all<Z: ZooKeeper>(zk: &Z, paths: &[String]) -> Option<Vec<Option<Vec<u8>>>> {
    let mut found = Vec::with_capacity(paths.len());
    for group in paths.chunks(256) {
        let ops: Vec<ReadOp<'_>> = group.iter().map(|path| ReadOp::Data(path)).collect();
        let results = retry_transient(zk, || zk.multi_read(&ops)).await.ok()?;
        for result in results {
            match result {
                ReadResult::Data(data, _) => found.push(Some(data)),
                ReadResult::Failed(ZkError::NoNode) => found.push(None),
                _ => return None,
            }
        }
    }
    Some(found)
}
