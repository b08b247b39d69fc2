//! Changing a set that exists: `add`, `remove` and `replace` compute the new set from the one in force and write the
//! difference, in one conditional `multi` when it fits, else staged under the writer's lease, committed, then
//! applied.

use std::collections::{BTreeMap, BTreeSet};

use super::chunks::{chunks, fits_one_request, paths_of};
use super::{Attempts, MAX_ATTEMPTS, Retry, SetStore, SharedSetVersion};
use crate::retry::{is_transient, retry_transient};
use crate::zookeeper::{Mode, MultiError, WriteOp, ZkError, ZooKeeper};
use crate::{Error, Item, weighted::Weight};
use proto::item::{check_kind_of_set, validate_items};
use proto::set_layout::{self as layout, Committed, Kind, State, TableRef};

impl<Z: ZooKeeper> SetStore<Z> {
    pub async fn add(&self, added: Vec<Item>) -> Result<SharedSetVersion, Error> {
        let added = validate_items(added, true)?;
        self.update(None, |current| {
            // Checked against the set before merging, so that the error names the new item, not one of the set's.
            if let Some(held) = current.first() {
                check_kind_of_set(&added, held, &self.paths.node)?;
            }
            Ok(current.iter().chain(&added).cloned().collect())
        })
        .await
    }

    pub async fn remove(&self, removed: Vec<Item>) -> Result<SharedSetVersion, Error> {
        let removed: BTreeSet<Item> = removed.into_iter().collect();
        self.update(None, |current| {
            if let Some(missing) = removed.iter().find(|item| !current.contains(*item)) {
                return Err(Error::InvalidItem {
                    item: missing.to_string(),
                    reason: "is not in the shared set, so it cannot be removed".into(),
                });
            }
            Ok(current.difference(&removed).cloned().collect())
        })
        .await
    }

    pub async fn replace(&self, expected: Option<u64>, items: Vec<Item>) -> Result<SharedSetVersion, Error> {
        let items: BTreeSet<Item> = validate_items(items, true)?.into_iter().collect();
        self.update(expected, |_| Ok(items.clone())).await
    }

    /// Reads the set in force, computes the new one and writes the difference, conditionally on the version read;
    /// starts over when another writer got there first (unless the caller asked for a precise `expected` version).
    /// A commit whose reply was lost is resolved by its outcome marker before anything else: an attempt that landed
    /// is the update's result, one that did not is retried as if refused, so the change is never applied twice.
    async fn update(
        &self,
        expected: Option<u64>,
        change: impl Fn(&BTreeSet<Item>) -> Result<BTreeSet<Item>, Error>,
    ) -> Result<SharedSetVersion, Error> {
        let zk = self.zk()?;
        let token = layout::token(zk.random());
        // The change tags of our staged attempts (see `create_if_missing`).
        let mut own: Vec<String> = Vec::new();
        let mut attempts = Attempts::default();
        loop {
            let current = self.settled(&zk, &mut attempts, &own).await?;
            if let Some(expected) = expected
                && expected != current.version
            {
                return Err(Error::SharedSetConflict {
                    path: self.paths.node.clone(),
                    reason: format!("expected version {expected}, found version {}", current.version),
                });
            }
            let before: BTreeSet<Item> = current.items.iter().cloned().collect();
            let after = change(&before)?;
            #[cfg(test)]
            self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(token.clone());
            if after.is_empty() {
                return Err(Error::EmptySharedSet { path: self.paths.node.clone() });
            }
            // All of one kind (a replace may change the kind; an add may not mix kinds).
            let after = validate_items(after.into_iter().collect(), true)?;
            // By node name: an integer and a string that render alike are one child (a replace that changes the
            // kind keeps it), and a child skipped as garbage may be an item of the new kind.
            let on_disk: BTreeSet<String> =
                current.items.iter().map(Item::node_name).chain(current.skipped.iter().cloned()).collect();
            let wanted: BTreeSet<String> = after.iter().map(Item::node_name).collect();
            let adds: Vec<String> = wanted.difference(&on_disk).cloned().collect();
            let removes: Vec<String> = on_disk.difference(&wanted).cloned().collect();
            // Whether an item with lineage is in the set is lineage's business alone (see `lineage`).
            if current.header.lineage && (!adds.is_empty() || !removes.is_empty()) {
                let lineage = self.lineage_names(&zk).await?;
                if let Some(name) = adds.iter().find(|name| lineage.contains(*name)) {
                    return Err(Error::InvalidItem {
                        item: name.clone(),
                        reason: "has lineage (it waits on its parents, or has finished): only its parents' finish \
                                 puts it in the set"
                            .into(),
                    });
                }
                if let Some(name) = removes.iter().find(|name| lineage.contains(*name)) {
                    return Err(Error::InvalidItem {
                        item: name.clone(),
                        reason: "has lineage (it has children, or was closed): it leaves the set when its owner \
                                 finishes it, not by a removal"
                            .into(),
                    });
                }
            }
            let kind = Kind::of(&after);
            if adds.is_empty() && removes.is_empty() && kind == current.header.kind && current.skipped.is_empty() {
                return Ok(SharedSetVersion::of(current));
            }
            // Removed items lose their weight (re-added, they weigh 1): a table without them goes in force along, as
            // it does when the table still weighs finished items.
            let weights: BTreeMap<Item, Weight> = current
                .weights
                .iter()
                // `after` is sorted (validate_items): a search, not a scan, or a weighted set's update is quadratic.
                .filter(|(item, _)| after.binary_search(item).is_ok())
                .map(|(i, w)| (i.clone(), w.clone()))
                .collect();
            let pruned = if weights.len() == current.weights.len() && !current.stale_weights {
                None
            } else {
                match self.write_table(&zk, &current, &weights).await {
                    Ok(pruned) => Some(pruned),
                    Err(Ok(_)) => continue,
                    Err(Err(err)) => return Err(err),
                }
            };
            // The table the committed version names: the pruned one, else the one in force.
            let table = match &pruned {
                Some(pruned) => pruned.table.clone(),
                None => current.header.weights.clone(),
            };
            let written = if fits_one_request(&self.paths, self.chunk, &adds, &removes) {
                self.write_small(&zk, &current, kind, &adds, &removes, &token, table).await
            } else {
                let tag = layout::token(zk.random());
                own.push(tag.clone());
                self.write_large(&zk, &current, kind, (&adds, &removes, table), &token, &tag).await
            };
            if let Some(pruned) = &pruned {
                self.after_table(&zk, &written, pruned, &current).await;
            }
            match written {
                Ok(()) => {
                    let version = current.version + 1;
                    return Ok(SharedSetVersion {
                        items: after,
                        version,
                        updating: false,
                        skipped: Vec::new(),
                        weights,
                    });
                }
                Err(Ok(Retry::Moved)) if expected.is_some() => {
                    return Err(Error::SharedSetConflict {
                        path: self.paths.node.clone(),
                        reason: format!("the set changed after version {}", current.version),
                    });
                }
                Err(Ok(Retry::Moved | Retry::Unknown | Retry::Lost)) => {}
                Err(Err(err)) => return Err(err),
            }
        }
    }

    /// One `multi`: the header's next version (naming weight `table`), conditional on the one read, with every create
    /// and delete.
    #[allow(clippy::too_many_arguments)]
    async fn write_small(
        &self,
        zk: &Z,
        current: &Committed,
        kind: Kind,
        adds: &[String],
        removes: &[String],
        token: &str,
        table: Option<TableRef>,
    ) -> Result<(), Result<Retry, Error>> {
        let mut header = current.header.next(kind, State::Ready, token).recording(adds, removes);
        header.weights = table;
        let header = header.render();
        let (created, deleted) = (paths_of(&self.paths.node, adds), paths_of(&self.paths.node, removes));
        let mut ops = vec![WriteOp::SetData {
            path: &self.paths.node,
            data: header.as_bytes(),
            version: Some(current.header_version),
        }];
        ops.extend(deleted.iter().map(|path| WriteOp::Delete { path, version: None }));
        ops.extend(created.iter().map(|path| self.create_op(path)));
        self.commit_marked(zk, &ops, token).await
    }

    /// A staged update: intent (under our lease), staging, commit, apply, finish (see the `shared_set` module docs).
    /// `token` goes into the header's log; `tag` names this attempt's change and lease. The weight `table` goes in
    /// force with the commit (the intent keeps the one in force, so that an undone update leaves it).
    async fn write_large(
        &self,
        zk: &Z,
        current: &Committed,
        kind: Kind,
        (adds, removes, table): (&[String], &[String], Option<TableRef>),
        token: &str,
        tag: &str,
    ) -> Result<(), Result<Retry, Error>> {
        for dir in [&self.paths.changes, &self.paths.writers] {
            retry_transient(zk, || zk.mkdir(dir, &self.acls)).await.map_err(|e| Err(self.zk_error("mkdir", e)))?;
        }
        self.collect_garbage(zk).await;
        // 1. The intent: the header says `staging` under our lease; the set in force is unchanged.
        let staging = current.header.with_state(State::Staging(tag.to_owned())).render();
        let (lease, change) = (self.paths.lease(tag), self.paths.change(tag));
        let (additions, removals) = (self.paths.additions(tag), self.paths.removals(tag));
        let ops = [
            WriteOp::SetData {
                path: &self.paths.node,
                data: staging.as_bytes(),
                version: Some(current.header_version),
            },
            WriteOp::Create { path: &lease, data: b"", mode: Mode::Ephemeral, acls: &self.acls },
            self.create_op(&change),
            self.create_op(&additions),
            self.create_op(&removals),
        ];
        // A lost intent may have landed: the next read then finds our own `staging`, and undoes it.
        let outcome = match self.commit(zk, &ops).await {
            Ok(()) => self.stage_and_commit(zk, current, kind, (adds, removes, table), token, tag).await,
            Err(err) => Err(err),
        };
        // Whatever happened, our lease goes before we return: while it lives nobody finishes or undoes a change of
        // ours left part-way, and an intent whose reply was lost may have taken it.
        self.release_lease(zk, tag).await;
        outcome
    }

    /// Steps 2 to 5 of [`SetStore::write_large`], under our lease.
    async fn stage_and_commit(
        &self,
        zk: &Z,
        current: &Committed,
        kind: Kind,
        (adds, removes, table): (&[String], &[String], Option<TableRef>),
        token: &str,
        tag: &str,
    ) -> Result<(), Result<Retry, Error>> {
        let staged_version = current.header_version + 1;
        // 2. Staging, each request checking that the header is still our intent (nobody undid it).
        self.stage(zk, tag, staged_version, adds, removes).await?;
        // 3. The commit: from `staging` to `applying`, one conditional write; every reader now sees the change.
        let mut applying = current.header.next(kind, State::Applying(tag.to_owned()), token);
        applying.weights = table;
        let applying = applying.render();
        let ops =
            [WriteOp::SetData { path: &self.paths.node, data: applying.as_bytes(), version: Some(staged_version) }];
        // A lost reply is resolved by our outcome marker: landed, the change is ours to apply; not landed, the intent
        // is still ours in the header, and the next read undoes it.
        self.commit_marked(zk, &ops, token).await?;
        // 4. and 5. Apply it to the base set and say `ready`. The update is in force whatever happens now: if this
        // fails (the session ends, say), whoever finds the change abandoned finishes it.
        if let Err(err) = self.finish_applying(zk, tag).await {
            tracing::warn!(%err, change = tag, "an update is committed but not yet applied; it will be finished");
        }
        Ok(())
    }

    /// Stages a change's additions and removals under `item-changes/<tag>`, each `multi` checking that the header is
    /// still at `version` (our intent). Resumable: what is already staged is listed and skipped.
    pub(super) async fn stage(
        &self,
        zk: &Z,
        tag: &str,
        version: i32,
        adds: &[String],
        removes: &[String],
    ) -> Result<(), Result<Retry, Error>> {
        let (additions, removals) = (self.paths.additions(tag), self.paths.removals(tag));
        let mut staged_adds: BTreeSet<String> = BTreeSet::new();
        let mut staged_removes: BTreeSet<String> = BTreeSet::new();
        for _ in 0..MAX_ATTEMPTS {
            let mut todo: Vec<String> = adds
                .iter()
                .filter(|name| !staged_adds.contains(*name))
                .map(|name| format!("{additions}/{name}"))
                .collect();
            todo.extend(
                removes.iter().filter(|name| !staged_removes.contains(*name)).map(|name| format!("{removals}/{name}")),
            );
            if todo.is_empty() {
                return Ok(());
            }
            let mut lost = false;
            for chunk in chunks(&todo, self.chunk) {
                let mut ops = vec![WriteOp::Check { path: &self.paths.node, version: Some(version) }];
                ops.extend(chunk.iter().map(|path| self.create_op(path)));
                match zk.multi_write(&ops).await {
                    Ok(_) => {}
                    Err(MultiError { index: Some(0), error: ZkError::BadVersion | ZkError::NoNode }) => {
                        return Err(Ok(Retry::Moved));
                    }
                    Err(MultiError { error, .. }) if is_transient(&error) || error == ZkError::NodeExists => {
                        lost = true;
                        break;
                    }
                    Err(MultiError { error, .. }) => return Err(Err(self.zk_error("multi create", error))),
                }
            }
            if !lost {
                return Ok(());
            }
            // Some of it may have landed: list what is staged, and stage the rest.
            let listed = |dir: String| async move { retry_transient(zk, || zk.list_children(&dir)).await };
            staged_adds = listed(additions.clone())
                .await
                .map_err(|e| Err(self.zk_error("get_children", e)))?
                .into_iter()
                .collect();
            staged_removes = listed(removals.clone())
                .await
                .map_err(|e| Err(self.zk_error("get_children", e)))?
                .into_iter()
                .collect();
        }
        Err(Err(self.too_busy()))
    }
}
